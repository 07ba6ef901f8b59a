//! The int8 dot product every fully-connected and convolution kernel spends
//! its time in: `sum((x + offset) * w)` over two `i8` slices, in `i32`.
//!
//! NOTE [DSP dot product]
//! On Cortex-M4/M7 (`thumbv7em`: the DSP extension; kael-core's build script
//! sets `cfg(kael_arm_dsp)` for those targets) [`dot`] takes four bytes of
//! each slice per step and multiplies them as two pairs of 16-bit lanes:
//! `SXTAB16` sign-extends bytes 0 and 2 (or 1 and 3, with its built-in
//! `ROR #8`) of the input *and adds the offset to each lane* (x + offset
//! stays in -255..=255, so a 16-bit lane holds it exactly), `SXTB16` does
//! the same for the weights, and `SMLAD` adds both lane products to the
//! accumulator: six instructions and two word loads per four
//! multiply-adds, where the byte loop takes about sixteen. Integer
//! arithmetic is exact, so the sum equals the byte loop's bit for bit (both
//! wrap modulo 2^32 only where TFLite's own `i32` accumulator would).
//! The lane algorithm is written once ([`dot_packed`]) over [`Lanes`]: the
//! instructions on `kael_arm_dsp`, and a plain-Rust model of them that
//! host tests (and Miri) check against the byte loop. Firmware runs under
//! QEMU check the instructions themselves (`sine_int8`, `speech_int8` and
//! `int8_kernels` in firmware-examples/).

/// `sum((x[i] + offset) * w[i])` over the common length of `x` and `w`,
/// wrapping in `i32` as TFLite's accumulators do.
///
/// `offset` is the negated input zero point, in `-127..=128` for int8
/// activations; the DSP path needs `x + offset` to fit an `i16`, so any
/// other offset takes the byte loop.
///
/// ```
/// use kael_core::quant::dot;
/// assert_eq!(dot(&[1, 2, 3], &[4, 5, 6], 1), 2 * 4 + 3 * 5 + 4 * 6);
/// ```
#[inline(always)]
pub fn dot(x: &[i8], w: &[i8], offset: i32) -> i32 {
    #[cfg(kael_arm_dsp)]
    if offset >= -128 && offset <= 128 {
        return dot_packed::<Dsp>(x, w, offset);
    }
    dot_bytes(x, w, offset)
}

/// The byte loop: TFLite's reference kernels' inner loop.
#[inline(always)]
pub(crate) fn dot_bytes(x: &[i8], w: &[i8], offset: i32) -> i32 {
    let mut acc = 0i32;
    for (&x, &w) in x.iter().zip(w) {
        acc = acc.wrapping_add((x as i32 + offset).wrapping_mul(w as i32));
    }
    acc
}

#[cfg(any(test, kael_arm_dsp))]
/// The three DSP-extension instructions the packed dot product uses, on
/// 32-bit words holding two 16-bit lanes (low lane in bits 0..16).
pub(crate) trait Lanes {
    /// `SXTB16 w`: bytes 0 and 2 of `w`, sign-extended to the two lanes.
    fn sxtb16(w: u32) -> u32;
    /// `SXTAB16 offset, x`: bytes 0 and 2 of `x`, sign-extended and added
    /// to `offset`'s lanes (each lane wraps in 16 bits).
    fn sxtab16(offset: u32, x: u32) -> u32;
    /// `SMLAD a, b, acc`: `acc + a.lo * b.lo + a.hi * b.hi`, the lanes
    /// signed (wrapping in 32 bits; the instruction sets the Q flag on
    /// overflow, which nothing here reads).
    fn smlad(a: u32, b: u32, acc: i32) -> i32;
    /// `SXTB16 w, ROR #8`: bytes 1 and 3 of `w`, sign-extended.
    fn sxtb16_ror8(w: u32) -> u32 {
        Self::sxtb16(w.rotate_right(8))
    }
    /// `SXTAB16 offset, x, ROR #8`: bytes 1 and 3 of `x` added to
    /// `offset`'s lanes.
    fn sxtab16_ror8(offset: u32, x: u32) -> u32 {
        Self::sxtab16(offset, x.rotate_right(8))
    }
}

/// [`Lanes`] in plain Rust: the instructions' definitions from the Armv7-M
/// Architecture Reference Manual.
#[cfg(test)]
pub(crate) struct Emulated;

#[cfg(test)]
impl Lanes for Emulated {
    fn sxtb16(w: u32) -> u32 {
        let lo = w as u8 as i8 as i16 as u16 as u32;
        let hi = (w >> 16) as u8 as i8 as i16 as u16 as u32;
        lo | (hi << 16)
    }
    fn sxtab16(offset: u32, x: u32) -> u32 {
        let lo = (offset as u16).wrapping_add(x as u8 as i8 as i16 as u16) as u32;
        let hi = ((offset >> 16) as u16).wrapping_add((x >> 16) as u8 as i8 as i16 as u16) as u32;
        lo | (hi << 16)
    }
    fn smlad(a: u32, b: u32, acc: i32) -> i32 {
        let lo = (a as u16 as i16 as i32) * (b as u16 as i16 as i32);
        let hi = ((a >> 16) as u16 as i16 as i32) * ((b >> 16) as u16 as i16 as i32);
        acc.wrapping_add(lo).wrapping_add(hi)
    }
}

/// [`Lanes`] as the Cortex-M4/M7 instructions themselves.
#[cfg(kael_arm_dsp)]
pub(crate) struct Dsp;

#[cfg(kael_arm_dsp)]
impl Lanes for Dsp {
    #[inline(always)]
    fn sxtb16(w: u32) -> u32 {
        let r: u32;
        // SAFETY: register-only arithmetic (no memory, no stack); the
        // instruction exists on every thumbv7em core (cfg(kael_arm_dsp) is
        // set by build.rs for those targets only).
        unsafe {
            core::arch::asm!("sxtb16 {r}, {w}", r = lateout(reg) r, w = in(reg) w,
                options(pure, nomem, nostack, preserves_flags));
        }
        r
    }
    #[inline(always)]
    fn sxtab16(offset: u32, x: u32) -> u32 {
        let r: u32;
        // SAFETY: as in `sxtb16`: registers only, a thumbv7em instruction.
        unsafe {
            core::arch::asm!("sxtab16 {r}, {o}, {x}", r = lateout(reg) r, o = in(reg) offset,
                x = in(reg) x, options(pure, nomem, nostack, preserves_flags));
        }
        r
    }
    #[inline(always)]
    fn sxtb16_ror8(w: u32) -> u32 {
        let r: u32;
        // SAFETY: as in `sxtb16`: registers only, a thumbv7em instruction.
        unsafe {
            core::arch::asm!("sxtb16 {r}, {w}, ror #8", r = lateout(reg) r, w = in(reg) w,
                options(pure, nomem, nostack, preserves_flags));
        }
        r
    }
    #[inline(always)]
    fn sxtab16_ror8(offset: u32, x: u32) -> u32 {
        let r: u32;
        // SAFETY: as in `sxtb16`: registers only, a thumbv7em instruction.
        unsafe {
            core::arch::asm!("sxtab16 {r}, {o}, {x}, ror #8", r = lateout(reg) r, o = in(reg) offset,
                x = in(reg) x, options(pure, nomem, nostack, preserves_flags));
        }
        r
    }
    #[inline(always)]
    fn smlad(a: u32, b: u32, acc: i32) -> i32 {
        let r: i32;
        // SAFETY: registers only, a thumbv7em instruction. It may set the
        // sticky Q flag, which no Rust code reads, so `preserves_flags`
        // (which covers the N, Z, C and V condition flags) is not claimed.
        unsafe {
            core::arch::asm!("smlad {r}, {a}, {b}, {c}", r = lateout(reg) r, a = in(reg) a,
                b = in(reg) b, c = in(reg) acc, options(pure, nomem, nostack));
        }
        r
    }
}

#[cfg(any(test, kael_arm_dsp))]
/// The packed dot product (NOTE [DSP dot product]) over any [`Lanes`].
/// `offset` must lie in `-128..=128` (checked by the caller).
#[inline(always)]
pub(crate) fn dot_packed<L: Lanes>(x: &[i8], w: &[i8], offset: i32) -> i32 {
    // NOTE: index loops, not chunk iterators: at opt-level "z" (firmware)
    // the iterator adapters stay out-of-line calls that cost more than the
    // arithmetic on short rows.
    let lanes = (offset as u16 as u32) | ((offset as u16 as u32) << 16);
    let n = x.len().min(w.len());
    let (x, w) = (&x[..n], &w[..n]);
    let quads = n / 4;
    let xq: &[[i8; 4]] = bytemuck::try_cast_slice(&x[..quads * 4]).unwrap_or(&[]);
    let wq: &[[i8; 4]] = bytemuck::try_cast_slice(&w[..quads * 4]).unwrap_or(&[]);
    let quads = xq.len().min(wq.len());
    let (xq, wq) = (&xq[..quads], &wq[..quads]);
    let mut acc = 0i32;
    for k in 0..quads {
        let (a, b) = (xq[k], wq[k]);
        let xv = u32::from_le_bytes([a[0] as u8, a[1] as u8, a[2] as u8, a[3] as u8]);
        let wv = u32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8]);
        // Bytes 0 and 2, then bytes 1 and 3.
        let (x02, x13) = (L::sxtab16(lanes, xv), L::sxtab16_ror8(lanes, xv));
        let (w02, w13) = (L::sxtb16(wv), L::sxtb16_ror8(wv));
        acc = L::smlad(x02, w02, acc);
        acc = L::smlad(x13, w13, acc);
    }
    let mut i = quads * 4;
    while i < n {
        acc = acc.wrapping_add((x[i] as i32 + offset).wrapping_mul(w[i] as i32));
        i += 1;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// A deterministic byte stream covering -128..=127.
    fn bytes(seed: u32, n: usize) -> Vec<i8> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                s as u8 as i8
            })
            .collect()
    }

    #[test]
    fn emulated_instructions_match_their_definitions() {
        // 0x80 and 0x7f bytes: the sign extension's edges.
        assert_eq!(Emulated::sxtb16(0x117f_2280), 0x007f_ff80);
        assert_eq!(Emulated::sxtab16(0x0001_0001, 0x0080_007f), 0xff81_0080);
        // (-2 * 3) + (32767 * 2)
        assert_eq!(
            Emulated::smlad(0x7fff_fffe, 0x0002_0003, 10),
            10 - 6 + 65_534
        );
    }

    #[test]
    fn packed_dot_equals_the_byte_loop_for_every_length_and_offset() {
        for n in 0..=37 {
            for (k, offset) in [-128, -127, -1, 0, 1, 5, 127, 128].into_iter().enumerate() {
                let (x, w) = (bytes(n as u32 * 8 + k as u32, n), bytes(1000 + n as u32, n));
                assert_eq!(
                    dot_packed::<Emulated>(&x, &w, offset),
                    dot_bytes(&x, &w, offset),
                    "n = {n}, offset = {offset}"
                );
            }
        }
    }

    #[test]
    fn packed_dot_on_extreme_bytes_equals_the_hand_derived_sum() {
        // (-128 + 128) * -128 = 0 per element with offset 128;
        // with offset -128: (127 - 128) * 127 = -127 per element.
        assert_eq!(dot_packed::<Emulated>(&[-128; 8], &[-128; 8], 128), 0);
        assert_eq!(dot_packed::<Emulated>(&[127; 9], &[127; 9], -128), -127 * 9);
        assert_eq!(
            dot_packed::<Emulated>(&[-128; 6], &[-128; 6], -128),
            6 * 256 * 128
        );
    }

    #[test]
    fn dot_uses_the_shorter_slice() {
        assert_eq!(dot(&[1, 1, 1, 1, 1], &[2, 2, 2, 2], 0), 8);
        assert_eq!(
            dot_packed::<Emulated>(&[1, 1, 1, 1, 1], &[2, 2, 2, 2], 0),
            8
        );
    }
}
