//! Writing FlatBuffers: the [`Builder`] that `.tflite` files are written
//! with ([`QuantizedModel::to_tflite`](super::QuantizedModel::to_tflite)),
//! the counterpart of the reader in `flatbuffer.rs`.
//!
//! NOTE [Building back to front]
//! A FlatBuffers offset (`uoffset_t`) is unsigned and points forward, so a
//! referenced object must lie after the field that references it. The
//! builder therefore writes back to front, as FlatBuffers' own builders
//! do: children first, at the end of the buffer, then their parents
//! before them. It keeps the bytes reversed in a `Vec` (so prepending is a
//! push) and names each object by its distance from the end ([`Ref`]),
//! which no later write changes; [`Builder::finish`] reverses the bytes
//! once. Alignment is kept relative to the end, and the finished length is
//! padded to the largest alignment used, so every scalar lands aligned to
//! its size and every vector's data to what its caller asked.

use alloc::vec::Vec;

/// An object already written: its distance from the end of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ref(usize);

/// A table being written: where it started and where each field went.
pub(super) struct TableStart {
    start: usize,
    fields: Vec<(u16, usize)>,
}

/// A FlatBuffers writer (NOTE [Building back to front]).
#[derive(Default)]
pub(super) struct Builder {
    /// The bytes written so far, last byte first.
    rev: Vec<u8>,
    /// The largest alignment any object asked for.
    max_align: usize,
}

impl Builder {
    pub(super) fn new() -> Builder {
        Builder {
            rev: Vec::new(),
            max_align: 4,
        }
    }

    /// Pads so that, once `size` more bytes are prepended, the start of
    /// those bytes is aligned to `align` (a power of two).
    fn pad_for(&mut self, size: usize, align: usize) {
        self.max_align = self.max_align.max(align);
        while (self.rev.len() + size) % align != 0 {
            self.rev.push(0);
        }
    }

    fn prepend(&mut self, bytes: &[u8]) {
        self.rev.extend(bytes.iter().rev());
    }

    /// A `uoffset_t` to `target`, prepended where the buffer now starts.
    fn prepend_offset(&mut self, target: Ref) {
        self.pad_for(4, 4);
        let at = self.rev.len() + 4;
        self.prepend(&((at - target.0) as u32).to_le_bytes());
    }

    /// A vector of `n` elements whose little-endian bytes are `data`, its
    /// data aligned to `align` (at least 4, the length's).
    fn vector_of(&mut self, data: &[u8], n: usize, align: usize) -> Ref {
        self.pad_for(data.len(), align.max(4));
        self.prepend(data);
        self.prepend(&(n as u32).to_le_bytes());
        Ref(self.rev.len())
    }

    /// A `[ubyte]` vector, its data aligned to `align`.
    pub(super) fn bytes(&mut self, data: &[u8], align: usize) -> Ref {
        self.vector_of(data, data.len(), align)
    }

    /// A string (FlatBuffers adds a terminating 0 not counted in its
    /// length).
    pub(super) fn string(&mut self, s: &str) -> Ref {
        self.pad_for(s.len() + 1, 4);
        self.prepend(&[0]);
        self.prepend(s.as_bytes());
        self.prepend(&(s.len() as u32).to_le_bytes());
        Ref(self.rev.len())
    }

    /// An `[int]` vector.
    pub(super) fn i32s(&mut self, v: &[i32]) -> Ref {
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.vector_of(&data, v.len(), 4)
    }

    /// A `[float]` vector.
    pub(super) fn f32s(&mut self, v: &[f32]) -> Ref {
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.vector_of(&data, v.len(), 4)
    }

    /// A `[long]` vector.
    pub(super) fn i64s(&mut self, v: &[i64]) -> Ref {
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.vector_of(&data, v.len(), 8)
    }

    /// A vector of tables (or strings, or vectors) already written.
    pub(super) fn offsets(&mut self, refs: &[Ref]) -> Ref {
        self.pad_for(4 * refs.len(), 4);
        for &r in refs.iter().rev() {
            self.prepend_offset(r);
        }
        self.prepend(&(refs.len() as u32).to_le_bytes());
        Ref(self.rev.len())
    }

    /// Starts a table: add its fields, then [`Builder::end_table`].
    /// Its children (vectors, strings, tables) must already be written.
    pub(super) fn start_table(&self) -> TableStart {
        TableStart {
            start: self.rev.len(),
            fields: Vec::new(),
        }
    }

    fn field(&mut self, t: &mut TableStart, id: u16, le: &[u8]) {
        self.pad_for(le.len(), le.len());
        self.prepend(le);
        t.fields.push((id, self.rev.len()));
    }

    pub(super) fn field_u8(&mut self, t: &mut TableStart, id: u16, v: u8) {
        self.field(t, id, &[v]);
    }

    pub(super) fn field_i32(&mut self, t: &mut TableStart, id: u16, v: i32) {
        self.field(t, id, &v.to_le_bytes());
    }

    pub(super) fn field_u32(&mut self, t: &mut TableStart, id: u16, v: u32) {
        self.field(t, id, &v.to_le_bytes());
    }

    pub(super) fn field_f32(&mut self, t: &mut TableStart, id: u16, v: f32) {
        self.field(t, id, &v.to_le_bytes());
    }

    pub(super) fn field_offset(&mut self, t: &mut TableStart, id: u16, target: Ref) {
        self.prepend_offset(target);
        t.fields.push((id, self.rev.len()));
    }

    /// Ends a table: its `soffset_t` to a vtable written just before it.
    pub(super) fn end_table(&mut self, t: TableStart) -> Ref {
        self.pad_for(4, 4);
        self.prepend(&[0; 4]);
        let table = self.rev.len();
        let slots = t.fields.iter().map(|&(id, _)| id as usize + 1).max();
        let slots = slots.unwrap_or(0);
        let mut entries = alloc::vec![0u16; slots];
        for &(id, at) in &t.fields {
            // The field's offset from the table's start.
            entries[id as usize] = (table - at) as u16;
        }
        for &e in entries.iter().rev() {
            self.prepend(&e.to_le_bytes());
        }
        self.prepend(&((table - t.start) as u16).to_le_bytes());
        self.prepend(&((4 + 2 * slots) as u16).to_le_bytes());
        let vtable = self.rev.len();
        // The table's first 4 bytes (reversed storage: indices table - 1
        // down to table - 4) hold table - vtable as an address difference.
        let soffset = ((vtable - table) as i32).to_le_bytes();
        for (k, b) in soffset.iter().enumerate() {
            self.rev[table - 1 - k] = *b;
        }
        Ref(table)
    }

    /// The finished buffer: the root table's offset, the 4-byte file
    /// identifier, then everything written.
    pub(super) fn finish(mut self, root: Ref, identifier: &[u8; 4]) -> Vec<u8> {
        let align = self.max_align;
        self.pad_for(8, align);
        self.prepend(identifier);
        self.prepend_offset(root);
        self.rev.reverse();
        self.rev
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::flatbuffer::Table;

    #[test]
    fn a_written_table_reads_back_with_the_reader() {
        let mut b = Builder::new();
        let name = b.string("kael");
        let dims = b.i32s(&[1, -2, 3]);
        let zps = b.i64s(&[-5, 7]);
        let data = b.bytes(&[9, 8, 7], 16);
        let mut child = b.start_table();
        b.field_f32(&mut child, 0, 0.5);
        let child = b.end_table(child);
        let children = b.offsets(&[child, child]);
        let mut t = b.start_table();
        b.field_u8(&mut t, 1, 200);
        b.field_i32(&mut t, 0, -42);
        b.field_offset(&mut t, 2, name);
        b.field_offset(&mut t, 3, dims);
        b.field_offset(&mut t, 5, zps);
        b.field_offset(&mut t, 6, data);
        b.field_offset(&mut t, 7, children);
        b.field_u32(&mut t, 8, 70_000);
        let root = b.end_table(t);
        let bytes = b.finish(root, b"TEST");
        assert_eq!(&bytes[4..8], b"TEST");
        assert_eq!(bytes.len() % 16, 0);
        let r = Table::root(&bytes).unwrap();
        assert_eq!(r.i32(0, 0).unwrap(), -42);
        assert_eq!(r.u8(1, 0).unwrap(), 200);
        assert_eq!(r.vector(2, 1).unwrap().bytes(), b"kael");
        let d = r.vector(3, 4).unwrap();
        let got: Vec<i32> = (0..d.len()).map(|i| d.i32(i).unwrap()).collect();
        assert_eq!(got, [1, -2, 3]);
        assert_eq!(
            r.i32(4, 11).unwrap(),
            11,
            "an absent field reads its default"
        );
        let z = r.vector(5, 8).unwrap();
        assert_eq!(z.bytes().len(), 16);
        assert_eq!(
            (z.bytes().as_ptr() as usize - bytes.as_ptr() as usize) % 8,
            0
        );
        let v = r.vector(6, 1).unwrap();
        assert_eq!(v.bytes(), [9, 8, 7]);
        let off = v.bytes().as_ptr() as usize - bytes.as_ptr() as usize;
        assert_eq!(off % 16, 0, "data aligned to 16 from the buffer start");
        let c = r.vector(7, 4).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.table(1).unwrap().f32(0, 0.0).unwrap(), 0.5);
        assert_eq!(r.u32(8, 0).unwrap(), 70_000);
    }
}
