//! `.tflite` models run end to end: kael's parser and int8 interpreter give
//! TFLite's reference interpreter's outputs bit for bit on the shipped
//! models (tests/data/tflite/gen.py), and bad files are refused with an
//! `Err`, never a panic.

use kael_core::Error;
use kael_core::quant::{Activation, Model, OpKernel, OpKind, Value};
use kael_tests::tflite_cases::tflite_io;

const SINE: &[u8] = include_bytes!("../data/tflite/sine.tflite");
const CONVS: &[u8] = include_bytes!("../data/tflite/convs.tflite");
const DILATED: &[u8] = include_bytes!("../data/tflite/dilated.tflite");
const PTQ: &[u8] = include_bytes!("../data/tflite/ptq.tflite");
const ACTS: &[u8] = include_bytes!("../data/tflite/acts.tflite");
const SPEECH: &[u8] = include_bytes!("../data/tflite/speech.tflite");
const UNSUPPORTED: &[u8] = include_bytes!("../data/tflite/unsupported.tflite");
const CASES: &str = include_str!("../data/tflite/cases.txt");

mod speech_io {
    include!("../data/tflite/speech_io.rs");
}

fn check_model(bytes: &[u8], name: &str) {
    let model = Model::parse(bytes).unwrap();
    for run in 0..2 {
        let (x, want) = tflite_io(CASES, name, run);
        let out = model.run(&[Value::F32(x)]).unwrap();
        let Value::F32(got) = &out[0] else {
            panic!("{name}: output is not float")
        };
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(got),
            bits(&want),
            "{name} run {run}: got {got:?}, TFLite {want:?}"
        );
    }
}

#[test]
fn the_sine_model_matches_tflite_end_to_end() {
    check_model(SINE, "sine");
}

#[test]
fn the_conv_model_matches_tflite_end_to_end() {
    check_model(CONVS, "convs");
}

#[test]
fn the_dilated_model_matches_tflite_end_to_end() {
    check_model(DILATED, "dilated");
}

#[test]
fn a_model_kael_quantized_and_wrote_matches_tflite_end_to_end() {
    // ptq.tflite is kael's own output (tests/tests/quant_ptq.rs); TFLite's
    // interpreter produced the expected values from it.
    check_model(PTQ, "ptq");
}

#[test]
fn standalone_relus_and_broadcasting_adds_match_tflite_end_to_end() {
    check_model(ACTS, "acts");
    let model = Model::parse(ACTS).unwrap();
    let kinds: Vec<OpKind> = model.operators.iter().map(|o| o.kind).collect();
    assert!(kinds.contains(&OpKind::Relu(Activation::Relu)), "{kinds:?}");
    assert!(
        kinds.contains(&OpKind::Relu(Activation::Relu6)),
        "{kinds:?}"
    );
}

#[test]
fn the_speech_model_matches_tflite_end_to_end_with_int8_input_and_output() {
    // micro_speech-sized: int8 in and out, as TFLite Micro deploys it.
    let model = Model::parse(SPEECH).unwrap();
    for (x, want) in speech_io::INPUTS.iter().zip(&speech_io::OUTPUTS) {
        let out = model.run(&[Value::I8(x.to_vec())]).unwrap();
        assert_eq!(out, vec![Value::I8(want.to_vec())]);
    }
}

#[test]
fn a_model_parsed_with_only_its_kernels_runs_as_with_all_of_them() {
    let kernels = [
        OpKernel::DEPTHWISE_CONV_2D,
        OpKernel::RESHAPE,
        OpKernel::FULLY_CONNECTED,
        OpKernel::SOFTMAX,
    ];
    let (some, all) = (
        Model::parse_with(SPEECH, &kernels).unwrap(),
        Model::parse(SPEECH).unwrap(),
    );
    let x = Value::I8(speech_io::INPUTS[2].to_vec());
    assert_eq!(
        some.run(core::slice::from_ref(&x)).unwrap(),
        all.run(&[x]).unwrap()
    );
}

#[test]
fn an_operator_whose_kernel_was_not_registered_is_named_with_the_fix() {
    let kernels = [
        OpKernel::DEPTHWISE_CONV_2D,
        OpKernel::RESHAPE,
        OpKernel::SOFTMAX,
    ];
    let e = Model::parse_with(SPEECH, &kernels).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OperatorNotRegistered {
                code: 9,
                index: 2,
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("FULLY_CONNECTED") && text.contains("OpKernel::FULLY_CONNECTED"),
        "{text}"
    );
    // An operator kael has no kernel for stays UnsupportedOperator.
    let e = Model::parse_with(UNSUPPORTED, OpKernel::ALL).unwrap_err();
    assert!(
        matches!(e, Error::UnsupportedOperator { code: 14, .. }),
        "{e:?}"
    );
}

#[test]
fn parse_reads_the_operators_and_their_options() {
    let m = Model::parse(DILATED).unwrap();
    let kinds: Vec<&str> = m
        .operators
        .iter()
        .map(|o| match o.kind {
            OpKind::Quantize => "quantize",
            OpKind::Dequantize => "dequantize",
            OpKind::Conv2d(..) => "conv2d",
            OpKind::DepthwiseConv2d(..) => "depthwise",
            OpKind::Pool2d(..) => "pool",
            OpKind::Softmax(_) => "softmax",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "quantize",
            "conv2d",
            "depthwise",
            "pool",
            "conv2d",
            "softmax",
            "dequantize"
        ]
    );
    let OpKind::Conv2d(o, _) = m.operators[1].kind else {
        unreachable!()
    };
    assert_eq!((o.stride, o.dilation), ([1, 1], [2, 3]));
    let OpKind::DepthwiseConv2d(o, _) = m.operators[2].kind else {
        unreachable!()
    };
    assert_eq!(o.stride, [1, 2]);
}

#[test]
fn an_unsupported_operator_is_named() {
    let e = Model::parse(UNSUPPORTED).unwrap_err();
    assert!(
        matches!(e, Error::UnsupportedOperator { code: 14, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("LOGISTIC"), "{e}");
}

#[test]
fn a_file_without_the_tflite_identifier_is_refused() {
    let mut bytes = SINE.to_vec();
    bytes[4..8].copy_from_slice(b"NOPE");
    let e = Model::parse(&bytes).unwrap_err();
    assert!(e.to_string().contains("TFL3"), "{e}");
}

#[test]
fn every_truncation_of_a_model_is_refused_without_a_panic() {
    for n in 0..SINE.len() {
        assert!(
            Model::parse(&SINE[..n]).is_err(),
            "truncated at {n} of {}",
            SINE.len()
        );
    }
}

#[test]
fn corrupted_bytes_never_panic_and_runs_stay_checked() {
    // Every single-byte corruption (three values per byte) either parses
    // or is refused; what parses then runs or is refused, without a panic.
    let (x, _) = tflite_io(CASES, "sine", 0);
    let mut bytes = SINE.to_vec();
    for i in 0..bytes.len() {
        let keep = bytes[i];
        for v in [0x00, 0xFF, keep ^ 0x40] {
            bytes[i] = v;
            if let Ok(m) = Model::parse(&bytes) {
                let _ = m.run(&[Value::F32(x.clone())]);
            }
        }
        bytes[i] = keep;
    }
}

#[test]
fn run_refuses_an_input_of_the_wrong_length_or_type() {
    let m = Model::parse(SINE).unwrap();
    assert!(m.run(&[Value::F32(vec![0.0; 3])]).is_err());
    assert!(m.run(&[Value::I8(vec![0; 4])]).is_err());
    assert!(m.run(&[]).is_err());
}
