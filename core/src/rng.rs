//! A small deterministic PRNG (xoshiro256**, seeded through SplitMix64).
//!
//! No std, no global state: the caller owns the generator, so runs are
//! reproducible for a given seed on every target.

/// xoshiro256** generator.
///
/// ```
/// use kael_core::Rng;
/// let mut a = Rng::new(42);
/// let mut b = Rng::new(42);
/// assert_eq!(a.next_u64(), b.next_u64());
/// let u = a.uniform();
/// assert!((0.0..1.0).contains(&u));
/// ```
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
    spare_normal: Option<f64>,
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Self {
            s: [next(), next(), next(), next()],
            spare_normal: None,
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box–Muller, both values used).
    pub fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare_normal.take() {
            return z;
        }
        // 1 - uniform() is in (0, 1], so the log is finite.
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        let r = libm::sqrt(-2.0 * libm::log(u1));
        let theta = 2.0 * core::f64::consts::PI * u2;
        self.spare_normal = Some(r * libm::sin(theta));
        r * libm::cos(theta)
    }

    /// Uniform integer in `0..n` (`n > 0`), without modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        if n <= 1 {
            return 0;
        }
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let v = self.next_u64();
            if v < zone {
                return v % n;
            }
        }
    }
}

/// [`rand_core`] interop: `kael_core::Rng` is a `rand_core::Rng` (and so a
/// `RngCore`, the name `rand_core` 0.10 deprecates), so rand's
/// distributions and adapters take it; `next_u64` is the same stream as the
/// inherent [`Rng::next_u64`], `next_u32` its upper half.
///
/// ```
/// use rand_core::Rng as _;
/// let mut a = kael_core::Rng::new(7);
/// let mut b = kael_core::Rng::new(7);
/// assert_eq!(rand_core::Rng::next_u64(&mut a), b.next_u64());
/// let mut bytes = [0u8; 5];
/// a.fill_bytes(&mut bytes);
/// assert_eq!(&bytes, &b.next_u64().to_le_bytes()[..5]);
/// ```
impl rand_core::TryRng for Rng {
    type Error = core::convert::Infallible;

    fn try_next_u32(&mut self) -> core::result::Result<u32, Self::Error> {
        Ok((Rng::next_u64(self) >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> core::result::Result<u64, Self::Error> {
        Ok(Rng::next_u64(self))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> core::result::Result<(), Self::Error> {
        for chunk in dst.chunks_mut(8) {
            let word = Rng::next_u64(self).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        Ok(())
    }
}

/// Seeding through [`rand_core`]: `seed_from_u64(s)` is [`Rng::new(s)`](Rng::new);
/// `from_rng` seeds from any `rand_core::Rng`, e.g. a hardware RNG on a
/// microcontroller; `from_seed` takes the 256-bit state (an all-zero seed,
/// which would stall xoshiro, becomes `Rng::new(0)`).
///
/// ```
/// use rand_core::SeedableRng;
/// let mut hw = kael_core::Rng::new(99); // stands in for a hardware RNG
/// let mut a = kael_core::Rng::from_rng(&mut hw);
/// let mut b = kael_core::Rng::seed_from_u64(3);
/// assert_eq!(b.next_u64(), kael_core::Rng::new(3).next_u64());
/// assert!((0.0..1.0).contains(&a.uniform()));
/// ```
impl rand_core::SeedableRng for Rng {
    type Seed = [u8; 32];

    fn from_seed(seed: [u8; 32]) -> Self {
        if seed == [0; 32] {
            return Rng::new(0);
        }
        let mut s = [0u64; 4];
        for (word, bytes) in s.iter_mut().zip(seed.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes);
            *word = u64::from_le_bytes(b);
        }
        Self {
            s,
            spare_normal: None,
        }
    }

    fn seed_from_u64(state: u64) -> Self {
        Rng::new(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // NOTE [Miri runs the unsafe code]: arithmetic over thousands of
    // values, no unsafe code (minutes under Miri); it runs natively.
    #[cfg_attr(miri, ignore)]
    fn normal_has_unit_variance() {
        let mut r = Rng::new(7);
        let n = 20000;
        let xs: alloc::vec::Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.03, "{mean}");
        assert!((var - 1.0).abs() < 0.05, "{var}");
    }

    /// A generic `rand_core` consumer, as rand's adapters are.
    fn draw<R: rand_core::Rng + ?Sized>(r: &mut R) -> (u32, u64) {
        (r.next_u32(), r.next_u64())
    }

    #[test]
    fn through_rand_core_it_is_the_same_stream() {
        let mut via_trait = Rng::new(5);
        let mut direct = Rng::new(5);
        let (hi, next) = draw(&mut via_trait);
        assert_eq!(hi, (direct.next_u64() >> 32) as u32);
        assert_eq!(next, direct.next_u64());
    }

    #[test]
    fn fill_bytes_fills_every_byte_of_an_odd_length() {
        let mut r = Rng::new(11);
        let mut buf = [0u8; 13];
        rand_core::Rng::fill_bytes(&mut r, &mut buf);
        let mut want = Rng::new(11);
        let (a, b) = (want.next_u64().to_le_bytes(), want.next_u64().to_le_bytes());
        assert_eq!(&buf[..8], &a);
        assert_eq!(&buf[8..], &b[..5]);
    }

    #[test]
    fn an_all_zero_seed_does_not_stall_the_generator() {
        use rand_core::SeedableRng;
        let mut r = Rng::from_seed([0; 32]);
        assert_ne!((r.next_u64(), r.next_u64()), (0, 0));
    }

    #[test]
    fn seeding_from_another_generator_is_deterministic() {
        use rand_core::SeedableRng;
        let a = Rng::from_rng(&mut Rng::new(1)).next_u64();
        let b = Rng::from_rng(&mut Rng::new(1)).next_u64();
        assert_eq!(a, b);
        assert_ne!(a, Rng::new(1).next_u64());
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::new(1);
        assert!((0..1000).all(|_| r.below(3) < 3));
    }
}
