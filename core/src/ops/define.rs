//! The macros that turn the rows of the op tables into code (NOTE [Op
//! table] in the parent module). The rows themselves are in `unary.rs`,
//! `binary.rs` and `compare.rs`; their syntax is documented there.

/// Generates everything of the unary ops from their rows (see `unary.rs`).
macro_rules! unary_table {
    // `for_each_unary_row!`: the rows, for bindings generated from the table
    (@export ($d:tt) $($row:tt)*) => {
        /// Calls `cb!(method, in_place_method, (params))` once per row of
        /// the unary op table, so bindings (the Python methods) are
        /// generated from the table: a new row needs no binding line
        /// (NOTE [Op table in Python] in kael-py).
        #[macro_export]
        macro_rules! for_each_unary_row {
            ($d cb:ident) => { $( $d cb! $row; )* };
        }
    };
    ($(
        $(#[$doc:meta])*
        $V:ident $(($($ta:ident: $tty:ty),+))? $({$($(#[$fdoc:meta])* $sa:ident: $sty:ty),+})? => $BIT:ident {
            float: (|$fx:ident| $fe:expr, $fcuda:literal),
            int: $int:tt,
            $(cuda_args: ($p0:expr, $p1:expr, $fl:expr),)?
            grad: [$($save:ident)*] |$g:ident, $x:ident, $y:ident| $ge:expr,
            backward: $bname:literal,
            inplace: $im:ident($($iex:expr),*),
            method: $mvis:vis fn $m:ident($($arg:ident: $aty:ty),*) $(check $chk:expr;)? => $mk:expr,
            example: $ex:literal,
            check: [$(($cargs:literal, $cdom:ident, $cints:literal, $csmooth:literal, $cf:expr)),* $(,)?],
        }
    )*) => {
        /// Elementwise functions of one operand: one variant per row of the
        /// unary op table (NOTE [Op table]).
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub enum UnaryOp {
            $(
                $(#[$doc])*
                $V $(($($tty),+))? $({$($(#[$fdoc])* $sa: $sty),+})?,
            )*
        }

        /// The position of each row in the table: the op's code.
        #[allow(dead_code)]
        #[derive(Clone, Copy)]
        #[repr(u32)]
        enum Code {
            $($V,)*
        }

        /// The kernel-selection bit of each unary op (NOTE [Kernel
        /// selection]); re-exported by [`crate::cpu::ops`].
        pub mod bits {
            $(
                #[doc = concat!("Unary `", stringify!($m), "`.")]
                pub const $BIT: u128 = 1 << (super::super::UNARY_BASE + super::Code::$V as u32);
            )*
            /// Every unary op.
            pub const UNARY: u128 = 0 $(| $BIT)*;
        }

        impl UnaryOp {
            /// How many unary ops the table has.
            pub const COUNT: usize = [$(stringify!($V)),*].len();

            /// The op's name (its `Tensor` method), for errors and graph dumps.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$V { .. } => stringify!($m),)*
                }
            }

            /// The op's code: its position in the table (the CUDA kernels
            /// switch on it).
            pub const fn code(self) -> u32 {
                match self {
                    $(Self::$V { .. } => Code::$V as u32,)*
                }
            }

            /// The op's kernel-selection bit (NOTE [Kernel selection]).
            pub const fn bit(self) -> u128 {
                match self {
                    $(Self::$V { .. } => bits::$BIT,)*
                }
            }

            /// The op with this code when it takes no parameters; `None`
            /// for a parameterised op or an unknown code (decoding a
            /// serialised plan, `crate::plan`).
            ///
            /// ```
            /// use kael_core::ops::UnaryOp;
            /// assert_eq!(UnaryOp::plain_from_code(UnaryOp::Exp.code()), Some(UnaryOp::Exp));
            /// assert_eq!(UnaryOp::plain_from_code(UnaryOp::Powf(2.0).code()), None);
            /// ```
            pub const fn plain_from_code(code: u32) -> Option<UnaryOp> {
                $(if code == Code::$V as u32 {
                    return unary_table!(@plain $V $(($($ta),+))? $({$($sa),+})?);
                })*
                None
            }

            /// Whether the op is defined for integer dtypes too.
            pub const fn works_on_ints(self) -> bool {
                match self {
                    $(Self::$V { .. } => unary_table!(@has_int $int),)*
                }
            }

            /// The name of the op's backward node (`grad_fn_name()`).
            pub const fn backward_name(self) -> &'static str {
                match self {
                    $(Self::$V { .. } => $bname,)*
                }
            }

            /// Which of (input, output) the gradient needs saved.
            pub(crate) const fn saves(self) -> (bool, bool) {
                match self {
                    $(Self::$V { .. } => (
                        unary_table!(@saves x $($save)*),
                        unary_table!(@saves y $($save)*),
                    ),)*
                }
            }

            /// The op's numeric parameters as the CUDA kernels take them:
            /// `(p0, p1, flags)`.
            pub fn cuda_args(self) -> (f64, f64, i32) {
                #[allow(unused_variables)]
                match self {
                    $(Self::$V $(($($ta),+))? $({$($sa),+})? => unary_table!(@args $(($p0, $p1, $fl))?),)*
                }
            }

            /// Runs `kernel` with the op's float function, when `OPS` (a set
            /// of kernel-selection bits) holds the op; `None` otherwise.
            pub fn map_float_in<T: $crate::dtype::Float, K: $crate::ops::UnaryKernel<T>, const OPS: u128>(
                self,
                kernel: K,
            ) -> Option<K::Output> {
                match self {
                    $(Self::$V $(($($ta),+))? $({$($sa),+})? => {
                        if OPS & bits::$BIT == 0 {
                            return None;
                        }
                        Some(kernel.run(move |$fx: T| -> T { $fe }))
                    })*
                }
            }

            /// [`map_float_in`](Self::map_float_in) with every op selected.
            pub fn map_float<T: $crate::dtype::Float, K: $crate::ops::UnaryKernel<T>>(
                self,
                kernel: K,
            ) -> Option<K::Output> {
                self.map_float_in::<T, K, { u128::MAX }>(kernel)
            }

            /// Runs `kernel` with the op's integer function, when the op
            /// accepts integers and `OPS` holds it; `None` otherwise.
            pub fn map_int_in<T: $crate::dtype::Scalar, K: $crate::ops::UnaryKernel<T>, const OPS: u128>(
                self,
                kernel: K,
            ) -> Option<K::Output> {
                #[allow(unused_variables)]
                match self {
                    $(Self::$V $(($($ta),+))? $({$($sa),+})? => {
                        unary_table!(@map_int OPS, bits::$BIT, kernel, T, $int)
                    })*
                }
            }

            /// [`map_int_in`](Self::map_int_in) with every op selected.
            pub fn map_int<T: $crate::dtype::Scalar, K: $crate::ops::UnaryKernel<T>>(
                self,
                kernel: K,
            ) -> Option<K::Output> {
                self.map_int_in::<T, K, { u128::MAX }>(kernel)
            }

            /// The op's float function as one closure that matches the op
            /// per element: the reference kernels' form (one loop per dtype,
            /// so firmware images stay small; NOTE [Op table]). An op outside
            /// `OPS` returns its input, which is never used: callers refuse
            /// such ops first ([`crate::cpu::ops::has_unary`]).
            pub fn float_fn_in<T: $crate::dtype::Float, const OPS: u128>(self) -> impl Fn(T) -> T + Copy {
                #[allow(unused_variables)]
                move |x: T| -> T {
                    match self {
                        $(Self::$V $(($($ta),+))? $({$($sa),+})? => {
                            if OPS & bits::$BIT == 0 {
                                return x;
                            }
                            let $fx = x;
                            $fe
                        })*
                    }
                }
            }

            /// The op's integer function in the reference kernels' form (see
            /// [`float_fn_in`](Self::float_fn_in)); an op that refuses
            /// integers returns its input, which is never used: callers
            /// check [`works_on_ints`](Self::works_on_ints) first.
            pub fn int_fn_in<T: $crate::dtype::Scalar, const OPS: u128>(self) -> impl Fn(T) -> T + Copy {
                #[allow(unused_variables)]
                move |x: T| -> T {
                    match self {
                        $(Self::$V $(($($ta),+))? $({$($sa),+})? => {
                            unary_table!(@eval_int OPS, bits::$BIT, x, $int)
                        })*
                    }
                }
            }

            /// The gradient of the input from the gradient `g` of the output;
            /// `x` and `y` fetch the saved input and output.
            #[allow(unused_variables)]
            pub(crate) fn backward(
                self,
                g: &$crate::Tensor,
                x: &dyn Fn() -> $crate::Result<$crate::Tensor>,
                y: &dyn Fn() -> $crate::Result<$crate::Tensor>,
            ) -> $crate::Result<$crate::Tensor> {
                match self {
                    $(Self::$V $(($($ta),+))? $({$($sa),+})? => {
                        let ($g, $x, $y) = (g, x, y);
                        $ge
                    })*
                }
            }

            /// Every op's CUDA statements, indexed by [`code`](Self::code).
            pub const CUDA: &'static [$crate::ops::CudaRow] = &[
                $($crate::ops::CudaRow {
                    name: stringify!($m),
                    code: Code::$V as u32,
                    float: Some($fcuda),
                    int: unary_table!(@cuda_int $int),
                },)*
            ];

            /// Every in-place unary method with its out-of-place twin,
            /// called with the row's example arguments.
            pub const INPLACE_CASES: &'static [$crate::ops::InplaceCase] = &[
                $($crate::ops::InplaceCase {
                    op: stringify!($im),
                    inplace: |x| x.$im($($iex),*),
                    out_of_place: |x| x.$m($($iex),*),
                    ints: unary_table!(@has_int $int),
                },)*
            ];

            /// Every public unary op as the conformance suite and the
            /// gradient checks call it (parametrised ops once per
            /// parameter set worth checking).
            pub const CASES: &'static [$crate::ops::UnaryCase] = &[
                $($($crate::ops::UnaryCase {
                    op: stringify!($m),
                    args: $cargs,
                    f: $cf,
                    domain: $crate::ops::Domain::$cdom,
                    ints: $cints,
                    smooth: $csmooth,
                },)*)*
            ];
        }

        impl $crate::Tensor {
            $(
                $(#[$doc])*
                ///
                /// # Errors
                /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType)
                /// for dtypes the op is not defined on;
                /// [`Error::InvalidArgument`](crate::Error::InvalidArgument)
                /// for bad parameters.
                ///
                /// ```
                /// use kael_core::{Device, Tensor};
                /// let x = Tensor::from_slice(&[-1.0f32, 0.5, 2.0], &[3], &Device::cpu())?;
                #[doc = $ex]
                /// # Ok::<(), kael_core::Error>(())
                /// ```
                $mvis fn $m(&self $(, $arg: $aty)*) -> $crate::Result<$crate::Tensor> {
                    $($chk?;)?
                    self.unary_op($mk)
                }

                #[doc = concat!("In place: `self = self.", stringify!($m), "(..)` (PyTorch's `", stringify!($im), "`), generated from the same row as [`Tensor::", stringify!($m), "`].")]
                ///
                /// The storage version is bumped once. With autograd, the
                /// gradient is the op's own formula (the input it needs is
                /// saved before the write); a leaf that requires grad is
                /// refused while grad mode is on, as in PyTorch.
                ///
                /// # Errors
                /// As the out-of-place method, naming this one;
                /// [`Error::InternalOverlap`](crate::Error::InternalOverlap)
                /// for an expanded destination;
                /// [`Error::Autograd`](crate::Error::Autograd) for a leaf
                /// that requires grad. On error `self` is unchanged.
                ///
                /// ```
                /// use kael_core::{Device, Tensor};
                /// let x = Tensor::from_slice(&[-1.0f32, 0.5, 2.0], &[3], &Device::cpu())?;
                #[doc = concat!("let want = x.", stringify!($m), "(", $(stringify!($iex), ", ",)* ")?;")]
                #[doc = concat!("x.", stringify!($im), "(", $(stringify!($iex), ", ",)* ")?;")]
                /// assert_eq!(format!("{:?}", x.to_vec::<f32>()?), format!("{:?}", want.to_vec::<f32>()?));
                /// assert_eq!(x.version(), 1);
                /// # Ok::<(), kael_core::Error>(())
                /// ```
                $mvis fn $im(&self $(, $arg: $aty)*) -> $crate::Result<()> {
                    $($chk.map_err(|e| e.renamed(stringify!($im)))?;)?
                    self.unary_($mk, stringify!($im))
                }
            )*
        }
        unary_table!(@export ($) $(($m, $im, ($($arg: $aty),*)))*);
    };

    (@has_int refused) => { false };
    (@has_int ($($t:tt)*)) => { true };

    (@saves $w:ident) => { false };
    (@saves x x $($r:ident)*) => { true };
    (@saves y y $($r:ident)*) => { true };
    (@saves a a $($r:ident)*) => { true };
    (@saves b b $($r:ident)*) => { true };
    (@saves $w:ident $o:ident $($r:ident)*) => { unary_table!(@saves $w $($r)*) };

    (@plain $V:ident) => { Some(UnaryOp::$V) };
    (@plain $V:ident $($rest:tt)+) => { None };

    (@args) => { (0.0, 0.0, 0) };
    (@args ($a:expr, $b:expr, $c:expr)) => { ($a, $b, $c) };

    (@cuda_int refused) => { None };
    (@cuda_int (|$ix:ident| $ie:expr, $cu:literal)) => { Some($cu) };

    (@eval_int $ops:ident, $bit:path, $x:ident, refused) => { $x };
    (@eval_int $ops:ident, $bit:path, $x:ident, (|$ix:ident| $ie:expr, $cu:literal)) => {{
        if $ops & $bit == 0 {
            return $x;
        }
        let $ix = $x;
        $ie
    }};

    (@map_int $ops:ident, $bit:path, $k:ident, $T:ident, refused) => { None };
    (@map_int $ops:ident, $bit:path, $k:ident, $T:ident, (|$ix:ident| $ie:expr, $cu:literal)) => {{
        if $ops & $bit == 0 {
            return None;
        }
        Some($k.run(move |$ix: $T| -> $T { $ie }))
    }};
}

/// Generates everything of the binary ops from their rows (see `binary.rs`).
macro_rules! binary_table {
    (@export ($d:tt) $($m:ident)*) => {
        /// Calls `cb!(method)` once per row of the binary op table (see
        /// `for_each_unary_row!`).
        #[macro_export]
        macro_rules! for_each_binary_row {
            ($d cb:ident) => { $( $d cb!($m); )* };
        }
    };
    ($(
        $(#[$doc:meta])*
        $V:ident => $BIT:ident {
            float: $float:tt,
            int: $int:tt,
            grad: [$($save:ident)*] |$g:ident, $a:ident, $b:ident, $y:ident| $ge:expr,
            backward: $bname:literal,
            method: fn $m:ident $(check |$ca:ident, $cb:ident| $chk:expr;)?,
            example: $ex:literal,
            check: ($da:ident, $db:ident, smooth: $smooth:literal),
        }
    )*) => {
        /// Elementwise functions of two operands: one variant per row of
        /// the binary op table (NOTE [Op table]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum BinaryOp {
            $(
                $(#[$doc])*
                $V,
            )*
        }

        /// The kernel-selection bit of each binary op (NOTE [Kernel
        /// selection]); re-exported by [`crate::cpu::ops`].
        pub mod bits {
            $(
                #[doc = concat!("Binary `", stringify!($m), "`.")]
                pub const $BIT: u128 = 1 << (super::super::BINARY_BASE + super::BinaryOp::$V as u32);
            )*
            /// Every binary op.
            pub const BINARY: u128 = 0 $(| $BIT)*;
        }

        impl BinaryOp {
            /// How many binary ops the table has.
            pub const COUNT: usize = [$(stringify!($V)),*].len();

            /// Every binary op, in table order.
            pub const ALL: [BinaryOp; Self::COUNT] = [$(Self::$V),*];

            /// The op's name (its `Tensor` method), for errors and graph dumps.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$V => stringify!($m),)*
                }
            }

            /// The op's code: its position in the table.
            pub const fn code(self) -> u32 {
                self as u32
            }

            /// The op's kernel-selection bit (NOTE [Kernel selection]).
            pub const fn bit(self) -> u128 {
                match self {
                    $(Self::$V => bits::$BIT,)*
                }
            }

            /// Whether the op is defined for float dtypes.
            pub const fn works_on_floats(self) -> bool {
                match self {
                    $(Self::$V => binary_table!(@has $float),)*
                }
            }

            /// Whether the op is defined for integer dtypes (`bool` included
            /// for the bitwise ops, whose integer functions are also
            /// logical on 0/1).
            pub const fn works_on_ints(self) -> bool {
                match self {
                    $(Self::$V => binary_table!(@has $int),)*
                }
            }

            /// The name of the op's backward node (`grad_fn_name()`).
            pub const fn backward_name(self) -> &'static str {
                match self {
                    $(Self::$V => $bname,)*
                }
            }

            /// Which of (lhs, rhs, output) the gradient needs saved.
            pub(crate) const fn saves(self) -> (bool, bool, bool) {
                match self {
                    $(Self::$V => (
                        unary_table!(@saves a $($save)*),
                        unary_table!(@saves b $($save)*),
                        unary_table!(@saves y $($save)*),
                    ),)*
                }
            }

            /// Runs `kernel` with the op's float function, when the op
            /// accepts floats and `OPS` holds it; `None` otherwise.
            pub fn map_float_in<T: $crate::dtype::Float, K: $crate::ops::BinaryKernel<T>, const OPS: u128>(
                self,
                kernel: K,
            ) -> Option<K::Output> {
                match self {
                    $(Self::$V => binary_table!(@map OPS, bits::$BIT, kernel, T, $float),)*
                }
            }

            /// [`map_float_in`](Self::map_float_in) with every op selected.
            pub fn map_float<T: $crate::dtype::Float, K: $crate::ops::BinaryKernel<T>>(
                self,
                kernel: K,
            ) -> Option<K::Output> {
                self.map_float_in::<T, K, { u128::MAX }>(kernel)
            }

            /// Runs `kernel` with the op's integer function, when the op
            /// accepts integers and `OPS` holds it; `None` otherwise.
            pub fn map_int_in<T: $crate::dtype::Int, K: $crate::ops::BinaryKernel<T>, const OPS: u128>(
                self,
                kernel: K,
            ) -> Option<K::Output> {
                match self {
                    $(Self::$V => binary_table!(@map OPS, bits::$BIT, kernel, T, $int),)*
                }
            }

            /// [`map_int_in`](Self::map_int_in) with every op selected.
            pub fn map_int<T: $crate::dtype::Int, K: $crate::ops::BinaryKernel<T>>(
                self,
                kernel: K,
            ) -> Option<K::Output> {
                self.map_int_in::<T, K, { u128::MAX }>(kernel)
            }

            /// The op's float function as one closure that matches the op
            /// per element: the reference kernels' form (see
            /// [`UnaryOp::float_fn_in`](crate::ops::UnaryOp::float_fn_in)). An op outside `OPS` or refusing
            /// floats returns its lhs, which is never used: callers refuse
            /// such ops first.
            pub fn float_fn_in<T: $crate::dtype::Float, const OPS: u128>(self) -> impl Fn(T, T) -> T + Copy {
                move |a: T, b: T| -> T {
                    match self {
                        $(Self::$V => binary_table!(@eval OPS, bits::$BIT, a, b, $float),)*
                    }
                }
            }

            /// The op's integer function in the reference kernels' form.
            pub fn int_fn_in<T: $crate::dtype::Int, const OPS: u128>(self) -> impl Fn(T, T) -> T + Copy {
                move |a: T, b: T| -> T {
                    match self {
                        $(Self::$V => binary_table!(@eval OPS, bits::$BIT, a, b, $int),)*
                    }
                }
            }

            /// The gradients of (lhs, rhs), at the broadcast shape, from the
            /// gradient `g` of the output; `a`, `b` and `y` fetch the saved
            /// operands and output.
            #[allow(unused_variables)]
            pub(crate) fn backward(
                self,
                g: &$crate::Tensor,
                a: &dyn Fn() -> $crate::Result<$crate::Tensor>,
                b: &dyn Fn() -> $crate::Result<$crate::Tensor>,
                y: &dyn Fn() -> $crate::Result<$crate::Tensor>,
            ) -> $crate::Result<($crate::Tensor, $crate::Tensor)> {
                match self {
                    $(Self::$V => {
                        let ($g, $a, $b, $y) = (g, a, b, y);
                        $ge
                    })*
                }
            }

            /// Every op's CUDA statements, indexed by [`code`](Self::code).
            pub const CUDA: &'static [$crate::ops::CudaRow] = &[
                $($crate::ops::CudaRow {
                    name: stringify!($m),
                    code: Self::$V as u32,
                    float: binary_table!(@cuda_float $float),
                    int: binary_table!(@cuda_int $int),
                },)*
            ];

            /// Every binary op as the conformance suite and the gradient
            /// checks call it.
            pub const CASES: &'static [$crate::ops::BinaryCase] = &[
                $($crate::ops::BinaryCase {
                    op: stringify!($m),
                    f: $crate::Tensor::$m,
                    domains: ($crate::ops::Domain::$da, $crate::ops::Domain::$db),
                    floats: binary_table!(@has $float),
                    ints: binary_table!(@has $int),
                    smooth: $smooth,
                },)*
            ];
        }

        impl $crate::Tensor {
            $(
                $(#[$doc])*
                ///
                /// Broadcasts `self` and `other` to a common shape.
                ///
                /// # Errors
                /// Shapes that do not broadcast; devices that differ; a dtype
                /// the op is not defined on, after promotion (NOTE [Type
                /// promotion]).
                ///
                /// ```
                /// use kael_core::{Device, Tensor};
                /// let dev = Device::cpu();
                #[doc = $ex]
                /// # Ok::<(), kael_core::Error>(())
                /// ```
                pub fn $m(&self, other: &$crate::Tensor) -> $crate::Result<$crate::Tensor> {
                    $({
                        #[allow(unused_variables)]
                        let ($ca, $cb) = (self, other);
                        $chk?;
                    })?
                    self.binary_op(BinaryOp::$V, other)
                }
            )*
        }
        binary_table!(@export ($) $($m)*);
    };

    (@has refused) => { false };
    (@has ($($t:tt)*)) => { true };

    (@cuda_float refused) => { None };
    (@cuda_float (|$x:ident, $z:ident| $e:expr, $cu:literal)) => { Some($cu) };
    (@cuda_int refused) => { None };
    (@cuda_int (|$x:ident, $z:ident| $e:expr, $cu:literal)) => { Some($cu) };

    (@eval $ops:ident, $bit:path, $a:ident, $b:ident, refused) => { $a };
    (@eval $ops:ident, $bit:path, $a:ident, $b:ident, (|$x:ident, $z:ident| $e:expr, $cu:literal)) => {{
        if $ops & $bit == 0 {
            return $a;
        }
        let ($x, $z) = ($a, $b);
        $e
    }};

    (@map $ops:ident, $bit:path, $k:ident, $T:ident, refused) => { None };
    (@map $ops:ident, $bit:path, $k:ident, $T:ident, (|$x:ident, $z:ident| $e:expr, $cu:literal)) => {{
        if $ops & $bit == 0 {
            return None;
        }
        Some($k.run(move |$x: $T, $z: $T| -> $T { $e }))
    }};
}
