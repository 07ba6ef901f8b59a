//! Shared by the fuzz targets: a byte reader and the invariant checks.
#![allow(dead_code)]

use kael_core::{DType, Error, Result, Tensor};

/// `KAEL_FUZZ_TRACE=1 cargo fuzz run <target> <input>` prints each step
/// (to read a crash or leak report).
#[macro_export]
macro_rules! trace {
    ($($a:tt)*) => {
        if std::env::var_os("KAEL_FUZZ_TRACE").is_some() {
            eprintln!($($a)*);
        }
    };
}

/// Largest tensor (in elements) a target materialises; bigger views are
/// checked for their metadata only (so libFuzzer's malloc limit never trips).
pub const MAX_NUMEL: usize = 512;

/// Reads the fuzz input one decision at a time; past the end every read is 0.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    pub fn done(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A dimension index in -4..=4 (some out of range for small ranks).
    pub fn dim(&mut self) -> isize {
        (self.u8() % 9) as isize - 4
    }

    /// A small size, 0..=4.
    pub fn size(&mut self) -> usize {
        (self.u8() % 5) as usize
    }

    /// A size that is occasionally huge (for argument validation).
    pub fn wide(&mut self) -> usize {
        match self.u8() {
            0..=199 => (self.u8() % 8) as usize,
            200..=219 => (self.u8() as usize) << 8 | self.u8() as usize,
            220..=229 => usize::MAX,
            230..=239 => usize::MAX / 2 + 1,
            240..=247 => 1usize << 32,
            _ => usize::from_le_bytes([
                self.u8(),
                self.u8(),
                self.u8(),
                self.u8(),
                self.u8(),
                self.u8(),
                self.u8(),
                self.u8(),
            ]),
        }
    }

    /// A shape of rank 0..=3 with small sizes.
    pub fn shape(&mut self) -> Vec<usize> {
        let rank = (self.u8() % 4) as usize;
        (0..rank).map(|_| self.size()).collect()
    }

    pub fn dtype(&mut self) -> DType {
        DType::ALL[(self.u8() as usize) % DType::ALL.len()]
    }

    /// A float-heavy dtype choice (most ops are float ops).
    pub fn dtype_mostly_float(&mut self) -> DType {
        match self.u8() % 8 {
            0..=3 => DType::F32,
            4 => DType::F64,
            _ => self.dtype(),
        }
    }

    pub fn value(&mut self) -> f64 {
        const V: [f64; 12] = [
            0.0,
            1.0,
            -1.0,
            2.0,
            0.5,
            -3.0,
            7.0,
            1e30,
            -0.25,
            f64::INFINITY,
            f64::NAN,
            255.0,
        ];
        V[(self.u8() as usize) % V.len()]
    }

    pub fn opt_value(&mut self) -> Option<f64> {
        if self.bool() {
            Some(self.value())
        } else {
            None
        }
    }
}

/// Every error must explain itself: a non-empty message that names a fix.
#[track_caller]
pub fn check_err(e: &Error) {
    let msg = e.to_string();
    assert!(!msg.trim().is_empty(), "error with an empty message: {e:?}");
    assert!(
        msg.len() > 10,
        "error message too short to name a fix: {msg:?}"
    );
}

/// `Some(value)` for `Ok`; checks the error's message for `Err`.
#[track_caller]
pub fn ok<T>(r: Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            check_err(&e);
            None
        }
    }
}

/// Layout invariants of a tensor: ranks agree, the reach stays inside the
/// storage (INVARIANT 2 of `TensorImpl`).
#[track_caller]
pub fn check_tensor(t: &Tensor) {
    let layout = t.layout();
    assert_eq!(layout.shape().len(), layout.strides().len());
    assert!(t.rank() <= kael_core::MAX_RANK);
    let storage_len = t.storage_nbytes() / t.element_size();
    if t.numel() > 0 {
        assert!(
            layout.reach() <= storage_len,
            "view reaches {} but storage holds {storage_len}: {layout:?}",
            layout.reach()
        );
    } else {
        assert!(
            layout.offset() <= storage_len,
            "{layout:?} past {storage_len}"
        );
    }
}

/// The element bytes of `t` in logical row-major order, gathered by hand
/// from the raw storage through the layout (the reference every kernel's
/// output is compared with). `None` when too large or not readable.
pub fn gather(t: &Tensor) -> Option<Vec<u8>> {
    if t.numel() > MAX_NUMEL {
        return None;
    }
    let storage = t.storage();
    let g = storage.read("fuzz gather").ok()?;
    let bytes = g.bytes();
    let es = t.element_size();
    let mut out = Vec::with_capacity(t.numel() * es);
    t.layout()
        .for_each_offset(|o| out.extend_from_slice(&bytes[o * es..(o + 1) * es]));
    Some(out)
}

/// The raw storage bytes (for "nothing else changed" checks).
pub fn storage_bytes(t: &Tensor) -> Option<Vec<u8>> {
    let storage = t.storage();
    let g = storage.read("fuzz storage_bytes").ok()?;
    Some(g.bytes().to_vec())
}

/// Storage element indices `t` covers.
pub fn covered(t: &Tensor) -> Vec<usize> {
    let mut v = Vec::new();
    if t.numel() <= MAX_NUMEL {
        t.layout().for_each_offset(|o| v.push(o));
    }
    v
}

/// Bytes equal, except that any two NaNs of the same float dtype match.
pub fn same_values(dtype: DType, a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    match dtype {
        DType::F32 => a.chunks(4).zip(b.chunks(4)).all(|(x, y)| {
            let (x, y) = (
                f32::from_le_bytes(x.try_into().unwrap()),
                f32::from_le_bytes(y.try_into().unwrap()),
            );
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }),
        DType::F64 => a.chunks(8).zip(b.chunks(8)).all(|(x, y)| {
            let (x, y) = (
                f64::from_le_bytes(x.try_into().unwrap()),
                f64::from_le_bytes(y.try_into().unwrap()),
            );
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }),
        DType::F16 | DType::BF16 => a.chunks(2).zip(b.chunks(2)).all(|(x, y)| {
            let nan = |c: &[u8]| {
                let bits = u16::from_le_bytes([c[0], c[1]]);
                if dtype == DType::F16 {
                    kael_core::f16::from_bits(bits).is_nan()
                } else {
                    kael_core::bf16::from_bits(bits).is_nan()
                }
            };
            x == y || (nan(x) && nan(y))
        }),
        _ => a == b,
    }
}

/// Asserts two results of one op agree: both `Ok` with equal shape, dtype
/// and values, or both `Err` (with messages). `what` names the op.
#[track_caller]
pub fn assert_same(what: &str, got: &Result<Tensor>, want: &Result<Tensor>) {
    match (got, want) {
        (Ok(g), Ok(w)) => {
            check_tensor(g);
            check_tensor(w);
            assert_eq!(g.shape(), w.shape(), "{what}: shapes differ");
            assert_eq!(g.dtype(), w.dtype(), "{what}: dtypes differ");
            if let (Some(a), Some(b)) = (gather(g), gather(w)) {
                assert!(
                    same_values(g.dtype(), &a, &b),
                    "{what}: values differ from the recomputation on a deep copy\n got {a:?}\nwant {b:?}"
                );
            }
        }
        (Err(a), Err(b)) => {
            check_err(a);
            check_err(b);
        }
        (Ok(_), Err(Error::OutOfMemory { .. })) | (Err(Error::OutOfMemory { .. }), Ok(_)) => {}
        (Ok(_), Err(e)) => panic!("{what}: ok on the tensor but {e:?} on its deep copy"),
        (Err(e), Ok(_)) => panic!("{what}: {e:?} on the tensor but ok on its deep copy"),
    }
}
