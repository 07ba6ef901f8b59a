//! The `conv2d` family (`kael_core::kernels::conv`) on the threaded
//! backend: the batch split across the pool, each image's columns built
//! in a buffer of the thread's own (the reference kernel's column walks,
//! [`image_to_cols`] and [`cols_to_image`]) and multiplied by the `gemm`
//! crate. f32 with contiguous operands; anything else runs the shared
//! declared path (the reference kernel, batch-split).
//!
//! NOTE [Convolution by image]
//! Per image, with `K` column rows per group and `P = OH·OW` positions:
//! the forward is `y[n]_g [O/G, P] = w_g [O/G, K] @ cols_g [K, P]`, the
//! input gradient `dcols_g [K, P] = w_gᵀ @ gy[n]_g`, added back into
//! `dx[n]`, and the weight gradient `dw_g += gy[n]_g @ cols_gᵀ`, summed
//! over the images of a range into the range's own partial, the partials
//! added in range order (as a depthwise weight's gradient is). Both
//! sides of every product are read in place, NCHW as it lies: no
//! permute, no whole-batch column matrix. ResNet-8's first block at
//! batch 32 has 590 KB of columns per image against 19 MB for the batch.

use super::conv_direct::{self, Direct};
use super::engine::{Par, cast_slice, cast_slice_mut};
use kael_core::backend::declared::Call;
use kael_core::cpu as reference;
use kael_core::dtype::DType;
use kael_core::kernels::conv::{Image, Sizes, cols_to_image, image_to_cols, params_of};
use kael_core::kernels::im2col::Geometry;
use kael_core::{Error, Result};
use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    /// This thread's column buffer, kept between calls (a fresh one per
    /// call paid its page faults every step).
    static COLS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's column buffer, at least `len` long.
fn with_cols<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    conv_direct::with_buf(&COLS, len, f)
}

/// `dst [m, n] = (dst if acc) + a @ b`, every operand given as
/// `(pointer, row stride, column stride)`.
///
/// # Safety
/// Every element `a[i·ars + p·acs]`, `b[p·brs + j·bcs]` (`i < m`, `p < k`,
/// `j < n`) must be readable, every `dst[i·drs + j·dcs]` writable and
/// disjoint from `a` and `b`, and nothing else may access `dst`'s elements
/// during the call.
unsafe fn gemm_f32(
    [m, n, k]: [usize; 3],
    dst: (*mut f32, usize, usize),
    acc: bool,
    a: (*const f32, usize, usize),
    b: (*const f32, usize, usize),
) {
    // SAFETY: the caller's contract is gemm's (in-bounds, disjoint,
    // exclusive); strides fit in isize because they index allocations.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.0,
            dst.2 as isize,
            dst.1 as isize,
            acc,
            a.0,
            a.2 as isize,
            a.1 as isize,
            b.0,
            b.2 as isize,
            b.1 as isize,
            if acc { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// The `conv2d` family's step on the pool, or `None` where this path does
/// not apply (not f32, an operand not contiguous).
pub(super) fn conv2d(par: &Par<'_>, call: Call<'_>) -> Option<Result<()>> {
    let contiguous = call.srcs.iter().all(|s| s.layout.is_contiguous())
        && call.dsts.iter().all(|d| d.layout.is_contiguous());
    let f32s = call.srcs.iter().all(|s| s.dtype == DType::F32)
        && call.dsts.iter().all(|d| d.dtype == DType::F32);
    // (An empty weight, `O = 0` or `C/G·KH·KW = 0`, takes the shared path:
    // gemm is not asked for empty products.)
    let empty = call
        .srcs
        .get(1)
        .is_none_or(|w| w.layout.shape().contains(&0));
    if !contiguous || !f32s || empty || call.dsts.len() != 1 {
        return None;
    }
    Some(run(par, call))
}

fn run(par: &Par<'_>, call: Call<'_>) -> Result<()> {
    reference::declared_contract(call)?; // shapes, dtypes, aliasing
    let (g, groups) = params_of(call.params).ok_or_else(|| bad("malformed parameters"))?;
    let (Some(x), Some(w), Some(d)) = (call.srcs.first(), call.srcs.get(1), call.dsts.first())
    else {
        return Err(bad("missing operands"));
    };
    let (xs, ws) = (x.layout.shape(), w.layout.shape());
    let s = Sizes {
        n: xs[0],
        c: xs[1],
        o: ws[0],
        groups,
        out: g.out("conv2d")?,
    };
    let op = call.family.name();
    let gx = x.storage.read(op)?;
    let gw = w.storage.read(op)?;
    let xv = &cast_slice::<f32>(gx.bytes())?[x.layout.offset()..];
    let wv = &cast_slice::<f32>(gw.bytes())?[w.layout.offset()..];
    let gy_guard = match call.srcs.get(2) {
        Some(gy) => Some((gy.storage.read(op)?, gy.layout.offset())),
        None => None,
    };
    let gy = match &gy_guard {
        Some((guard, off)) => Some(&cast_slice::<f32>(guard.bytes())?[*off..]),
        None => None,
    };
    let mut gd = d.storage.write(op)?;
    let dn = d.layout.numel();
    let off = d.layout.offset();
    let dv = cast_slice_mut::<f32>(gd.bytes_mut())?
        .get_mut(off..off + dn)
        .ok_or_else(|| bad("the output runs past its storage"))?;
    let k = Ctx { g, s, k: s.k(&g) };
    // The lengths every product below relies on (the contract checked the
    // shapes; the storages are checked here, before any unsafe read).
    let (img, out) = (xs[1] * xs[2] * xs[3], s.o * s.p());
    let short =
        xv.len() < s.n * img || wv.len() < s.o * k.k || gy.is_some_and(|gy| gy.len() < s.n * out);
    if short {
        return Err(bad("an operand runs past its storage"));
    }
    match (call.step, gy) {
        (0, _) if direct(0, &g, &s) => {
            let conv = Direct::forward(&g, &s, wv);
            let fine = AtomicBool::new(true);
            par.for_rows(dv, out, |n0, ys| {
                for (i, y) in ys.chunks_exact_mut(out).enumerate() {
                    if !conv.run(&xv[(n0 + i) * img..], y) {
                        fine.store(false, Ordering::Relaxed);
                    }
                }
            });
            checked(fine)
        }
        (0, _) => {
            par.for_rows(dv, out, |n0, ys| {
                for (i, y) in ys.chunks_exact_mut(out).enumerate() {
                    k.forward(&xv[(n0 + i) * img..], wv, y);
                }
            });
            Ok(())
        }
        (1, Some(gy)) if direct(1, &g, &s) => {
            let conv = Direct::input_grad(&g, &s, wv);
            let fine = AtomicBool::new(true);
            par.for_rows(dv, img, |n0, dxs| {
                for (i, dx) in dxs.chunks_exact_mut(img.max(1)).enumerate() {
                    if !conv.run(&gy[(n0 + i) * out..], dx) {
                        fine.store(false, Ordering::Relaxed);
                    }
                }
            });
            checked(fine)
        }
        (1, Some(gy)) => {
            par.for_rows(dv, img, |n0, dxs| {
                for (i, dx) in dxs.chunks_exact_mut(img.max(1)).enumerate() {
                    k.input_grad(&gy[(n0 + i) * out..], wv, dx);
                }
            });
            Ok(())
        }
        (2, Some(gy)) => k.weight_grad(par, xv, gy, dv),
        _ => Err(bad("missing operands")),
    }
}

/// Whether step `step` (0: forward, 1: input gradient, 2: weight
/// gradient) runs the direct
/// kernel (NOTE [Direct or columns]).
/// `KAEL_CONV=cols` in the environment (read once) keeps every call on
/// the columns, so that a benchmark can compare the two paths.
fn direct(step: usize, g: &Geometry, s: &Sizes) -> bool {
    static COLS_ONLY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *COLS_ONLY.get_or_init(|| std::env::var("KAEL_CONV").is_ok_and(|v| v == "cols")) {
        return false;
    }
    match step {
        0 => conv_direct::forward_applies(g, s),
        1 => conv_direct::input_grad_applies(g, s),
        _ => conv_direct::weight_grad_applies(g, s),
    }
}

/// An error unless every image's lengths held (they were checked above).
fn checked(fine: AtomicBool) -> Result<()> {
    if fine.into_inner() {
        Ok(())
    } else {
        Err(bad("an operand runs past its storage"))
    }
}

/// One call's geometry and sizes.
struct Ctx {
    g: Geometry,
    s: Sizes,
    /// Column rows per group.
    k: usize,
}

impl Ctx {
    fn rows(&self) -> usize {
        self.k * self.s.groups
    }

    fn image(&self) -> Image {
        let [h, w] = self.g.image;
        Image {
            offset: 0,
            strides: [h * w, w, 1],
        }
    }

    /// `y [O, P]` of one image `x [C, H, W]`.
    fn forward(&self, x: &[f32], w: &[f32], y: &mut [f32]) {
        let (p, og) = (self.s.p(), self.s.o / self.s.groups);
        with_cols(self.rows() * p, |cols| {
            image_to_cols(&self.g, self.s.out, self.s.c, (x, self.image()), cols);
            for gi in 0..self.s.groups {
                // SAFETY: y is this image's [O, P] block (exclusive to this
                // call), w is [O, K·G / G] contiguous, cols [G·K, P]; the
                // group's rows and columns lie inside each.
                unsafe {
                    gemm_f32(
                        [og, p, self.k],
                        (y.as_mut_ptr().add(gi * og * p), p, 1),
                        false,
                        (w.as_ptr().add(gi * og * self.k), self.k, 1),
                        (cols.as_ptr().add(gi * self.k * p), p, 1),
                    );
                }
            }
        });
    }

    /// `dx [C, H, W]` of one image from its `gy [O, P]`.
    fn input_grad(&self, gy: &[f32], w: &[f32], dx: &mut [f32]) {
        let (p, og) = (self.s.p(), self.s.o / self.s.groups);
        with_cols(self.rows() * p, |dcols| {
            for gi in 0..self.s.groups {
                // SAFETY: dcols is this thread's buffer; w's group block
                // read transposed ([K, O/G] with strides (1, K)), gy's
                // group rows [O/G, P]; all inside their slices.
                unsafe {
                    gemm_f32(
                        [self.k, p, og],
                        (dcols.as_mut_ptr().add(gi * self.k * p), p, 1),
                        false,
                        (w.as_ptr().add(gi * og * self.k), 1, self.k),
                        (gy.as_ptr().add(gi * og * p), p, 1),
                    );
                }
            }
            dx.fill(0.0);
            cols_to_image(&self.g, self.s.out, self.s.c, dcols, (dx, self.image()));
        });
    }

    /// `dw [O, K]`: ranges of the batch into partials, added in order.
    fn weight_grad(&self, par: &Par<'_>, x: &[f32], gy: &[f32], dw: &mut [f32]) -> Result<()> {
        let (o, p) = (self.s.o, self.s.p());
        let img = self.s.c * self.g.image[0] * self.g.image[1];
        if direct(2, &self.g, &self.s) {
            // NOTE [Direct weight gradient]: partials in dw's own layout.
            let conv = Direct::weight_grad(&self.g, &self.s);
            let fine = AtomicBool::new(true);
            let parts = self.partials(par, dw.len(), |b, part| {
                if !conv.add_weight_grad(&x[b * img..], &gy[b * o * p..], part) {
                    fine.store(false, Ordering::Relaxed);
                }
            });
            for (i, part) in parts.into_iter().enumerate() {
                for (a, &v) in dw.iter_mut().zip(&part) {
                    *a = if i == 0 { v } else { *a + v };
                }
            }
            return checked(fine);
        }
        // Each partial holds `dwᵀ`, group by group `[K, O/G]`: the product's
        // rows are then the O/G output channels, its packed side `gy`'s
        // [O/G, P] rows, and the columns are read in place (`dw` as [O, K]
        // rows made gemm pack the whole [K, P] column block per image:
        // 18 GFLOP/s against 85 for the forward).
        let parts = self.partials(par, dw.len(), |b, part| {
            self.weight_grad_image(&x[b * img..], &gy[b * o * p..], part);
        });
        let og = self.s.o / self.s.groups;
        for (i, part) in parts.into_iter().enumerate() {
            for (gi, block) in part.chunks_exact(self.k * og).enumerate() {
                for (kk, row) in block.chunks_exact(og).enumerate() {
                    for (o, &v) in row.iter().enumerate() {
                        let a = &mut dw[(gi * og + o) * self.k + kk];
                        *a = if i == 0 { v } else { *a + v };
                    }
                }
            }
        }
        Ok(())
    }

    /// Ranges of the batch on the pool, each image `b` of a range added by
    /// `image(b, partial)` into the range's own zeroed partial of `len`;
    /// the partials in range order.
    fn partials(
        &self,
        par: &Par<'_>,
        len: usize,
        image: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Vec<Vec<f32>> {
        let n = self.s.n;
        let pieces = if par.parallel(n * self.rows() * self.s.p()) {
            n.min(par.threads).max(1)
        } else {
            1
        };
        let bound = |i: usize| i * n / pieces;
        let partials: Vec<Mutex<Vec<f32>>> =
            (0..pieces).map(|_| Mutex::new(vec![0.0; len])).collect();
        let piece = |i: usize| {
            let mut part = partials[i].lock().unwrap_or_else(|e| e.into_inner());
            for b in bound(i)..bound(i + 1) {
                image(b, &mut part);
            }
        };
        if pieces > 1 {
            par.for_each_index(pieces, piece);
        } else {
            piece(0);
        }
        partials
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect()
    }

    fn weight_grad_image(&self, x: &[f32], gy: &[f32], dw: &mut [f32]) {
        let (p, og) = (self.s.p(), self.s.o / self.s.groups);
        with_cols(self.rows() * p, |cols| {
            image_to_cols(&self.g, self.s.out, self.s.c, (x, self.image()), cols);
            for gi in 0..self.s.groups {
                // SAFETY: dw is this range's own partial, the group's
                // [K, O/G] block read as [O/G, K] (strides (1, O/G)); gy's
                // group rows [O/G, P]; cols' group rows read transposed
                // ([P, K] with strides (1, P)); all inside their slices.
                unsafe {
                    gemm_f32(
                        [og, self.k, p],
                        (dw.as_mut_ptr().add(gi * og * self.k), 1, og),
                        true,
                        (gy.as_ptr().add(gi * og * p), p, 1),
                        (cols.as_ptr().add(gi * self.k * p), 1, p),
                    );
                }
            }
        });
    }
}

fn bad(reason: &'static str) -> Error {
    Error::InvalidArgument {
        op: "conv2d",
        reason,
    }
}
