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
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Dims(heapless::Vec<usize, MAX_RANK, u8>);

impl Dims {
    /// An empty list (the shape of a scalar).
    pub const fn new() -> Self {
        Self(heapless::Vec::new())
    }

    /// Copies `dims`.
    ///
    /// # Errors
    /// [`Error::RankTooLarge`] when `dims` has more than [`MAX_RANK`] entries.
    pub fn from_slice(dims: &[usize]) -> Result<Self> {
        heapless::Vec::from_slice(dims)
            .map(Self)
            .map_err(|_| Error::RankTooLarge {
                rank: dims.len(),
                max: MAX_RANK,
            })
    }

    /// Appends one entry.
    ///
    /// # Errors
    /// [`Error::RankTooLarge`] when the list is full.
    pub fn push(&mut self, d: usize) -> Result<()> {
        let rank = self.0.len() + 1;
        self.0.push(d).map_err(|_| Error::RankTooLarge {
            rank,
            max: MAX_RANK,
        })
    }

    /// Inserts an entry at `index` (`index <= len`).
    ///
    /// # Errors
    /// [`Error::RankTooLarge`] when the list is full.
    pub fn insert(&mut self, index: usize, d: usize) -> Result<()> {
        let rank = self.0.len() + 1;
        self.0.insert(index, d).map_err(|_| Error::RankTooLarge {
            rank,
            max: MAX_RANK,
        })
    }

    /// Removes and returns the entry at `index`, if it exists.
    pub fn remove(&mut self, index: usize) -> Option<usize> {
        if index < self.0.len() {
            Some(self.0.remove(index))
        } else {
            None
        }
    }

    /// The product of all entries (1 for an empty list).
    pub fn numel(&self) -> usize {
        self.0.iter().product()
    }

    /// Number of entries.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The entries as a slice.
    pub fn as_slice(&self) -> &[usize] {
        &self.0
    }

    /// The entries as a mutable slice.
    pub fn as_mut_slice(&mut self) -> &mut [usize] {
        &mut self.0
    }
}

impl core::ops::Deref for Dims {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.0
    }
}

impl core::ops::DerefMut for Dims {
    fn deref_mut(&mut self) -> &mut [usize] {
        &mut self.0
    }
}

impl core::fmt::Debug for Dims {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
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
    let rank = a.len().max(b.len());
    let mut out = Dims::new();
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
    }
    Ok(out)
}

/// Checked product of sizes.
///
/// # Errors
/// [`Error::InvalidArgument`] when the product overflows `usize`.
pub fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d).ok_or(Error::InvalidArgument {
            op,
            reason: "the number of elements overflows usize; use a smaller shape",
        })
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
    fn negative_dims_resolve_from_the_end() {
        assert_eq!(resolve_dim("t", -3, 3).unwrap(), 0);
        assert!(resolve_dim("t", -4, 3).is_err());
        assert_eq!(resolve_insert_dim("t", 3, 3).unwrap(), 3);
        assert_eq!(resolve_insert_dim("t", -1, 3).unwrap(), 3);
    }
}
