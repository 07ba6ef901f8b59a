//! The macro that turns the rows of the comparison table (`compare.rs`)
//! into code (NOTE [Op table]).

/// Generates everything of the comparisons and logical ops from their rows
/// (see `compare.rs`).
macro_rules! compare_table {
    ($(
        $(#[$doc:meta])*
        $V:ident {
            f: (|$a:ident, $b:ident| $e:expr, $cuda:literal),
            method: fn $m:ident,
            example: $ex:literal,
        }
    )*) => {
        /// Comparisons and logical ops: a `Bool` result from two operands of
        /// one dtype; one variant per row of the table (NOTE [Op table]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum CmpOp {
            $(
                $(#[$doc])*
                $V,
            )*
        }

        impl CmpOp {
            /// How many ops the table has.
            pub const COUNT: usize = [$(stringify!($V)),*].len();

            /// Every op, in table order.
            pub const ALL: [CmpOp; Self::COUNT] = [$(Self::$V),*];

            /// The op's name (its `Tensor` method).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$V => stringify!($m),)*
                }
            }

            /// The op's code: its position in the table.
            pub const fn code(self) -> u32 {
                self as u32
            }

            /// Runs `kernel` with the op's function (every dtype).
            pub fn map<T: $crate::dtype::Scalar, K: $crate::ops::CompareKernel<T>>(self, kernel: K) -> K::Output {
                match self {
                    $(Self::$V => kernel.run(move |$a: T, $b: T| -> bool { $e }),)*
                }
            }

            /// The op's function as one closure that matches the op per
            /// element: the reference kernels' form (see
            /// [`UnaryOp::float_fn_in`](crate::ops::UnaryOp::float_fn_in)).
            pub fn fn_of<T: $crate::dtype::Scalar>(self) -> impl Fn(T, T) -> bool + Copy {
                move |x: T, y: T| -> bool {
                    match self {
                        $(Self::$V => {
                            let ($a, $b) = (x, y);
                            $e
                        })*
                    }
                }
            }

            /// Every op's CUDA expression (a `bool` of `a` and `b`), indexed by
            /// [`code`](Self::code).
            pub const CUDA: &'static [$crate::ops::CudaRow] = &[
                $($crate::ops::CudaRow {
                    name: stringify!($m),
                    code: Self::$V as u32,
                    float: Some($cuda),
                    int: Some($cuda),
                },)*
            ];

            /// Every op as the conformance suite calls it.
            pub const CASES: &'static [$crate::ops::CompareCase] = &[
                $($crate::ops::CompareCase {
                    op: stringify!($m),
                    f: $crate::Tensor::$m,
                },)*
            ];
        }

        impl $crate::Tensor {
            $(
                $(#[$doc])*
                ///
                /// A `Bool` tensor; `self` and `other` broadcast together.
                ///
                /// # Errors
                /// Shapes that do not broadcast; different dtypes or devices.
                ///
                /// ```
                /// use kael_core::{Device, Tensor};
                /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &Device::cpu())?;
                /// let b = Tensor::from_slice(&[2.0f32], &[1], &Device::cpu())?;
                #[doc = $ex]
                /// # Ok::<(), kael_core::Error>(())
                /// ```
                pub fn $m(&self, other: &$crate::Tensor) -> $crate::Result<$crate::Tensor> {
                    self.compare_op(CmpOp::$V, other)
                }
            )*
        }
        compare_table!(@export ($) $($m)*);
    };
    (@export ($d:tt) $($m:ident)*) => {
        /// Calls `cb!(method)` once per row of the comparison table (see
        /// `for_each_unary_row!`).
        #[macro_export]
        macro_rules! for_each_compare_row {
            ($d cb:ident) => { $( $d cb!($m); )* };
        }
    };
}
