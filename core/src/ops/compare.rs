//! The comparison and logical op table (NOTE [Op table]): ops with a
//! `Bool` result from two operands of one dtype, with no gradient.
//!
//! A row: `Variant { f: (|a, b| rust bool, "cuda bool expression of a, b"),
//! method: fn name, example: "doc-test line (a = [1, 2, 3], b = [2])", }`.

compare_table! {
    /// Elementwise `self == other`.
    Eq {
        f: (|a, b| a == b, "a == b"),
        method: fn eq,
        example: "assert_eq!(a.eq(&b)?.to_vec::<bool>()?, vec![false, true, false]);",
    }
    /// Elementwise `self != other`.
    Ne {
        f: (|a, b| a != b, "a != b"),
        method: fn ne,
        example: "assert_eq!(a.ne(&b)?.to_vec::<bool>()?, vec![true, false, true]);",
    }
    /// Elementwise `self < other`.
    Lt {
        f: (|a, b| a < b, "a < b"),
        method: fn lt,
        example: "assert_eq!(a.lt(&b)?.to_vec::<bool>()?, vec![true, false, false]);",
    }
    /// Elementwise `self <= other`.
    Le {
        f: (|a, b| a <= b, "a <= b"),
        method: fn le,
        example: "assert_eq!(a.le(&b)?.to_vec::<bool>()?, vec![true, true, false]);",
    }
    /// Elementwise `self > other`.
    Gt {
        f: (|a, b| a > b, "a > b"),
        method: fn gt,
        example: "assert_eq!(a.gt(&b)?.to_vec::<bool>()?, vec![false, false, true]);",
    }
    /// Elementwise `self >= other`.
    Ge {
        f: (|a, b| a >= b, "a >= b"),
        method: fn ge,
        example: "assert_eq!(a.ge(&b)?.to_vec::<bool>()?, vec![false, true, true]);",
    }
    /// Elementwise logical and: true where both are non-zero (NaN counts
    /// as non-zero, as in PyTorch).
    LogicalAnd {
        f: (|a, b| a != T::ZERO && b != T::ZERO, "(a != (C)0) && (b != (C)0)"),
        method: fn logical_and,
        example: "assert_eq!(a.sub(&b)?.logical_and(&a)?.to_vec::<bool>()?, vec![true, false, true]);",
    }
    /// Elementwise logical or: true where either is non-zero.
    LogicalOr {
        f: (|a, b| a != T::ZERO || b != T::ZERO, "(a != (C)0) || (b != (C)0)"),
        method: fn logical_or,
        example: "assert_eq!(a.sub(&b)?.logical_or(&a.sub(&a)?)?.to_vec::<bool>()?, vec![true, false, true]);",
    }
    /// Elementwise logical exclusive or: true where exactly one is non-zero.
    LogicalXor {
        f: (|a, b| (a != T::ZERO) != (b != T::ZERO), "(a != (C)0) != (b != (C)0)"),
        method: fn logical_xor,
        example: "assert_eq!(a.sub(&b)?.logical_xor(&a)?.to_vec::<bool>()?, vec![false, true, false]);",
    }
}
