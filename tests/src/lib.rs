//! Cross-crate tests live in `tests/`; this library holds what a test and
//! an example share.

pub mod mlp_plan;
pub mod ptq_model;
pub mod sine_plan;
pub mod tflite_cases;
