//! Shapes and strides: inline, at most [`MAX_RANK`] dimensions.
//!
//! Strides and offsets count elements, not bytes.

use crate::error::{ErrShape, Error, Result};

/// The largest rank a tensor may have.
pub const MAX_RANK: usize = 8;

/// An inline list of at most [`MAX_RANK`] sizes (a shape or strides).
///
/// Stored without a heap allocation, so making a view allocates only its
/// `TensorImpl`.
///
/// ```
/// use kael_core::Dims;
/// let d = Dims::from_slice(&[2, 3, 4])?;
/// assert_eq!(&d[..], &[2, 3, 4]);
/// assert_eq!(d.numel(), 24);
/// # Ok::<(), kael_core::Error>(())
/// ```
// INVARIANT: `len <= MAX_RANK`, and the entries past `len` are 0, so that a
// clone is one fixed-size copy (no loop over the live entries, no length-
// dependent memcpy call: views clone a shape and strides each).
#[derive(Clone, Default)]
pub struct Dims {
    dims: [usize; MAX_RANK],
    len: u8,
}

impl Dims {
    /// An empty list (the shape of a scalar).
    pub const fn new() -> Self {
        Self {
            dims: [0; MAX_RANK],
            len: 0,
        }
    }

    /// A list of `like.rank()` zeros.
    #[inline]
    pub(crate) fn zeros_like(like: &Dims) -> Self {
        Self {
            dims: [0; MAX_RANK],
            len: like.len,
        }
    }

    /// Copies `dims`.
    ///
    /// # Errors
    /// [`Error::RankTooLarge`] when `dims` has more than [`MAX_RANK`] entries.
    pub fn from_slice(dims: &[usize]) -> Result<Self> {
        let mut out = Self::new();
        match out.dims.get_mut(..dims.len()) {
            Some(live) => live.copy_from_slice(dims),
            None => {
                return Err(Error::RankTooLarge {
                    rank: dims.len(),
                    max: MAX_RANK,
                });
            }
        }
        out.len = dims.len() as u8;
        Ok(out)
    }

    /// Appends one entry.
    ///
    /// # Errors
    /// [`Error::RankTooLarge`] when the list is full.
    pub fn push(&mut self, d: usize) -> Result<()> {
        let rank = self.rank() + 1;
        match self.dims.get_mut(rank - 1) {
            Some(slot) => *slot = d,
            None => {
                return Err(Error::RankTooLarge {
                    rank,
                    max: MAX_RANK,
                });
            }
        }
        self.len += 1;
        Ok(())
    }

    /// Inserts an entry at `index` (`index <= len`).
    ///
    /// # Errors
    /// [`Error::RankTooLarge`] when the list is full, [`Error::InvalidArgument`]
    /// when `index > len`.
    pub fn insert(&mut self, index: usize, d: usize) -> Result<()> {
        let len = self.rank();
        if index > len {
            return Err(Error::InvalidArgument {
                op: "Dims::insert",
                reason: "the index is past the end; insert at most at the rank",
            });
        }
        self.push(d)?;
        self.dims[index..=len].rotate_right(1);
        Ok(())
    }

    /// Removes and returns the entry at `index`, if it exists.
    pub fn remove(&mut self, index: usize) -> Option<usize> {
        let len = self.rank();
        if index >= len {
            return None;
        }
        let d = self.dims[index];
        self.dims[index..len].rotate_left(1);
        self.dims[len - 1] = 0;
        self.len -= 1;
        Some(d)
    }

    /// The product of all entries (1 for an empty list).
    ///
    /// A tensor's shape has a product that fits (NOTE [Checked output
    /// sizes]) unless a dim is 0, when the product of the others may not
    /// (`[2^40, 2^40, 0]`): the wrapping product is exact in the first
    /// case and 0 in the second, with no overflow panic in debug builds.
    pub fn numel(&self) -> usize {
        self.as_slice()
            .iter()
            .fold(1usize, |a, &d| a.wrapping_mul(d))
    }

    /// Number of entries.
    pub fn rank(&self) -> usize {
        usize::from(self.len)
    }

    /// All `MAX_RANK` slots: the entries, then zeros (INVARIANT), for hot
    /// loops whose indices the compiler then knows are in bounds.
    #[inline]
    pub(crate) fn padded(&self) -> &[usize; MAX_RANK] {
        &self.dims
    }

    /// The entries as a slice.
    pub fn as_slice(&self) -> &[usize] {
        // `get`, not indexing: `len <= MAX_RANK` (INVARIANT), and without
        // a panic path the call is small enough to inline at opt-level z.
        self.dims.get(..self.rank()).unwrap_or(&[])
    }

    /// The entries as a mutable slice.
    pub fn as_mut_slice(&mut self) -> &mut [usize] {
        let len = self.rank();
        &mut self.dims[..len]
    }
}

impl core::ops::Deref for Dims {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        self.as_slice()
    }
}

impl core::ops::DerefMut for Dims {
    fn deref_mut(&mut self) -> &mut [usize] {
        self.as_mut_slice()
    }
}

impl PartialEq for Dims {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Dims {}

impl core::hash::Hash for Dims {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl core::fmt::Debug for Dims {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl PartialEq<[usize]> for Dims {
    fn eq(&self, other: &[usize]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<&[usize]> for Dims {
    fn eq(&self, other: &&[usize]) -> bool {
        self.as_slice() == *other
    }
}

impl<const N: usize> PartialEq<[usize; N]> for Dims {
    fn eq(&self, other: &[usize; N]) -> bool {
        self.as_slice() == other.as_slice()
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Dims {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{=[?]}", self.as_slice())
    }
}

/// Row-major (C-order) strides of a contiguous tensor of shape `shape`.
///
/// ```
/// assert_eq!(&kael_core::shape::contiguous_strides(&[2, 3, 4])[..], &[12, 4, 1]);
/// ```
pub fn contiguous_strides(shape: &[usize]) -> Dims {
    let mut s = Dims::new();
    let mut acc = 1usize;
    for _ in shape {
        // rank was validated by the caller's Dims; cannot overflow MAX_RANK
        let _ = s.push(0);
    }
    for (i, &d) in shape.iter().enumerate().rev() {
        s[i] = acc;
        acc = acc.saturating_mul(d.max(1));
    }
    s
}

/// Resolves a possibly negative dimension index against `rank`.
///
/// # Errors
/// [`Error::DimOutOfRange`] when `dim` is not in `-rank..rank`.
///
/// ```
/// assert_eq!(kael_core::shape::resolve_dim("op", -1, 3)?, 2);
/// assert!(kael_core::shape::resolve_dim("op", 3, 3).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn resolve_dim(op: &'static str, dim: isize, rank: usize) -> Result<usize> {
    let r = rank as isize;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(Error::DimOutOfRange { op, dim, rank });
    }
    Ok(d as usize)
}

/// Like [`resolve_dim`] but for insertion points (`unsqueeze`): `-(rank+1)..=rank`.
///
/// # Errors
/// [`Error::DimOutOfRange`] when `dim` is outside that range.
pub fn resolve_insert_dim(op: &'static str, dim: isize, rank: usize) -> Result<usize> {
    resolve_dim(op, dim, rank + 1)
}

/// The broadcast shape of `a` and `b` (numpy rules, aligned at the right).
///
/// # Errors
/// [`Error::BroadcastMismatch`] when a pair of sizes differ and neither is 1.
///
/// ```
/// let s = kael_core::shape::broadcast_shapes("add", &[2, 1, 4], &[3, 1])?;
/// assert_eq!(&s[..], &[2, 3, 4]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Dims> {
    let mut out = Dims::new();
    broadcast_into(op, a, b, &mut out)?;
    Ok(out)
}

/// [`broadcast_shapes`] written into `out` (empty on entry), for the
/// small-op path: a `Dims` returned through a `Result` is moved two more
/// times, each a memcpy call on Cortex-M (NOTE [Small-op path]).
pub(crate) fn broadcast_into(
    op: &'static str,
    a: &[usize],
    b: &[usize],
    out: &mut Dims,
) -> Result<()> {
    let rank = a.len().max(b.len());
    // The result's element count, accumulated in the same loop (this is
    // the small-op path): `overflow` once it passes usize::MAX.
    let (mut numel, mut overflow) = (1usize, false);
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        let d = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::BroadcastMismatch {
                op,
                lhs: ErrShape::of(a),
                rhs: ErrShape::of(b),
            });
        };
        out.push(d)?;
        let (n, o) = numel.overflowing_mul(d);
        (numel, overflow) = (n, overflow | o);
    }
    // NOTE [Checked output sizes]: operands that fit can broadcast to a
    // result that does not (two expanded views); refuse it under `op`.
    if overflow {
        return Err(Error::InvalidArgument {
            op,
            reason: "the number of elements overflows usize; use a smaller shape",
        });
    }
    Ok(())
}

/// Checked product of sizes.
///
/// # Errors
/// [`Error::InvalidArgument`] when the product overflows `usize`.
pub fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    // (Conservative: a product of the other dims that overflows is refused
    // even next to a 0, so no walk ever multiplies such sizes.)
    shape.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d).ok_or(Error::InvalidArgument {
            op,
            reason: "the number of elements overflows usize; use a smaller shape",
        })
    })
}

// NOTE [Checked output sizes]: no output is allocated or written before
// its element count and byte size are known to fit in `usize`. Operands
// that fit can still make a result that does not: two expanded views
// broadcast together, a batched matmul of expanded batches, `stack` or
// `repeat` of a large view. So each op that builds a shape from user
// input checks it under its own name (`broadcast_into` for every
// elementwise op, matmul's plan, `stack`, `repeat`, `cat`, conv and pool
// geometry, `one_hot`, `expand`), and `Tensor::alloc` takes the byte size
// from `output_bytes` below, the one backstop (`Tensor::written`, the
// small-op path, checks only the bytes of a count its caller checked,
// with `Dims::numel`'s wrapping product, exact for a count that fits).
// The callers of
// `Tensor::written` pass either an existing tensor's shape (unary, cast,
// copy, argsort) or one checked above (binary and compare: broadcast;
// matmul's fast path: `m * n`). `tests/shape_overflow.rs` drives every
// shape-building op to overflow on every device.

/// The byte size of a contiguous `shape` of `elem_size`-byte elements,
/// with checked arithmetic: the one computation every output constructor
/// (`Tensor::alloc`, `Tensor::written`) makes before it allocates
/// (NOTE [Checked output sizes]). An op that builds a shape from user
/// input checks it under its own name first ([`checked_numel`],
/// [`broadcast_shapes`]); this is the backstop, and reports a size past
/// the address space as out of memory, which names no operation.
///
/// # Errors
/// [`Error::OutOfMemory`] with `requested == usize::MAX` when the element
/// count or the byte size overflows `usize`.
pub(crate) fn output_bytes(shape: &[usize], elem_size: usize) -> Result<usize> {
    // A zero dim empties the tensor, whatever the other dims' product.
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .try_fold(elem_size, |acc, &d| acc.checked_mul(d))
        .ok_or(Error::OutOfMemory {
            requested: usize::MAX,
            available: None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides_are_row_major() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), [12, 4, 1]);
        assert_eq!(contiguous_strides(&[]), [0usize; 0]);
        assert_eq!(contiguous_strides(&[3, 0, 2]), [2, 2, 1]);
    }

    #[test]
    fn broadcast_follows_numpy() {
        assert_eq!(broadcast_shapes("t", &[5, 1], &[3]).unwrap(), [5, 3]);
        assert_eq!(broadcast_shapes("t", &[], &[2, 2]).unwrap(), [2, 2]);
        assert_eq!(broadcast_shapes("t", &[0], &[1]).unwrap(), [0]);
        assert!(broadcast_shapes("t", &[2], &[3]).is_err());
    }

    #[test]
    fn rank_nine_is_refused() {
        assert!(matches!(
            Dims::from_slice(&[1; 9]),
            Err(Error::RankTooLarge { rank: 9, max: 8 })
        ));
    }

    #[test]
    fn a_ninth_push_is_refused_and_changes_nothing() {
        let mut d = Dims::from_slice(&[1; 8]).unwrap();
        assert!(matches!(
            d.push(2),
            Err(Error::RankTooLarge { rank: 9, max: 8 })
        ));
        assert!(d.insert(0, 2).is_err());
        assert_eq!(d, [1; 8]);
    }

    #[test]
    fn insert_and_remove_shift_the_entries_after_the_index() {
        let mut d = Dims::from_slice(&[1, 2, 3]).unwrap();
        d.insert(1, 9).unwrap();
        assert_eq!(d, [1, 9, 2, 3]);
        d.insert(4, 7).unwrap();
        assert_eq!(d, [1, 9, 2, 3, 7]);
        assert_eq!(d.remove(0), Some(1));
        assert_eq!(d.remove(5), None);
        assert_eq!(d, [9, 2, 3, 7]);
    }

    #[test]
    fn inserting_past_the_end_is_an_error() {
        let mut d = Dims::from_slice(&[1, 2]).unwrap();
        assert!(matches!(d.insert(3, 5), Err(Error::InvalidArgument { .. })));
        assert_eq!(d, [1, 2]);
    }

    #[test]
    fn lists_with_the_same_entries_are_equal_and_hash_alike_whatever_their_history() {
        use core::hash::{Hash, Hasher};
        struct Sum(u64);
        impl Hasher for Sum {
            fn finish(&self) -> u64 {
                self.0
            }
            fn write(&mut self, bytes: &[u8]) {
                for (i, &b) in bytes.iter().enumerate() {
                    self.0 = self.0.wrapping_mul(31).wrapping_add(b as u64 + i as u64);
                }
            }
        }
        let hash = |d: &Dims| {
            let mut h = Sum(0);
            d.hash(&mut h);
            h.finish()
        };
        let mut a = Dims::from_slice(&[5, 6, 7]).unwrap();
        assert_eq!(a.remove(2), Some(7));
        let b = Dims::from_slice(&[5, 6]).unwrap();
        assert_eq!(a, b);
        assert_eq!(hash(&a), hash(&b));
        assert_eq!(a.clone(), b);
        assert_ne!(a, Dims::from_slice(&[5, 6, 0]).unwrap());
    }

    #[test]
    fn negative_dims_resolve_from_the_end() {
        assert_eq!(resolve_dim("t", -3, 3).unwrap(), 0);
        assert!(resolve_dim("t", -4, 3).is_err());
        assert_eq!(resolve_insert_dim("t", 3, 3).unwrap(), 3);
        assert_eq!(resolve_insert_dim("t", -1, 3).unwrap(), 3);
    }
}
