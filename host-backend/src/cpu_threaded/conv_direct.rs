//! Direct convolution with AVX2 and FMA: the `conv2d` family's forward,
//! and the input gradient of a stride-1 convolution, without a column
//! matrix (NOTE [Direct convolution]).
//!
//! NOTE [Direct convolution]
//! For few channels the column matrix of NOTE [Convolution by image] costs
//! more than the product it feeds: ResNet-8's 16→16 3x3 layer writes 144
//! column rows per position (590 KB per image, past a core's L2), and
//! `gemm` packs them once more, for a product with 16 rows. Here the image
//! is read in place instead. Per image, one zero-padded copy split by
//! column phase, `xph[c][r][q][j] = x_pad[c][r][j·SW + q]`, so that a step
//! of the stride or the dilation along a row is a unit step in `j`; per
//! output row, a tile of `OB` output channels by `V` vectors of 8
//! positions accumulates over every `(c, kh, kw)` in registers: `V` loads
//! and `OB` broadcasts per `OB·V` FMAs. The weights are laid out once per
//! call as `[C·KH·KW][O rounded up to OB]`, zero past `O`.
//!
//! The input gradient of a stride-1 convolution is the same product on the
//! output's gradient, with the kernel flipped and its two channel axes
//! swapped, and padding `d·(K - 1) - p`: `dx = conv(gy, flip(w)ᵀ)`.
//!
//! NOTE [Direct weight gradient]
//! The weight gradient `dw[o, c, i, j] = Σ gy[o, r, col]·x_pad[c, r·SH + i·DH,
//! col·SW + j·DW]` reads the same phase image: per input channel `c` and
//! kernel row `i`, a tile of 3 output channels by the kernel's 3 columns
//! keeps 9 vector accumulators over every output row and vector of
//! positions (3 gradient loads and 3 input loads per 9 FMAs), each summed
//! across its lanes once per image and added to the range's partial. The
//! gradient's rows are copied padded to whole vectors, zero past `OW` and
//! past `O`, so the ragged last vector adds nothing.
//!
//! Which calls take it is [`forward_applies`] and [`input_grad_applies`],
//! from the family benchmark's conv shapes on an AVX2 machine (NOTE
//! [Direct or columns]); other CPUs, and other shapes, keep the columns.

use kael_core::kernels::conv::Sizes;
use kael_core::kernels::im2col::Geometry;
use std::cell::RefCell;

/// Lanes of one vector.
const L: usize = 8;

/// The weight gradient's tile: output channels by kernel columns (3x3
/// accumulators, three gradient rows and an input in registers).
const WG_OB: usize = 3;
const WG_TAPS: usize = 3;

thread_local! {
    /// This thread's phase image, kept between calls.
    static PHASE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// This thread's copy of an output gradient, rows padded to vectors.
    static GRAD: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's buffer `cell`, at least `len` long (the
/// column path's buffer too).
pub(super) fn with_buf<R>(
    cell: &'static std::thread::LocalKey<RefCell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    cell.with(|c| {
        let mut v = c.borrow_mut();
        if v.len() < len {
            v.resize(len, 0.0);
        }
        f(&mut v[..len])
    })
}

/// One direct convolution: its sizes, blocking and laid-out weights.
///
/// Invariants (set by [`Direct::new`], relied on by the unsafe tile):
/// `wt.len() == C·KH·KW·opad`, `opad` a multiple of `ob`; every offset of
/// `koff` plus `(OH - 1)·SH·SW·jw + 8·nv - 1` is below `plane()`; the
/// phase image is `C·plane()` long.
pub(super) struct Direct {
    c: usize,
    o: usize,
    out: [usize; 2],
    image: [usize; 2],
    pad: [usize; 2],
    stride: [usize; 2],
    /// Output channels per tile, and `O` rounded up to it.
    ob: usize,
    opad: usize,
    /// Vectors per output row, `⌈OW / 8⌉`.
    nv: usize,
    /// Rows of the phase image, and the length of one phase row.
    rows: usize,
    jw: usize,
    /// Kernel width.
    kw: usize,
    /// Per `(kh, kw)`, the offset of its first input in a channel's plane.
    koff: Vec<usize>,
    /// The weights, `[C·KH·KW][opad]`.
    wt: Vec<f32>,
}

/// Whether this CPU runs the direct kernel (AVX2 and FMA).
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// NOTE [Direct or columns]: the direct kernel wins where the column
/// matrix is large against the product: stride 1, one group, at least one
/// full vector of outputs per row, and up to 64 channels (where `gemm` has
/// few rows to amortise its packing over). Measured with `kael-bench
/// --only families` (`KAEL_CONV=cols` forces the columns): ResNet-8's
/// 16→16 3x3 layer at batch 32 went from 1.87 to 1.10 ms at 2 threads
/// (3.09 to 2.59 at 1), the CNN's 16→32 from 1.07 to 0.99 ms; its 32→64
/// stride-2 layer was slower direct (1.89 against 1.60 ms at 1 thread:
/// an 8-wide row is one vector, and the 8x1 tile waits on its loads), so
/// strides keep the columns.
pub(super) fn forward_applies(g: &Geometry, s: &Sizes) -> bool {
    available() && g.stride == [1, 1] && s.groups == 1 && s.out[1] >= L && s.o <= 64 && s.c <= 64
}

/// The input gradient: as the forward, for stride 1 and a padding of at
/// most `d·(K - 1)` (the flipped kernel's padding is not negative).
pub(super) fn input_grad_applies(g: &Geometry, s: &Sizes) -> bool {
    let flat =
        (0..2).all(|i| g.stride[i] == 1 && g.padding[i] <= g.dilation[i] * (g.kernel[i] - 1));
    available() && flat && s.groups == 1 && g.image[1] >= L && s.o <= 64 && s.c <= 64
}

/// The weight gradient: as the forward, for kernels 3 wide and images of
/// at least 64 vectors of outputs (each tile sums its accumulators across
/// lanes once per image: on ResNet-8's 16x16 and 8x8 layers, 32 and 8
/// vectors, that cost more than it saved, and `gemm` stays).
pub(super) fn weight_grad_applies(g: &Geometry, s: &Sizes) -> bool {
    forward_applies(g, s) && g.kernel[1] == WG_TAPS && s.out[0] * s.out[1].div_ceil(L) >= 64
}

impl Direct {
    /// The weight gradient of a forward over images of `g` (its weights
    /// are not read: [`Direct::add_weight_grad`] takes the images).
    pub(super) fn weight_grad(g: &Geometry, s: &Sizes) -> Direct {
        Direct::of(g, s, |_, _, _, _| 0.0)
    }

    /// The forward of `w [O, C, KH, KW]` (contiguous) over images of `g`.
    pub(super) fn forward(g: &Geometry, s: &Sizes, w: &[f32]) -> Direct {
        let ([kh, kw], c) = (g.kernel, s.c);
        Direct::of(g, s, |o, ci, i, j| w[((o * c + ci) * kh + i) * kw + j])
    }

    /// [`Direct::new`] with `g`'s and `s`'s sizes.
    fn of(g: &Geometry, s: &Sizes, weight: impl Fn(usize, usize, usize, usize) -> f32) -> Direct {
        Direct::new(
            s.c, s.o, g.kernel, g.stride, g.dilation, g.padding, g.image, s.out, weight,
        )
    }

    /// The input gradient of a stride-1 forward of `w`: a convolution of
    /// the output's gradient `[O, OH, OW]` into `[C, H, W]`.
    pub(super) fn input_grad(g: &Geometry, s: &Sizes, w: &[f32]) -> Direct {
        let [kh, kw] = g.kernel;
        let c = s.c;
        let pad = [0, 1].map(|i| g.dilation[i] * (g.kernel[i] - 1) - g.padding[i]);
        Direct::new(
            s.o,
            c,
            g.kernel,
            [1, 1],
            g.dilation,
            pad,
            s.out,
            g.image,
            |ci, o, i, j| w[((o * c + ci) * kh + (kh - 1 - i)) * kw + (kw - 1 - j)],
        )
    }

    /// `weight(o, c, i, j)` is the kernel of output channel `o`, input `c`.
    #[allow(clippy::too_many_arguments)]
    fn new(
        c: usize,
        o: usize,
        kernel: [usize; 2],
        stride: [usize; 2],
        dil: [usize; 2],
        pad: [usize; 2],
        image: [usize; 2],
        out: [usize; 2],
        weight: impl Fn(usize, usize, usize, usize) -> f32,
    ) -> Direct {
        let nv = out[1].div_ceil(L);
        // 8x1 and 6x2 tiles: 8 or 12 accumulators, a vector or two of
        // inputs and a broadcast weight, within the 16 vector registers
        // (a 4x3 tile needs all 16, and LLVM spilled an accumulator).
        let ob = if nv == 1 { 8 } else { 6 };
        let opad = o.div_ceil(ob) * ob;
        let [kh, kw] = kernel;
        let [sh, sw] = stride;
        let rows = (out[0] - 1) * sh + (kh - 1) * dil[0] + 1;
        let jw = nv * L + (kw - 1) * dil[1] / sw;
        let koff = (0..kh * kw)
            .map(|t| {
                let (i, j) = (t / kw, t % kw);
                let (q, jo) = (j * dil[1] % sw, j * dil[1] / sw);
                (i * dil[0] * sw + q) * jw + jo
            })
            .collect();
        let mut wt = vec![0.0; c * kh * kw * opad];
        for ci in 0..c {
            for t in 0..kh * kw {
                let row = &mut wt[(ci * kh * kw + t) * opad..][..o];
                for (oi, v) in row.iter_mut().enumerate() {
                    *v = weight(oi, ci, t / kw, t % kw);
                }
            }
        }
        Direct {
            c,
            o,
            out,
            image,
            pad,
            stride,
            ob,
            opad,
            nv,
            rows,
            jw,
            kw,
            koff,
            wt,
        }
    }

    /// Floats of one channel of the phase image.
    fn plane(&self) -> usize {
        self.rows * self.stride[1] * self.jw
    }

    /// `y [O, OH, OW]` of one image `x [C, H, W]` (both contiguous);
    /// false, with nothing written, where either is too short.
    #[must_use]
    pub(super) fn run(&self, x: &[f32], y: &mut [f32]) -> bool {
        let [oh, ow] = self.out;
        if x.len() < self.c * self.image[0] * self.image[1] || y.len() < self.o * oh * ow {
            return false;
        }
        with_buf(&PHASE, self.c * self.plane(), |ph| {
            self.fill_phases(x, ph);
            #[cfg(target_arch = "x86_64")]
            if available() {
                // SAFETY: AVX2 and FMA were detected; `ph` is the phase
                // image of `C·plane()` floats and `y` holds `O·OH·OW`.
                unsafe { self.rows_avx2(ph, y) };
                return;
            }
            self.rows_portable(ph, y);
        });
        true
    }

    /// Adds one image's weight gradient to `dw [O, C, KH, KW]`, from the
    /// image `x [C, H, W]` and the output's gradient `gy [O, OH, OW]`
    /// (NOTE [Direct weight gradient]); false, with nothing added, where a
    /// slice is too short or the kernel is not 3 wide.
    #[must_use]
    pub(super) fn add_weight_grad(&self, x: &[f32], gy: &[f32], dw: &mut [f32]) -> bool {
        let [oh, ow] = self.out;
        let taps = self.koff.len();
        let short = x.len() < self.c * self.image[0] * self.image[1]
            || gy.len() < self.o * oh * ow
            || dw.len() < self.o * self.c * taps;
        if short || self.kw != WG_TAPS {
            return false;
        }
        let row = self.nv * L;
        let gopad = self.o.div_ceil(WG_OB) * WG_OB;
        with_buf(&PHASE, self.c * self.plane(), |ph| {
            with_buf(&GRAD, gopad * oh * row, |gp| {
                self.fill_phases(x, ph);
                // gy's rows, zero past OW and past O.
                gp.fill(0.0);
                for (dst, src) in gp.chunks_exact_mut(row).zip(gy.chunks_exact(ow)) {
                    dst[..ow].copy_from_slice(src);
                }
                #[cfg(target_arch = "x86_64")]
                if available() {
                    // SAFETY: AVX2 and FMA were detected; `ph` is the phase
                    // image, `gp` holds `gopad` padded gradient planes,
                    // `dw` at least `O·C·KH·KW`.
                    unsafe { self.weight_grad_avx2(ph, gp, dw) };
                    return;
                }
                self.weight_grad_portable(ph, gp, dw);
            })
        });
        true
    }

    /// [`Direct::add_weight_grad`]'s sums in plain Rust.
    fn weight_grad_portable(&self, ph: &[f32], gp: &[f32], dw: &mut [f32]) {
        let [oh, _] = self.out;
        let (row, plane, taps) = (self.nv * L, self.plane(), self.koff.len());
        let step = self.stride[0] * self.stride[1] * self.jw;
        for o in 0..self.o {
            for ci in 0..self.c {
                for (t, &k) in self.koff.iter().enumerate() {
                    let mut acc = 0.0f32;
                    for r in 0..oh {
                        let g = &gp[(o * oh + r) * row..][..row];
                        let xs = &ph[ci * plane + r * step + k..][..row];
                        for (&a, &b) in g.iter().zip(xs) {
                            acc = a.mul_add(b, acc);
                        }
                    }
                    dw[(o * self.c + ci) * taps + t] += acc;
                }
            }
        }
    }

    /// # Safety
    /// AVX2 and FMA must be available; `ph` is `C·plane()` floats, `gp`
    /// `O`-rounded-up-to-[`WG_OB`] planes of `OH·nv·8`, `dw` at least
    /// `O·C·KH·KW`; the kernel is [`WG_TAPS`] wide.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn weight_grad_avx2(&self, ph: &[f32], gp: &[f32], dw: &mut [f32]) {
        let kh = self.koff.len() / WG_TAPS;
        for ci in 0..self.c {
            for i in 0..kh {
                let mut o0 = 0;
                while o0 < self.o {
                    // SAFETY: the caller's contract; `o0 < O` so the
                    // tile's rows lie in `gp`'s rounded-up planes.
                    let sums = unsafe { self.wtile(ph, gp, ci, i, o0) };
                    for (b, row) in sums.iter().enumerate() {
                        let o = o0 + b;
                        if o >= self.o {
                            break;
                        }
                        let at = ((o * self.c + ci) * kh + i) * WG_TAPS;
                        for (d, &v) in dw[at..at + WG_TAPS].iter_mut().zip(row) {
                            *d += v;
                        }
                    }
                    o0 += WG_OB;
                }
            }
        }
    }

    /// The sums over one image of `gy[o]·x[c]` for the [`WG_OB`] output
    /// channels from `o0`, kernel row `i` and its [`WG_TAPS`] taps.
    ///
    /// # Safety
    /// As [`Direct::weight_grad_avx2`], with `ci < C`, `i < KH` and
    /// `o0 + WG_OB` within `gp`'s planes.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn wtile(
        &self,
        ph: &[f32],
        gp: &[f32],
        ci: usize,
        i: usize,
        o0: usize,
    ) -> [[f32; WG_TAPS]; WG_OB] {
        use std::arch::x86_64::{
            __m256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps,
        };
        let [oh, _] = self.out;
        let row = self.nv * L;
        let step = self.stride[0] * self.stride[1] * self.jw;
        let mut acc = [[_mm256_setzero_ps(); WG_TAPS]; WG_OB];
        let (xp, gpp) = (ph.as_ptr(), gp.as_ptr());
        let xbase = ci * self.plane();
        let koff: [usize; WG_TAPS] = core::array::from_fn(|j| self.koff[i * WG_TAPS + j]);
        for r in 0..oh {
            for v in 0..self.nv {
                // SAFETY: gradient rows `o0 + b < gopad`, row `r < OH`,
                // vector `v < nv` lie in `gp`; the inputs at `r·step +
                // koff + 8v .. + 8` lie in channel `ci`'s plane by the
                // struct's invariant.
                unsafe {
                    let g: [__m256; WG_OB] = core::array::from_fn(|b| {
                        _mm256_loadu_ps(gpp.add(((o0 + b) * oh + r) * row + v * L))
                    });
                    for (j, &k) in koff.iter().enumerate() {
                        let x = _mm256_loadu_ps(xp.add(xbase + r * step + k + v * L));
                        for (a, &gb) in acc.iter_mut().zip(&g) {
                            a[j] = _mm256_fmadd_ps(gb, x, a[j]);
                        }
                    }
                }
            }
        }
        let mut out = [[0.0f32; WG_TAPS]; WG_OB];
        for (o, a) in out.iter_mut().zip(&acc) {
            for (d, &v) in o.iter_mut().zip(a) {
                let mut lanes = [0.0f32; L];
                // SAFETY: `lanes` holds 8 floats.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
                *d = lanes.iter().sum();
            }
        }
        out
    }

    /// `ph[c][r][q][j] = x_pad[c][r][j·SW + q]`, zero in the padding.
    fn fill_phases(&self, x: &[f32], ph: &mut [f32]) {
        let [h, w] = self.image;
        let (sw, pw) = (self.stride[1], self.pad[1]);
        let plane = self.plane();
        for (ci, dst) in ph.chunks_exact_mut(plane).enumerate().take(self.c) {
            for (r, drow) in dst.chunks_exact_mut(sw * self.jw).enumerate() {
                drow.fill(0.0);
                let Some(ih) = r.checked_sub(self.pad[0]).filter(|&ih| ih < h) else {
                    continue;
                };
                let src = &x[(ci * h + ih) * w..][..w];
                if sw == 1 {
                    // One phase: the row itself, after `pw` zeros (the
                    // phase row is at least `pw + W` long or ends sooner).
                    let start = pw.min(self.jw);
                    let n = w.min(self.jw - start);
                    drow[start..start + n].copy_from_slice(&src[..n]);
                    continue;
                }
                for (iw, &v) in src.iter().enumerate() {
                    let (q, j) = ((iw + pw) % sw, (iw + pw) / sw);
                    if j < self.jw {
                        drow[q * self.jw + j] = v;
                    }
                }
            }
        }
    }

    /// The tiles in plain Rust (CPUs without AVX2, and the reference the
    /// tests hold the vector tiles to).
    fn rows_portable(&self, ph: &[f32], y: &mut [f32]) {
        let [oh, ow] = self.out;
        let (plane, taps) = (self.plane(), self.koff.len());
        for r in 0..oh {
            let base = r * self.stride[0] * self.stride[1] * self.jw;
            for o in 0..self.o {
                for col in 0..ow {
                    let mut acc = 0.0f32;
                    for ci in 0..self.c {
                        for (t, &k) in self.koff.iter().enumerate() {
                            let wv = self.wt[(ci * taps + t) * self.opad + o];
                            acc = wv.mul_add(ph[ci * plane + base + k + col], acc);
                        }
                    }
                    y[(o * oh + r) * ow + col] = acc;
                }
            }
        }
    }

    /// Every output row's tiles.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `ph` is `C·plane()` floats, `y` at
    /// least `O·OH·OW`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows_avx2(&self, ph: &[f32], y: &mut [f32]) {
        let oh = self.out[0];
        for r in 0..oh {
            let mut o0 = 0;
            while o0 < self.opad {
                let mut v0 = 0;
                while v0 < self.nv {
                    let left = self.nv - v0;
                    // SAFETY: (each arm) the caller's contract, `o0 + ob
                    // <= opad`, and `v0 + V <= nv`.
                    unsafe {
                        match (self.ob, left) {
                            (8, _) => self.tile::<8, 1>(ph, y, r, o0, v0),
                            (_, 2..) => self.tile::<6, 2>(ph, y, r, o0, v0),
                            _ => self.tile::<6, 1>(ph, y, r, o0, v0),
                        }
                    }
                    v0 += if self.ob == 6 && left >= 2 { 2 } else { 1 };
                }
                o0 += self.ob;
            }
        }
    }

    /// Output channels `o0..o0 + OB` (those below `O` stored) by positions
    /// `8·v0..8·(v0 + V)` (those below `OW` stored) of output row `r`.
    ///
    /// # Safety
    /// As [`Direct::rows_avx2`], with `OB <= ob`, `o0 + OB <= opad`,
    /// `v0 + V <= nv` and `r < OH`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const OB: usize, const V: usize>(
        &self,
        ph: &[f32],
        y: &mut [f32],
        r: usize,
        o0: usize,
        v0: usize,
    ) {
        use std::arch::x86_64::{
            __m256, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps,
            _mm256_storeu_ps,
        };
        let [oh, ow] = self.out;
        let plane = self.plane();
        let taps = self.koff.len();
        let base = r * self.stride[0] * self.stride[1] * self.jw + v0 * L;
        let mut acc = [[_mm256_setzero_ps(); V]; OB];
        let (xp, wp) = (ph.as_ptr(), self.wt.as_ptr());
        for ci in 0..self.c {
            for (t, &k) in self.koff.iter().enumerate() {
                // SAFETY: by the struct's invariant, `base + k + 8·V - 1`
                // is below `plane()` for `r < OH`, `v0 + V <= nv`; the
                // weights' row `(ci·taps + t)` holds `opad >= o0 + OB`.
                unsafe {
                    let src = xp.add(ci * plane + base + k);
                    let xs: [__m256; V] = core::array::from_fn(|v| _mm256_loadu_ps(src.add(v * L)));
                    let w = wp.add((ci * taps + t) * self.opad + o0);
                    for (b, a) in acc.iter_mut().enumerate() {
                        let wb = _mm256_broadcast_ss(&*w.add(b));
                        for (v, x) in a.iter_mut().zip(xs) {
                            *v = _mm256_fmadd_ps(wb, x, *v);
                        }
                    }
                }
            }
        }
        for (b, a) in acc.iter().enumerate() {
            let o = o0 + b;
            if o >= self.o {
                break;
            }
            let row = &mut y[(o * oh + r) * ow..][..ow];
            for (v, &x) in a.iter().enumerate() {
                let col = (v0 + v) * L;
                let n = ow.saturating_sub(col).min(L);
                let mut lanes = [0.0f32; L];
                // SAFETY: `lanes` holds 8 floats.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), x) };
                row[col..col + n].copy_from_slice(&lanes[..n]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain convolution, straight from its definition.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        x: &[f32],
        w: &[f32],
        [c, h, wd]: [usize; 3],
        o: usize,
        [kh, kw]: [usize; 2],
        [sh, sw]: [usize; 2],
        [ph, pw]: [usize; 2],
        [dh, dw]: [usize; 2],
    ) -> (Vec<f32>, [usize; 2]) {
        let oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
        let ow = (wd + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
        let mut y = vec![0.0f32; o * oh * ow];
        for oi in 0..o {
            for r in 0..oh {
                for col in 0..ow {
                    let mut acc = 0.0f64;
                    for ci in 0..c {
                        for i in 0..kh {
                            for j in 0..kw {
                                let ih = (r * sh + i * dh) as isize - ph as isize;
                                let iw = (col * sw + j * dw) as isize - pw as isize;
                                if ih < 0 || iw < 0 || ih >= h as isize || iw >= wd as isize {
                                    continue;
                                }
                                let xv = x[(ci * h + ih as usize) * wd + iw as usize];
                                acc +=
                                    f64::from(w[((oi * c + ci) * kh + i) * kw + j]) * f64::from(xv);
                            }
                        }
                    }
                    y[(oi * oh + r) * ow + col] = acc as f32;
                }
            }
        }
        (y, [oh, ow])
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let v = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8;
                (v % 1000) as f32 / 500.0 - 1.0
            })
            .collect()
    }

    fn geometry(
        k: [usize; 2],
        s: [usize; 2],
        p: [usize; 2],
        d: [usize; 2],
        image: [usize; 2],
    ) -> Geometry {
        Geometry {
            kernel: k,
            stride: s,
            padding: p,
            dilation: d,
            image,
            fill: 0.0,
        }
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                "element {i}: {x} against {y}"
            );
        }
    }

    // Small enough for Miri, yet every tile shape: 1, 2 and 3+ vectors per
    // row (with a ragged last vector), output channels not a multiple of
    // the tile, strides, dilation and padding.
    /// `[C, H, W]`, `O`, kernel, stride, padding, dilation.
    type Case = (
        [usize; 3],
        usize,
        [usize; 2],
        [usize; 2],
        [usize; 2],
        [usize; 2],
    );

    const CASES: &[Case] = &[
        ([2, 5, 9], 5, [3, 3], [1, 1], [1, 1], [1, 1]),
        ([3, 4, 17], 7, [3, 3], [1, 1], [1, 1], [1, 1]),
        ([2, 3, 27], 3, [3, 2], [1, 1], [0, 1], [1, 2]),
        ([3, 6, 19], 9, [3, 3], [2, 2], [1, 1], [1, 1]),
        ([1, 7, 20], 4, [4, 3], [2, 3], [1, 2], [1, 1]),
    ];

    /// The cases a test runs: under Miri, the two that reach every tile
    /// (6x2, 6x1 and a ragged vector; 8x1 with strides).
    fn cases() -> impl Iterator<Item = &'static Case> {
        CASES
            .iter()
            .enumerate()
            .filter(|(i, _)| !cfg!(miri) || [1, 4].contains(i))
            .map(|(_, c)| c)
    }

    #[test]
    fn the_direct_forward_equals_the_definition() {
        for &([c, h, w], o, k, s, p, d) in cases() {
            let (x, wt) = (values(c * h * w, 1), values(o * c * k[0] * k[1], 7));
            let (want, out) = naive(&x, &wt, [c, h, w], o, k, s, p, d);
            let sizes = Sizes {
                n: 1,
                c,
                o,
                groups: 1,
                out,
            };
            let conv = Direct::forward(&geometry(k, s, p, d, [h, w]), &sizes, &wt);
            let mut got = vec![f32::NAN; want.len()];
            assert!(conv.run(&x, &mut got));
            close(&got, &want);
            // The portable tiles too.
            let mut ph = vec![0.0; c * conv.plane()];
            conv.fill_phases(&x, &mut ph);
            let mut plain = vec![f32::NAN; want.len()];
            conv.rows_portable(&ph, &mut plain);
            close(&plain, &want);
        }
    }

    #[test]
    fn the_direct_weight_gradient_equals_its_definition() {
        // dw[o, c, i, j] = Σ gy[o, r, col]·x_pad[c, r·s + i·d, col·s + j·d]
        // over two images, added to what dw held.
        for &([c, h, w], o, k, s, p, d) in cases().filter(|case| case.2[1] == 3) {
            let g = geometry(k, s, p, d, [h, w]);
            let oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) / s[0] + 1;
            let ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
            let xs = [values(c * h * w, 11), values(c * h * w, 13)];
            let gys = [values(o * oh * ow, 17), values(o * oh * ow, 19)];
            let mut want = vec![0.5f64; o * c * k[0] * k[1]];
            for (x, gy) in xs.iter().zip(&gys) {
                for oi in 0..o {
                    for ci in 0..c {
                        for i in 0..k[0] {
                            for j in 0..k[1] {
                                let mut acc = 0.0f64;
                                for r in 0..oh {
                                    for col in 0..ow {
                                        let ih = (r * s[0] + i * d[0]) as isize - p[0] as isize;
                                        let iw = (col * s[1] + j * d[1]) as isize - p[1] as isize;
                                        if ih < 0 || iw < 0 || ih >= h as isize || iw >= w as isize
                                        {
                                            continue;
                                        }
                                        acc += f64::from(gy[(oi * oh + r) * ow + col])
                                            * f64::from(
                                                x[(ci * h + ih as usize) * w + iw as usize],
                                            );
                                    }
                                }
                                want[((oi * c + ci) * k[0] + i) * k[1] + j] += acc;
                            }
                        }
                    }
                }
            }
            let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
            let sizes = Sizes {
                n: 2,
                c,
                o,
                groups: 1,
                out: [oh, ow],
            };
            let conv = Direct::weight_grad(&g, &sizes);
            let mut got = vec![0.5f32; want.len()];
            for (x, gy) in xs.iter().zip(&gys) {
                assert!(conv.add_weight_grad(x, gy, &mut got));
            }
            close(&got, &want);
            // The portable sums too.
            let mut plain = vec![0.5f32; want.len()];
            let (row, gopad) = (conv.nv * L, o.div_ceil(WG_OB) * WG_OB);
            for (x, gy) in xs.iter().zip(&gys) {
                let mut ph = vec![0.0; c * conv.plane()];
                conv.fill_phases(x, &mut ph);
                let mut gp = vec![0.0; gopad * oh * row];
                for (dst, src) in gp.chunks_exact_mut(row).zip(gy.chunks_exact(ow)) {
                    dst[..ow].copy_from_slice(src);
                }
                conv.weight_grad_portable(&ph, &gp, &mut plain);
            }
            close(&plain, &want);
        }
    }

    #[test]
    fn the_direct_input_gradient_equals_the_adjoint_of_the_definition() {
        // dx[c, ih, iw] = sum over (o, r, col, i, j) with r + i·d - p = ih
        // of w[o, c, i, j]·gy[o, r, col]: the adjoint, accumulated directly.
        for &([c, h, w], o, k, _, p, d) in cases().filter(|case| case.3 == [1, 1]) {
            let g = geometry(k, [1, 1], p, d, [h, w]);
            let oh = h + 2 * p[0] - d[0] * (k[0] - 1);
            let ow = w + 2 * p[1] - d[1] * (k[1] - 1);
            let (gy, wt) = (values(o * oh * ow, 3), values(o * c * k[0] * k[1], 5));
            let mut want = vec![0.0f64; c * h * w];
            for oi in 0..o {
                for ci in 0..c {
                    for i in 0..k[0] {
                        for j in 0..k[1] {
                            for r in 0..oh {
                                for col in 0..ow {
                                    let ih = (r + i * d[0]) as isize - p[0] as isize;
                                    let iw = (col + j * d[1]) as isize - p[1] as isize;
                                    if ih < 0 || iw < 0 || ih >= h as isize || iw >= w as isize {
                                        continue;
                                    }
                                    want[(ci * h + ih as usize) * w + iw as usize] +=
                                        f64::from(wt[((oi * c + ci) * k[0] + i) * k[1] + j])
                                            * f64::from(gy[(oi * oh + r) * ow + col]);
                                }
                            }
                        }
                    }
                }
            }
            let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
            let sizes = Sizes {
                n: 1,
                c,
                o,
                groups: 1,
                out: [oh, ow],
            };
            let conv = Direct::input_grad(&g, &sizes, &wt);
            let mut got = vec![f32::NAN; c * h * w];
            assert!(conv.run(&gy, &mut got));
            close(&got, &want);
        }
    }
}
