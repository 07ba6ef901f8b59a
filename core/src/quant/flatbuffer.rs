//! A bounds-checked reader for the parts of the FlatBuffers binary format
//! a `.tflite` file uses: tables with vtables, vectors of scalars, of
//! tables and of bytes. Every read checks its offset against the buffer
//! and returns an `Err` past the end, so a truncated or corrupted file
//! cannot make it panic or read out of bounds; it follows no offset
//! backwards into a loop, since every caller reads a fixed depth.

use crate::error::{Error, Result};

const OP: &str = "tflite::Model::parse";

fn malformed() -> Error {
    Error::InvalidArgument {
        op: OP,
        reason: "the file is not a well-formed .tflite flatbuffer (an offset or length points past its end); re-export it with TFLite's converter, and pass the whole file",
    }
}

fn bytes<const N: usize>(buf: &[u8], pos: usize) -> Result<[u8; N]> {
    let end = pos.checked_add(N).ok_or_else(malformed)?;
    let s = buf.get(pos..end).ok_or_else(malformed)?;
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    Ok(a)
}

fn u32_at(buf: &[u8], pos: usize) -> Result<u32> {
    bytes::<4>(buf, pos).map(u32::from_le_bytes)
}

/// Follows the unsigned offset stored at `pos` (relative to `pos`).
fn follow(buf: &[u8], pos: usize) -> Result<usize> {
    pos.checked_add(u32_at(buf, pos)? as usize)
        .ok_or_else(malformed)
}

/// A table: its position and its vtable's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Table<'a> {
    buf: &'a [u8],
    pos: usize,
    vtable: usize,
    vtable_len: usize,
}

impl<'a> Table<'a> {
    /// The root table of the buffer.
    pub(crate) fn root(buf: &'a [u8]) -> Result<Table<'a>> {
        Table::at(buf, follow(buf, 0)?)
    }

    fn at(buf: &'a [u8], pos: usize) -> Result<Table<'a>> {
        let soffset = i32::from_le_bytes(bytes::<4>(buf, pos)?) as i64;
        let vtable = usize::try_from(pos as i64 - soffset).map_err(|_| malformed())?;
        let vtable_len = u16::from_le_bytes(bytes::<2>(buf, vtable)?) as usize;
        if vtable_len < 4 || vtable.checked_add(vtable_len).is_none_or(|e| e > buf.len()) {
            return Err(malformed());
        }
        Ok(Table {
            buf,
            pos,
            vtable,
            vtable_len,
        })
    }

    /// The position of field `id`, or `None` when the table omits it.
    fn field(&self, id: usize) -> Result<Option<usize>> {
        let slot = 4 + 2 * id;
        if slot + 2 > self.vtable_len {
            return Ok(None);
        }
        let off = u16::from_le_bytes(bytes::<2>(self.buf, self.vtable + slot)?) as usize;
        Ok((off != 0).then_some(self.pos + off))
    }

    pub(crate) fn u8(&self, id: usize, default: u8) -> Result<u8> {
        match self.field(id)? {
            Some(p) => Ok(bytes::<1>(self.buf, p)?[0]),
            None => Ok(default),
        }
    }

    pub(crate) fn i32(&self, id: usize, default: i32) -> Result<i32> {
        match self.field(id)? {
            Some(p) => Ok(i32::from_le_bytes(bytes::<4>(self.buf, p)?)),
            None => Ok(default),
        }
    }

    pub(crate) fn f32(&self, id: usize, default: f32) -> Result<f32> {
        match self.field(id)? {
            Some(p) => Ok(f32::from_le_bytes(bytes::<4>(self.buf, p)?)),
            None => Ok(default),
        }
    }

    pub(crate) fn u32(&self, id: usize, default: u32) -> Result<u32> {
        match self.field(id)? {
            Some(p) => u32_at(self.buf, p),
            None => Ok(default),
        }
    }

    pub(crate) fn table(&self, id: usize) -> Result<Option<Table<'a>>> {
        match self.field(id)? {
            Some(p) => Table::at(self.buf, follow(self.buf, p)?).map(Some),
            None => Ok(None),
        }
    }

    /// A vector of `elem`-byte elements (empty when the field is absent).
    pub(crate) fn vector(&self, id: usize, elem: usize) -> Result<Vector<'a>> {
        let Some(p) = self.field(id)? else {
            return Ok(Vector {
                buf: self.buf,
                start: 0,
                len: 0,
                elem,
            });
        };
        let at = follow(self.buf, p)?;
        let len = u32_at(self.buf, at)? as usize;
        let start = at.checked_add(4).ok_or_else(malformed)?;
        let end = len
            .checked_mul(elem)
            .and_then(|n| n.checked_add(start))
            .ok_or_else(malformed)?;
        if end > self.buf.len() {
            return Err(malformed());
        }
        Ok(Vector {
            buf: self.buf,
            start,
            len,
            elem,
        })
    }
}

/// A vector whose elements lie inside the buffer (checked when made).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Vector<'a> {
    buf: &'a [u8],
    start: usize,
    len: usize,
    elem: usize,
}

impl<'a> Vector<'a> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn bytes(&self) -> &'a [u8] {
        // In range by construction; `get` keeps it panic-free regardless.
        self.buf
            .get(self.start..self.start + self.len * self.elem)
            .unwrap_or(&[])
    }

    fn pos(&self, i: usize) -> Result<usize> {
        if i >= self.len {
            return Err(malformed());
        }
        Ok(self.start + i * self.elem)
    }

    pub(crate) fn i32(&self, i: usize) -> Result<i32> {
        Ok(i32::from_le_bytes(bytes::<4>(self.buf, self.pos(i)?)?))
    }

    pub(crate) fn f32(&self, i: usize) -> Result<f32> {
        Ok(f32::from_le_bytes(bytes::<4>(self.buf, self.pos(i)?)?))
    }

    pub(crate) fn i64(&self, i: usize) -> Result<i64> {
        Ok(i64::from_le_bytes(bytes::<8>(self.buf, self.pos(i)?)?))
    }

    /// Element `i` of a vector of tables.
    pub(crate) fn table(&self, i: usize) -> Result<Table<'a>> {
        let p = self.pos(i)?;
        Table::at(self.buf, follow(self.buf, p)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-assembled buffer: root offset, a vtable with two fields, a
    /// table holding an i32 (7) and an offset to a vector of two i32s.
    fn sample() -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..4].copy_from_slice(&12u32.to_le_bytes()); // root table at 12
        // vtable at 4: len 8, table size 12, field0 at +4, field1 at +8
        b[4..6].copy_from_slice(&8u16.to_le_bytes());
        b[6..8].copy_from_slice(&12u16.to_le_bytes());
        b[8..10].copy_from_slice(&4u16.to_le_bytes());
        b[10..12].copy_from_slice(&8u16.to_le_bytes());
        b[12..16].copy_from_slice(&8i32.to_le_bytes()); // soffset: 12 - 8 = 4
        b[16..20].copy_from_slice(&7i32.to_le_bytes());
        b[20..24].copy_from_slice(&4u32.to_le_bytes()); // vector at 24
        b[24..28].copy_from_slice(&1u32.to_le_bytes()); // len 1
        b[28..32].copy_from_slice(&(-5i32).to_le_bytes());
        b
    }

    #[test]
    fn reads_fields_defaults_and_vectors() {
        let b = sample();
        let t = Table::root(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.i32(0, 0).ok(), Some(7));
        assert_eq!(
            t.i32(5, 42).ok(),
            Some(42),
            "an absent field reads its default"
        );
        let v = t.vector(1, 4).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.len(), v.i32(0).ok()), (1, Some(-5)));
        assert!(v.i32(1).is_err());
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let b = sample();
        for n in 0..b.len() {
            let r = Table::root(&b[..n]).and_then(|t| {
                t.i32(0, 0)?;
                t.vector(1, 4)?.i32(0)
            });
            assert!(r.is_err(), "truncated at {n}");
        }
    }

    #[test]
    fn a_vector_length_past_the_end_is_refused() {
        let mut b = sample();
        b[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        let t = Table::root(&b).unwrap_or_else(|e| panic!("{e}"));
        assert!(t.vector(1, 4).is_err());
    }
}
