//! The plans of the replay examples and their expected values, made on
//! the host by
//! `cargo run -p kael-tests --example sine_plan -- firmware-examples/data`
//! (`tests/tests/plan.rs` checks the committed files are current).

/// Bytes aligned to 4, so a plan is read in place from flash.
#[repr(C, align(4))]
pub struct Aligned<T: ?Sized>(pub T);

/// The inference plan: weights frozen into it, 1 input, 1 output.
pub static INFER_PLAN: &Aligned<[u8]> = &Aligned(*include_bytes!("../data/sine_infer.plan"));

/// The training-step plan: batch 16, SGD, parameters bound as state.
pub static TRAIN_PLAN: &Aligned<[u8]> = &Aligned(*include_bytes!("../data/sine_train.plan"));

/// `mlp_infer`'s model, one sample: binds `w1 b1 w2 b2 x`, output `p`.
pub static MLP_INFER_PLAN: &Aligned<[u8]> = &Aligned(*include_bytes!("../data/mlp_infer.plan"));

/// `mlp_infer`'s model on the whole batch, forward and backward of
/// `sum(p * [1, 2, 3, 4])`: outputs `p loss dx dw1`.
pub static MLP_GRAD_PLAN: &Aligned<[u8]> = &Aligned(*include_bytes!("../data/mlp_grad.plan"));

/// One XOR training step of `mlp_train`: inputs `x y`, state
/// `w1 b1 w2 b2`, outputs `loss pred`.
pub static XOR_TRAIN_PLAN: &Aligned<[u8]> = &Aligned(*include_bytes!("../data/xor_train.plan"));

/// The MLP plans' expected values (`tests/src/mlp_plan.rs`) as f32 bits.
#[allow(missing_docs)]
pub mod mlp_io {
    include!("../data/mlp_plan_io.rs");
}

/// Inputs, weights and expected outputs as f32 bits.
#[allow(missing_docs)]
pub mod io {
    include!("../data/sine_plan_io.rs");
}

/// f32 values from bits.
pub fn floats<const N: usize>(bits: &[u32; N]) -> [f32; N] {
    bits.map(f32::from_bits)
}
