//! The bad-input matrix: every public tensor op (read from
//! `core/src/tensor/*.rs` and the autograd entry points) with a wrong rank,
//! shape, dim, index, dtype, device or bound. Each (op, bad input) pair must
//! return `Err` with a message that names the fix, and leave every input
//! tensor exactly as it was (bytes, shape, strides, offset, version).
//!
//! The second device is a tiny custom backend (`DeviceKind::Custom("other")`)
//! that can only move bytes: mixing it with the CPU must give
//! `DeviceMismatch`, computing on it alone `Unsupported`.
mod common;

use kael_core::allocator::{Allocator, GlobalAllocator};
use kael_core::autograd::{BackwardOptions, grad};
use kael_core::backend::Backend;
use kael_core::shared::Shared;
use kael_core::storage::Storage;
use kael_core::{DType, Device, DeviceKind, Error, Layout, Result, Rng, Tensor};

/// A backend that stores host bytes and computes nothing.
struct Other {
    allocator: Shared<dyn Allocator>,
}

impl Backend for Other {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Custom("other")
    }
    fn is_host_memory(&self) -> bool {
        true
    }
    fn allocator(&self) -> Shared<dyn Allocator> {
        self.allocator.clone()
    }
    fn write_bytes(&self, dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
        kael_core::cpu::write_host_bytes(dst, byte_offset, src)
    }
    fn read_bytes(&self, src: &Storage, byte_offset: usize, dst: &mut [u8]) -> Result<()> {
        kael_core::cpu::read_host_bytes(src, byte_offset, dst)
    }
}

fn other_device() -> Device {
    Device::from_backend(Shared::new(Other {
        allocator: Shared::new(GlobalAllocator::new()),
    }))
}

#[repr(align(16))]
struct Aligned([u8; 16]);
impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// The inputs every case draws from.
struct Fx {
    /// f32 [2, 3], 0..6
    a: Tensor,
    /// f32 [3, 4]
    b: Tensor,
    /// f32 [2, 3, 4]
    c: Tensor,
    /// f32 [3]
    v: Tensor,
    /// f32 [4]
    v4: Tensor,
    /// f32 scalar (rank 0)
    s: Tensor,
    /// i64 [2, 3]
    ia: Tensor,
    /// i32 [2, 3]
    i32a: Tensor,
    /// bool [2, 3]
    m: Tensor,
    /// i64 [2] = [0, 1]
    idx: Tensor,
    /// i64 [2] = [0, 7] (7 out of range everywhere)
    idx_oob: Tensor,
    /// i64 [1] = [-1]
    idx_neg: Tensor,
    /// i64 [2, 2]
    idx2: Tensor,
    /// f32 [2] (not an index dtype)
    idx_f: Tensor,
    /// f32 [2, 3] expanded from [1, 3] (overlapping positions)
    ex: Tensor,
    /// f32 [4] over external, read-only bytes
    ext: Tensor,
    /// f32 [2, 3] leaf that requires grad
    leaf: Tensor,
    /// f32 [2, 3] with history (leaf * 2)
    nonleaf: Tensor,
    /// f32 [2, 3] on the other device
    o: Tensor,
    /// f32 [0, 3] (empty)
    e: Tensor,
}

impl Fx {
    fn new() -> Self {
        let dev = Device::cpu();
        let a = Tensor::arange(0.0f32, 6.0, &dev)
            .unwrap()
            .reshape(&[2, 3])
            .unwrap();
        let leaf = Tensor::ones(&[2, 3], DType::F32, &dev)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let nonleaf = leaf.mul_scalar(2.0).unwrap();
        let ext_storage = Storage::from_owner(Aligned([0; 16]), &dev).unwrap();
        Self {
            b: Tensor::ones(&[3, 4], DType::F32, &dev).unwrap(),
            c: Tensor::zeros(&[2, 3, 4], DType::F32, &dev).unwrap(),
            v: Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev).unwrap(),
            v4: Tensor::ones(&[4], DType::F32, &dev).unwrap(),
            s: Tensor::scalar(2.0f32, &dev).unwrap(),
            ia: Tensor::arange(0i64, 6, &dev)
                .unwrap()
                .reshape(&[2, 3])
                .unwrap(),
            i32a: Tensor::arange(0i32, 6, &dev)
                .unwrap()
                .reshape(&[2, 3])
                .unwrap(),
            m: a.gt(&Tensor::scalar(2.0f32, &dev).unwrap()).unwrap(),
            idx: Tensor::from_slice(&[0i64, 1], &[2], &dev).unwrap(),
            idx_oob: Tensor::from_slice(&[0i64, 7], &[2], &dev).unwrap(),
            idx_neg: Tensor::from_slice(&[-1i64], &[1], &dev).unwrap(),
            idx2: Tensor::from_slice(&[0i64, 1, 1, 0], &[2, 2], &dev).unwrap(),
            idx_f: Tensor::from_slice(&[0.0f32, 1.0], &[2], &dev).unwrap(),
            ex: Tensor::ones(&[1, 3], DType::F32, &dev)
                .unwrap()
                .expand(&[2isize, 3])
                .unwrap(),
            ext: Tensor::from_storage(
                Shared::new(ext_storage),
                Layout::contiguous(&[4]).unwrap(),
                DType::F32,
            )
            .unwrap(),
            o: Tensor::zeros(&[2, 3], DType::F32, &other_device()).unwrap(),
            e: Tensor::zeros(&[0, 3], DType::F32, &dev).unwrap(),
            a,
            leaf,
            nonleaf,
        }
    }

    fn all(&self) -> Vec<(&'static str, &Tensor)> {
        vec![
            ("a", &self.a),
            ("b", &self.b),
            ("c", &self.c),
            ("v", &self.v),
            ("v4", &self.v4),
            ("s", &self.s),
            ("ia", &self.ia),
            ("i32a", &self.i32a),
            ("m", &self.m),
            ("idx", &self.idx),
            ("idx_oob", &self.idx_oob),
            ("idx_neg", &self.idx_neg),
            ("idx2", &self.idx2),
            ("idx_f", &self.idx_f),
            ("ex", &self.ex),
            ("ext", &self.ext),
            ("leaf", &self.leaf),
            ("nonleaf", &self.nonleaf),
            ("o", &self.o),
            ("e", &self.e),
        ]
    }
}

/// What kind of bad input a case feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Bad {
    Rank,
    Shape,
    Dim,
    Index,
    DType,
    Device,
    Bounds,
    Other,
}

type Run = fn(&Fx) -> Result<()>;

/// `(op, kind of bad input, what exactly, the call)`.
macro_rules! cases {
    ($($op:literal, $bad:ident, $what:literal => |$f:ident| $body:expr;)*) => {
        vec![$(($op, Bad::$bad, $what, (|$f: &Fx| { $body.map(|_| ()) }) as Run),)*]
    };
}

fn dev() -> Device {
    Device::cpu()
}

#[rustfmt::skip]
fn table() -> Vec<(&'static str, Bad, &'static str, Run)> {
    cases! {
        // ------------------------------------------------ constructors
        "zeros", Rank, "rank 9" => |_f| Tensor::zeros(&[1; 9], DType::F32, &dev());
        "zeros", Bounds, "element count overflows" => |_f| Tensor::zeros(&[usize::MAX, 2], DType::F32, &dev());
        "zeros", Bounds, "byte count overflows" => |_f| Tensor::zeros(&[usize::MAX / 2], DType::F64, &dev());
        "ones", Rank, "rank 9" => |_f| Tensor::ones(&[1; 9], DType::F32, &dev());
        "full", Bounds, "element count overflows" => |_f| Tensor::full(&[usize::MAX, 3], 1.0, DType::I64, &dev());
        "from_slice", Shape, "3 values for [2, 2]" => |_f| Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[2, 2], &dev());
        "from_slice", Rank, "rank 9" => |_f| Tensor::from_slice(&[1.0f32], &[1; 9], &dev());
        "scalar", Device, "on a backend that cannot write" => |_f| Tensor::scalar(1.0f32, &Device::from_backend(Shared::new(NoWrite)));
        "arange", DType, "bool" => |_f| Tensor::arange(false, true, &dev());
        "arange_step", Bounds, "zero step" => |_f| Tensor::arange_step(0.0f32, 1.0, 0.0, &dev());
        "arange_step", Bounds, "NaN step" => |_f| Tensor::arange_step(0.0f32, 1.0, f64::NAN, &dev());
        "arange_step", Bounds, "infinite end" => |_f| Tensor::arange_step(0.0f64, f64::INFINITY, 1.0, &dev());
        "eye", Bounds, "n*n overflows" => |_f| Tensor::eye(usize::MAX, DType::F32, &dev());
        "rand", DType, "i64" => |_f| Tensor::rand(&[2], DType::I64, &dev(), &mut Rng::new(0));
        "randn", DType, "bool" => |_f| Tensor::randn(&[2], DType::Bool, &dev(), &mut Rng::new(0));
        "from_storage", Bounds, "layout past the storage" => |f| Tensor::from_storage(f.a.storage(), Layout::contiguous(&[7]).unwrap(), DType::F32);
        "from_storage", Bounds, "wider dtype past the storage" => |f| Tensor::from_storage(f.a.storage(), Layout::contiguous(&[4]).unwrap(), DType::F64);
        // ------------------------------------------------ reading
        "to_vec", DType, "i64 from f32" => |f| f.a.to_vec::<i64>();
        "to_vec", DType, "f32 from bool" => |f| f.m.to_vec::<f32>();
        "item", Shape, "6 elements" => |f| f.a.item::<f32>();
        "item", DType, "f64 from f32" => |f| f.s.item::<f64>();
        "item", Shape, "empty" => |f| f.e.item::<f32>();
        "size", Dim, "dim 2 of rank 2" => |f| f.a.size(2);
        "size", Dim, "dim 0 of rank 0" => |f| f.s.size(0);
        // ------------------------------------------------ views
        "narrow", Dim, "dim 2" => |f| f.a.narrow(2, 0, 1);
        "narrow", Dim, "dim -3" => |f| f.a.narrow(-3, 0, 1);
        "narrow", Bounds, "start + length past the end" => |f| f.a.narrow(1, 2, 2);
        "narrow", Bounds, "start past the end" => |f| f.a.narrow(1, 4, 0);
        "narrow", Bounds, "start + length overflows" => |f| f.a.narrow(1, usize::MAX, 2);
        "narrow", Rank, "rank 0" => |f| f.s.narrow(0, 0, 1);
        "slice", Dim, "dim 5" => |f| f.a.slice(5, 0, 1, 1);
        "slice", Bounds, "step 0" => |f| f.a.slice(1, 0, 3, 0);
        "select", Dim, "dim 2" => |f| f.a.select(2, 0);
        "select", Index, "index 3 of 3" => |f| f.a.select(1, 3);
        "select", Index, "index -4 of 3" => |f| f.a.select(1, -4);
        "select", Index, "index 0 of an empty dim" => |f| f.e.select(0, 0);
        "select", Rank, "rank 0" => |f| f.s.select(0, 0);
        "transpose", Dim, "dim 2" => |f| f.a.transpose(0, 2);
        "transpose", Dim, "dim -3" => |f| f.a.transpose(-3, 0);
        "t", Rank, "rank 3" => |f| f.c.t();
        "permute", Rank, "too few dims" => |f| f.c.permute(&[0, 1]);
        "permute", Rank, "too many dims" => |f| f.a.permute(&[0, 1, 2]);
        "permute", Dim, "repeated dim" => |f| f.a.permute(&[0, 0]);
        "permute", Dim, "dim out of range" => |f| f.a.permute(&[0, 5]);
        "expand", Rank, "fewer sizes than dims" => |f| f.a.expand(&[3isize]);
        "expand", Shape, "non-1 dim to another size" => |f| f.a.expand(&[2isize, 4]);
        "expand", Shape, "-1 for a new leading dim" => |f| f.a.expand(&[-1isize, 2, 3]);
        "expand", Shape, "size -2" => |f| f.v.expand(&[2isize, -2]);
        "expand", Rank, "rank 9" => |f| f.v.expand(&[1isize, 1, 1, 1, 1, 1, 1, 1, 3]);
        "broadcast_to", Shape, "[2, 3] to [3, 3]" => |f| f.a.broadcast_to(&[3, 3]);
        "broadcast_to", Rank, "to a lower rank" => |f| f.a.broadcast_to(&[3]);
        "unsqueeze", Dim, "dim 4 of rank 2" => |f| f.a.unsqueeze(4);
        "unsqueeze", Dim, "dim -4 of rank 2" => |f| f.a.unsqueeze(-4);
        "unsqueeze", Rank, "past MAX_RANK" => |_f| Tensor::zeros(&[1; 8], DType::F32, &dev())?.unsqueeze(0);
        "squeeze_dim", Dim, "dim 2" => |f| f.a.squeeze_dim(2);
        "view", Shape, "7 elements" => |f| f.a.view(&[7usize]);
        "view", Shape, "two -1" => |f| f.a.view(&[-1isize, -1]);
        "view", Shape, "-1 that does not divide" => |f| f.a.view(&[-1isize, 4]);
        "view", Shape, "size -3" => |f| f.a.view(&[-3isize, -2]);
        "view", Other, "strides that cannot express it" => |f| f.a.t()?.view(&[6usize]);
        "view", Rank, "rank 9" => |f| f.v.view(&[1usize, 1, 1, 1, 1, 1, 1, 1, 3]);
        "reshape", Shape, "5 elements" => |f| f.a.reshape(&[5usize]);
        "reshape", Shape, "two -1" => |f| f.a.reshape(&[-1isize, -1]);
        "reshape", Shape, "-1 with a 0 size" => |f| f.e.reshape(&[-1isize, 0]);
        "flatten", Dim, "end dim 2" => |f| f.a.flatten(0, 2);
        "flatten", Dim, "start after end" => |f| f.c.flatten(2, 0);
        "unfold", Dim, "dim 2" => |f| f.a.unfold(2, 1, 1);
        "unfold", Bounds, "size past the dim" => |f| f.a.unfold(1, 4, 1);
        "unfold", Bounds, "step 0" => |f| f.a.unfold(1, 2, 0);
        "diagonal", Dim, "same dims" => |f| f.a.diagonal(0, 1, 1);
        "diagonal", Dim, "dim 2" => |f| f.a.diagonal(0, 0, 2);
        "diagonal", Rank, "rank 1" => |f| f.v.diagonal(0, 0, 1);
        "chunk", Bounds, "0 chunks" => |f| f.a.chunk(0, 0);
        "chunk", Dim, "dim 2" => |f| f.a.chunk(2, 2);
        "split", Bounds, "size 0" => |f| f.a.split(0, 1);
        "split", Dim, "dim -3" => |f| f.a.split(1, -3);
        "split_sizes", Shape, "sizes do not sum to the dim" => |f| f.a.split_sizes(&[1, 1], 1);
        "split_sizes", Dim, "dim 3" => |f| f.a.split_sizes(&[3], 3);
        "as_strided", Rank, "2 sizes, 1 stride" => |f| f.a.as_strided(&[2, 3], &[1], 0);
        "as_strided", Bounds, "past the storage" => |f| f.a.as_strided(&[2, 3], &[3, 1], 1);
        "as_strided", Bounds, "huge stride" => |f| f.a.as_strided(&[2, 1], &[usize::MAX, 1], 0);
        "as_strided", Bounds, "element count overflows" => |f| f.a.as_strided(&[usize::MAX, 2], &[0, 0], 0);
        "as_strided", Bounds, "offset past an empty view" => |f| f.a.as_strided(&[0], &[1], 7);
        "as_strided", Rank, "rank 9" => |f| f.a.as_strided(&[1; 9], &[1; 9], 0);
        "view_dtype", Rank, "rank 0 to another size" => |f| f.s.view_dtype(DType::F64);
        "view_dtype", Other, "last stride not 1" => |f| f.a.t()?.view_dtype(DType::F16);
        "view_dtype", Shape, "last dim not divisible" => |f| f.a.view_dtype(DType::F64);
        "view_dtype", Bounds, "offset not divisible" => |f| f.v4.narrow(0, 1, 2)?.view_dtype(DType::F64);
        // ------------------------------------------------ elementwise
        "neg", DType, "bool" => |f| f.m.neg();
        "abs", DType, "bool" => |f| f.m.abs();
        "sqr", DType, "bool" => |f| f.m.sqr();
        "sign", DType, "bool" => |f| f.m.sign();
        "relu", DType, "bool" => |f| f.m.relu();
        "clamp", Bounds, "min > max" => |f| f.a.clamp(Some(2.0), Some(1.0));
        "clamp", Bounds, "NaN bound" => |f| f.a.clamp(Some(f64::NAN), None);
        "clamp", DType, "bool" => |f| f.m.clamp(Some(0.0), Some(1.0));
        "add_scalar", Bounds, "i32 + 2^40 (does not fit)" => |f| f.i32a.add_scalar(1i64 << 40);
        "sub_scalar", DType, "bool - 1" => |f| f.m.sub_scalar(1);
        "mul_scalar", Bounds, "i32 * -2^40 (does not fit)" => |f| f.i32a.mul_scalar(-(1i64 << 40));
        "exp", Device, "on a backend without kernels" => |f| f.o.exp();
        "add", Shape, "[2, 3] + [3, 4]" => |f| f.a.add(&f.b);
        "add", Shape, "[2, 3] + [4]" => |f| f.a.add(&f.v4);
        "bitwise_and", DType, "f32 & i64" => |f| f.a.bitwise_and(&f.ia);
        "add", Device, "cpu + other" => |f| f.a.add(&f.o);
        "add", Device, "other + other (backend without kernels)" => |f| f.o.add(&f.o);
        "sub", Shape, "[2, 3] - [3, 4]" => |f| f.a.sub(&f.b);
        "sub", DType, "f32 - bool" => |f| f.a.sub(&f.m);
        "sub", DType, "bool - bool" => |f| f.m.sub(&f.m);
        "sub", Device, "other - cpu" => |f| f.o.sub(&f.a);
        "mul", Shape, "[2, 3] * [4]" => |f| f.a.mul(&f.v4);
        "bitwise_left_shift", DType, "i64 << f32" => |f| f.ia.bitwise_left_shift(&f.a);
        "mul", Device, "cpu * other" => |f| f.a.mul(&f.o);
        "div", Shape, "[3, 4] / [2, 3]" => |f| f.b.div(&f.a);
        "remainder", DType, "bool % bool" => |f| f.m.remainder(&f.m);
        "floor_divide", DType, "bool // bool" => |f| f.m.floor_divide(&f.m);
        "div", Device, "cpu / other" => |f| f.a.div(&f.o);
        "maximum", Shape, "[2, 3] vs [4]" => |f| f.a.maximum(&f.v4);
        "bitwise_or", DType, "f32 | i64" => |f| f.a.bitwise_or(&f.ia);
        "minimum", Device, "cpu vs other" => |f| f.a.minimum(&f.o);
        "pow", DType, "bool ^ bool" => |f| f.m.pow(&f.m);
        "pow", Shape, "[2, 3] ^ [4]" => |f| f.a.pow(&f.v4);
        "operator +", Shape, "&a + &b" => |f| &f.a + &f.b;
        "operator -", DType, "&m - 2.0" => |f| &f.m - 2.0;
        "eq", Shape, "[2, 3] == [4]" => |f| f.a.eq(&f.v4);
        "lt", Device, "cpu < other" => |f| f.a.lt(&f.o);
        "le", Shape, "[2, 3] <= [3, 4]" => |f| f.a.le(&f.b);
        "ge", Device, "other >= cpu" => |f| f.o.ge(&f.a);
        "where_cond", DType, "f32 condition" => |f| f.a.where_cond(&f.a, &f.a);
        "where_cond", Shape, "branch [4]" => |f| f.m.where_cond(&f.a, &f.v4);
        "where_cond", Device, "branch on other" => |f| f.m.where_cond(&f.a, &f.o);
        // ------------------------------------------------ in place
        "add_", Shape, "[2, 3] += [3, 4]" => |f| f.a.add_(&f.b);
        "add_", Shape, "[3] += [2, 3] (would grow the destination)" => |f| f.v.add_(&f.a);
        "add_", DType, "i64 += f32" => |f| f.ia.add_(&f.a);
        "add_scalar_", DType, "i64 += 0.5" => |f| f.ia.add_scalar_(0.5);
        "add_", Device, "cpu += other" => |f| f.a.add_(&f.o);
        "add_", Other, "expanded destination" => |f| f.ex.add_(&f.a);
        "add_", Other, "external (read-only) destination" => |f| f.ext.add_(&f.v4);
        "add_", Other, "leaf that requires grad" => |f| f.leaf.add_(&f.a);
        "add_", Other, "view of a leaf that requires grad" => |f| f.leaf.narrow(0, 0, 1)?.add_(&f.v);
        "sub_", Shape, "[2, 3] -= [4]" => |f| f.a.sub_(&f.v4);
        "sub_", DType, "i64 -= f32" => |f| f.ia.sub_(&f.a);
        "sub_", DType, "bool -= bool" => |f| f.m.sub_(&f.m);
        "mul_", Shape, "[2, 3] *= [3, 4]" => |f| f.a.mul_(&f.b);
        "mul_", Device, "other *= cpu" => |f| f.o.mul_(&f.a);
        "mul_", Other, "expanded destination" => |f| f.ex.mul_(&f.s);
        "div_", DType, "i64 /= i64" => |f| f.ia.div_(&f.ia);
        "div_", Shape, "[4] /= [3]" => |f| f.v4.div_(&f.v);
        "fill_", Other, "external destination" => |f| f.ext.fill_(1.0);
        "fill_", Other, "leaf that requires grad" => |f| f.leaf.fill_(0.0);
        "fill_", Device, "on a backend without kernels" => |f| f.o.fill_(1.0);
        "zero_", Other, "leaf that requires grad" => |f| f.leaf.zero_();
        "copy_", Shape, "[2, 3] from [3, 4]" => |f| f.a.copy_(&f.b);
        "copy_", Shape, "[3] from [2, 3]" => |f| f.v.copy_(&f.a);
        "copy_", Other, "expanded destination" => |f| f.ex.copy_(&f.a);
        "copy_", Other, "external destination" => |f| f.ext.copy_(&f.v4);
        "copy_", Other, "leaf that requires grad" => |f| f.leaf.copy_(&f.a);
        "clamp_", Bounds, "min > max" => |f| f.a.clamp_(Some(1.0), Some(0.0));
        "clamp_", Bounds, "NaN bound" => |f| f.a.clamp_(None, Some(f64::NAN));
        "clamp_", DType, "bool" => |f| f.m.clamp_(Some(0.0), None);
        "clamp_", Other, "expanded destination" => |f| f.ex.clamp_(Some(0.0), None);
        // ------------------------------------------------ reductions
        "sum", Dim, "dim 2" => |f| f.a.sum(&[2], false);
        "sum", Dim, "repeated dim" => |f| f.a.sum(&[1, 1], false);
        "sum", Device, "on a backend without kernels" => |f| f.o.sum(&[0], false);
        "sum_dim", Dim, "dim -3" => |f| f.a.sum_dim(-3, true);
        "mean", DType, "i64" => |f| f.ia.mean(&[0], false);
        "mean", Dim, "dim 3" => |f| f.a.mean(&[3], false);
        "mean_dim", Dim, "dim 2" => |f| f.a.mean_dim(2, false);
        "mean_all", DType, "i32" => |f| f.i32a.mean_all();
        "prod_dim", Dim, "dim 2" => |f| f.a.prod_dim(2, false);
        "max_dim", Dim, "dim 2" => |f| f.a.max_dim(2, false);
        "max_dim", Bounds, "empty dim" => |f| f.e.max_dim(0, false);
        "max_dim", DType, "bool" => |f| f.m.max_dim(0, false);
        "min_dim", Dim, "dim -3" => |f| f.a.min_dim(-3, false);
        "max_all", Bounds, "empty tensor" => |f| f.e.max_all();
        "min_all", Bounds, "empty tensor" => |f| f.e.min_all();
        "argmax", Dim, "dim 2" => |f| f.a.argmax(2, false);
        "argmax", Bounds, "empty dim" => |f| f.e.argmax(0, false);
        "argmin", Dim, "dim 5" => |f| f.a.argmin(5, false);
        "argmin", DType, "bool" => |f| f.m.argmin(0, false);
        "softmax", DType, "i64" => |f| f.ia.softmax(1);
        "softmax", Dim, "dim 2" => |f| f.a.softmax(2);
        "softmax", Dim, "rank 0, dim 1" => |f| f.s.softmax(1);
        "log_softmax", DType, "bool" => |f| f.m.log_softmax(0);
        "log_softmax", Dim, "dim -3" => |f| f.a.log_softmax(-3);
        "logsumexp", Dim, "dim 2" => |f| f.a.logsumexp(2, false);
        "logsumexp", DType, "i64" => |f| f.ia.logsumexp(0, false);
        // ------------------------------------------------ linear algebra
        "matmul", Rank, "rank 0" => |f| f.s.matmul(&f.a);
        "matmul", Shape, "[2, 3] @ [2, 3]" => |f| f.a.matmul(&f.a);
        "matmul", Shape, "batch dims that do not broadcast" => |f| f.c.matmul(&Tensor::zeros(&[3, 4, 2], DType::F32, &dev())?);
        "matmul", DType, "f32 @ i64" => |f| f.b.matmul(&f.ia.t()?);
        "matmul", DType, "bool @ bool" => |f| f.m.matmul(&f.m.t()?);
        "matmul", Device, "cpu @ other" => |f| f.o.t()?.matmul(&f.a);
        "mm", Rank, "rank 3" => |f| f.c.mm(&f.b);
        "mm", Rank, "rank 1" => |f| f.v.mm(&f.b);
        "mm", Shape, "[2, 3] @ [4]x" => |f| f.a.mm(&f.b.t()?);
        "mm", Device, "cpu @ other" => |f| f.a.mm(&f.o.t()?);
        "bmm", Rank, "rank 2" => |f| f.a.bmm(&f.b);
        "bmm", Shape, "batch 2 vs 3" => |f| f.c.bmm(&Tensor::zeros(&[3, 4, 2], DType::F32, &dev())?);
        "bmm", Shape, "inner 4 vs 3" => |f| f.c.bmm(&f.c);
        "dot", Rank, "rank 2" => |f| f.a.dot(&f.a);
        "dot", Shape, "3 vs 4" => |f| f.v.dot(&f.v4);
        "dot", DType, "f32 . i64" => |f| f.v.dot(&f.idx.narrow(0, 0, 1)?.expand(&[3isize])?);
        // ------------------------------------------------ joining and indexing
        "cat", Other, "no tensors" => |_f| Tensor::cat(&[], 0);
        "cat", Rank, "rank 0" => |f| Tensor::cat(&[&f.s, &f.s], 0);
        "cat", Rank, "ranks 2 and 1" => |f| Tensor::cat(&[&f.a, &f.v], 0);
        "cat", Shape, "[2, 3] and [3, 4] on dim 0" => |f| Tensor::cat(&[&f.a, &f.b], 0);
        "cat", Device, "cpu and other" => |f| Tensor::cat(&[&f.a, &f.o], 0);
        "cat", Dim, "dim 2" => |f| Tensor::cat(&[&f.a, &f.a], 2);
        "stack", Other, "no tensors" => |_f| Tensor::stack(&[], 0);
        "stack", Shape, "[2, 3] and [3, 4]" => |f| Tensor::stack(&[&f.a, &f.b], 0);
        "stack", Dim, "dim 4 of rank 2" => |f| Tensor::stack(&[&f.a, &f.a], 4);
        "stack", Device, "cpu and other" => |f| Tensor::stack(&[&f.a, &f.o], 0);
        "index_select", DType, "f32 indices" => |f| f.a.index_select(0, &f.idx_f);
        "index_select", Rank, "rank-2 indices" => |f| f.a.index_select(0, &f.idx2);
        "index_select", Index, "index 7 of 2" => |f| f.a.index_select(0, &f.idx_oob);
        "index_select", Index, "index -1" => |f| f.a.index_select(1, &f.idx_neg);
        "index_select", Dim, "dim 2" => |f| f.a.index_select(2, &f.idx);
        "index_select", Device, "indices on other" => |f| f.a.index_select(0, &Tensor::from_slice(&[0i64], &[1], &other_device())?);
        "gather", Rank, "rank-1 index for rank 2" => |f| f.a.gather(1, &f.idx);
        "gather", Index, "index 7" => |f| f.a.gather(1, &f.idx_oob.reshape(&[1usize, 2])?);
        "gather", DType, "f32 index" => |f| f.a.gather(1, &f.idx_f.reshape(&[1usize, 2])?);
        "gather", Dim, "dim 2" => |f| f.a.gather(2, &f.idx2);
        "gather", Shape, "index larger than self off dim" => |f| f.a.gather(1, &Tensor::zeros(&[3, 1], DType::I64, &dev())?);
        "index_add", Shape, "src of the wrong shape" => |f| f.a.index_add(0, &f.idx, &f.b);
        "index_add", Index, "index 7" => |f| f.a.index_add(0, &f.idx_oob, &f.a);
        "index_add", DType, "src i64" => |f| f.a.index_add(0, &f.idx, &f.ia);
        "index_add", Dim, "dim 2" => |f| f.a.index_add(2, &f.idx, &f.a);
        "scatter_add", Index, "index 7" => |f| f.a.scatter_add(1, &f.idx_oob.reshape(&[1usize, 2])?, &f.a);
        "scatter_add", Rank, "rank-1 index" => |f| f.a.scatter_add(1, &f.idx, &f.a);
        "scatter_add", DType, "f32 index" => |f| f.a.scatter_add(1, &f.a, &f.a);
        "scatter_add", Device, "src on other" => |f| f.a.scatter_add(1, &f.idx2, &f.o);
        "scatter", Index, "index 7" => |f| f.a.scatter(1, &f.idx_oob.reshape(&[1usize, 2])?, &f.a);
        "scatter", Rank, "rank-1 index" => |f| f.a.scatter(1, &f.idx, &f.a);
        "scatter", DType, "f32 index" => |f| f.a.scatter(1, &f.a, &f.a);
        "scatter", Device, "src on other" => |f| f.a.scatter(1, &f.idx2, &f.o);
        "scatter_value", Index, "index 7" => |f| f.a.scatter_value(1, &f.idx_oob.reshape(&[1usize, 2])?, 1.0);
        "scatter_value", Dim, "dim 2" => |f| f.a.scatter_value(2, &f.idx2, 1.0);
        "sort", Dim, "dim 2" => |f| f.a.sort(2, false).map(|r| r.0);
        "argsort", Dim, "dim -3" => |f| f.a.argsort(-3, true);
        "topk", Bounds, "k 4 of 3" => |f| f.a.topk(4, 1, true, true).map(|r| r.0);
        "topk", Dim, "dim 2" => |f| f.a.topk(1, 2, true, true).map(|r| r.1);
        "cumsum", Dim, "dim 2" => |f| f.a.cumsum(2);
        "cumprod", Dim, "dim -3" => |f| f.a.cumprod(-3);
        "norm", DType, "i32" => |f| f.i32a.norm(2.0, &[], false);
        "norm", Bounds, "p = -1" => |f| f.a.norm(-1.0, &[], false);
        "norm", Dim, "dim 2" => |f| f.a.norm(2.0, &[2], false);
        "max_dim_with_indices", Dim, "dim 2" => |f| f.a.max_dim_with_indices(2, false).map(|r| r.0);
        "min_dim_with_indices", Bounds, "empty dim" => |f| f.e.min_dim_with_indices(0, false).map(|r| r.1);
        "prod_all", DType, "bool" => |f| f.m.prod_all();
        "exp_", DType, "i32" => |f| f.i32a.exp_().map(|()| f.i32a.clone());
        "relu_", Other, "leaf that requires grad" => |f| f.leaf.relu_().map(|()| f.leaf.clone());
        "powf_", Other, "expanded destination" => |f| f.ex.powf_(2.0).map(|()| f.ex.clone());
        "embedding", Rank, "rank-1 weight" => |f| Tensor::embedding(&f.v, &f.idx);
        "embedding", DType, "f32 ids" => |f| Tensor::embedding(&f.a, &f.idx_f);
        "embedding", Index, "id 7 of 2 rows" => |f| Tensor::embedding(&f.a, &f.idx_oob);
        "embedding", Index, "id -1" => |f| Tensor::embedding(&f.a, &f.idx_neg);
        "embedding", Device, "ids on other" => |f| Tensor::embedding(&f.a, &Tensor::from_slice(&[0i64], &[1], &other_device())?);
        // ------------------------------------------------ dtype and device moves
        "to_dtype", Device, "on a backend without kernels" => |f| f.o.to_dtype(DType::F64);
        "deep_clone", Device, "on a backend without kernels" => |f| f.o.t()?.deep_clone();
        "contiguous", Device, "on a backend without kernels" => |f| f.o.t()?.contiguous();
        "move_to_", Device, "to a backend that cannot write" => |f| f.v.move_to_(&Device::from_backend(Shared::new(NoWrite)));
        "to_device", Device, "to a backend that cannot write" => |f| f.v.to_device(&Device::from_backend(Shared::new(NoWrite)));
        // ------------------------------------------------ autograd
        "requires_grad_", DType, "i64" => |f| f.ia.clone().requires_grad_(true);
        "requires_grad_", Other, "non-leaf" => |f| f.nonleaf.clone().requires_grad_(false);
        "backward", Shape, "non-scalar" => |f| f.nonleaf.backward();
        "backward", Other, "no history" => |f| f.a.sum_all()?.backward();
        "backward_with", Shape, "gradient of the wrong shape" => |f| f.nonleaf.backward_with(Some(&f.v), BackwardOptions::default());
        "backward_with", DType, "gradient of the wrong dtype" => |f| f.nonleaf.backward_with(Some(&f.ia), BackwardOptions::default());
        "grad", Other, "input that does not require grad" => |f| grad(&[&f.nonleaf.sum_all()?], &[&f.a], &[None], BackwardOptions::default());
        "grad", Shape, "more grad_outputs than outputs" => |f| grad(&[&f.nonleaf.sum_all()?], &[&f.leaf], &[None, None], BackwardOptions::default());
        "grad", Shape, "a grad_output of the wrong shape" => |f| grad(&[&f.nonleaf], &[&f.leaf], &[Some(f.v.clone())], BackwardOptions::default());
        "grad", Other, "an output without history" => |f| grad(&[&f.a], &[&f.leaf], &[None], BackwardOptions::default());
        "set_grad", Shape, "wrong shape" => |f| f.leaf.set_grad(Some(f.v.clone()));
        "set_grad", DType, "wrong dtype" => |f| f.leaf.set_grad(Some(Tensor::zeros(&[2, 3], DType::F64, &dev())?));
        "set_grad", Device, "on other" => |f| f.leaf.set_grad(Some(f.o.clone()));
        "register_hook", Other, "tensor without grad" => |f| f.a.register_hook(|_| Ok(None));
    }
}

/// A backend whose `write_bytes` is not implemented: constructors on it fail
/// after the allocation, moves to it fail after the read. It reports device
/// memory (though its allocator is the host's), so moves to it copy through
/// `write_bytes`; a host-memory backend would share the storage instead
/// (NOTE [Host-memory moves]) and never write.
struct NoWrite;
impl Backend for NoWrite {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Custom("no-write")
    }
    fn is_host_memory(&self) -> bool {
        false
    }
    fn allocator(&self) -> Shared<dyn Allocator> {
        Shared::new(GlobalAllocator::new())
    }
}

/// Whether a message names the fix: a `; do this` clause (every structured
/// error has one), or a requirement (`must`, `use`, `call`, `pass`, ...).
fn names_a_fix(msg: &str) -> bool {
    const HINTS: [&str; 12] = [
        "; ",
        "must",
        "only ",
        "use ",
        "call ",
        "pass ",
        "wrap ",
        "move ",
        "convert",
        "choose",
        "give ",
        "deep_clone",
    ];
    // The text after the op name (`op: ...`), so an op named like a hint
    // does not count.
    let text = msg.split_once(": ").map_or(msg, |(_, rest)| rest);
    HINTS.iter().any(|h| text.contains(h))
}

#[test]
fn every_bad_input_is_refused_with_a_fix_and_leaves_inputs_unchanged() {
    let table = table();
    let mut per_kind = std::collections::BTreeMap::new();
    let mut ops = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    let mut no_clause = Vec::new();
    // One set of inputs for every case: a refused op must not change them,
    // so each case also checks that no earlier one did.
    let f = Fx::new();
    let before: Vec<_> = f
        .all()
        .iter()
        .map(|(n, t)| (*n, common::snapshot(t)))
        .collect();
    for (op, bad, what, run) in &table {
        match run(&f) {
            Ok(()) => failures.push(format!("{op} ({what}): accepted")),
            Err(e) => {
                let msg = e.to_string();
                if msg.trim().is_empty() || !names_a_fix(&msg) {
                    failures.push(format!("{op} ({what}): message without a fix: {msg:?}"));
                }
                if !msg.contains("; ") {
                    no_clause.push(format!("{op} ({what}): {msg}"));
                }
                if matches!(bad, Bad::Device)
                    && !what.contains("backend")
                    && !matches!(e, Error::DeviceMismatch { .. })
                {
                    failures.push(format!("{op} ({what}): expected DeviceMismatch, got {e:?}"));
                }
            }
        }
        for ((name, snap), (_, t)) in before.iter().zip(f.all()) {
            if &common::snapshot(t) != snap {
                failures.push(format!("{op} ({what}): input {name} changed"));
            }
        }
        *per_kind.entry(*bad).or_insert(0usize) += 1;
        ops.insert(*op);
    }
    eprintln!(
        "bad-input matrix: {} (op, bad input) pairs over {} ops; by kind: {per_kind:?}",
        table.len(),
        ops.len()
    );
    if !no_clause.is_empty() {
        eprintln!(
            "{} messages state the requirement without a separate '; fix' clause:\n  {}",
            no_clause.len(),
            no_clause.join("\n  ")
        );
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        table.len() >= 250,
        "the matrix covers {} pairs",
        table.len()
    );
}

/// Unsupported ops on the custom backend name the backend and the fix.
#[test]
fn ops_on_a_backend_without_kernels_say_which_backend_and_what_to_do() {
    let f = Fx::new();
    let e = f.o.exp().unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                device: DeviceKind::Custom("other"),
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("other") && msg.contains("Device::cpu()"),
        "{msg}"
    );
    // Moving it to the CPU is the fix, and works.
    assert_eq!(
        f.o.to_device(&Device::cpu())
            .unwrap()
            .exp()
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0; 6]
    );
}

#[test]
fn mixing_devices_names_both() {
    let f = Fx::new();
    let e = f.a.add(&f.o).unwrap_err();
    assert_eq!(
        e,
        Error::DeviceMismatch {
            op: "add",
            lhs: DeviceKind::Cpu,
            rhs: DeviceKind::Custom("other")
        }
    );
    assert!(e.to_string().contains("to_device"));
}
