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


MODELS = {"sine": sine, "convs": convs, "dilated": dilated, "rows": rows}


def convert(model, sample):
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    data = sample(64).astype(np.float32)
    conv.representative_dataset = lambda: ([d] for d in data)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return conv.convert()


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


def cases(name, model, sample):
    blob = convert(model, sample)
    with open(os.path.join(HERE, f"{name}.tflite"), "wb") as f:
        f.write(blob)
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
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
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


def main():
    tf.keras.utils.set_random_seed(7)
    records = []
    for name, build in MODELS.items():
        model, sample = build()
        records += cases(name, model, sample)
    write_firmware_io()
    model, sample = unsupported()
    with open(os.path.join(HERE, "unsupported.tflite"), "wb") as f:
        f.write(convert(model, sample))
    with open(os.path.join(HERE, "cases.txt"), "w") as f:
        f.write(f"# generated by gen.py with tensorflow {tf.__version__}, reference kernels; do not edit\n")
        f.write("\n".join(records) + "\n")
    print(f"{len(records)} cases")


if __name__ == "__main__":
    main()
