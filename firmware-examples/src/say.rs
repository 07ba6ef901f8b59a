//! Printing over semihosting without `core::fmt`: strings and unsigned
//! integers, written straight to the host's stdout.
//!
//! `hprintln!` with any `{}` links `core::fmt`'s machinery (about 4 KB of
//! flash, more with `Debug`); the exit path, the panic handler and the
//! size-measured int8 examples print through these instead, so their flash
//! figures are about kael.

use cortex_m_semihosting::hio;

/// Pieces of one printed line.
#[derive(Clone, Copy)]
pub enum Part<'a> {
    /// Text, as it is.
    Text(&'a str),
    /// An unsigned integer, in decimal.
    Int(usize),
    /// A 32-bit word, as `0x` and eight hex digits.
    Hex(u32),
}

/// Writes `parts` and a newline to the host's stdout (nothing when no host
/// is attached).
pub fn line(parts: &[Part<'_>]) {
    let Ok(mut out) = hio::hstdout() else {
        return;
    };
    for part in parts {
        let mut digits = [0u8; 20];
        let bytes: &[u8] = match *part {
            Part::Text(s) => s.as_bytes(),
            Part::Int(n) => decimal(n, &mut digits),
            Part::Hex(w) => hex(w, &mut digits),
        };
        let _ = out.write_all(bytes);
    }
    let _ = out.write_all(b"\n");
}

/// `n` in decimal, in the tail of `buf`.
fn decimal(mut n: usize, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// `w` as `0x` and eight hex digits, in the head of `buf`.
fn hex(w: u32, buf: &mut [u8; 20]) -> &[u8] {
    buf[0] = b'0';
    buf[1] = b'x';
    for i in 0..8 {
        let nibble = (w >> (28 - 4 * i)) & 0xf;
        buf[2 + i] = b"0123456789abcdef"[nibble as usize];
    }
    &buf[..10]
}
