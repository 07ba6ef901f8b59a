//! The sine MLP's plans and expected values, made on the host by
//! `cargo run -p kael-tests --example sine_plan -- firmware-examples/data`
//! (`tests/tests/plan.rs` checks the committed files are current).

/// Bytes aligned to 4, so a plan is read in place from flash.
#[repr(C, align(4))]
pub struct Aligned<T: ?Sized>(pub T);

/// The inference plan: weights frozen into it, 1 input, 1 output.
pub static INFER_PLAN: &Aligned<[u8]> = &Aligned(*include_bytes!("../data/sine_infer.plan"));

/// The training-step plan: batch 16, SGD, parameters bound as state.
pub static TRAIN_PLAN: &Aligned<[u8]> = &Aligned(*include_bytes!("../data/sine_train.plan"));

/// Inputs, weights and expected outputs as f32 bits.
#[allow(missing_docs)]
pub mod io {
    include!("../data/sine_plan_io.rs");
}

/// f32 values from bits.
pub fn floats<const N: usize>(bits: &[u32; N]) -> [f32; N] {
    bits.map(f32::from_bits)
}
