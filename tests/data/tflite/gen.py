#!/usr/bin/env python3
"""TFLite's own int8 results, for kael's quantized kernels (tests/tests/quant_tflite.rs).

usage: python tests/data/tflite/gen.py   (writes tests/data/tflite/cases.txt)

Pinned: tensorflow-cpu==2.21.0 and numpy from PyPI, run offline; the wheels
are not committed, the output is.

Each model below is a small Keras model converted with TFLite's
post-training full-integer quantization (int8 weights and activations,
int32 biases; float input and output, so the graph starts with QUANTIZE
and ends with DEQUANTIZE). It is run by TFLite's interpreter with the
*reference* kernels (OpResolverType.BUILTIN_REF, the kernels TFLite Micro
shares) and every intermediate tensor kept. Every operator of the graph
becomes one case: its operator options (read from the flatbuffer), its
inputs as the interpreter saw them, each tensor's quantization parameters,
and the output TFLite computed. kael's kernels must reproduce the output
bit for bit from the rest.

Format, one record per line:
  case NAME OP key=value ...      operator and its options
  tensor ROLE DTYPE shape=a,b scale=s,... zp=z,... dim=D data=v,v,...
  end
Scales are printed with 9 significant digits (they are float32, so the
text reads back to the same float). A tensor without quantization has
scale= and zp= empty.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf
from tensorflow.lite.python import schema_py_generated as schema

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(20261205)

OPS = {
    schema.BuiltinOperator.FULLY_CONNECTED: "fully_connected",
    schema.BuiltinOperator.CONV_2D: "conv2d",
    schema.BuiltinOperator.DEPTHWISE_CONV_2D: "depthwise_conv2d",
    schema.BuiltinOperator.AVERAGE_POOL_2D: "avg_pool2d",
    schema.BuiltinOperator.MAX_POOL_2D: "max_pool2d",
    schema.BuiltinOperator.ADD: "add",
    schema.BuiltinOperator.QUANTIZE: "quantize",
    schema.BuiltinOperator.DEQUANTIZE: "dequantize",
    schema.BuiltinOperator.RESHAPE: "reshape",
    schema.BuiltinOperator.SOFTMAX: "softmax",
    schema.BuiltinOperator.RELU: "relu",
    schema.BuiltinOperator.RELU6: "relu6",
}
ACT = {
    schema.ActivationFunctionType.NONE: "none",
    schema.ActivationFunctionType.RELU: "relu",
    schema.ActivationFunctionType.RELU6: "relu6",
}
PAD = {schema.Padding.SAME: "same", schema.Padding.VALID: "valid"}


def sine():
    """TFLite Micro's hello_world model: 1-16-16-1, trained on sin(x) over
    [0, 2 pi) with noise, batch 1."""
    x = tf.keras.Input((1,), batch_size=1)
    h = tf.keras.layers.Dense(16, activation="relu")(x)
    h = tf.keras.layers.Dense(16, activation="relu")(h)
    model = tf.keras.Model(x, tf.keras.layers.Dense(1)(h))
    xs = RNG.uniform(0, 2 * np.pi, (1000, 1)).astype(np.float32)
    ys = np.sin(xs) + RNG.normal(0, 0.1, xs.shape).astype(np.float32)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.005), loss="mse")
    model.fit(xs, ys, epochs=500, batch_size=32, verbose=0)
    return model, lambda n: RNG.uniform(0, 2 * np.pi, (n, 1, 1))


def convs():
    x = tf.keras.Input((9, 9, 3), batch_size=2)
    a = tf.keras.layers.Conv2D(4, 3, strides=2, padding="same", activation=tf.nn.relu6)(x)
    b = tf.keras.layers.Conv2D(4, 3, strides=2, padding="same", dilation_rate=1, activation="relu")(x)
    s = tf.keras.layers.Add()([a, b])
    d = tf.keras.layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same")(s)
    m = tf.keras.layers.MaxPool2D(2, strides=1, padding="valid")(d)
    p = tf.keras.layers.AveragePooling2D(3, strides=2, padding="same")(m)
    f = tf.keras.layers.Flatten()(p)
    y = tf.keras.layers.Softmax()(tf.keras.layers.Dense(5)(f))
    return tf.keras.Model(x, y), lambda n: RNG.normal(0, 1, (n, 2, 9, 9, 3))


def dilated():
    x = tf.keras.Input((10, 7, 2), batch_size=1)
    a = tf.keras.layers.Conv2D(3, (3, 2), dilation_rate=(2, 3), padding="valid", activation="relu")(x)
    b = tf.keras.layers.DepthwiseConv2D((2, 3), strides=(1, 2), depth_multiplier=1, padding="valid", activation=tf.nn.relu6)(a)
    c = tf.keras.layers.AveragePooling2D((2, 2), strides=(1, 1), padding="same")(b)
    d = tf.keras.layers.Softmax()(tf.keras.layers.Conv2D(16, 1)(c))
    return tf.keras.Model(x, d), lambda n: RNG.uniform(-3, 5, (n, 1, 10, 7, 2))


def rows():
    """Many fully-connected outputs and softmax rows (64 x 16 per run) over a
    wide input range, so requantization and the fixed-point exp and
    reciprocal are exercised at many rounding points (ties included)."""
    x = tf.keras.Input((32,), batch_size=64)
    h = tf.keras.layers.Dense(64)(x)
    y = tf.keras.layers.Softmax()(tf.keras.layers.Dense(16)(h))
    return tf.keras.Model(x, y), lambda n: RNG.normal(0, 3, (n, 64, 32))


def spectrograms(n, label=None, noise=0.3):
    """Synthetic 49 x 40 "spectrograms" of four keywords: each keyword is
    energy in its own band of frequency bins sweeping over time, plus noise."""
    labels = RNG.integers(0, 4, n) if label is None else np.full(n, label)
    t = np.arange(49)[:, None]
    f = np.arange(40)[None, :]
    xs = []
    for k in labels:
        centre = 6 + 9 * k + (t - 24) * (0.15 if k % 2 else -0.15)
        band = np.exp(-((f - centre) ** 2) / 8.0)
        xs.append(band + RNG.normal(0, noise, (49, 40)))
    return np.asarray(xs, np.float32)[..., None], labels


def speech():
    """A keyword-spotting model the size of TFLite Micro's micro_speech
    (its "tiny_conv"): a 49 x 40 spectrogram, a 10 x 8 depthwise conv with
    8 filters at stride 2 and ReLU (25 x 20 x 8), flatten, 4 classes,
    softmax; int8 input and output as in TFLite Micro. Trained briefly on
    synthetic keywords so that its outputs mean something."""
    x = tf.keras.Input((49, 40, 1), batch_size=1)
    h = tf.keras.layers.DepthwiseConv2D((10, 8), strides=2, depth_multiplier=8, padding="same", activation="relu")(x)
    y = tf.keras.layers.Softmax()(tf.keras.layers.Dense(4)(tf.keras.layers.Flatten()(h)))
    model = tf.keras.Model(x, y)
    xs, labels = spectrograms(2000)
    # Batch 1 is the deployed shape; a batch-32 twin trains, the weights
    # are copied over.
    xt = tf.keras.Input((49, 40, 1))
    ht = tf.keras.layers.DepthwiseConv2D((10, 8), strides=2, depth_multiplier=8, padding="same", activation="relu")(xt)
    twin = tf.keras.Model(xt, tf.keras.layers.Softmax()(tf.keras.layers.Dense(4)(tf.keras.layers.Flatten()(ht))))
    twin.compile(optimizer=tf.keras.optimizers.Adam(0.003), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    twin.fit(xs, labels, epochs=4, batch_size=32, verbose=0)
    model.set_weights(twin.get_weights())
    return model, lambda n: spectrograms(n * 1)[0].reshape(n, 1, 49, 40, 1)


def acts():
    """Standalone RELU and RELU6 (after QUANTIZE and RESHAPE, which have no
    fused activation, so the converter keeps them as operators that
    requantize from the input's scale to the output's) and ADD with
    broadcasting: [2,4,1,3] + [2,1,5,3] (both sides broadcast), a
    per-channel constant [3], and [2,1,1,3] against [2,4,5,3]. Built after
    the other models with its own generator, so their files stay as they
    were."""
    rng = np.random.default_rng(20261206)
    add = tf.keras.layers.Lambda(lambda t: t[0] + t[1])
    x = tf.keras.Input((4, 5, 3), batch_size=2)
    r = tf.keras.layers.ReLU()(x)
    r6 = tf.keras.layers.ReLU(max_value=6.0)(tf.keras.layers.Reshape((5, 4, 3))(x))
    rows = tf.keras.layers.AveragePooling2D((1, 5))(r)
    cols = tf.keras.layers.MaxPool2D((4, 1))(tf.keras.layers.Reshape((4, 5, 3))(r6))
    s = add([rows, cols])
    s = tf.keras.layers.Lambda(lambda t: t + tf.constant([0.5, -1.0, 2.0]))(s)
    g = tf.keras.layers.MaxPool2D((4, 5))(x)
    s = tf.keras.layers.Lambda(lambda t: t[0] + t[1])([s, g])
    y = tf.keras.layers.Dense(4)(tf.keras.layers.Flatten()(s))
    return tf.keras.Model(x, y), lambda n: rng.normal(0.5, 3, (n, 2, 4, 5, 3))


MODELS = {"sine": sine, "convs": convs, "dilated": dilated, "rows": rows}
# Models with int8 input and output (no QUANTIZE/DEQUANTIZE), as TFLite
# Micro deploys them.
INT8_IO = {"speech": speech}


def convert(model, sample, int8_io=False):
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    data = sample(64).astype(np.float32)
    conv.representative_dataset = lambda: ([d] for d in data)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if int8_io:
        conv.inference_input_type = tf.int8
        conv.inference_output_type = tf.int8
    return conv.convert()


def quantized_input(interp, x):
    """`x` as the interpreter's input type (quantized for int8 input)."""
    d = interp.get_input_details()[0]
    if d["dtype"] == np.int8:
        scale, zp = d["quantization"]
        return np.clip(np.round(x / scale) + zp, -128, 127).astype(np.int8)
    return x


def options(op, code):
    t = op.BuiltinOptionsType()
    tab = op.BuiltinOptions()
    kv = {}
    if code == schema.BuiltinOperator.CONV_2D:
        o = schema.Conv2DOptions()
        o.Init(tab.Bytes, tab.Pos)
        kv.update(stride=f"{o.StrideH()},{o.StrideW()}", dilation=f"{o.DilationHFactor()},{o.DilationWFactor()}",
                  padding=PAD[o.Padding()], act=ACT[o.FusedActivationFunction()])
    elif code == schema.BuiltinOperator.DEPTHWISE_CONV_2D:
        o = schema.DepthwiseConv2DOptions()
        o.Init(tab.Bytes, tab.Pos)
        kv.update(stride=f"{o.StrideH()},{o.StrideW()}", dilation=f"{o.DilationHFactor()},{o.DilationWFactor()}",
                  padding=PAD[o.Padding()], act=ACT[o.FusedActivationFunction()], multiplier=o.DepthMultiplier())
    elif code in (schema.BuiltinOperator.AVERAGE_POOL_2D, schema.BuiltinOperator.MAX_POOL_2D):
        o = schema.Pool2DOptions()
        o.Init(tab.Bytes, tab.Pos)
        kv.update(stride=f"{o.StrideH()},{o.StrideW()}", kernel=f"{o.FilterHeight()},{o.FilterWidth()}",
                  padding=PAD[o.Padding()], act=ACT[o.FusedActivationFunction()])
    elif code == schema.BuiltinOperator.FULLY_CONNECTED:
        o = schema.FullyConnectedOptions()
        o.Init(tab.Bytes, tab.Pos)
        kv.update(act=ACT[o.FusedActivationFunction()], keep_dims=int(bool(o.KeepNumDims())))
    elif code == schema.BuiltinOperator.SOFTMAX:
        o = schema.SoftmaxOptions()
        o.Init(tab.Bytes, tab.Pos)
        kv.update(beta=fmt_num(np.float32(o.Beta())))
    elif code == schema.BuiltinOperator.ADD:
        o = schema.AddOptions()
        o.Init(tab.Bytes, tab.Pos)
        kv.update(act=ACT[o.FusedActivationFunction()])
    del t
    return kv


def fmt_num(v):
    return "%.9g" % v


def tensor_line(role, detail, value):
    q = detail["quantization_parameters"]
    scales = ",".join(fmt_num(np.float32(s)) for s in q["scales"])
    zps = ",".join(str(int(z)) for z in q["zero_points"])
    dtype = np.dtype(detail["dtype"]).name
    flat = np.asarray(value).reshape(-1)
    if dtype.startswith("float"):
        data = ",".join(fmt_num(np.float32(v)) for v in flat)
    else:
        data = ",".join(str(int(v)) for v in flat)
    shape = ",".join(str(int(d)) for d in np.asarray(value).shape)
    return f"tensor {role} {dtype} shape={shape} scale={scales} zp={zps} dim={q['quantized_dimension']} data={data}"


def cases(name, model, sample, int8_io=False):
    blob = convert(model, sample, int8_io)
    with open(os.path.join(HERE, f"{name}.tflite"), "wb") as f:
        f.write(blob)
    return blob_cases(name, blob, sample)


def blob_cases(name, blob, sample):
    fb = schema.Model.GetRootAsModel(blob, 0)
    graph = fb.Subgraphs(0)
    interp = tf.lite.Interpreter(
        model_content=blob,
        experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_REF,
        experimental_preserve_all_tensors=True,
    )
    interp.allocate_tensors()
    details = {d["index"]: d for d in interp.get_tensor_details()}
    out = []
    for run, x in enumerate(sample(2).astype(np.float32)):
        interp.set_tensor(interp.get_input_details()[0]["index"], quantized_input(interp, x))
        interp.invoke()
        for i in range(graph.OperatorsLength()):
            op = graph.Operators(i)
            code = fb.OperatorCodes(op.OpcodeIndex())
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            if builtin not in OPS:
                raise SystemExit(f"{name}: operator {builtin} has no kael kernel yet; leave it out of the model")
            kv = options(op, builtin)
            head = f"case {name}_run{run}_op{i} {OPS[builtin]}" + "".join(f" {k}={v}" for k, v in kv.items())
            lines = [head]
            for j in range(op.InputsLength()):
                t = op.Inputs(j)
                if t < 0:
                    continue
                lines.append(tensor_line(f"in{j}", details[t], interp.get_tensor(t)))
            t = op.Outputs(0)
            lines.append(tensor_line("out", details[t], interp.get_tensor(t)))
            lines.append("end")
            out.append("\n".join(lines))
    return out


def unsupported():
    """A model with an operator kael does not run (LOGISTIC, from a sigmoid):
    its file is only parsed, to check the refusal."""
    x = tf.keras.Input((3,), batch_size=1)
    y = tf.keras.layers.Dense(4, activation="sigmoid")(x)
    return tf.keras.Model(x, y), lambda n: RNG.normal(0, 1, (n, 1, 3))


def ptq_cases():
    """ptq.tflite is written by kael, not by TFLite's converter: kael's
    post-training quantization of a small conv model
    (`cargo run -p kael-tests --example ptq_tflite -- tests/data/tflite/ptq.tflite`,
    run before this script). TFLite's interpreter must load it and its
    results become cases like every other model's."""
    rng = np.random.default_rng(20261207)
    with open(os.path.join(HERE, "ptq.tflite"), "rb") as f:
        blob = f.read()
    return blob_cases("ptq", blob, lambda n: rng.normal(0, 1, (n, 1, 10, 10, 2)))


def write_firmware_io():
    """sine_io.rs: inputs across [0, 2 pi) and TFLite's outputs for them
    (both as f32 bits), for the sine_int8 firmware example."""
    with open(os.path.join(HERE, "sine.tflite"), "rb") as f:
        blob = f.read()
    interp = tf.lite.Interpreter(
        model_content=blob, experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_REF
    )
    interp.allocate_tensors()
    xs = np.linspace(0, 2 * np.pi, 16, endpoint=False).astype(np.float32)
    ys = []
    for x in xs:
        interp.set_tensor(interp.get_input_details()[0]["index"], np.array([[x]], np.float32))
        interp.invoke()
        ys.append(np.float32(interp.get_tensor(interp.get_output_details()[0]["index"]).reshape(-1)[0]))
    err = max(abs(float(y) - np.sin(float(x))) for x, y in zip(xs, ys))
    with open(os.path.join(HERE, "sine_io.rs"), "w") as f:
        f.write(f"// generated by gen.py with tensorflow {tf.__version__} (reference kernels); do not edit\n")
        f.write(f"// TFLite's int8 sine model: largest |y - sin(x)| over these inputs {err:.4f}\n")
        f.write(f"pub const INPUT_BITS: [u32; {len(xs)}] = [{', '.join(hex(int(np.float32(x).view(np.uint32))) for x in xs)}];\n")
        f.write(f"pub const OUTPUT_BITS: [u32; {len(ys)}] = [{', '.join(hex(int(np.float32(y).view(np.uint32))) for y in ys)}];\n")


def write_speech_io():
    """speech_io.rs: four int8 spectrograms and TFLite's int8 outputs for
    them, for the speech_int8 firmware example."""
    with open(os.path.join(HERE, "speech.tflite"), "rb") as f:
        blob = f.read()
    interp = tf.lite.Interpreter(
        model_content=blob, experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_REF
    )
    interp.allocate_tensors()
    ins, outs = [], []
    for k in range(4):
        # Blends of keywords k and k + 1, so that the softmax outputs are
        # not all saturated (clear keywords give 127 and -128 only).
        blend = 0.6 * spectrograms(1, label=k)[0] + 0.4 * spectrograms(1, label=(k + 1) % 4)[0]
        x = quantized_input(interp, blend)
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        ins.append(x.reshape(-1))
        outs.append(interp.get_tensor(interp.get_output_details()[0]["index"]).reshape(-1))
    right = sum(int(np.argmax(o)) == k for k, o in enumerate(outs))
    with open(os.path.join(HERE, "speech_io.rs"), "w") as f:
        f.write(f"// generated by gen.py with tensorflow {tf.__version__} (reference kernels); do not edit\n")
        f.write(f"// synthetic spectrograms, 0.6 of keyword k and 0.4 of keyword k + 1 (TFLite's argmax is k for {right} of 4)\n")
        f.write(f"pub const INPUTS: [[i8; {ins[0].size}]; 4] = [\n")
        for x in ins:
            f.write("    [" + ", ".join(str(int(v)) for v in x) + "],\n")
        f.write("];\n")
        f.write(f"pub const OUTPUTS: [[i8; {outs[0].size}]; 4] = [\n")
        for y in outs:
            f.write("    [" + ", ".join(str(int(v)) for v in y) + "],\n")
        f.write("];\n")


def main():
    tf.keras.utils.set_random_seed(7)
    records = []
    for name, build in MODELS.items():
        model, sample = build()
        records += cases(name, model, sample)
    for name, build in INT8_IO.items():
        model, sample = build()
        records += cases(name, model, sample, int8_io=True)
    write_firmware_io()
    write_speech_io()
    model, sample = unsupported()
    with open(os.path.join(HERE, "unsupported.tflite"), "wb") as f:
        f.write(convert(model, sample))
    model, sample = acts()
    records += cases("acts", model, sample)
    records += ptq_cases()
    with open(os.path.join(HERE, "cases.txt"), "w") as f:
        f.write(f"# generated by gen.py with tensorflow {tf.__version__}, reference kernels; do not edit\n")
        f.write("\n".join(records) + "\n")
    print(f"{len(records)} cases")


if __name__ == "__main__":
    main()
