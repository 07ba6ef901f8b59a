//! The backward rules of views: permutes, reshapes, expands, narrows and
//! selects, replayed index maps (step slices, unfold, diagonal) and
//! `as_strided`.

use super::sum_to;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::Dims;
use crate::tensor::Tensor;
use alloc::vec::Vec;

/// How a view was made, for its backward.
#[derive(Clone, Debug)]
pub enum ViewKind {
    /// `permute(dims)` (also transpose/t): backward permutes back.
    Permute(alloc::boxed::Box<Dims>),
    /// view/reshape/flatten/squeeze/unsqueeze: backward reshapes back.
    Reshape,
    /// expand/broadcast_to: backward sums the broadcast dims.
    Expand,
    /// narrow(dim, start, len): backward pads with zeros (cat).
    Narrow(usize, usize),
    /// select(dim, index): backward unsqueezes and pads.
    Select(usize, usize),
    /// slice with a step, unfold, diagonal: backward index_adds through a
    /// replayed index map.
    Replay(Replay),
    /// as_strided over the storage (input layout, view layout): backward
    /// maps storage elements back to the input's positions.
    AsStrided(alloc::boxed::Box<(Layout, Layout)>),
}

/// A view op to replay on an index tensor.
#[derive(Clone, Copy, Debug)]
pub enum Replay {
    /// `slice(dim, start, end, step)`
    Slice(isize, isize, isize, usize),
    /// `unfold(dim, size, step)`
    Unfold(isize, usize, usize),
    /// `diagonal(offset, dim1, dim2)`
    Diagonal(isize, isize, isize),
}

impl Replay {
    fn apply(&self, t: &Tensor) -> Result<Tensor> {
        match *self {
            Replay::Slice(d, s, e, st) => t.slice(d, s, e, st),
            Replay::Unfold(d, size, step) => t.unfold(d, size, step),
            Replay::Diagonal(o, a, b) => t.diagonal(o, a, b),
        }
    }
}

pub(super) fn view_backward(g: &Tensor, input_shape: &Dims, kind: &ViewKind) -> Result<Tensor> {
    match kind {
        ViewKind::Permute(dims) => {
            let mut inv = [0isize; crate::MAX_RANK];
            for (i, &d) in dims.iter().enumerate() {
                inv[d] = i as isize;
            }
            g.permute(&inv[..dims.len()])
        }
        ViewKind::Reshape => g.reshape(input_shape),
        ViewKind::Expand => sum_to(g, input_shape),
        ViewKind::Narrow(dim, start) => pad(g, *dim, *start, input_shape),
        ViewKind::Select(dim, index) => {
            pad(&g.unsqueeze(*dim as isize)?, *dim, *index, input_shape)
        }
        ViewKind::Replay(r) => {
            let n = input_shape.numel();
            let dev = g.device();
            let idx = r.apply(&Tensor::arange(0i64, n as i64, &dev)?.reshape(input_shape)?)?;
            let idx = idx.contiguous()?.reshape(&[-1])?;
            let zeros = Tensor::zeros(&[n], g.dtype(), &dev)?;
            zeros
                .index_add(0, &idx, &g.reshape(&[-1])?)?
                .reshape(input_shape)
        }
        ViewKind::AsStrided(l) => as_strided_backward(g, &l.0, &l.1),
    }
}

/// `g` placed at `start` along `dim` of a zero tensor of `shape` (via cat,
/// so the result stays differentiable).
fn pad(g: &Tensor, dim: usize, start: usize, shape: &Dims) -> Result<Tensor> {
    let len = g.shape()[dim];
    let mut before = shape.clone();
    before[dim] = start;
    let mut after = shape.clone();
    after[dim] = shape[dim] - start - len;
    let dev = g.device();
    let mut parts: Vec<Tensor> = Vec::new();
    if start > 0 {
        parts.push(Tensor::zeros(&before, g.dtype(), &dev)?);
    }
    parts.push(g.clone());
    if after[dim] > 0 {
        parts.push(Tensor::zeros(&after, g.dtype(), &dev)?);
    }
    if parts.len() == 1 {
        return Ok(g.clone());
    }
    let refs: Vec<&Tensor> = parts.iter().collect();
    Tensor::cat(&refs, dim as isize)
}

fn as_strided_backward(g: &Tensor, input: &Layout, view: &Layout) -> Result<Tensor> {
    if input.has_internal_overlap() {
        return Err(Error::Autograd {
            op: "AsStridedBackward",
            reason: "as_strided backward needs an input without overlapping memory; deep_clone() the input before as_strided",
        });
    }
    // storage element -> input position
    let mut map = hashbrown::HashMap::<usize, i64, core::hash::BuildHasherDefault<Fnv>>::default();
    let mut pos = 0i64;
    input.for_each_offset(|o| {
        map.insert(o, pos);
        pos += 1;
    });
    let (mut from, mut to) = (Vec::new(), Vec::new());
    let mut p = 0i64;
    view.for_each_offset(|o| {
        if let Some(&q) = map.get(&o) {
            from.push(p);
            to.push(q);
        }
        p += 1;
    });
    let dev = g.device();
    let n = from.len();
    let from = Tensor::from_slice(&from, &[n], &dev)?;
    let to = Tensor::from_slice(&to, &[n], &dev)?;
    let picked = g.reshape(&[-1])?.index_select(0, &from)?;
    let zeros = Tensor::zeros(&[input.numel()], g.dtype(), &dev)?;
    zeros.index_add(0, &to, &picked)?.reshape(input.shape())
}

/// FNV-1a, for the few hash maps autograd keeps (keys are addresses/offsets).
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl core::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}
