#!/usr/bin/env python3
"""make_onnx.py - writes the small ONNX models test_onnx.c imports, and the
outputs onnx's reference evaluator (onnx.reference) gives for a fixed input,
which the test compares memgrad's forward pass against.

The .onnx and .bin files are committed, so the tests need no Python; run this
again (pip install onnx numpy) only to change them:

    python3 tests/data/make_onnx.py tests/data

Files: <model>.onnx; <model>.input.bin (the first input, raw little-endian
f32, or int32 for token ids); <model>.output.bin (the first output in inference mode: BatchNorm on
running statistics, Dropout the identity), raw f32.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(12)


def init(name, *shape, scale=0.5):
    return numpy_helper.from_array(
        (rng.standard_normal(shape) * scale).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def save(model, name, x=None, check=True):
    if check:
        onnx.checker.check_model(model, full_check=True)
    path = os.path.join(OUT, name + ".onnx")
    onnx.save(model, path)
    if x is not None:
        x.astype("<f4").tofile(os.path.join(OUT, name + ".input.bin"))
        ref = ReferenceEvaluator(model)
        feed = {model.graph.input[0].name: x}
        y = ref.run(None, feed)[0]
        np.asarray(y, dtype="<f4").tofile(os.path.join(OUT, name + ".output.bin"))


def model(nodes, inputs, outputs, inits, opset=13, name="g"):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                             producer_name="memgrad make_onnx.py")


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


# mlp: Gemm (transB, bias) -> Relu -> Gemm, batch a dynamic dim "N"
mlp = model(
    [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
     helper.make_node("Relu", ["h"], ["r"], name="relu1"),
     helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], name="fc2", transB=1)],
    [vi("x", ["N", 8])], [vi("y", ["N", 4])],
    [init("w1", 16, 8), init("b1", 16), init("w2", 4, 16), init("b2", 4)])
save(mlp, "mlp", rng.standard_normal((3, 8)).astype(np.float32))

# cnn: Conv -> BatchNorm -> Relu -> MaxPool -> grouped Conv -> AveragePool
# -> Reshape through Shape/Gather/Unsqueeze/Concat (folded) -> Gemm
cnn = model(
    [helper.make_node("Conv", ["x", "cw1", "cb1"], ["c1"], name="conv1",
                      kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
     helper.make_node("BatchNormalization", ["c1", "bn_g", "bn_b", "bn_m", "bn_v"],
                      ["bn"], name="bn1", epsilon=1e-5),
     helper.make_node("Relu", ["bn"], ["r1"], name="relu1"),
     helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1",
                      kernel_shape=[2, 2], strides=[2, 2]),
     helper.make_node("Conv", ["p1", "cw2"], ["c2"], name="conv2",
                      kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=2,
                      strides=[1, 1]),
     helper.make_node("AveragePool", ["c2"], ["p2"], name="pool2",
                      kernel_shape=[2, 2], strides=[2, 2]),
     helper.make_node("Shape", ["p2"], ["s"], name="shape"),
     helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
     helper.make_node("Unsqueeze", ["n", "zero_axes"], ["n1"], name="unsq"),
     helper.make_node("Concat", ["n1", "minus1"], ["tgt"], name="cat", axis=0),
     helper.make_node("Reshape", ["p2", "tgt"], ["flat"], name="reshape"),
     helper.make_node("Gemm", ["flat", "fw", "fb"], ["y"], name="fc", transB=1)],
    [vi("x", ["N", 3, 8, 8])], [vi("y", ["N", 5])],
    [init("cw1", 4, 3, 3, 3), init("cb1", 4), init("bn_g", 4), init("bn_b", 4),
     init("bn_m", 4, scale=0.1),
     numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "bn_v"),
     init("cw2", 6, 2, 3, 3), init("fw", 5, 24), init("fb", 5),
     numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
     ints("zero_axes", [0]), ints("minus1", [-1])],
    opset=14)  # BatchNormalization-14: the reference evaluator's BN-9 applies
               # its momentum even in inference
save(cnn, "cnn", rng.standard_normal((2, 3, 8, 8)).astype(np.float32))

# ops: a mix of the other supported ops, opset 17 (LayerNormalization)
ops = model(
    [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
     helper.make_node("LayerNormalization", ["m", "ln_g", "ln_b"], ["ln"],
                      name="ln", axis=-1, epsilon=1e-5),
     helper.make_node("Transpose", ["ln"], ["t"], name="tr", perm=[0, 2, 1]),
     helper.make_node("Sigmoid", ["t"], ["sg"], name="sig"),
     helper.make_node("Tanh", ["t"], ["th"], name="tanh"),
     helper.make_node("Concat", ["sg", "th"], ["cat"], name="cat", axis=1),
     helper.make_node("LeakyRelu", ["cat"], ["lr"], name="lrelu", alpha=0.1),
     helper.make_node("Clip", ["lr", "cmin", "cmax"], ["cl"], name="clip"),
     helper.make_node("Sub", ["cl", "half"], ["sb"], name="sub"),
     helper.make_node("Div", ["sb", "two"], ["dv"], name="div"),
     helper.make_node("Pow", ["dv", "two"], ["pw"], name="pow"),
     helper.make_node("Dropout", ["pw", "ratio"], ["dr"], name="drop"),
     helper.make_node("ReduceMean", ["dr"], ["rm"], name="rmean", axes=[2],
                      keepdims=0),
     helper.make_node("Softmax", ["rm"], ["y"], name="softmax", axis=-1)],
    [vi("x", ["N", 3, 6])], [vi("y", ["N", 8])],
    [init("w", 6, 4), init("ln_g", 4), init("ln_b", 4),
     numpy_helper.from_array(np.array(-0.5, dtype=np.float32), "cmin"),
     numpy_helper.from_array(np.array(0.8, dtype=np.float32), "cmax"),
     numpy_helper.from_array(np.array([0.5], dtype=np.float32), "half"),
     numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two"),
     numpy_helper.from_array(np.array(0.25, dtype=np.float32), "ratio")],
    opset=17)
# Initializers in the graph are parameters to memgrad; cmin etc. are trained
# too, which is fine for this test: its values are what count.
save(ops, "ops", rng.standard_normal((2, 3, 6)).astype(np.float32))

# gpt: a GPT-style block as torch exports it (opset 17): token and position
# embeddings (Gather; Shape/Range folded), pre-norm LayerNormalization,
# causal self-attention with heads split by Reshape/Transpose and the mask
# through Where, an exact-erf GELU MLP (Div, Erf, Add, Mul, Mul), then a
# mean over the sequence and a classifier. The input is int64 token ids.
def const(name, arr):
    return helper.make_node("Constant", [], [name], name=name + "_c",
                            value=numpy_helper.from_array(arr, name + "_v"))


def heads(src, dst):
    return [helper.make_node("Reshape", [src, "hshape"], [dst + "_r"], name=dst + "_reshape"),
            helper.make_node("Transpose", [dst + "_r"], [dst], name=dst + "_tr",
                             perm=[0, 2, 1, 3])]


L, D, H = 4, 8, 2
causal = np.triu(np.ones((L, L), dtype=bool), 1)
gpt_nodes = [
    helper.make_node("Gather", ["wte", "x"], ["emb"], name="wte_gather"),
    helper.make_node("Shape", ["x"], ["xs"], name="shape_x"),
    const("one_i", np.array(1, dtype=np.int64)),
    const("zero_i", np.array(0, dtype=np.int64)),
    helper.make_node("Gather", ["xs", "one_i"], ["seqlen"], name="g_len", axis=0),
    helper.make_node("Range", ["zero_i", "seqlen", "one_i"], ["pos"], name="range"),
    helper.make_node("Gather", ["wpe", "pos"], ["pe"], name="wpe_gather"),
    helper.make_node("Add", ["emb", "pe"], ["h0"], name="add_pos"),
    helper.make_node("LayerNormalization", ["h0", "ln1_g", "ln1_b"], ["ln1"], name="ln1"),
    helper.make_node("MatMul", ["ln1", "wq"], ["q"], name="q"),
    helper.make_node("MatMul", ["ln1", "wk"], ["k"], name="k"),
    helper.make_node("MatMul", ["ln1", "wv"], ["v"], name="v"),
    helper.make_node("Shape", ["q"], ["qs"], name="shape_q"),
    helper.make_node("Gather", ["qs", "zero_i"], ["nb"], name="g_n", axis=0),
    helper.make_node("Unsqueeze", ["nb", "axes0"], ["nb1"], name="unsq_n"),
    helper.make_node("Concat", ["nb1", "rest"], ["hshape"], name="cat_shape", axis=0),
    *heads("q", "qh"), *heads("k", "kh"), *heads("v", "vh"),
    helper.make_node("Transpose", ["kh"], ["khT"], name="kT", perm=[0, 1, 3, 2]),
    helper.make_node("MatMul", ["qh", "khT"], ["sc"], name="scores"),
    const("sqrt_dh", np.array(2.0, dtype=np.float32)),
    helper.make_node("Div", ["sc", "sqrt_dh"], ["sc2"], name="scale"),
    const("mask", causal),
    const("neg_inf", np.array(-np.inf, dtype=np.float32)),
    helper.make_node("Where", ["mask", "neg_inf", "sc2"], ["scm"], name="causal_where"),
    helper.make_node("Softmax", ["scm"], ["att"], name="softmax", axis=-1),
    helper.make_node("MatMul", ["att", "vh"], ["o"], name="att_v"),
    helper.make_node("Transpose", ["o"], ["oT"], name="merge_tr", perm=[0, 2, 1, 3]),
    helper.make_node("Reshape", ["oT", "merge_shape"], ["om"], name="merge"),
    helper.make_node("MatMul", ["om", "wo"], ["proj"], name="proj"),
    helper.make_node("Add", ["h0", "proj"], ["h1"], name="res1"),
    helper.make_node("LayerNormalization", ["h1", "ln2_g", "ln2_b"], ["ln2"], name="ln2"),
    helper.make_node("MatMul", ["ln2", "w1"], ["f1m"], name="fc1"),
    helper.make_node("Add", ["f1m", "b1"], ["f1"], name="fc1_bias"),
    const("sqrt2", np.array(1.4142135381698608, dtype=np.float32)),
    const("one_f", np.array(1.0, dtype=np.float32)),
    const("half_f", np.array(0.5, dtype=np.float32)),
    helper.make_node("Div", ["f1", "sqrt2"], ["gd"], name="gelu_div"),
    helper.make_node("Erf", ["gd"], ["ge"], name="gelu_erf"),
    helper.make_node("Add", ["ge", "one_f"], ["ga"], name="gelu_add"),
    helper.make_node("Mul", ["f1", "ga"], ["gm"], name="gelu_mul"),
    helper.make_node("Mul", ["gm", "half_f"], ["gelu"], name="gelu_half"),
    helper.make_node("MatMul", ["gelu", "w2"], ["f2"], name="fc2"),
    helper.make_node("Add", ["h1", "f2"], ["h2"], name="res2"),
    helper.make_node("ReduceMean", ["h2"], ["pool"], name="pool", axes=[1], keepdims=0),
    helper.make_node("Gemm", ["pool", "wc", "bc"], ["y"], name="classifier", transB=1),
]
gpt = model(
    gpt_nodes, [vi("x", ["N", L], TensorProto.INT64)], [vi("y", ["N", 5])],
    [init("wte", 10, D), init("wpe", 6, D), init("ln1_g", D), init("ln1_b", D),
     init("wq", D, D), init("wk", D, D), init("wv", D, D), init("wo", D, D),
     init("ln2_g", D), init("ln2_b", D), init("w1", D, 16), init("b1", 16),
     init("w2", 16, D), init("wc", 5, D), init("bc", 5),
     ints("axes0", [0]), ints("rest", [L, H, D // H]), ints("merge_shape", [0, 0, -1])],
    opset=17)
tokens = rng.integers(0, 10, (2, L)).astype(np.int64)
onnx.checker.check_model(gpt, full_check=True)
onnx.save(gpt, os.path.join(OUT, "gpt.onnx"))
tokens.astype("<i4").tofile(os.path.join(OUT, "gpt.input.bin"))
np.asarray(ReferenceEvaluator(gpt).run(None, {"x": tokens})[0],
           dtype="<f4").tofile(os.path.join(OUT, "gpt.output.bin"))

# unsupported: an op memgrad does not have
uns = model(
    [helper.make_node("Relu", ["x"], ["r"], name="relu1"),
     helper.make_node("Hardmax", ["r"], ["y"], name="the_hardmax", axis=1)],
    [vi("x", [2, 3])], [vi("y", [2, 3])], [], opset=13)
save(uns, "unsupported")

# an op from a custom domain
cus = model(
    [helper.make_node("Relu", ["x"], ["y"], name="custom_relu",
                      domain="com.example")],
    [vi("x", [2, 3])], [vi("y", [2, 3])], [], opset=13)
cus.opset_import.append(helper.make_opsetid("com.example", 1))
save(cus, "custom_domain", check=False)

# bad graphs: a cycle, an undefined input, shapes that do not fit
cyc = model(
    [helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
     helper.make_node("Relu", ["a"], ["b"], name="relu_b")],
    [vi("x", [2, 3])], [vi("b", [2, 3])], [])
save(cyc, "cycle", check=False)
und = model(
    [helper.make_node("Add", ["x", "nowhere"], ["y"], name="add_undef")],
    [vi("x", [2, 3])], [vi("y", [2, 3])], [])
save(und, "undefined_input", check=False)
mis = model(
    [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm_bad")],
    [vi("x", [2, 3])], [vi("y", [2, 5])], [init("w", 4, 5)])
save(mis, "shape_mismatch", check=False)

# an initializer whose dims promise more data than it holds
short = model(
    [helper.make_node("Add", ["x", "w"], ["y"], name="add_short")],
    [vi("x", [2, 3])], [vi("y", [2, 3])],
    [helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])])
del short.graph.initializer[0].dims[:]
short.graph.initializer[0].dims.extend([2, 3])
save(short, "short_initializer", check=False)
# ... and one that declares a huge size backed by nothing
huge = model(
    [helper.make_node("Add", ["x", "w"], ["y"], name="add_huge")],
    [vi("x", [2, 3])], [vi("y", [2, 3])],
    [helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])])
del huge.graph.initializer[0].dims[:]
huge.graph.initializer[0].dims.extend([1 << 20, 1 << 20, 1 << 20])
save(huge, "huge_initializer", check=False)

# external data: the mlp with its weights in mlp_external.bin beside it
ext = onnx.load(os.path.join(OUT, "mlp.onnx"))
onnx.save_model(ext, os.path.join(OUT, "mlp_external.onnx"),
                save_as_external_data=True, all_tensors_to_one_file=True,
                location="mlp_external.bin", size_threshold=0)
print("wrote models to", OUT)
