//! kael's int8 kernels reproduce TFLite's reference interpreter bit for
//! bit: every operator of three models that TFLite converted (full-integer
//! post-training quantization) and ran itself (tests/data/tflite/gen.py,
//! TensorFlow 2.21, reference kernels), replayed from the inputs TFLite saw.

mod common;

use kael_core::quant::{self, Activation, Conv2dOptions, Padding, PoolKind, QTensor, QuantParams};
use kael_core::{Device, Tensor};

const CASES: &str = include_str!("../data/tflite/cases.txt");

#[derive(Default)]
struct Data {
    dtype: String,
    shape: Vec<usize>,
    scales: Vec<f32>,
    zps: Vec<i32>,
    dim: usize,
    values: Vec<String>,
}

struct Case {
    name: String,
    op: String,
    attrs: Vec<(String, String)>,
    inputs: Vec<Data>,
    output: Data,
}

fn list<T: std::str::FromStr>(s: &str) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    if s.is_empty() {
        Vec::new()
    } else {
        s.split(',').map(|v| v.parse().unwrap()).collect()
    }
}

fn parse() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut cur: Option<Case> = None;
    for line in CASES
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut toks = line.split(' ');
        match toks.next().unwrap() {
            "case" => {
                let name = toks.next().unwrap().to_string();
                let op = toks.next().unwrap().to_string();
                let attrs = toks
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').unwrap();
                        (k.to_string(), v.to_string())
                    })
                    .collect();
                cur = Some(Case {
                    name,
                    op,
                    attrs,
                    inputs: Vec::new(),
                    output: Data::default(),
                });
            }
            "tensor" => {
                let role = toks.next().unwrap();
                let dtype = toks.next().unwrap().to_string();
                let kv: std::collections::HashMap<&str, &str> =
                    toks.map(|t| t.split_once('=').unwrap()).collect();
                let d = Data {
                    dtype,
                    shape: list(kv["shape"]),
                    scales: list(kv["scale"]),
                    zps: list(kv["zp"]),
                    dim: kv["dim"].parse().unwrap(),
                    values: kv["data"].split(',').map(str::to_string).collect(),
                };
                let c = cur.as_mut().unwrap();
                if role == "out" {
                    c.output = d
                } else {
                    c.inputs.push(d)
                }
            }
            "end" => {
                let c = cur.take().unwrap();
                assert!(!c.output.values.is_empty(), "{}: no output", c.name);
                cases.push(c);
            }
            other => panic!("cases.txt: unknown record {other}"),
        }
    }
    cases
}

fn params(d: &Data) -> QuantParams {
    if d.scales.len() == 1 {
        QuantParams::per_tensor(d.scales[0], d.zps[0]).unwrap()
    } else {
        QuantParams::per_channel(&d.scales, &d.zps, d.dim).unwrap()
    }
}

fn tensor(d: &Data, dev: &Device) -> Tensor {
    match d.dtype.as_str() {
        "float32" => Tensor::from_slice(&list::<f32>(&d.values.join(",")), &d.shape, dev),
        "int8" => Tensor::from_slice(&list::<i8>(&d.values.join(",")), &d.shape, dev),
        "int32" => Tensor::from_slice(&list::<i32>(&d.values.join(",")), &d.shape, dev),
        other => panic!("dtype {other}"),
    }
    .unwrap()
}

fn qtensor(d: &Data, dev: &Device) -> QTensor {
    QTensor::new(tensor(d, dev), params(d)).unwrap()
}

impl Case {
    fn attr(&self, k: &str) -> &str {
        &self
            .attrs
            .iter()
            .find(|(a, _)| a == k)
            .unwrap_or_else(|| panic!("{}: no {k}", self.name))
            .1
    }
    fn pair(&self, k: &str) -> [usize; 2] {
        let v: Vec<usize> = list(self.attr(k));
        [v[0], v[1]]
    }
    fn act(&self) -> Activation {
        match self.attr("act") {
            "none" => Activation::None,
            "relu" => Activation::Relu,
            "relu6" => Activation::Relu6,
            other => panic!("act {other}"),
        }
    }
    fn options(&self) -> Conv2dOptions {
        Conv2dOptions {
            stride: self.pair("stride"),
            dilation: if self.attrs.iter().any(|(k, _)| k == "dilation") {
                self.pair("dilation")
            } else {
                [1, 1]
            },
            padding: match self.attr("padding") {
                "same" => Padding::Same,
                "valid" => Padding::Valid,
                other => panic!("padding {other}"),
            },
        }
    }
    fn bias(&self, dev: &Device) -> Option<Tensor> {
        self.inputs.get(2).map(|d| tensor(d, dev))
    }
}

/// Runs one case; returns kael's output as TFLite's text would print it.
fn run(c: &Case, dev: &Device) -> Vec<String> {
    let out = &c.output;
    let q = |t: QTensor| {
        t.values()
            .to_vec::<i8>()
            .unwrap()
            .iter()
            .map(|v| v.to_string())
            .collect()
    };
    match c.op.as_str() {
        "quantize" => q(QTensor::quantize(&tensor(&c.inputs[0], dev), params(out)).unwrap()),
        "dequantize" => {
            let x = qtensor(&c.inputs[0], dev)
                .dequantize()
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            // TFLite's text is %.9g of the f32; compare the f32 values.
            let want: Vec<f32> = list(&out.values.join(","));
            assert_eq!(
                x.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{}",
                c.name
            );
            out.values.clone()
        }
        "reshape" => q(qtensor(&c.inputs[0], dev).reshape(&out.shape).unwrap()),
        "fully_connected" => {
            let x = qtensor(&c.inputs[0], dev);
            let w = qtensor(&c.inputs[1], dev);
            q(
                quant::fully_connected(&x, &w, c.bias(dev).as_ref(), &params(out), c.act())
                    .unwrap(),
            )
        }
        "conv2d" => {
            let (x, f) = (qtensor(&c.inputs[0], dev), qtensor(&c.inputs[1], dev));
            q(quant::conv2d(
                &x,
                &f,
                c.bias(dev).as_ref(),
                &c.options(),
                &params(out),
                c.act(),
            )
            .unwrap())
        }
        "depthwise_conv2d" => {
            let (x, f) = (qtensor(&c.inputs[0], dev), qtensor(&c.inputs[1], dev));
            let y = quant::depthwise_conv2d(
                &x,
                &f,
                c.bias(dev).as_ref(),
                &c.options(),
                &params(out),
                c.act(),
            )
            .unwrap();
            let m: usize = c.attr("multiplier").parse().unwrap();
            assert_eq!(
                y.shape()[3],
                x.shape()[3] * m,
                "{}: depth multiplier",
                c.name
            );
            q(y)
        }
        "avg_pool2d" | "max_pool2d" => {
            let kind = if c.op == "max_pool2d" {
                PoolKind::Max
            } else {
                PoolKind::Average
            };
            let x = qtensor(&c.inputs[0], dev);
            assert_eq!(
                x.params(),
                &params(out),
                "{}: pooling keeps its input's quantization",
                c.name
            );
            q(quant::pool2d(&x, kind, c.pair("kernel"), &c.options(), c.act()).unwrap())
        }
        "softmax" => {
            let x = qtensor(&c.inputs[0], dev);
            let y = quant::softmax(&x, c.attr("beta").parse().unwrap()).unwrap();
            assert_eq!(
                y.params(),
                &params(out),
                "{}: TFLite's softmax output quantization",
                c.name
            );
            q(y)
        }
        "add" => {
            let (a, b) = (qtensor(&c.inputs[0], dev), qtensor(&c.inputs[1], dev));
            q(quant::add(&a, &b, &params(out), c.act()).unwrap())
        }
        "relu" | "relu6" => {
            let act = if c.op == "relu" {
                Activation::Relu
            } else {
                Activation::Relu6
            };
            q(quant::relu(&qtensor(&c.inputs[0], dev), act, &params(out)).unwrap())
        }
        other => panic!("{}: op {other} has no replay", c.name),
    }
}

fn replay_all(dev: &Device) {
    let cases = parse();
    assert!(cases.len() >= 40, "cases.txt holds {} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let got = run(c, dev);
        let want = &c.output.values;
        let diffs = got.iter().zip(want).filter(|(g, w)| g != w).count();
        if got.len() != want.len() || diffs > 0 {
            failures.push(format!(
                "{} ({}): {diffs} of {} values differ; first got {:?} want {:?}",
                c.name,
                c.op,
                want.len(),
                &got[..got.len().min(8)],
                &want[..want.len().min(8)]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from TFLite:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn every_operator_matches_tflite_bit_for_bit_cpu() {
    replay_all(&Device::cpu());
}

#[test]
fn every_operator_matches_tflite_bit_for_bit_threaded() {
    replay_all(&common::threaded());
}

#[test]
fn the_shipped_cases_cover_every_kernel_and_activation() {
    let cases = parse();
    for op in [
        "quantize",
        "dequantize",
        "fully_connected",
        "conv2d",
        "depthwise_conv2d",
        "avg_pool2d",
        "max_pool2d",
        "add",
        "reshape",
        "relu",
        "relu6",
    ] {
        assert!(cases.iter().any(|c| c.op == op), "no {op} case");
    }
    for act in ["none", "relu", "relu6"] {
        assert!(
            cases
                .iter()
                .any(|c| c.attrs.iter().any(|(k, v)| k == "act" && v == act)),
            "no act={act} case"
        );
    }
    // Per-channel weights, strides, dilation and SAME padding appear.
    assert!(
        cases
            .iter()
            .any(|c| c.op == "conv2d" && c.inputs[1].scales.len() > 1)
    );
    assert!(
        cases
            .iter()
            .any(|c| c.attrs.iter().any(|(k, v)| k == "dilation" && v != "1,1"))
    );
    assert!(
        cases
            .iter()
            .any(|c| c.attrs.iter().any(|(k, v)| k == "padding" && v == "same"))
    );
    // ADD broadcasts its second operand, and both (the kernel's unit tests
    // cover the first alone).
    let adds = cases.iter().filter(|c| c.op == "add");
    let sides: Vec<[bool; 2]> = adds
        .map(|c| [0, 1].map(|k| c.inputs[k].shape != c.output.shape))
        .collect();
    for want in [[false, true], [true, true]] {
        assert!(sides.contains(&want), "no add broadcasting {want:?}");
    }
}
