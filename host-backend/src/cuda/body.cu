// The kernels of one storage dtype `KT` (see prelude.cu). Compiled once per
// dtype; every kernel name is the same in every module.

typedef KT::S KS;
typedef KT::C KC;
typedef Acc<KT::FLOAT> KA;

extern "C" __global__ void k_copy(L d, L s, i64 n, KS* pd, const KS* ps) {
    GRID_LOOP(i, n) pd[off(d, i)] = ps[off(s, i)];
}

extern "C" __global__ void k_fill(L d, i64 n, KS* pd, KS v) {
    GRID_LOOP(i, n) pd[off(d, i)] = v;
}

// `pa` may be `pd` with the same layout (in place): each position is read
// and then written by one thread.
extern "C" __global__ void k_unary(L d, L a, i64 n, KS* pd, const KS* pa, int op, double p0, double p1, int flags) {
    GRID_LOOP(i, n) pd[off(d, i)] = unary_f<KT>(op, pa[off(a, i)], p0, p1, flags);
}

extern "C" __global__ void k_binary(L d, L a, L b, i64 n, KS* pd, const KS* pa, const KS* pb, int op) {
    GRID_LOOP(i, n) pd[off(d, i)] = binary_f<KT>(op, pa[off(a, i)], pb[off(b, i)]);
}

extern "C" __global__ void k_compare(L d, L a, L b, i64 n, u8* pd, const KS* pa, const KS* pb, int op) {
    GRID_LOOP(i, n) pd[off(d, i)] = compare_f<KT>(op, pa[off(a, i)], pb[off(b, i)]);
}

extern "C" __global__ void k_where(L d, L c, L t, L f, i64 n, KS* pd, const u8* pc, const KS* pt, const KS* pf) {
    GRID_LOOP(i, n) pd[off(d, i)] = pc[off(c, i)] != 0 ? pt[off(t, i)] : pf[off(f, i)];
}

// src (this dtype) -> dst of dtype code `dcode`, through double as the
// reference backend does.
extern "C" __global__ void k_cast(L d, L s, i64 n, void* pd, int dcode, const KS* ps) {
    // Integer sources go through i64, so integer-to-integer casts wrap (as
    // the reference backend and PyTorch); floats through f64 (saturating).
    if (KT::FLOAT) {
        GRID_LOOP(i, n) store_f64(pd, off(d, i), dcode, KT::f64(KT::ld(ps[off(s, i)])));
    } else {
        GRID_LOOP(i, n) store_i64(pd, off(d, i), dcode, (i64)KT::ld(ps[off(s, i)]));
    }
}

// Reductions. `dst` has src's rank with the reduced dims of size 1; `inner`
// has the reduced dims' sizes and src's strides for them (offset 0). Output
// position o reads src at (o's coordinates . src strides) + off(inner, r).
__device__ __forceinline__ i64 reduce_base(const L& src, const L& dst, i64 o) {
    i64 c[8];
    coords(dst, o, c);
    return at(src, c);
}

// One thread per output, the reduced elements in row-major order (used for
// short reductions).
extern "C" __global__ void k_reduce_small(L src, L dst, L inner, i64 n_out, i64 n_in, void* pd, int dcode, const KS* ps, int op) {
    GRID_LOOP(o, n_out) {
        i64 base = reduce_base(src, dst, o);
        KA::V acc = KA::ident(op);
        for (i64 r = 0; r < n_in; ++r) acc = KA::comb(op, acc, KA::load<KT>(ps[base + off(inner, r)]));
        KA::store(pd, off(dst, o), dcode, acc);
    }
}

// One block of BLOCK threads per output.
extern "C" __global__ void k_reduce_block(L src, L dst, L inner, i64 n_out, i64 n_in, void* pd, int dcode, const KS* ps, int op) {
    __shared__ KA::V sh[BLOCK];
    BLOCK_LOOP(o, n_out) {
        i64 base = reduce_base(src, dst, o);
        KA::V acc = KA::ident(op);
        for (i64 r = threadIdx.x; r < n_in; r += blockDim.x)
            acc = KA::comb(op, acc, KA::load<KT>(ps[base + off(inner, r)]));
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) sh[threadIdx.x] = KA::comb(op, sh[threadIdx.x], sh[threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0) KA::store(pd, off(dst, o), dcode, sh[0]);
        __syncthreads();
    }
}

// Whether candidate (x, kx) beats (b, kb) for argmax (op 0) / argmin (op 1):
// NaN beats everything, the lower index wins ties (so the first max/NaN).
__device__ __forceinline__ bool arg_better(int op, KC x, i64 kx, KC b, i64 kb) {
    if (kb < 0) return kx >= 0;
    if (kx < 0) return false;
    bool xn = x != x, bn = b != b;
    if (bn) return xn && kx < kb;
    if (xn) return true;
    if (op == 0 ? x > b : x < b) return true;
    return x == b && kx < kb;
}

// One block per row; `rows` is src's layout with the reduced dim of size 1,
// `step` that dim's stride.
extern "C" __global__ void k_argreduce(L rows, L dst, i64 n_rows, i64 len, i64 step, i64* pd, const KS* ps, int op) {
    __shared__ KC sv[BLOCK];
    __shared__ i64 si[BLOCK];
    BLOCK_LOOP(r, n_rows) {
        i64 base = off(rows, r);
        KC bv = (KC)0;
        i64 bi = -1;
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) {
            KC x = KT::ld(ps[base + k * step]);
            if (arg_better(op, x, k, bv, bi)) { bv = x; bi = k; }
        }
        sv[threadIdx.x] = bv;
        si[threadIdx.x] = bi;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s && arg_better(op, sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
                sv[threadIdx.x] = sv[threadIdx.x + s];
                si[threadIdx.x] = si[threadIdx.x + s];
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) pd[off(dst, r)] = si[0] < 0 ? 0 : si[0];
        __syncthreads();
    }
}

// index_select: dst = src with `dim` picked by the validated indices `ix`.
extern "C" __global__ void k_index_select(L d, L s, i64 n, int dim, const i64* ix, KS* pd, const KS* ps) {
    GRID_LOOP(i, n) {
        i64 c[8];
        coords(d, i, c);
        i64 od = at(d, c);
        c[dim] = ix[c[dim]];
        pd[od] = ps[at(s, c)];
    }
}

// gather: `ix` holds the validated index values in row-major order of the
// index tensor, whose shape is dst's.
extern "C" __global__ void k_gather(L d, L s, i64 n, int dim, const i64* ix, KS* pd, const KS* ps) {
    GRID_LOOP(i, n) {
        i64 c[8];
        coords(d, i, c);
        i64 od = at(d, c);
        c[dim] = ix[i];
        pd[od] = ps[at(s, c)];
    }
}

// index_add: one thread per column (a position of src with `dim` dropped;
// `cols` has src's shape with that dim of size 1), adding the n_idx slices
// in index order. Two threads never touch the same dst element, and repeated
// indices accumulate in the reference backend's order.
extern "C" __global__ void k_index_add(L d, L s, L cols, i64 n_cols, i64 n_idx, int dim, const i64* ix, KS* pd, const KS* ps) {
    GRID_LOOP(q, n_cols) {
        i64 c[8];
        coords(cols, q, c);
        for (i64 i = 0; i < n_idx; ++i) {
            c[dim] = i;
            i64 os = at(s, c);
            c[dim] = ix[i];
            i64 od = at(d, c);
            pd[od] = binary_f<KT>(0, pd[od], ps[os]);
        }
    }
}

// scatter_add: one thread per column of the index tensor (`cols`: the index
// shape with `dim` of size 1; `il`: the contiguous layout of the index
// shape), walking `dim` in order. Positions that hit one dst element share
// every other coordinate, so they are in one column: no two threads collide
// and the order is the reference backend's row-major order.
extern "C" __global__ void k_scatter_add(L d, L s, L cols, L il, i64 n_cols, i64 len, int dim, const i64* ix, KS* pd, const KS* ps) {
    GRID_LOOP(q, n_cols) {
        i64 c[8];
        coords(cols, q, c);
        for (i64 k = 0; k < len; ++k) {
            c[dim] = k;
            i64 p = at(il, c);
            i64 os = at(s, c);
            c[dim] = ix[p];
            i64 od = at(d, c);
            pd[od] = binary_f<KT>(0, pd[od], ps[os]);
        }
    }
}

#ifdef KAEL_FLOAT
// Softmax / log-softmax along one dim, one block per row, in double:
// e^(x-m) / sum e^(x-m) and x - m - ln(sum e^(x-m)). `src` may be `dst`
// (each element is read and then written by one thread, after the row's
// max and sum are known).
extern "C" __global__ void k_softmax(L srows, L drows, i64 n_rows, i64 len, i64 ss, i64 ds, KS* pd, const KS* ps, int lg) {
    __shared__ double sh[BLOCK];
    BLOCK_LOOP(r, n_rows) {
        i64 bs = off(srows, r), bd = off(drows, r);
        double m = -d_inf();
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) {
            double x = KT::f64(KT::ld(ps[bs + k * ss]));
            if (x != x || x > m) m = x;
        }
        sh[threadIdx.x] = m;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) {
                double x = sh[threadIdx.x + s];
                if (x != x || x > sh[threadIdx.x]) sh[threadIdx.x] = x;
            }
            __syncthreads();
        }
        m = sh[0];
        __syncthreads();
        double sum = 0.0;
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) sum += exp(KT::f64(KT::ld(ps[bs + k * ss])) - m);
        sh[threadIdx.x] = sum;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
            __syncthreads();
        }
        sum = sh[0];
        __syncthreads();
        double ls = log(sum);
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) {
            double x = KT::f64(KT::ld(ps[bs + k * ss])) - m;
            pd[bd + k * ds] = KT::from_f64(lg ? x - ls : exp(x) / sum);
        }
    }
}
#else
// Integer matmul (cuBLAS has none): one thread per output element, wrapping
// arithmetic in the element type, as the reference backend.
// a [.., m, k], b [.., k, n], c [.., m, n] (batch dims already broadcast).
extern "C" __global__ void k_matmul_int(L a, L b, L c, i64 n, i64 kk, KS* pc, const KS* pa, const KS* pb) {
    typedef KT::U U;
    GRID_LOOP(i, n) {
        i64 co[8];
        coords(c, i, co);
        int r = c.rank;
        i64 ao = a.offset, bo = b.offset;
        for (int d = 0; d < r - 2; ++d) { ao += co[d] * a.stride[d]; bo += co[d] * b.stride[d]; }
        ao += co[r - 2] * a.stride[r - 2];
        bo += co[r - 1] * b.stride[r - 1];
        U acc = 0;
        for (i64 k = 0; k < kk; ++k) acc += (U)pa[ao + k * a.stride[r - 1]] * (U)pb[bo + k * b.stride[r - 2]];
        pc[at(c, co)] = (KS)acc;
    }
}
#endif
