// kael's CUDA kernels, compiled with NVRTC at first use (one module per
// storage dtype; see cuda/kernels.rs). The Rust side prepends
//   typedef T<dtype> KT;
// and, for float dtypes, `#define KAEL_FLOAT 1`. No headers are included:
// f16/bf16 conversions are written out (PTX cvt for f16, bit arithmetic for
// bf16), so NVRTC needs no include path.
//
// Every kernel takes layouts `L` (shape, strides and offset in elements, as
// the core's Layout) and walks positions in row-major order; `contig` marks
// a row-major contiguous layout, whose i-th position is `offset + i`.
//
// Semantics follow the reference CPU backend (core/src/cpu/): integer
// arithmetic wraps, float-to-integer conversion truncates and saturates
// (NaN -> 0), anything-to-bool is `x != 0`, reductions of float sources
// accumulate in double and of integer sources in wrapping int64, max/min
// and argmax/argmin propagate NaN (the first NaN wins).

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned char u8;

struct L {
    int rank;
    int contig;
    i64 shape[8];
    i64 stride[8];
    i64 offset;
};

#define GRID_LOOP(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)
#define BLOCK_LOOP(o, n) for (i64 o = blockIdx.x; o < (n); o += gridDim.x)

// Storage offset of row-major position i.
__device__ __forceinline__ i64 off(const L& l, i64 i) {
    if (l.contig) return l.offset + i;
    i64 o = l.offset;
    for (int d = l.rank - 1; d >= 0; --d) {
        i64 s = l.shape[d];
        o += (i % s) * l.stride[d];
        i /= s;
    }
    return o;
}

// Coordinates of row-major position i in l's shape.
__device__ __forceinline__ void coords(const L& l, i64 i, i64* c) {
    for (int d = l.rank - 1; d >= 0; --d) {
        i64 s = l.shape[d];
        c[d] = i % s;
        i /= s;
    }
}

// Storage offset of coordinates c (c has l.rank entries).
__device__ __forceinline__ i64 at(const L& l, const i64* c) {
    i64 o = l.offset;
    for (int d = 0; d < l.rank; ++d) o += c[d] * l.stride[d];
    return o;
}

// ------------------------------------------------------------ conversions

__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float b2f(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}
// float -> bfloat16, round to nearest even; NaN stays (quiet) NaN.
__device__ __forceinline__ unsigned short f2b(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
// double -> float rounded to odd: a second rounding to a format of fewer than
// 23 significand bits (f16, bf16) then gives the correctly rounded result.
__device__ __forceinline__ float d2f_odd(double d) {
    float f = __double2float_rz(d);
    if (f == f && (double)f != d) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}
__device__ __forceinline__ i64 sat_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return (i64)0x7fffffffffffffffULL;
    if (v <= -9223372036854775808.0) return (i64)0x8000000000000000ULL;
    return (i64)v;
}
__device__ __forceinline__ int sat_i32(double v) {
    if (v != v) return 0;
    if (v >= 2147483647.0) return 2147483647;
    if (v <= -2147483648.0) return (int)0x80000000u;
    return (int)v;
}
__device__ __forceinline__ short sat_i16(double v) {
    if (v != v) return 0;
    if (v >= 32767.0) return 32767;
    if (v <= -32768.0) return -32768;
    return (short)(int)v;
}
__device__ __forceinline__ signed char sat_i8(double v) {
    if (v != v) return 0;
    if (v >= 127.0) return 127;
    if (v <= -128.0) return -128;
    return (signed char)(int)v;
}
__device__ __forceinline__ u8 sat_u8(double v) {
    if (v != v) return 0;
    if (v >= 255.0) return 255;
    if (v <= 0.0) return 0;
    return (u8)(int)v;
}
__device__ __forceinline__ double d_inf() { return __longlong_as_double(0x7ff0000000000000LL); }

// ------------------------------------------------------------ dtype traits
// S: storage type, C: compute type, U: unsigned type for wrapping integer
// arithmetic.

struct TF32 {
    typedef float S; typedef float C; typedef float U;
    static constexpr bool FLOAT = true;
    static __device__ __forceinline__ C ld(S x) { return x; }
    static __device__ __forceinline__ S st(C x) { return x; }
    static __device__ __forceinline__ double f64(C x) { return (double)x; }
    static __device__ __forceinline__ S from_f64(double v) { return (float)v; }
};
struct TF64 {
    typedef double S; typedef double C; typedef double U;
    static constexpr bool FLOAT = true;
    static __device__ __forceinline__ C ld(S x) { return x; }
    static __device__ __forceinline__ S st(C x) { return x; }
    static __device__ __forceinline__ double f64(C x) { return x; }
    static __device__ __forceinline__ S from_f64(double v) { return v; }
};
struct TF16 {
    typedef unsigned short S; typedef float C; typedef float U;
    static constexpr bool FLOAT = true;
    static __device__ __forceinline__ C ld(S x) { return h2f(x); }
    static __device__ __forceinline__ S st(C x) { return f2h(x); }
    static __device__ __forceinline__ double f64(C x) { return (double)x; }
    static __device__ __forceinline__ S from_f64(double v) { return f2h(d2f_odd(v)); }
};
struct TBF16 {
    typedef unsigned short S; typedef float C; typedef float U;
    static constexpr bool FLOAT = true;
    static __device__ __forceinline__ C ld(S x) { return b2f(x); }
    static __device__ __forceinline__ S st(C x) { return f2b(x); }
    static __device__ __forceinline__ double f64(C x) { return (double)x; }
    static __device__ __forceinline__ S from_f64(double v) { return f2b(d2f_odd(v)); }
};
struct TI64 {
    typedef i64 S; typedef i64 C; typedef u64 U;
    static constexpr bool FLOAT = false;
    static __device__ __forceinline__ C ld(S x) { return x; }
    static __device__ __forceinline__ S st(C x) { return x; }
    static __device__ __forceinline__ double f64(C x) { return (double)x; }
    static __device__ __forceinline__ S from_f64(double v) { return sat_i64(v); }
};
struct TI32 {
    typedef int S; typedef int C; typedef unsigned int U;
    static constexpr bool FLOAT = false;
    static __device__ __forceinline__ C ld(S x) { return x; }
    static __device__ __forceinline__ S st(C x) { return x; }
    static __device__ __forceinline__ double f64(C x) { return (double)x; }
    static __device__ __forceinline__ S from_f64(double v) { return sat_i32(v); }
};
struct TI16 {
    typedef short S; typedef short C; typedef unsigned int U;
    static constexpr bool FLOAT = false;
    static __device__ __forceinline__ C ld(S x) { return x; }
    static __device__ __forceinline__ S st(C x) { return x; }
    static __device__ __forceinline__ double f64(C x) { return (double)x; }
    static __device__ __forceinline__ S from_f64(double v) { return sat_i16(v); }
};
struct TI8 {
    typedef signed char S; typedef signed char C; typedef unsigned int U;
    static constexpr bool FLOAT = false;
    static __device__ __forceinline__ C ld(S x) { return x; }
    static __device__ __forceinline__ S st(C x) { return x; }
    static __device__ __forceinline__ double f64(C x) { return (double)x; }
    static __device__ __forceinline__ S from_f64(double v) { return sat_i8(v); }
};
struct TU8 {
    typedef u8 S; typedef u8 C; typedef unsigned int U;
    static constexpr bool FLOAT = false;
    static __device__ __forceinline__ C ld(S x) { return x; }
    static __device__ __forceinline__ S st(C x) { return x; }
    static __device__ __forceinline__ double f64(C x) { return (double)x; }
    static __device__ __forceinline__ S from_f64(double v) { return sat_u8(v); }
};

// Dtype codes (kernels.rs `dcode`): 0 f32, 1 f64, 2 f16, 3 bf16, 4 i64,
// 5 i32, 6 u8, 7 bool, 8 i16, 9 i8.
__device__ __forceinline__ void store_f64(void* base, i64 o, int code, double v) {
    switch (code) {
    case 0: ((float*)base)[o] = (float)v; break;
    case 1: ((double*)base)[o] = v; break;
    case 2: ((unsigned short*)base)[o] = f2h(d2f_odd(v)); break;
    case 3: ((unsigned short*)base)[o] = f2b(d2f_odd(v)); break;
    case 4: ((i64*)base)[o] = sat_i64(v); break;
    case 5: ((int*)base)[o] = sat_i32(v); break;
    case 6: ((u8*)base)[o] = sat_u8(v); break;
    case 8: ((short*)base)[o] = sat_i16(v); break;
    case 9: ((signed char*)base)[o] = sat_i8(v); break;
    default: ((u8*)base)[o] = (v != 0.0) ? 1 : 0; break;
    }
}
// An int64 accumulator into any dtype: integers wrap, floats round.
__device__ __forceinline__ void store_i64(void* base, i64 o, int code, i64 v) {
    switch (code) {
    case 4: ((i64*)base)[o] = v; break;
    case 5: ((int*)base)[o] = (int)(unsigned int)(u64)v; break;
    case 6: ((u8*)base)[o] = (u8)(u64)v; break;
    case 8: ((short*)base)[o] = (short)(unsigned short)(u64)v; break;
    case 9: ((signed char*)base)[o] = (signed char)(u8)(u64)v; break;
    case 7: ((u8*)base)[o] = (v != 0) ? 1 : 0; break;
    default: store_f64(base, o, code, (double)v); break;
    }
}

#define F1(name, ff, df) \
    __device__ __forceinline__ float name(float x) { return ff(x); } \
    __device__ __forceinline__ double name(double x) { return df(x); }
F1(m_exp, expf, exp)
F1(m_log, logf, log)
F1(m_sqrt, sqrtf, sqrt)
F1(m_tanh, tanhf, tanh)
F1(m_sin, sinf, sin)
F1(m_cos, cosf, cos)
F1(m_erf, erff, erf)
F1(m_log1p, log1pf, log1p)
F1(m_expm1, expm1f, expm1)
F1(m_floor, floorf, floor)
F1(m_ceil, ceilf, ceil)
F1(m_trunc, truncf, trunc)
F1(m_rint, rintf, rint)
#define F2(name, ff, df) \
    __device__ __forceinline__ float name(float a, float b) { return ff(a, b); } \
    __device__ __forceinline__ double name(double a, double b) { return df(a, b); }
F2(m_atan2, atan2f, atan2)
F2(m_fmod, fmodf, fmod)

template <class C> __device__ __forceinline__ C sigmoid(C x) {
    if (x >= (C)0) return (C)1 / ((C)1 + m_exp(-x));
    C e = m_exp(x);
    return e / ((C)1 + e);
}

// unary_f, binary_f and compare_f: generated from kael-core's op table
// (kernels.rs `op_functions`), so codes and formulas cannot drift from the
// Rust side.
@OP_FUNCTIONS@

// Reduction accumulators. Op codes: 0 sum, 1 max, 2 min, 3 prod.
template <bool F> struct Acc;
template <> struct Acc<true> {
    typedef double V;
    static __device__ __forceinline__ V ident(int op) {
        return op == 0 ? 0.0 : op == 1 ? -d_inf() : op == 2 ? d_inf() : 1.0;
    }
    static __device__ __forceinline__ V comb(int op, V a, V x) {
        switch (op) {
        case 0: return a + x;
        case 1: return (x != x || x > a) ? x : a;
        case 2: return (x != x || x < a) ? x : a;
        default: return a * x;
        }
    }
    template <class T> static __device__ __forceinline__ V load(typename T::S s) { return T::f64(T::ld(s)); }
    static __device__ __forceinline__ void store(void* base, i64 o, int code, V v) { store_f64(base, o, code, v); }
};
template <> struct Acc<false> {
    typedef i64 V;
    static __device__ __forceinline__ V ident(int op) {
        return op == 0 ? 0 : op == 1 ? (i64)0x8000000000000000ULL : op == 2 ? (i64)0x7fffffffffffffffULL : 1;
    }
    static __device__ __forceinline__ V comb(int op, V a, V x) {
        switch (op) {
        case 0: return (i64)((u64)a + (u64)x);
        case 1: return x > a ? x : a;
        case 2: return x < a ? x : a;
        default: return (i64)((u64)a * (u64)x);
        }
    }
    template <class T> static __device__ __forceinline__ V load(typename T::S s) { return (i64)T::ld(s); }
    static __device__ __forceinline__ void store(void* base, i64 o, int code, V v) { store_i64(base, o, code, v); }
};

// Every block-wide reduction below uses blockDim.x == 256 (kernels.rs BLOCK).
#define BLOCK 256
