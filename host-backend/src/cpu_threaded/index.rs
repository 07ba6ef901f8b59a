//! `index_select` as row copies (below), and `gather` and `scatter_add`
//! on the pool: the index's rows (dim 0) split
//! across threads. A gather's outputs are independent, so any `dim`
//! splits; a scatter-add's writes along `dim` stay inside their row when
//! `dim != 0`, so each row's sums keep the reference's order (index order
//! within the row). f32 and f64 values, i64 indices, a contiguous index
//! and output (a gather's) or index (a scatter-add's, whose destination
//! may be any layout); anything else, and any index out of range (for the
//! reference's error, nothing written), runs the reference kernels.

use super::engine::{Par, cast_slice, cast_slice_mut};
use kael_core::backend::{Dst, Src, contract};
use kael_core::cpu as reference;
use kael_core::dtype::DType;
use kael_core::layout::Layout;
use kael_core::storage::ReadGuard;
use kael_core::{Error, Result};

/// A contiguous i64 index's values, read under its guard.
fn values<'g>(op: &'static str, guard: &'g ReadGuard<'_>, index: &Src<'_>) -> Result<&'g [i64]> {
    let (io, n) = (index.layout.offset(), index.layout.numel());
    cast_slice::<i64>(guard.bytes())?
        .get(io..io + n)
        .ok_or_else(|| reach(op))
}

/// Whether every index value lies in `0..size`.
fn in_range(ix: &[i64], size: usize) -> bool {
    ix.iter()
        .all(|&v| usize::try_from(v).is_ok_and(|i| i < size))
}

/// Calls `f(position in the row, offset in `l` of that position with
/// `dim`'s coordinate 0)` for every position of row `r` of `shape` (dims
/// 1.., row-major).
fn each_in_row(shape: &[usize], l: &Layout, dim: usize, r: usize, mut f: impl FnMut(usize, usize)) {
    let st = l.strides();
    let base = l.offset() + if dim == 0 { 0 } else { r * st[0] };
    let inner = &shape[1..];
    let n: usize = inner.iter().product();
    if let [w] = inner {
        let s = if dim == 1 { 0 } else { st[1] };
        for j in 0..*w {
            f(j, base + j * s);
        }
        return;
    }
    for t in 0..n {
        let (mut rest, mut off) = (t, base);
        for (k, &d) in inner.iter().enumerate().rev() {
            let c = rest % d;
            rest /= d;
            if k + 1 != dim {
                off += c * st[k + 1];
            }
        }
        f(t, off);
    }
}

/// `index_select` as row copies, on the pool when large: a contiguous
/// source and output, a contiguous i64 index (any dtype: whole rows of
/// bytes move). The reference walks every element through a selected
/// layout (an embedding's 512 rows of 768 took 0.36 ms against
/// PyTorch's 0.16); anything else, and an index out of range, runs it.
pub(super) fn index_select(
    par: &Par<'_>,
    src: Src<'_>,
    dim: usize,
    indices: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    const OP: &str = "index_select";
    let fits = indices.dtype == DType::I64
        && indices.layout.is_contiguous()
        && src.layout.is_contiguous()
        && dst.layout.is_contiguous()
        && dst.layout.numel() > 0;
    if !fits {
        return reference::index::index_select(src, dim, indices, dst);
    }
    contract::index_select(src, dim, indices, dst)?;
    let shape = src.layout.shape().as_slice();
    let (outer, size) = (shape[..dim].iter().product::<usize>(), shape[dim]);
    let inner: usize = shape[dim + 1..].iter().product();
    let es = dst.dtype.size_in_bytes();
    let (gs, gi) = (src.storage.read(OP)?, indices.storage.read(OP)?);
    let ix = values(OP, &gi, &indices)?;
    if !in_range(ix, size) {
        drop((gs, gi));
        return reference::index::index_select(src, dim, indices, dst);
    }
    let k = ix.len();
    let row = inner * es;
    let s = gs
        .bytes()
        .get(src.layout.offset() * es..)
        .and_then(|b| b.get(..outer * size * row))
        .ok_or_else(|| reach(OP))?;
    let mut gd = dst.storage.write(OP)?;
    let d = gd
        .bytes_mut()
        .get_mut(dst.layout.offset() * es..)
        .and_then(|b| b.get_mut(..outer * k * row))
        .ok_or_else(|| reach(OP))?;
    par.bandwidth_bound().for_rows(d, row, |r0, rows| {
        for (q, out) in rows.chunks_exact_mut(row).enumerate() {
            let (o, i) = ((r0 + q) / k, (r0 + q) % k);
            // In range (checked above): row `o·size + ix[i]` of `s`.
            let from = (o * size + ix[i] as usize) * row;
            out.copy_from_slice(&s[from..from + row]);
        }
    });
    Ok(())
}

/// `gather` on the pool, or the reference kernel.
pub(super) fn gather(
    par: &Par<'_>,
    src: Src<'_>,
    dim: usize,
    index: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let n = dst.layout.numel();
    let fits = par.parallel(n)
        && index.dtype == DType::I64
        && matches!(dst.dtype, DType::F32 | DType::F64)
        && dst.layout.rank() >= 2
        && dst.layout.is_contiguous()
        && index.layout.is_contiguous();
    if !fits {
        return reference::index::gather(src, dim, index, dst);
    }
    contract::gather(src, dim, index, dst)?;
    match dst.dtype {
        DType::F32 => gather_as::<f32>(par, src, dim, index, dst),
        _ => gather_as::<f64>(par, src, dim, index, dst),
    }
}

fn gather_as<T: bytemuck::Pod + Send + Sync>(
    par: &Par<'_>,
    src: Src<'_>,
    dim: usize,
    index: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let (gs, gi) = (src.storage.read("gather")?, index.storage.read("gather")?);
    let s = cast_slice::<T>(gs.bytes())?;
    let n = dst.layout.numel();
    let ix = values("gather", &gi, &index)?;
    if !in_range(ix, src.layout.shape()[dim]) {
        drop((gs, gi));
        return reference::index::gather(src, dim, index, dst);
    }
    let mut gd = dst.storage.write("gather")?;
    let off = dst.layout.offset();
    let d = cast_slice_mut::<T>(gd.bytes_mut())?
        .get_mut(off..off + n)
        .ok_or_else(|| reach("gather"))?;
    let shape = dst.layout.shape().as_slice();
    let row = n / shape[0].max(1);
    let step = src.layout.strides()[dim];
    par.for_rows(d, row, |r0, rows| {
        for (k, out) in rows.chunks_exact_mut(row.max(1)).enumerate() {
            let r = r0 + k;
            // (dim 0: the index value picks src's row.)
            each_in_row(shape, src.layout, dim, r, |t, o| {
                // The contract and the range check put every offset in `s`.
                out[t] = s[o + ix[r * row + t] as usize * step];
            });
        }
    });
    Ok(())
}

/// `scatter_add` on the pool, or the reference kernel.
pub(super) fn scatter_add(
    par: &Par<'_>,
    dst: Dst<'_>,
    dim: usize,
    index: Src<'_>,
    src: Src<'_>,
) -> Result<()> {
    let n = index.layout.numel();
    let fits = par.parallel(n)
        && dim != 0
        && index.dtype == DType::I64
        && matches!(dst.dtype, DType::F32 | DType::F64)
        && index.layout.rank() >= 2
        && index.layout.is_contiguous();
    if !fits {
        return reference::index::scatter_add(dst, dim, index, src);
    }
    contract::scatter_add(dst, dim, index, src)?;
    match dst.dtype {
        DType::F32 => scatter_add_as::<f32>(par, dst, dim, index, src),
        _ => scatter_add_as::<f64>(par, dst, dim, index, src),
    }
}

fn scatter_add_as<T: bytemuck::Pod + Send + Sync + core::ops::Add<Output = T>>(
    par: &Par<'_>,
    dst: Dst<'_>,
    dim: usize,
    index: Src<'_>,
    src: Src<'_>,
) -> Result<()> {
    let (gs, gi) = (
        src.storage.read("scatter_add")?,
        index.storage.read("scatter_add")?,
    );
    let s = cast_slice::<T>(gs.bytes())?;
    let n = index.layout.numel();
    let ix = values("scatter_add", &gi, &index)?;
    if !in_range(ix, dst.layout.shape()[dim]) {
        drop((gs, gi));
        return reference::index::scatter_add(dst, dim, index, src);
    }
    let mut gd = dst.storage.write("scatter_add")?;
    let d = cast_slice_mut::<T>(gd.bytes_mut())?;
    let shape = index.layout.shape().as_slice();
    let rows = shape[0];
    let row = n / rows.max(1);
    let (dl, sl) = (dst.layout, src.layout);
    let step = dl.strides()[dim];
    // Row r of the index writes only row r of the destination (dim != 0),
    // so rows run in parallel; each row's adds keep the reference's order.
    let base = Shared(d.as_mut_ptr());
    let len = d.len();
    par.for_each_index(rows, |r| {
        let mut from = Vec::with_capacity(row);
        each_in_row(shape, sl, usize::MAX, r, |_, o| from.push(o));
        each_in_row(shape, dl, dim, r, |t, o| {
            let at = o + ix[r * row + t] as usize * step;
            if at < len {
                // SAFETY: `at < len` is inside `d`, borrowed under the
                // write guard for the whole call; row r of the index writes
                // only row r of the destination (dim 0 is not `dim`, and
                // every offset carries r·stride[0]), so no element is
                // written by two threads. Elements are accessed through the
                // raw pointer only, never through overlapping references.
                unsafe {
                    let p = base.get().add(at);
                    p.write(p.read() + s[from[t]]);
                }
            }
        });
    });
    Ok(())
}

/// A base pointer shared by the rows that write disjoint parts of it.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);

// SAFETY: only dereferenced inside `scatter_add_as`'s rows, which write
// disjoint elements, within the borrow of the destination's write guard.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as for `Send`.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

fn reach(op: &'static str) -> Error {
    Error::InvalidArgument {
        op,
        reason: "an operand's layout runs past its storage; this is a bug in the caller",
    }
}

#[cfg(test)]
mod tests {
    use kael_core::{Device, Tensor};

    /// The pool's gather and scatter-add (raw per-row writes) on a
    /// two-thread device equal the reference device's, bit for bit.
    #[test]
    fn pooled_gather_and_scatter_add_equal_the_reference() {
        let dev = crate::cpu_threaded::Builder::new()
            .threads(2)
            .parallel_threshold(1)
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let cpu = Device::cpu();
        let x: Vec<f32> = (0..6 * 5).map(|i| i as f32 * 0.5 - 3.0).collect();
        let ix: Vec<i64> = (0..6 * 3).map(|i| (i * 2 % 5) as i64).collect();
        let run = |d: &Device| -> Vec<u32> {
            let t = Tensor::from_slice(&x, &[6, 5], d).unwrap_or_else(|e| panic!("{e}"));
            let i = Tensor::from_slice(&ix, &[6, 3], d).unwrap_or_else(|e| panic!("{e}"));
            let g = t.gather(1, &i).unwrap_or_else(|e| panic!("{e}"));
            let s = t.scatter_add(1, &i, &g).unwrap_or_else(|e| panic!("{e}"));
            let mut out = g.to_vec::<f32>().unwrap_or_else(|e| panic!("{e}"));
            out.extend(s.to_vec::<f32>().unwrap_or_else(|e| panic!("{e}")));
            out.iter().map(|v| v.to_bits()).collect()
        };
        assert_eq!(run(&dev), run(&cpu));
    }
}
