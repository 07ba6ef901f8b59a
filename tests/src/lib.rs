//! Cross-crate tests live in `tests/`; this library holds what a test and
//! an example share.

pub mod ptq_model;
pub mod sine_plan;
pub mod tflite_cases;
