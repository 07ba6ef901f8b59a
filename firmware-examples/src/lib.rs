//! Support shared by the firmware examples: a heap that records its peak,
//! stack painting, the flash-resident MLP, fixed-point printing (no float
//! formatting code in flash), the exit path, the panic handler and the
//! interrupt vectors ([`vectors`]).
//!
//! Every example reports success or failure through semihosting
//! `SYS_EXIT`, so QEMU's exit status is the example's verdict. Every example
//! starts with [`stack::paint`] and [`heap::init`], and ends through
//! [`exit`], which reports the stack peak and fails a run whose stack came
//! within [`stack::GUARD`] bytes of the heap.
#![no_std]

extern crate alloc;

use core::fmt;
use cortex_m as _; // links cortex-m's critical-section implementation
use cortex_m_semihosting::debug;
use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Layout, Storage, Tensor};

pub mod heap;
pub mod infer;
pub mod plan_data;
pub mod say;
pub mod stack;
pub mod vectors;

/// Ends the program: QEMU exits with status 0 when `ok` and the stack kept
/// its guard bytes, 1 otherwise. Prints the stack peak first.
pub fn exit(ok: bool) -> ! {
    let (peak, size) = (stack::peak(), stack::size());
    let overflow = stack::overflowed();
    #[cfg(not(feature = "defmt"))]
    {
        use say::Part::{Int, Text};
        say::line(&[
            Text("stack peak "),
            Int(peak),
            Text(" B of "),
            Int(size),
            Text(" B"),
        ]);
        if overflow {
            say::line(&[
                Text("FAIL: the stack came within "),
                Int(stack::GUARD),
                Text(" B of the heap; give it more RAM (a smaller heap in heap.rs)"),
            ]);
        }
    }
    #[cfg(feature = "defmt")]
    {
        defmt::info!("stack peak {} B of {} B", peak, size);
        if overflow {
            defmt::error!(
                "FAIL: the stack came within {} B of the heap; give it more RAM (a smaller heap in heap.rs)",
                stack::GUARD
            );
        }
    }
    debug::exit(if ok && !overflow {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    // Only reached on a real board without a debugger attached.
    loop {
        cortex_m::asm::wfi();
    }
}

/// `N` from `extra=N` on the semihosting command line (QEMU's `-append`),
/// or 0: how many more inferences the examples run, so that two runs'
/// instruction counts give the cost of one (scripts/firmware.sh).
pub fn extra_runs() -> usize {
    arg(b"extra=")
}

/// `N` from `KEY=N` (`key` includes the `=`) on the semihosting command
/// line, or 0.
pub fn arg(key: &[u8]) -> usize {
    let mut buf = [0u8; 128];
    let mut args = [buf.as_mut_ptr() as usize, buf.len()];
    // SAFETY: SYS_GET_CMDLINE writes at most args[1] bytes into buf (which
    // outlives the call) and the length into args[1]; both are ours.
    let failed = unsafe {
        cortex_m_semihosting::syscall1(
            cortex_m_semihosting::nr::GET_CMDLINE,
            args.as_mut_ptr() as usize,
        )
    } != 0;
    if failed || key.is_empty() {
        return 0;
    }
    let line = &buf[..args[1].min(buf.len())];
    let Some(at) = line.windows(key.len()).position(|w| w == key) else {
        return 0;
    };
    line[at + key.len()..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .fold(0, |n, &c| n * 10 + (c - b'0') as usize)
}

#[cfg(not(feature = "defmt"))]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    // Through `say`, not `{}`: formatting the message would link
    // core::fmt into every example. A message with arguments is not
    // printed; its location is.
    use say::Part::{Int, Text};
    let message = info.message().as_str().unwrap_or("(a formatted message)");
    match info.location() {
        Some(at) => say::line(&[
            Text("PANIC at "),
            Text(at.file()),
            Text(":"),
            Int(at.line() as usize),
            Text(": "),
            Text(message),
        ]),
        None => say::line(&[Text("PANIC: "), Text(message)]),
    }
    exit(false)
}

#[cfg(feature = "defmt")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    defmt::error!("PANIC: {}", defmt::Display2Format(info));
    exit(false)
}

/// An `f32` printed with six decimals through integer formatting only.
///
/// `{}` on an `f32` links core's shortest-float formatting (about 10 KB of
/// flash); this keeps the examples' flash figures about kael, not `core::fmt`.
pub struct Fx(pub f32);

impl fmt::Display for Fx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v.is_nan() {
            return f.write_str("NaN");
        }
        if v < 0.0 {
            f.write_str("-")?;
        }
        let a = if v < 0.0 { -v } else { v };
        if a >= 4.0e9 {
            return f.write_str("inf-or-huge");
        }
        let mut int = a as u32;
        let mut frac = ((a - int as f32) * 1.0e6 + 0.5) as u32;
        if frac >= 1_000_000 {
            int += 1;
            frac -= 1_000_000;
        }
        write!(f, "{int}.{frac:06}")
    }
}

/// Largest `|got - want|` over two equal-length slices, and whether every
/// element is within `tol * (1 + |want|)`. A length mismatch or a NaN fails.
pub fn compare(got: &[f32], want: &[f32], tol: f32) -> (f32, bool) {
    if got.len() != want.len() {
        return (f32::INFINITY, false);
    }
    let mut max = 0.0f32;
    let mut ok = true;
    for (&g, &w) in got.iter().zip(want) {
        let d = if g > w { g - w } else { w - g };
        let scale = 1.0 + if w < 0.0 { -w } else { w };
        if d.is_nan() || d > tol * scale {
            ok = false;
        }
        if d > max || d.is_nan() {
            max = d;
        }
    }
    (max, ok)
}

// ------------------------------------------------------------ the model

/// The model file, 16-byte aligned so that its f32 sections can be used in
/// place (kael storage needs 16-byte alignment).
#[repr(C, align(16))]
struct Aligned<B: ?Sized>(B);

static MLP_BLOB: &Aligned<[u8]> = &Aligned(*include_bytes!("../data/mlp_infer.bin"));

/// The model file's header: magic, then four little-endian `u32`s.
const MAGIC: &[u8; 8] = b"KAELMLP1";
const HEADER: usize = 32;

/// The two-layer MLP of `data/mlp_infer.bin`, read in place from flash:
/// `softmax(relu(x @ w1 + b1) @ w2 + b2, dim 1)`.
///
/// File layout (written by `tests/tests/firmware_reference.rs`, which also
/// checks `expected` against kael on the host): 32-byte header
/// (`KAELMLP1`, `u32` in, hidden, out, samples, zero padding), then six
/// little-endian f32 sections, each starting on a 16-byte boundary:
/// `w1 [in, hidden]`, `b1 [hidden]`, `w2 [hidden, out]`, `b2 [out]`,
/// `x [samples, in]`, `expected [samples, out]`.
pub struct Mlp {
    /// First layer weight, `[in, hidden]`.
    pub w1: Tensor,
    /// First layer bias, `[hidden]`.
    pub b1: Tensor,
    /// Second layer weight, `[hidden, out]`.
    pub w2: Tensor,
    /// Second layer bias, `[out]`.
    pub b2: Tensor,
    /// Test inputs, `[samples, in]`.
    pub x: Tensor,
    /// Host-computed outputs for `x`, `[samples, out]`.
    pub expected: Tensor,
}

const BAD_FILE: Error = Error::InvalidArgument {
    op: "Mlp::from_flash",
    reason: "data/mlp_infer.bin is not a valid model file; regenerate it with KAEL_BLESS=1 cargo test -p kael-tests --test firmware_reference",
};

fn read_u32(bytes: &[u8], at: usize) -> Result<usize, Error> {
    match bytes.get(at..at + 4) {
        Some(&[a, b, c, d]) => Ok(u32::from_le_bytes([a, b, c, d]) as usize),
        _ => Err(BAD_FILE),
    }
}

/// The model file's six f32 sections (`w1 b1 w2 b2 x expected`, see
/// [`Mlp`]) as slices of flash, with the dimensions in, hidden, out,
/// samples: what a plan replay binds, with no tensor and no heap.
///
/// # Errors
/// [`Error::InvalidArgument`] when the file is malformed.
pub fn mlp_sections() -> Result<([&'static [f32]; 6], [usize; 4]), Error> {
    let bytes: &'static [u8] = &MLP_BLOB.0;
    if bytes.get(..8) != Some(&MAGIC[..]) {
        return Err(BAD_FILE);
    }
    let dims = [
        read_u32(bytes, 8)?,
        read_u32(bytes, 12)?,
        read_u32(bytes, 16)?,
        read_u32(bytes, 20)?,
    ];
    let [i, h, o, n] = dims;
    let mut at = HEADER;
    let mut section = |len: usize| -> Result<&'static [f32], Error> {
        let end = len.checked_mul(4).and_then(|b| b.checked_add(at));
        let s = end.and_then(|end| bytes.get(at..end)).ok_or(BAD_FILE)?;
        at = end.ok_or(BAD_FILE)?.next_multiple_of(16);
        bytemuck::try_cast_slice(s).map_err(|_| BAD_FILE)
    };
    let m = |a: usize, b: usize| a.checked_mul(b).ok_or(BAD_FILE);
    Ok((
        [
            section(m(i, h)?)?,
            section(h)?,
            section(m(h, o)?)?,
            section(o)?,
            section(m(n, i)?)?,
            section(m(n, o)?)?,
        ],
        dims,
    ))
}

impl Mlp {
    /// Wraps the flash-resident model file as tensors on `dev` without
    /// copying: one external (read-only) storage, six views into it. No
    /// tensor memory is allocated.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the file is malformed.
    pub fn from_flash(dev: &Device) -> Result<Self, Error> {
        let bytes: &'static [u8] = &MLP_BLOB.0;
        if bytes.get(..8) != Some(&MAGIC[..]) {
            return Err(BAD_FILE);
        }
        let (n_in, n_hid, n_out, n) = (
            read_u32(bytes, 8)?,
            read_u32(bytes, 12)?,
            read_u32(bytes, 16)?,
            read_u32(bytes, 20)?,
        );
        let storage = Shared::new(Storage::from_owner(bytes, dev)?);
        // Offsets in f32 elements; every section starts on 16 bytes (4 f32).
        let mut at = HEADER / 4;
        let mut section = |shape: &[usize]| -> Result<Tensor, Error> {
            let layout = Layout::contiguous(shape)?;
            let numel: usize = shape.iter().product();
            let layout = Layout::new(shape, layout.strides(), at)?;
            at += numel.div_ceil(4) * 4;
            Tensor::from_storage(storage.clone(), layout, DType::F32)
        };
        Ok(Self {
            w1: section(&[n_in, n_hid])?,
            b1: section(&[n_hid])?,
            w2: section(&[n_hid, n_out])?,
            b2: section(&[n_out])?,
            x: section(&[n, n_in])?,
            expected: section(&[n, n_out])?,
        })
    }

    /// Class probabilities for a batch `x` of shape `[batch, in]`.
    ///
    /// # Errors
    /// Any kael error, e.g. [`Error::OutOfMemory`] when the device's
    /// allocator cannot hold the activations.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        x.matmul(&self.w1)?
            .add(&self.b1)?
            .relu()?
            .matmul(&self.w2)?
            .add(&self.b2)?
            .softmax(1)
    }
}

/// Tolerance for firmware-vs-host outputs (absolute + relative). Same code,
/// same IEEE f32 arithmetic: in practice the results are bit-identical.
pub const TOLERANCE: f32 = 1.0e-5;
