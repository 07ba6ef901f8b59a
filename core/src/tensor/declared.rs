//! The tensor op of every declared family (NOTE [Declared families]): the
//! outputs allocated from the family's shape function, the backend's
//! [`Backend::declared`](crate::backend::Backend::declared), and the
//! gradient the table row declares.

use super::Tensor;
use crate::autograd::{self, SavedTensor, rules::Rule};
use crate::backend::contract::Operand;
use crate::backend::declared::{Call, MAX_OPERANDS};
use crate::backend::family::declared_rows;
use crate::backend::{Family, Src};
use crate::error::{Error, Result};
use alloc::vec::Vec;

impl Tensor {
    /// Runs step `step` of the declared family `family` with parameter
    /// words `params` on `inputs`, into a new tensor of the shape the
    /// family's kernel computes; records the gradient the table row
    /// declares (`adjoint:` or `grad:`). A declared family's ops (e.g.
    /// [`conv2d`](crate::nn::functional::conv2d) through `im2col`) call
    /// this; kernel developers may call it to test a family directly.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a device without the family (the op's
    /// caller composes it instead); the family's contract, naming it;
    /// device mismatch; [`Error::Autograd`] for an input that requires
    /// grad when the row declares no gradient.
    ///
    /// ```
    /// use kael_core::backend::Family;
    /// use kael_core::kernels::im2col::Geometry;
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 9.0, &Device::cpu())?.reshape(&[1, 1, 3, 3])?;
    /// let g = Geometry { kernel: [2, 2], stride: [1, 1], padding: [0, 0], dilation: [1, 1], image: [3, 3], fill: 0.0 };
    /// let cols = Tensor::declared(Family::Im2col, 0, &g.words("im2col")?, &[&x])?;
    /// assert_eq!(cols.shape(), &[1, 2, 2, 1, 2, 2]);
    /// assert_eq!(cols.to_vec::<f32>()?[..4], [0.0, 1.0, 3.0, 4.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn declared(
        family: Family,
        step: usize,
        params: &[u32],
        inputs: &[&Tensor],
    ) -> Result<Tensor> {
        let op = family.name();
        let ops = operands(op, inputs)?;
        let ops: Vec<Operand<'_>> = ops.iter().map(Operand::from_parts).collect();
        let shapes = declared_rows::outputs(family, step, params, &ops)?;
        if shapes.len() != 1 {
            return Err(Error::InvalidArgument {
                op,
                reason: "this kernel family step has more than one output; call its tensor op",
            });
        }
        let needs = autograd::needs_record(inputs);
        // The gradient the row declares: an adjoint (run on the output's
        // gradient) or a grad step (run on the input and it).
        let grad = match (family.adjoint(step), family.grad(step)) {
            (Some(s), _) => Some((s, false)),
            (None, Some(s)) => Some((s, true)),
            (None, None) => None,
        };
        // (An adjoint is the gradient of a one-input step; a `grad:` row
        // gives one gradient step per input.)
        let declared = match grad {
            Some((_, false)) => inputs.len() == 1,
            Some((_, true)) => true,
            None => false,
        };
        if needs && !declared {
            return Err(Error::Autograd {
                op,
                reason: "this kernel family declares no gradient for this step; call it under no_grad or detach its inputs",
            });
        }
        let out = run_step(family, step, params, inputs, &shapes)?.remove(0);
        if let (true, Some((gs, with_input))) = (needs, grad) {
            autograd::record(&out, inputs, || {
                Ok(Rule::Declared {
                    family,
                    step: gs,
                    params: params.into(),
                    saved: match with_input {
                        true => inputs.iter().map(|t| SavedTensor::input(t)).collect(),
                        false => alloc::boxed::Box::default(),
                    },
                })
            })?;
        }
        Ok(out)
    }
}

impl Tensor {
    /// [`Tensor::declared`] for a step with several outputs (no gradient
    /// is recorded: every input must be outside autograd, or the call
    /// under `no_grad`).
    ///
    /// # Errors
    /// As [`Tensor::declared`]; [`Error::Autograd`] for an input that
    /// requires grad outside `no_grad`.
    pub fn declared_outputs(
        family: Family,
        step: usize,
        params: &[u32],
        inputs: &[&Tensor],
    ) -> Result<Vec<Tensor>> {
        let op = family.name();
        let ops = operands(op, inputs)?;
        let ops: Vec<Operand<'_>> = ops.iter().map(Operand::from_parts).collect();
        let shapes = declared_rows::outputs(family, step, params, &ops)?;
        if autograd::needs_record(inputs) {
            return Err(Error::Autograd {
                op,
                reason: "this kernel family step records no gradient; call it under no_grad or detach its inputs",
            });
        }
        run_step(family, step, params, inputs, &shapes)
    }
}

impl Tensor {
    /// Runs step `step` of a declared family that
    /// [updates](crate::backend::declared::Declared::updates) its outputs
    /// in place: `outputs` are read and written, `inputs` only read (the
    /// `adam` family's step: the gradient in, the parameter and its
    /// moments updated). Records no gradient; bumps each output's storage
    /// version once.
    ///
    /// # Errors
    /// As [`Tensor::declared_outputs`]; [`Error::InvalidArgument`] for a
    /// step that writes its outputs whole (call `declared`), an output
    /// that shares storage with another operand (the contract), or an
    /// output that maps several positions to one element or is read-only.
    /// Nothing is written when the call is refused.
    pub fn declared_update(
        family: Family,
        step: usize,
        params: &[u32],
        inputs: &[&Tensor],
        outputs: &[&Tensor],
    ) -> Result<()> {
        let op = family.name();
        if !declared_rows::updates(family, step) {
            return Err(Error::InvalidArgument {
                op,
                reason: "this kernel family step writes its outputs whole; call Tensor::declared",
            });
        }
        let all: Vec<&Tensor> = inputs.iter().chain(outputs).copied().collect();
        if autograd::needs_record(&all) {
            return Err(Error::Autograd {
                op,
                reason: "a kernel family step that updates tensors in place records no gradient; call it under no_grad",
            });
        }
        for o in outputs {
            o.check_writable(op)?;
        }
        // (at least one operand, within the count, on one device)
        operands(op, &all)?;
        let first = all.first().map(|t| t.device());
        let (layouts, storages) = parts(&all);
        let ops = srcs_of(&all, &layouts, &storages);
        let (srcs, dsts) = ops.split_at(inputs.len());
        let dev = first.ok_or(Error::InvalidArgument {
            op,
            reason: "a kernel family step needs at least one input",
        })?;
        dev.backend().declared(Call {
            family,
            step,
            params,
            srcs,
            dsts,
        })?;
        for o in outputs {
            o.storage().bump_version();
        }
        Ok(())
    }
}

/// An input's layout, storage and dtype, held for its [`Operand`].
struct Held {
    layout: crate::layout::Layout,
    storage: crate::shared::Shared<crate::storage::Storage>,
    dtype: crate::dtype::DType,
}

impl Operand<'_> {
    fn from_parts(h: &Held) -> Operand<'_> {
        Operand {
            layout: &h.layout,
            dtype: h.dtype,
            buffer: core::ptr::from_ref::<crate::storage::Storage>(&h.storage).addr(),
        }
    }
}

/// The inputs of a declared call, checked (at least one, at most the
/// operand limit, one device), with their layouts and storages.
fn operands(op: &'static str, inputs: &[&Tensor]) -> Result<Vec<Held>> {
    let first = inputs.first().ok_or(Error::InvalidArgument {
        op,
        reason: "a kernel family step needs at least one input",
    })?;
    if inputs.len() >= MAX_OPERANDS {
        return Err(Error::InvalidArgument {
            op,
            reason: "more inputs than a kernel family takes (5)",
        });
    }
    for t in inputs {
        first.same_device(op, t)?;
    }
    Ok(inputs
        .iter()
        .map(|t| Held {
            layout: t.layout().clone(),
            storage: t.storage(),
            dtype: t.dtype(),
        })
        .collect())
}

/// Allocates a step's outputs (`shapes`) and runs it on the device.
fn run_step(
    family: Family,
    step: usize,
    params: &[u32],
    inputs: &[&Tensor],
    shapes: &crate::backend::declared::Shapes,
) -> Result<Vec<Tensor>> {
    let Some(first) = inputs.first() else {
        return Err(Error::InvalidArgument {
            op: family.name(),
            reason: "a kernel family step needs at least one input",
        });
    };
    let dev = first.device();
    let outs = shapes
        .iter()
        .map(|(shape, dtype)| Tensor::alloc_for_overwrite(shape, *dtype, &dev))
        .collect::<Result<Vec<_>>>()?;
    let (layouts, storages) = parts(inputs);
    let srcs = srcs_of(inputs, &layouts, &storages);
    let out_refs: Vec<&Tensor> = outs.iter().collect();
    let (ols, oss) = parts(&out_refs);
    let dsts = srcs_of(&out_refs, &ols, &oss);
    dev.backend().declared(Call {
        family,
        step,
        params,
        srcs: &srcs,
        dsts: &dsts,
    })?;
    Ok(outs)
}

/// The layouts and storages of `ts`, held while their [`Src`]s are used.
fn parts(
    ts: &[&Tensor],
) -> (
    Vec<crate::layout::Layout>,
    Vec<crate::shared::Shared<crate::storage::Storage>>,
) {
    ts.iter().map(|t| (t.layout(), t.storage())).unzip()
}

/// The backend operands of `ts` over their [`parts`].
fn srcs_of<'a>(
    ts: &[&Tensor],
    layouts: &'a [crate::layout::Layout],
    storages: &'a [crate::shared::Shared<crate::storage::Storage>],
) -> Vec<Src<'a>> {
    ts.iter()
        .zip(layouts)
        .zip(storages)
        .map(|((t, l), s)| Src {
            storage: s,
            layout: l,
            dtype: t.dtype(),
        })
        .collect()
}
