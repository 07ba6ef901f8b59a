//! Planned execution: trace a function of tensors once, size its arena
//! exactly, replay it with no heap.
//!
//! NOTE [Planned execution]
//! Eager execution pays per op for what a fixed computation does not need:
//! a tensor handle and its metadata on the heap, reference counts, shape
//! and dtype checks, autograd bookkeeping, and an allocator that can
//! fragment. A firmware loop runs the same forward (or training step)
//! forever, so kael records it once and replays the kernels:
//!
//! 1. **Trace.** Build the model on a [`Tracer`]'s device and call
//!    [`Tracer::record`] around one forward, or one whole training step
//!    (forward, `backward`, optimizer step). The device runs the reference
//!    CPU kernels eagerly and writes each call down: kernel, operands'
//!    buffers, layouts and dtypes (NOTE [Buffer identity in a trace]).
//! 2. **Plan.** [`Plan::build`] binds named tensors (inputs, outputs,
//!    trained state), keeps unbound read-only tensors as constants of the
//!    plan (frozen weights, in flash when the plan is), and gives every
//!    other buffer an offset in one arena by liveness (NOTE [Arena
//!    planning]); a matmul feeding only a bias add and an activation is
//!    fused with them (NOTE [Fused epilogues]). [`Plan::arena_bytes`] is
//!    exact, and [`Plan::to_bytes`] serialises it so a host build can
//!    compute it and the firmware embed it (NOTE [Plan words]).
//! 3. **Replay.** [`PlanRef::run`] (or a [`Replayer`], made once, that
//!    links only the kernels a firmware image needs) checks the bindings
//!    and the arena and runs the kernels on them by raw pointer: no
//!    allocation, no reference counts, no per-op validation (NOTE [Replay
//!    on raw pointers]). Results are bit-identical to the eager tracing
//!    device's, because the replay kernels keep its arithmetic and order.
//!
//! ```
//! use kael_core::nn::{Linear, Module};
//! use kael_core::plan::{Accumulation, Arena, Bind, Binding, Plan, Tracer};
//! use kael_core::{Rng, Tensor};
//! let tracer = Tracer::new(Accumulation::F64);
//! let dev = tracer.device();
//! let mut rng = Rng::new(0);
//! let layer = Linear::new(3, 2, true, &dev, &mut rng)?;
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3], &dev)?;
//! let (y, rec) = tracer.record(|| layer.forward(&x)?.relu())?;
//! let plan = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)])?;
//! // The weights are constants of the plan, and one fused step writes y
//! // (x @ wᵀ + b never reaches memory): the arena is empty.
//! assert_eq!(plan.arena_bytes(), 0);
//! let mut arena = Arena::<0>::new();
//! let mut out = [0.0f32; 2];
//! plan.run(arena.as_mut_slice(), &mut [Bind::input("x", &[1.0, 2.0, 3.0]), Bind::output("y", &mut out)])?;
//! assert_eq!(out.to_vec(), y.to_vec::<f32>()?); // bit for bit
//! # Ok::<(), kael_core::Error>(())
//! ```
//!
//! What a plan replays: every kernel family of the table
//! ([`Family`](crate::backend::Family)) on f32 data, bool masks and
//! i64/i32 indices: copies, fills, casts, the op table's unary, binary and
//! comparison ops, `where`, reductions, argmax/argmin, softmax and its
//! fused backward, matrix products, the index families (`index_select`,
//! `gather`, `index_add`, `scatter_add`: embeddings and cross-entropy,
//! forward and backward), the fused layer norm with its backward, and
//! argsort (so `sort` and `topk`, an argsort and a gather), and the
//! declared families (NOTE [Declared families]: `im2col` and its adjoint
//! under convolutions and average pooling, the max pool and its
//! gradient, `scatter_wins` under `scatter`, and `add_int` under a batch
//! norm's counter, bound as `i64` state with [`Bind::state_i64`]). Every
//! step runs the reference backend's own kernels (NOTE [Slice-level
//! kernels] in [`crate::cpu::index`]). [`Plan::build`] refuses, naming the
//! op, what a replay could not recompute: ops whose output shape the host
//! computes from tensor values (`nonzero`, `one_hot` without a class
//! count), and kernels on dtypes a plan does not carry (f64, f16, bf16,
//! i8, i16, integer arithmetic other than `add_int`). Host
//! control flow inside the recorded function is frozen as it went when
//! recorded.

mod build;
mod format;
mod replay;
mod trace;

pub use format::{MAX_BINDINGS, PlanRef};
pub use replay::{Arena, Bind, Replayer};
pub use trace::{Accumulation, Recording, TRACE_KIND, Tracer};

use crate::error::Result;
use crate::tensor::Tensor;
use alloc::vec::Vec;

/// What a bound tensor is to a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Read only; supplied by each replay.
    Input,
    /// Made by the recorded function; written into the caller's slice.
    Output,
    /// Read and updated in place (parameters, optimizer buffers).
    State,
}

/// A tensor named for [`Plan::build`].
///
/// ```
/// use kael_core::plan::{Binding, Role, Tracer, Accumulation};
/// use kael_core::Tensor;
/// let t = Tracer::new(Accumulation::F64);
/// let w = Tensor::zeros(&[2], kael_core::DType::F32, &t.device())?;
/// assert_eq!(Binding::state("w", &w).role(), Role::State);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    name: &'a str,
    tensor: &'a Tensor,
    role: Role,
}

impl<'a> Binding<'a> {
    /// An input (from before recording, only read).
    pub fn input(name: &'a str, tensor: &'a Tensor) -> Self {
        Self {
            name,
            tensor,
            role: Role::Input,
        }
    }

    /// An output (made while recording).
    pub fn output(name: &'a str, tensor: &'a Tensor) -> Self {
        Self {
            name,
            tensor,
            role: Role::Output,
        }
    }

    /// State (from before recording, updated in place).
    pub fn state(name: &'a str, tensor: &'a Tensor) -> Self {
        Self {
            name,
            tensor,
            role: Role::State,
        }
    }

    /// The role.
    pub fn role(&self) -> Role {
        self.role
    }
}

/// A plan, owned: validated words (NOTE [Plan words]).
#[derive(Clone, PartialEq, Eq)]
pub struct Plan {
    words: Vec<u32>,
}

impl core::fmt::Debug for Plan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let r = self.as_ref();
        write!(
            f,
            "Plan {{ {} steps, {} bindings, arena {} B, {} B serialised }}",
            r.n_steps(),
            r.n_bindings(),
            r.arena_bytes(),
            self.words.len() * 4
        )
    }
}

impl Plan {
    /// The validated view a replay reads.
    pub fn as_ref(&self) -> PlanRef<'_> {
        PlanRef { words: &self.words }
    }

    /// The plan's words.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// The exact arena size a replay needs, in bytes.
    pub fn arena_bytes(&self) -> usize {
        self.as_ref().arena_bytes()
    }

    /// The serialised plan (little-endian words).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// A plan from [`Plan::to_bytes`]'s bytes (copied, so any alignment).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the
    /// bytes are not whole words or not a valid plan.
    pub fn from_bytes(bytes: &[u8]) -> Result<Plan> {
        if bytes.len() % 4 != 0 {
            return Err(crate::Error::InvalidArgument {
                op: "Plan::from_bytes",
                reason: "the plan bytes are not whole 4-byte words (truncated?); pass all of what Plan::to_bytes wrote",
            });
        }
        let mut words = Vec::new();
        words
            .try_reserve_exact(bytes.len() / 4)
            .map_err(|_| crate::Error::OutOfMemory {
                requested: bytes.len(),
                available: None,
            })?;
        words.extend(
            bytes
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        PlanRef::new(&words)?;
        Ok(Plan { words })
    }

    /// Replays the plan ([`PlanRef::run`]).
    ///
    /// # Errors
    /// As [`Replayer::run`].
    pub fn run(&self, arena: &mut [u8], binds: &mut [Bind<'_>]) -> Result<()> {
        self.as_ref().run(arena, binds)
    }
}

#[cfg(test)]
mod tests {
    //! Replays under Miri (the raw-pointer slices of `replay`): every
    //! kernel kind, in place and out of place, against the eager device.
    use super::*;
    use crate::Tensor;

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn a_small_training_step_replays_the_eager_bits() -> Result<()> {
        for acc in [Accumulation::F64, Accumulation::F32] {
            let tracer = Tracer::new(acc);
            let dev = tracer.device();
            let w0 = [0.5f32, -0.25, 0.75, 0.1, -0.6, 0.3];
            // The gradient by hand, not by autograd: without `std` the
            // grad mode is global, and parallel tests may turn it off.
            let w = Tensor::from_slice(&w0, &[2, 3], &dev)?;
            let x = Tensor::from_slice(&[1.0f32, 2.0, -1.0], &[1, 3], &dev)?;
            let (loss, rec) = tracer.record(|| {
                let h = x.matmul(&w.t()?)?.tanh()?;
                let loss = h.sqr()?.sum_all()?;
                // d(Σ h²)/dw = (2h · (1 - h²))ᵀ @ x
                let dh = h.mul_scalar(2.0)?.mul(&h.sqr()?.affine(-1.0, 1.0)?)?;
                let g = dh.t()?.matmul(&x)?;
                w.sub_(&g.mul_scalar(0.1)?)?;
                Ok(loss)
            })?;
            let plan = Plan::build(
                &rec,
                &[
                    Binding::input("x", &x),
                    Binding::state("w", &w),
                    Binding::output("loss", &loss),
                ],
            )?;
            let mut wd = w0;
            let mut l = [0.0f32];
            let mut arena = Arena::<256>::new();
            plan.run(
                arena.as_mut_slice(),
                &mut [
                    Bind::input("x", &[1.0, 2.0, -1.0]),
                    Bind::state("w", &mut wd),
                    Bind::output("loss", &mut l),
                ],
            )?;
            assert_eq!(bits(&l), bits(&loss.to_vec::<f32>()?));
            assert_eq!(bits(&wd), bits(&w.to_vec::<f32>()?));
        }
        Ok(())
    }

    #[test]
    fn fused_flat_and_strided_steps_replay() -> Result<()> {
        let tracer = Tracer::new(Accumulation::F32);
        let dev = tracer.device();
        let x = Tensor::from_slice(&[1.0f32, -2.0, 0.5, 3.0, -1.0, 2.0], &[2, 3], &dev)?;
        let w = Tensor::from_slice(&[0.5f32, -0.25, 0.75, 0.1, -0.6, 0.3], &[2, 3], &dev)?;
        let b = Tensor::from_slice(&[0.1f32, -0.2], &[2], &dev)?;
        let c = Tensor::from_slice(
            &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
            &[2, 2, 2],
            &dev,
        )?;
        let (y, rec) = tracer.record(|| {
            // matmul + bias + relu: one fused flat step.
            let h = x.matmul(&w.t()?)?.add(&b)?.relu()?;
            // A batched matmul, a 3-D permuted sum and a softmax along
            // the outer dimension: strided steps.
            let p = c.matmul(&h.expand(&[2, 2, 2])?)?;
            p.add(&c.permute(&[2, 0, 1])?)?.mul_scalar(0.01)?.softmax(0)
        })?;
        let plan = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)])?;
        assert!(plan.as_ref().strided()?);
        let mut out = [0.0f32; 8];
        let mut arena = Arena::<256>::new();
        plan.run(
            arena.as_mut_slice(),
            &mut [
                Bind::input("x", &[1.0, -2.0, 0.5, 3.0, -1.0, 2.0]),
                Bind::output("y", &mut out),
            ],
        )?;
        assert_eq!(bits(&out), bits(&y.to_vec::<f32>()?));
        Ok(())
    }

    #[test]
    fn softmax_and_its_fused_backward_replay() -> Result<()> {
        let tracer = Tracer::new(Accumulation::F64);
        let dev = tracer.device();
        let x =
            Tensor::from_slice(&[1.0f32, -2.0, 0.5, 3.0], &[2, 2], &dev)?.requires_grad_(true)?;
        let c = Tensor::from_slice(&[1.0f32, 3.0], &[2], &dev)?;
        let ((p, dx), rec) = tracer.record(|| {
            let p = x.log_softmax(1)?;
            p.mul(&c)?.sum_all()?.backward()?;
            let dx = x.grad().ok_or(crate::Error::Autograd {
                op: "test",
                reason: "no grad",
            })?;
            Ok((p, dx))
        })?;
        let plan = Plan::build(
            &rec,
            &[
                Binding::input("x", &x),
                Binding::output("p", &p),
                Binding::output("dx", &dx),
            ],
        )?;
        let (mut gp, mut gx) = ([0.0f32; 4], [0.0f32; 4]);
        let mut arena = Arena::<256>::new();
        plan.run(
            arena.as_mut_slice(),
            &mut [
                Bind::input("x", &[1.0, -2.0, 0.5, 3.0]),
                Bind::output("p", &mut gp),
                Bind::output("dx", &mut gx),
            ],
        )?;
        assert_eq!(bits(&gp), bits(&p.to_vec::<f32>()?));
        assert_eq!(bits(&gx), bits(&dx.to_vec::<f32>()?));
        Ok(())
    }

    #[test]
    fn slice_level_family_steps_replay() -> Result<()> {
        // Casts, argmax, the four index families and the fused layer norm
        // with its backward: the reference kernels on the replay's
        // slices (NOTE [Slice-level kernels]), under Miri too.
        let tracer = Tracer::new(Accumulation::F64);
        let dev = tracer.device();
        let table = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25, 1.5, -0.5], &[3, 2], &dev)?
            .requires_grad_(true)?;
        let w = Tensor::from_slice(&[1.0f32, 0.5], &[2], &dev)?.requires_grad_(true)?;
        let ids = Tensor::from_slice(&[2i64, 0, 2], &[3], &dev)?;
        let cols = Tensor::from_slice(&[1i32, 0, 1], &[3, 1], &dev)?;
        let ((y, dt, dw), rec) = tracer.record(|| {
            let e = crate::nn::functional::embedding(&ids, &table, None)?;
            let n = crate::nn::functional::layer_norm(&e, &[2], Some(&w), None, 1e-5)?;
            let am = n.argmax(1, true)?.to_dtype(crate::DType::F32)?;
            let y = n.gather(1, &cols)?.add(&am)?;
            y.sum_all()?.backward()?;
            let g = |t: &Tensor| {
                t.grad().ok_or(crate::Error::Autograd {
                    op: "test",
                    reason: "no grad",
                })
            };
            Ok((y, g(&table)?, g(&w)?.deep_clone()?))
        })?;
        let plan = Plan::build(
            &rec,
            &[
                Binding::input("ids", &ids),
                Binding::output("y", &y),
                Binding::output("dt", &dt),
                Binding::output("dw", &dw),
            ],
        )?;
        let (mut gy, mut gt, mut gw) = ([0.0f32; 3], [0.0f32; 6], [0.0f32; 2]);
        let mut arena = Arena::<1024>::new();
        // The ids bound as an index input (checked before the replay).
        plan.run(
            arena.as_mut_slice(),
            &mut [
                Bind::indices("ids", &[2, 0, 2]),
                Bind::output("y", &mut gy),
                Bind::output("dt", &mut gt),
                Bind::output("dw", &mut gw),
            ],
        )?;
        assert_eq!(bits(&gy), bits(&y.to_vec::<f32>()?));
        assert_eq!(bits(&gt), bits(&dt.to_vec::<f32>()?));
        assert_eq!(bits(&gw), bits(&dw.to_vec::<f32>()?));
        // A bad bound id is refused before anything runs.
        let e = plan.run(
            arena.as_mut_slice(),
            &mut [
                Bind::indices("ids", &[2, 3, 2]),
                Bind::output("y", &mut gy),
                Bind::output("dt", &mut gt),
                Bind::output("dw", &mut gw),
            ],
        );
        assert!(matches!(
            e,
            Err(crate::Error::IndexOutOfRange { index: 3, .. })
        ));
        Ok(())
    }

    #[test]
    fn declared_family_steps_replay() -> Result<()> {
        // im2col (a convolution), col2im (its gradient) and scatter_wins
        // with its arena scratch: the declared kernels on the replay's
        // slices (NOTE [Declared families]), under Miri too.
        let tracer = Tracer::new(Accumulation::F64);
        let dev = tracer.device();
        let x = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25, 1.5, -0.5], &[1, 1, 2, 3], &dev)?
            .requires_grad_(true)?;
        let w = Tensor::from_slice(&[1.0f32, -0.5], &[1, 1, 1, 2], &dev)?;
        let ix = Tensor::from_slice(&[1i64, 1, 0], &[3], &dev)?;
        let v = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)?;
        let ((y, dx, s), rec) = tracer.record(|| {
            let y = crate::nn::functional::conv2d(&x, &w, None, [1, 1], [0, 1], [1, 1], 1)?;
            y.sum_all()?.backward()?;
            let dx = x.grad().ok_or(crate::Error::Autograd {
                op: "test",
                reason: "no grad",
            })?;
            let s = v.scatter(0, &ix, &v)?;
            Ok((y, dx, s))
        })?;
        let plan = Plan::build(
            &rec,
            &[
                Binding::output("y", &y),
                Binding::output("dx", &dx),
                Binding::output("s", &s),
            ],
        )?;
        let (mut gy, mut gx, mut gs) = ([0.0f32; 8], [0.0f32; 6], [0.0f32; 3]);
        let mut arena = Arena::<2048>::new();
        plan.run(
            arena.as_mut_slice(),
            &mut [
                Bind::output("y", &mut gy),
                Bind::output("dx", &mut gx),
                Bind::output("s", &mut gs),
            ],
        )?;
        assert_eq!(bits(&gy), bits(&y.to_vec::<f32>()?));
        assert_eq!(bits(&gx), bits(&dx.to_vec::<f32>()?));
        assert_eq!(gs, [3.0, 2.0, 3.0]); // index 1 written twice: 2 wins
        Ok(())
    }

    #[test]
    fn compare_where_and_in_place_steps_replay() -> Result<()> {
        let tracer = Tracer::new(Accumulation::F64);
        let dev = tracer.device();
        let x = Tensor::from_slice(&[1.0f32, -2.0, 3.0, -4.0], &[2, 2], &dev)?;
        let (y, rec) = tracer.record(|| {
            let zero = Tensor::zeros(&[2, 2], crate::DType::F32, &dev)?;
            let y = x.gt(&zero)?.where_cond(&x, &zero)?; // relu by hand
            y.add_(&y)?; // exactly in place
            let s = y.sum(&[1], true)?; // a reduction with scratch
            y.mul_(&s)?; // broadcast source, in place
            Ok(y)
        })?;
        let plan = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)])?;
        let mut out = [0.0f32; 4];
        let mut arena = Arena::<256>::new();
        plan.run(
            arena.as_mut_slice(),
            &mut [
                Bind::input("x", &[1.0, -2.0, 3.0, -4.0]),
                Bind::output("y", &mut out),
            ],
        )?;
        assert_eq!(out.to_vec(), y.to_vec::<f32>()?);
        assert_eq!(out, [4.0, 0.0, 36.0, 0.0]);
        Ok(())
    }
}
