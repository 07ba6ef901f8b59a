//! Kernel sources, NVRTC compilation and the per-dtype module cache, plus
//! the kernel-argument form of a layout.
//!
//! NOTE [Kernel modules]
//! `prelude.cu` (layouts, conversions, dtype traits, op functions) and
//! `body.cu` (every kernel) are compiled together once per *storage* dtype
//! (bool shares uint8's module) the first time a kernel of that dtype runs,
//! with `typedef T<dtype> KT;` in between. The functions are cached per
//! (dtype, name) for the backend's life. Op choice (add vs mul, sum vs max)
//! is a kernel argument, so one module per dtype covers every op: at most
//! seven NVRTC compilations per process.

use super::{CudaBackend, intern};
use cudarc::driver::{CudaFunction, DeviceRepr, LaunchConfig};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use kael_core::ops::{BinaryOp, CmpOp, CudaRow, UnaryOp};
use kael_core::{DType, Error, Layout, MAX_RANK, Result};

/// The common part of every module.
pub(crate) const PRELUDE: &str = include_str!("prelude.cu");
/// The kernels, instantiated for `KT`.
pub(crate) const BODY: &str = include_str!("body.cu");

/// Threads per block of every kernel (the block reductions assume it).
pub(crate) const BLOCK: u32 = 256;

/// The dtype whose module holds a dtype's kernels (bool is stored as u8).
pub(crate) fn module_dtype(dtype: DType) -> DType {
    if dtype == DType::Bool {
        DType::U8
    } else {
        dtype
    }
}

/// The full source of one dtype's module.
pub(crate) fn module_source(dtype: DType) -> String {
    let (traits, float) = match module_dtype(dtype) {
        DType::F32 => ("TF32", true),
        DType::F64 => ("TF64", true),
        DType::F16 => ("TF16", true),
        DType::BF16 => ("TBF16", true),
        DType::I64 => ("TI64", false),
        DType::I32 => ("TI32", false),
        DType::I16 => ("TI16", false),
        DType::I8 => ("TI8", false),
        _ => ("TU8", false),
    };
    let mut s = String::with_capacity(PRELUDE.len() + BODY.len() + 8192);
    s.push_str(&PRELUDE.replace("@OP_FUNCTIONS@", &op_functions()));
    s.push_str("\ntypedef ");
    s.push_str(traits);
    s.push_str(" KT;\n");
    if float {
        s.push_str("#define KAEL_FLOAT 1\n");
    }
    s.push_str(BODY);
    s
}

/// The `switch` arms of one dtype class: `case code: { statements }`.
fn arms(rows: &[CudaRow], class: impl Fn(&CudaRow) -> Option<&'static str>) -> String {
    let mut s = String::new();
    for r in rows {
        if let Some(body) = class(r) {
            s.push_str(&format!(
                "        case {}: {{ {body} }} // {}\n",
                r.code, r.name
            ));
        }
    }
    s
}

/// `unary_f`, `binary_f` and `compare_f` from the op table (NOTE [Op
/// table]): one `case` per row and dtype class it accepts. A code the host
/// never sends (an op on a class it refuses) traps instead of returning a
/// value.
pub(crate) fn op_functions() -> String {
    let un = UnaryOp::CUDA;
    let bi = BinaryOp::CUDA;
    let cmp = CmpOp::CUDA;
    format!(
        r#"template <class T>
__device__ __forceinline__ typename T::S unary_f(int op, typename T::S xs, double p0, double p1, int flags) {{
    typedef typename T::C C;
    typedef typename T::U U;
    C x = T::ld(xs);
    if constexpr (T::FLOAT) {{
        switch (op) {{
{}        }}
    }} else {{
        switch (op) {{
{}        }}
    }}
    __trap();
    return xs;
}}

template <class T>
__device__ __forceinline__ typename T::S binary_f(int op, typename T::S as, typename T::S bs) {{
    typedef typename T::C C;
    typedef typename T::U U;
    C a = T::ld(as), b = T::ld(bs);
    if constexpr (T::FLOAT) {{
        switch (op) {{
{}        }}
    }} else {{
        switch (op) {{
{}        }}
    }}
    __trap();
    return as;
}}

template <class T>
__device__ __forceinline__ u8 compare_f(int op, typename T::S as, typename T::S bs) {{
    typedef typename T::C C;
    C a = T::ld(as), b = T::ld(bs);
    switch (op) {{
{}    }}
    __trap();
    return 0;
}}
"#,
        arms(un, |r| r.float),
        arms(un, |r| r.int),
        arms(bi, |r| r.float),
        arms(bi, |r| r.int),
        cmp_arms(cmp),
    )
}

/// The comparison arms: `case code: return (expr);`.
fn cmp_arms(rows: &[CudaRow]) -> String {
    let mut s = String::new();
    for r in rows {
        if let Some(e) = r.float {
            s.push_str(&format!(
                "    case {}: return ({e}); // {}\n",
                r.code, r.name
            ));
        }
    }
    s
}

/// Compiles a module's source to PTX for `arch` (e.g. `compute_90`).
pub(crate) fn compile(dtype: DType, arch: &str) -> Result<cudarc::nvrtc::Ptx> {
    let opts = CompileOptions {
        options: vec![
            "--std=c++17".to_string(),
            format!("--gpu-architecture={arch}"),
            "-diag-suppress=186".to_string(),
        ],
        ..Default::default()
    };
    compile_ptx_with_opts(module_source(dtype), opts).map_err(|e| {
        let mut text = format!("{e:?}");
        text.truncate(2000);
        Error::InvalidArgument {
            op: "cuda kernel compilation",
            reason: intern(format!(
                "NVRTC could not compile kael's {} kernels (a bug in kael; please report it with this text): {text}",
                dtype.name()
            )),
        }
    })
}

/// Code of a dtype in the kernels (`store_f64` in prelude.cu).
pub(crate) fn dcode(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
        DType::I64 => 4,
        DType::I32 => 5,
        DType::U8 => 6,
        DType::Bool => 7,
        DType::I16 => 8,
        DType::I8 => 9,
    }
}

/// A layout as a kernel argument (`struct L` in prelude.cu: same fields,
/// same C layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KLayout {
    pub rank: i32,
    pub contig: i32,
    pub shape: [i64; MAX_RANK],
    pub stride: [i64; MAX_RANK],
    pub offset: i64,
}

// SAFETY: `KLayout` is `#[repr(C)]` plain data (integers only) whose field
// order, types and alignment match `struct L` in prelude.cu, so the driver
// copies it into the kernel's parameter space byte for byte.
unsafe impl DeviceRepr for KLayout {}

fn to_i64(v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::InvalidArgument {
        op: "cuda",
        reason: "a size, stride or offset does not fit in i64; use smaller tensors",
    })
}

impl KLayout {
    /// From sizes, strides and an offset (in elements). `contig` is set when
    /// position `i` is at `offset + i`.
    pub(crate) fn new(shape: &[usize], strides: &[usize], offset: usize) -> Result<Self> {
        if shape.len() != strides.len() || shape.len() > MAX_RANK {
            return Err(Error::RankTooLarge {
                rank: shape.len().max(strides.len()),
                max: MAX_RANK,
            });
        }
        let mut k = KLayout {
            rank: shape.len() as i32,
            offset: to_i64(offset)?,
            ..Default::default()
        };
        for (d, (&s, &st)) in shape.iter().zip(strides).enumerate() {
            k.shape[d] = to_i64(s)?;
            k.stride[d] = to_i64(st)?;
        }
        let l = Layout::new(shape, strides, offset)?;
        k.contig = i32::from(l.is_contiguous());
        Ok(k)
    }

    /// From a core layout.
    pub(crate) fn of(l: &Layout) -> Result<Self> {
        Self::new(l.shape(), l.strides(), l.offset())
    }

    /// A row-major contiguous layout of `shape` at offset 0.
    pub(crate) fn contiguous(shape: &[usize]) -> Result<Self> {
        Self::of(&Layout::contiguous(shape)?)
    }
}

/// One thread per element, grid-stride loops beyond ~1M blocks.
pub(crate) fn per_element(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(BLOCK as usize).clamp(1, 1 << 20) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One block per row (output), looping beyond 65535 blocks.
pub(crate) fn per_row(rows: usize) -> LaunchConfig {
    let blocks = rows.clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl CudaBackend {
    /// The function `name` of `dtype`'s module, compiling the module at
    /// first use (NOTE [Kernel modules]).
    pub(crate) fn function(&self, dtype: DType, name: &'static str) -> Result<CudaFunction> {
        let key = module_dtype(dtype);
        let mut cache = super::lock(&self.kernels);
        if let Some(f) = cache.functions.get(&(key, name)) {
            return Ok(f.clone());
        }
        self.ctx
            .bind_to_thread()
            .map_err(|e| super::driver_error("cuda kernel lookup", e))?;
        let module = match cache.modules.get(&key) {
            Some(m) => m.clone(),
            None => {
                let ptx = compile(key, &self.arch)?;
                let m = self
                    .ctx
                    .load_module(ptx)
                    .map_err(|e| super::driver_error("cuda module load", e))?;
                cache.modules.insert(key, m.clone());
                m
            }
        };
        let f = module
            .load_function(name)
            .map_err(|e| super::driver_error("cuda kernel lookup", e))?;
        cache.functions.insert((key, name), f.clone());
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn klayout_matches_the_kernel_struct_size() {
        // struct L: 2 ints, two arrays of 8 long longs, one long long.
        assert_eq!(core::mem::size_of::<KLayout>(), 8 + 64 + 64 + 8);
        assert_eq!(core::mem::align_of::<KLayout>(), 8);
    }

    #[test]
    fn klayout_marks_only_row_major_layouts_contiguous() {
        let c = KLayout::contiguous(&[2, 3]).unwrap();
        assert_eq!((c.rank, c.contig, c.offset), (2, 1, 0));
        assert_eq!(&c.stride[..2], &[3, 1]);
        let t = KLayout::new(&[3, 2], &[1, 3], 0).unwrap();
        assert_eq!(t.contig, 0);
        // size-1 dims may have any stride and stay contiguous (PyTorch's rule)
        let s = KLayout::new(&[1, 4], &[99, 1], 5).unwrap();
        assert_eq!((s.contig, s.offset), (1, 5));
    }

    #[test]
    fn op_functions_have_one_case_per_table_row_and_class() {
        let src = op_functions();
        let count = |needle: &str| src.matches(needle).count();
        for r in UnaryOp::CUDA
            .iter()
            .chain(BinaryOp::CUDA)
            .chain(CmpOp::CUDA)
        {
            let classes = usize::from(r.float.is_some()) + usize::from(r.int.is_some());
            let arm = format!("case {}: ", r.code);
            let named = format!("// {}\n", r.name);
            assert!(count(&named) >= 1, "{} has no arm", r.name);
            assert!(
                count(&arm) >= classes.min(1),
                "{} has no case {}",
                r.name,
                r.code
            );
        }
        // Every unary row, float and int classes, appears exactly once each.
        for r in UnaryOp::CUDA {
            let classes = usize::from(r.float.is_some()) + usize::from(r.int.is_some());
            let line = format!("// {}\n", r.name);
            assert_eq!(count(&line), classes, "{}", r.name);
        }
        if let Ok(path) = std::env::var("KAEL_DUMP_CUDA") {
            std::fs::write(path, module_source(DType::F32)).unwrap();
        }
    }

    #[test]
    fn every_module_source_names_its_traits_once() {
        for d in DType::ALL {
            let s = module_source(d);
            let typedefs = s
                .lines()
                .filter(|l| l.starts_with("typedef T") && l.ends_with(" KT;"))
                .count();
            assert_eq!(typedefs, 1, "{d:?}");
            let float = s.lines().any(|l| l == "#define KAEL_FLOAT 1");
            assert_eq!(float, d.is_float(), "{d:?}");
        }
    }

    /// Compiles every module with NVRTC when libnvrtc can be loaded (it
    /// needs no GPU and no driver); prints one line and passes otherwise.
    #[test]
    fn every_module_compiles_with_nvrtc_when_it_is_present() {
        // SAFETY: only tries to dlopen libnvrtc under its usual names.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            println!("skipped: no NVRTC library found (libnvrtc could not be loaded)");
            return;
        }
        for d in [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I64,
            DType::I32,
            DType::I16,
            DType::I8,
            DType::U8,
        ] {
            let ptx = compile(d, "compute_90").unwrap();
            let text = ptx.to_src();
            for k in [
                "k_copy",
                "k_unary",
                "k_binary",
                "k_reduce_block",
                "k_gather",
            ] {
                assert!(text.contains(k), "{d:?}: {k} missing");
            }
            assert_eq!(text.contains("k_softmax"), d.is_float(), "{d:?}");
            assert_eq!(text.contains("k_matmul_int"), !d.is_float(), "{d:?}");
        }
    }
}
