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

# Blocks of the architectures torch.onnx.export is asked for, written as it
# exports them (no torch here): a ResNet stem and basic blocks, MobileNetV2
# inverted residuals with ReLU6 as Clip, a U-Net with nearest Resize and skip
# Concat, a BERT-style encoder layer with a constant padding mask added to
# the scores and LayerNorm decomposed into ReduceMean/Sub/Pow/Sqrt/Div.
def conv_bn(pfx, src, cin, cout, k, s=1, p=0, group=1, relu=None, inits=None):
    nodes = [helper.make_node("Conv", [src, pfx + "_w"], [pfx + "_c"], name=pfx + "_conv",
                              kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, group=group),
             helper.make_node("BatchNormalization", [pfx + "_c", pfx + "_g", pfx + "_b",
                                                     pfx + "_m", pfx + "_v"],
                              [pfx + "_bn"], name=pfx + "_bn", epsilon=1e-5)]
    inits += [init(pfx + "_w", cout, cin // group, k, k, scale=(2.0 / (cin // group * k * k)) ** 0.5),
              numpy_helper.from_array(rng.uniform(0.5, 1.5, cout).astype(np.float32), pfx + "_g"),
              init(pfx + "_b", cout, scale=0.1), init(pfx + "_m", cout, scale=0.1),
              numpy_helper.from_array(rng.uniform(0.5, 1.5, cout).astype(np.float32), pfx + "_v")]
    out = pfx + "_bn"
    if relu == "relu":
        nodes.append(helper.make_node("Relu", [out], [pfx + "_r"], name=pfx + "_relu"))
        out = pfx + "_r"
    elif relu == "relu6":
        nodes.append(helper.make_node("Clip", [out, "zero_f", "six_f"], [pfx + "_r"],
                                      name=pfx + "_relu6"))
        out = pfx + "_r"
    return nodes, out


def head(src, c, classes, inits, pfx="head"):
    inits += [init(pfx + "_w", classes, c), init(pfx + "_b", classes)]
    return [helper.make_node("GlobalAveragePool", [src], [pfx + "_gap"], name=pfx + "_gap"),
            helper.make_node("Flatten", [pfx + "_gap"], [pfx + "_flat"], name=pfx + "_flatten", axis=1),
            helper.make_node("Gemm", [pfx + "_flat", pfx + "_w", pfx + "_b"], ["y"],
                             name=pfx + "_fc", transB=1)]


# resnet: stem, max pool with padding, a basic block, a downsampling block
inits = []
nodes, h = conv_bn("stem", "x", 3, 8, 3, s=2, p=1, relu="relu", inits=inits)
nodes.append(helper.make_node("MaxPool", [h], ["pool"], name="maxpool",
                              kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
n1, a = conv_bn("b1a", "pool", 8, 8, 3, p=1, relu="relu", inits=inits)
n2, b = conv_bn("b1b", a, 8, 8, 3, p=1, inits=inits)
nodes += n1 + n2 + [helper.make_node("Add", [b, "pool"], ["b1s"], name="b1_add"),
                    helper.make_node("Relu", ["b1s"], ["b1"], name="b1_relu")]
n1, a = conv_bn("b2a", "b1", 8, 16, 3, s=2, p=1, relu="relu", inits=inits)
n2, b = conv_bn("b2b", a, 16, 16, 3, p=1, inits=inits)
n3, d = conv_bn("b2d", "b1", 8, 16, 1, s=2, inits=inits)
nodes += n1 + n2 + n3 + [helper.make_node("Add", [b, d], ["b2s"], name="b2_add"),
                         helper.make_node("Relu", ["b2s"], ["b2"], name="b2_relu")]
nodes += head("b2", 16, 5, inits)
resnet = model(nodes, [vi("x", ["N", 3, 16, 16])], [vi("y", ["N", 5])], inits, opset=14)
save(resnet, "resnet", rng.standard_normal((2, 3, 16, 16)).astype(np.float32))

# mobilenet: ReLU6 as Clip with initializer bounds, depthwise convs, an
# inverted residual, dropout before the classifier
inits = [numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero_f"),
         numpy_helper.from_array(np.array(6.0, dtype=np.float32), "six_f")]
nodes, h = conv_bn("stem", "x", 3, 8, 3, s=2, p=1, relu="relu6", inits=inits)
n1, h = conv_bn("dw1", h, 8, 8, 3, p=1, group=8, relu="relu6", inits=inits)
n2, h = conv_bn("pw1", h, 8, 16, 1, inits=inits)
n3, e = conv_bn("ex2", h, 16, 32, 1, relu="relu6", inits=inits)
n4, e = conv_bn("dw2", e, 32, 32, 3, p=1, group=32, relu="relu6", inits=inits)
n5, e = conv_bn("pj2", e, 32, 16, 1, inits=inits)
nodes += n1 + n2 + n3 + n4 + n5 + [helper.make_node("Add", [h, e], ["ir"], name="ir_add")]
inits += [init("cls_w", 5, 16), init("cls_b", 5)]
nodes += [helper.make_node("GlobalAveragePool", ["ir"], ["gap"], name="gap"),
          helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
          helper.make_node("Dropout", ["flat", "ratio"], ["drop"], name="dropout"),
          helper.make_node("Gemm", ["drop", "cls_w", "cls_b"], ["y"], name="classifier", transB=1)]
inits.append(numpy_helper.from_array(np.array(0.2, dtype=np.float32), "ratio"))
mobilenet = model(nodes, [vi("x", ["N", 3, 16, 16])], [vi("y", ["N", 5])], inits, opset=14)
save(mobilenet, "mobilenet", rng.standard_normal((2, 3, 16, 16)).astype(np.float32))

# unet: encoder, bottleneck, nearest Resize by 2, skip Concat, decoder
inits = [init("e1_w", 8, 3, 3, 3), init("e1_b", 8), init("e2_w", 16, 8, 3, 3),
         init("e2_b", 16), init("d1_w", 8, 24, 3, 3), init("d1_b", 8),
         init("out_w", 4, 8, 1, 1), init("out_b", 4),
         numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "up_scales")]
nodes = [
    helper.make_node("Conv", ["x", "e1_w", "e1_b"], ["e1c"], name="e1", kernel_shape=[3, 3], pads=[1] * 4),
    helper.make_node("Relu", ["e1c"], ["e1"], name="e1_relu"),
    helper.make_node("MaxPool", ["e1"], ["p1"], name="down", kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Conv", ["p1", "e2_w", "e2_b"], ["e2c"], name="e2", kernel_shape=[3, 3], pads=[1] * 4),
    helper.make_node("Relu", ["e2c"], ["e2"], name="e2_relu"),
    helper.make_node("Resize", ["e2", "", "up_scales"], ["up"], name="up", mode="nearest",
                     coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    helper.make_node("Concat", ["e1", "up"], ["cat"], name="skip_cat", axis=1),
    helper.make_node("Conv", ["cat", "d1_w", "d1_b"], ["d1c"], name="d1", kernel_shape=[3, 3], pads=[1] * 4),
    helper.make_node("Relu", ["d1c"], ["d1"], name="d1_relu"),
    helper.make_node("Conv", ["d1", "out_w", "out_b"], ["seg"], name="out", kernel_shape=[1, 1]),
]
nodes += head("seg", 4, 3, inits)
unet = model(nodes, [vi("x", ["N", 3, 8, 8])], [vi("y", ["N", 3])], inits, opset=13)
save(unet, "unet", rng.standard_normal((2, 3, 8, 8)).astype(np.float32))

# bert: embeddings, decomposed LayerNorm, attention with a constant padding
# mask added to the scores, heads by Reshape([0, 0, H, dh]), the first
# token (Gather of a scalar index on axis 1) into a classifier
L, D, H = 6, 8, 2


def layernorm(pfx, src):
    return [helper.make_node("ReduceMean", [src], [pfx + "_mu"], name=pfx + "_mean", axes=[-1]),
            helper.make_node("Sub", [src, pfx + "_mu"], [pfx + "_xc"], name=pfx + "_sub"),
            helper.make_node("Pow", [pfx + "_xc", "two_f"], [pfx + "_sq"], name=pfx + "_pow"),
            helper.make_node("ReduceMean", [pfx + "_sq"], [pfx + "_var"], name=pfx + "_var", axes=[-1]),
            helper.make_node("Add", [pfx + "_var", "eps_f"], [pfx + "_ve"], name=pfx + "_eps"),
            helper.make_node("Sqrt", [pfx + "_ve"], [pfx + "_sd"], name=pfx + "_sqrt"),
            helper.make_node("Div", [pfx + "_xc", pfx + "_sd"], [pfx + "_n"], name=pfx + "_div"),
            helper.make_node("Mul", [pfx + "_n", pfx + "_g"], [pfx + "_s"], name=pfx + "_scale"),
            helper.make_node("Add", [pfx + "_s", pfx + "_b"], [pfx], name=pfx + "_shift")]


pad_mask = np.zeros((2, 1, 1, L), dtype=np.float32)
pad_mask[1, :, :, 4:] = -10000.0  # the second sequence has 4 real tokens
nodes = [
    helper.make_node("Gather", ["wte", "x"], ["emb"], name="wte_gather"),
    helper.make_node("Gather", ["wpe", "pos_ids"], ["pe"], name="wpe_gather"),
    helper.make_node("Add", ["emb", "pe"], ["h0"], name="add_pos"),
    *layernorm("ln0", "h0"),
    helper.make_node("MatMul", ["ln0", "wq"], ["q"], name="q"),
    helper.make_node("MatMul", ["ln0", "wk"], ["k"], name="k"),
    helper.make_node("MatMul", ["ln0", "wv"], ["v"], name="v"),
    helper.make_node("Reshape", ["q", "hs"], ["qr"], name="q_reshape"),
    helper.make_node("Reshape", ["k", "hs"], ["kr"], name="k_reshape"),
    helper.make_node("Reshape", ["v", "hs"], ["vr"], name="v_reshape"),
    helper.make_node("Transpose", ["qr"], ["qh"], name="q_tr", perm=[0, 2, 1, 3]),
    helper.make_node("Transpose", ["kr"], ["khT"], name="k_tr", perm=[0, 2, 3, 1]),
    helper.make_node("Transpose", ["vr"], ["vh"], name="v_tr", perm=[0, 2, 1, 3]),
    helper.make_node("MatMul", ["qh", "khT"], ["sc"], name="scores"),
    helper.make_node("Mul", ["sc", "inv_sqrt_dh"], ["scs"], name="scale"),
    helper.make_node("Add", ["scs", "pad_mask"], ["scm"], name="mask_add"),
    helper.make_node("Softmax", ["scm"], ["att"], name="softmax", axis=-1),
    helper.make_node("MatMul", ["att", "vh"], ["o"], name="att_v"),
    helper.make_node("Transpose", ["o"], ["oT"], name="o_tr", perm=[0, 2, 1, 3]),
    helper.make_node("Reshape", ["oT", "ms"], ["om"], name="merge"),
    helper.make_node("MatMul", ["om", "wo"], ["proj"], name="proj"),
    helper.make_node("Add", ["ln0", "proj"], ["h1"], name="res1"),
    *layernorm("ln1", "h1"),
    helper.make_node("MatMul", ["ln1", "w1"], ["f1"], name="fc1"),
    helper.make_node("Div", ["f1", "sqrt2_f"], ["gd"], name="gelu_div"),
    helper.make_node("Erf", ["gd"], ["ge"], name="gelu_erf"),
    helper.make_node("Add", ["ge", "one_f"], ["ga"], name="gelu_add"),
    helper.make_node("Mul", ["f1", "ga"], ["gm"], name="gelu_mul"),
    helper.make_node("Mul", ["gm", "half_f"], ["gelu"], name="gelu_half"),
    helper.make_node("MatMul", ["gelu", "w2"], ["f2"], name="fc2"),
    helper.make_node("Add", ["ln1", "f2"], ["h2"], name="res2"),
    helper.make_node("Gather", ["h2", "zero_i"], ["cls"], name="cls_token", axis=1),
    helper.make_node("Gemm", ["cls", "wc", "bc"], ["y"], name="classifier", transB=1),
]
inits = [init("wte", 12, D), init("wpe", L, D), init("ln0_g", D), init("ln0_b", D),
         init("wq", D, D), init("wk", D, D), init("wv", D, D), init("wo", D, D),
         init("ln1_g", D), init("ln1_b", D), init("w1", D, 16), init("w2", 16, D),
         init("wc", 5, D), init("bc", 5),
         ints("pos_ids", list(range(L))), ints("hs", [0, 0, H, D // H]),
         ints("ms", [0, 0, D]),
         numpy_helper.from_array(np.array(0, dtype=np.int64), "zero_i")]
consts = [("two_f", 2.0), ("eps_f", 1e-5), ("inv_sqrt_dh", 0.5), ("sqrt2_f", 1.4142135381698608),
          ("one_f", 1.0), ("half_f", 0.5)]
nodes = [helper.make_node("Constant", [], [nm], name=nm + "_c",
                          value=numpy_helper.from_array(np.array(v, dtype=np.float32), nm + "_v"))
         for nm, v in consts] + \
        [helper.make_node("Constant", [], ["pad_mask"], name="pad_mask_c",
                          value=numpy_helper.from_array(pad_mask, "pad_mask_v"))] + nodes
bert = model(nodes, [vi("x", [2, L], TensorProto.INT64)], [vi("y", [2, 5])], inits, opset=13)
onnx.checker.check_model(bert, full_check=True)
onnx.save(bert, os.path.join(OUT, "bert.onnx"))
tokens = rng.integers(0, 12, (2, L)).astype(np.int64)
tokens.astype("<i4").tofile(os.path.join(OUT, "bert.input.bin"))
np.asarray(ReferenceEvaluator(bert).run(None, {"x": tokens})[0],
           dtype="<f4").tofile(os.path.join(OUT, "bert.output.bin"))

# where_init: a causal mask and its -inf fill as initializers, as an export
# with constant folding writes them (the fill is a value, not a weight)
wi = model(
    [helper.make_node("MatMul", ["x", "w"], ["s"], name="scores"),
     helper.make_node("Where", ["mask", "ninf", "s"], ["sm"], name="masked_fill"),
     helper.make_node("Softmax", ["sm"], ["y"], name="softmax", axis=-1)],
    [vi("x", ["N", 3, 3])], [vi("y", ["N", 3, 3])],
    [init("w", 3, 3),
     numpy_helper.from_array(np.triu(np.ones((3, 3), dtype=bool), 1), "mask"),
     numpy_helper.from_array(np.array(-np.inf, dtype=np.float32), "ninf")])
save(wi, "where_init", rng.standard_normal((2, 3, 3)).astype(np.float32))

# train_export: what torch.onnx.export(..., training=TrainingMode.TRAINING)
# writes: BatchNormalization with training_mode=1 and its running-statistics
# outputs, Dropout with a training_mode input and a mask output, none read.
# train_export_mask: the same with the mask as a graph output (refused).
def train_export(mask_out):
    outs = [vi("y", ["N", 3])] + ([vi("mask", ["N", 3, 4, 4], TensorProto.BOOL)] if mask_out else [])
    return model(
        [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["bn", "rm", "rv"],
                          name="bn_train", training_mode=1, momentum=0.9),
         helper.make_node("Dropout", ["bn", "ratio", "tmode"], ["d", "mask"], name="drop_train"),
         helper.make_node("GlobalAveragePool", ["d"], ["gap"], name="gap"),
         helper.make_node("Flatten", ["gap"], ["y"], name="flatten")],
        [vi("x", ["N", 3, 4, 4])], outs,
        [init("g", 3), init("b", 3), init("m", 3),
         numpy_helper.from_array(np.ones(3, dtype=np.float32), "v"),
         numpy_helper.from_array(np.array(0.1, dtype=np.float32), "ratio"),
         numpy_helper.from_array(np.array(True), "tmode")], opset=15)


save(train_export(False), "train_export")
save(train_export(True), "train_export_mask")

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
if os.path.exists(os.path.join(OUT, "mlp_external.bin")):
    os.remove(os.path.join(OUT, "mlp_external.bin"))  # onnx appends to it
onnx.save_model(ext, os.path.join(OUT, "mlp_external.onnx"),
                save_as_external_data=True, all_tensors_to_one_file=True,
                location="mlp_external.bin", size_threshold=0)
# bert_mask: the bert block with the padding mask as a second graph input,
# int64 [N, L] (1 = token, 0 = padding), as Hugging Face models export it:
# Unsqueeze, Cast to float, 1 - m, Cast to bool, Where(pad, finfo.min, s)
# (the SDPA path), and again as masked_fill(mask == 0, -inf) through Equal;
# the two masked score tensors are averaged. Input files: tokens
# (bert_mask.input.bin) and the mask (bert_mask.input1.bin), both int32.
fmin = float(np.finfo(np.float32).min)
mask_nodes = [
    helper.make_node("Unsqueeze", ["attention_mask", "ax12"], ["m4"], name="mask_unsq"),
    helper.make_node("Cast", ["m4"], ["m4f"], name="mask_cast_f", to=TensorProto.FLOAT),
    helper.make_node("Sub", ["one_f", "m4f"], ["inv"], name="mask_inv"),
    helper.make_node("Cast", ["inv"], ["padb"], name="mask_cast_b", to=TensorProto.BOOL),
    helper.make_node("Where", ["padb", "fmin_f", "scs"], ["scm1"], name="mask_where_min"),
    helper.make_node("Equal", ["m4", "zero_i"], ["pad_eq"], name="mask_eq"),
    helper.make_node("Where", ["pad_eq", "ninf_f", "scs"], ["scm2"], name="mask_where_inf"),
    helper.make_node("Add", ["scm1", "scm2"], ["scm12"], name="mask_sum"),
    helper.make_node("Mul", ["scm12", "half_f"], ["scm"], name="mask_mean"),
]
bm_nodes = [helper.make_node("Constant", [], [nm], name=nm + "_c",
                             value=numpy_helper.from_array(np.array(v, dtype=np.float32), nm + "_v"))
            for nm, v in [("fmin_f", fmin), ("ninf_f", -np.inf)]]
for nd in bert.graph.node:
    if nd.name == "pad_mask_c":
        continue
    if nd.name == "mask_add":
        bm_nodes += mask_nodes
        continue
    bm_nodes.append(nd)
bm_inits = list(bert.graph.initializer) + [ints("ax12", [1, 2])]
bert_mask = model(bm_nodes, [vi("x", [2, L], TensorProto.INT64),
                             vi("attention_mask", [2, L], TensorProto.INT64)],
                  [vi("y", [2, 5])], bm_inits, opset=13)
onnx.checker.check_model(bert_mask, full_check=True)
onnx.save(bert_mask, os.path.join(OUT, "bert_mask.onnx"))
bm_tokens = rng.integers(0, 12, (2, L)).astype(np.int64)
bm_mask = np.ones((2, L), dtype=np.int64)
bm_mask[0, 5:] = 0
bm_mask[1, 3:] = 0
bm_tokens.astype("<i4").tofile(os.path.join(OUT, "bert_mask.input.bin"))
bm_mask.astype("<i4").tofile(os.path.join(OUT, "bert_mask.input1.bin"))
np.asarray(ReferenceEvaluator(bert_mask).run(None, {"x": bm_tokens, "attention_mask": bm_mask})[0],
           dtype="<f4").tofile(os.path.join(OUT, "bert_mask.output.bin"))

# bool_ops: comparisons, logic, Where and Cast on tensors (not constants):
# y = Where(x > 0.2 or x < -0.3, x, 0.1 x) + float(not(...)) + float(and)
#     + float(int(4 x)) (truncation), through a Gemm to [N, 5]
bool_ops = model(
    [helper.make_node("Gemm", ["x", "w0"], ["h"], name="in_proj", transB=1),
     helper.make_node("Greater", ["h", "c02"], ["gt"], name="gt"),
     helper.make_node("Less", ["h", "cm03"], ["lt"], name="lt"),
     helper.make_node("Or", ["gt", "lt"], ["either"], name="or"),
     helper.make_node("Not", ["either"], ["neither"], name="not"),
     helper.make_node("Not", ["lt"], ["nlt"], name="not_lt"),
     helper.make_node("And", ["gt", "nlt"], ["both"], name="and"),
     helper.make_node("Mul", ["h", "c01"], ["small"], name="leak"),
     helper.make_node("Where", ["either", "h", "small"], ["sel"], name="where"),
     helper.make_node("Cast", ["neither"], ["neither_f"], name="cast_nf", to=TensorProto.FLOAT),
     helper.make_node("Cast", ["both"], ["both_f"], name="cast_bf", to=TensorProto.FLOAT),
     helper.make_node("Mul", ["h", "c4"], ["h4"], name="times4"),
     helper.make_node("Cast", ["h4"], ["h4i"], name="cast_i", to=TensorProto.INT64),
     helper.make_node("Cast", ["h4i"], ["h4t"], name="cast_t", to=TensorProto.FLOAT),
     helper.make_node("Add", ["sel", "neither_f"], ["s2"], name="add1"),
     helper.make_node("Add", ["s2", "both_f"], ["s3"], name="add2"),
     helper.make_node("Add", ["s3", "h4t"], ["s4"], name="add3"),
     helper.make_node("Gemm", ["s4", "w1"], ["y"], name="out_proj", transB=1)],
    [vi("x", ["N", 4])], [vi("y", ["N", 5])],
    [init("w0", 6, 4, scale=1.0), init("w1", 5, 6),
     numpy_helper.from_array(np.array(0.2, dtype=np.float32), "c02"),
     numpy_helper.from_array(np.array(-0.3, dtype=np.float32), "cm03"),
     numpy_helper.from_array(np.array(0.1, dtype=np.float32), "c01"),
     numpy_helper.from_array(np.array(4.0, dtype=np.float32), "c4")])
save(bool_ops, "bool_ops", rng.standard_normal((2, 4)).astype(np.float32))

# int_reuse: one int64 input read three times where memgrad wants floats
# (two Cast nodes, as exporters emit them, and a Transpose); the importer
# casts it to f32 once, not once per reader (test_onnx counts the casts).
# Its own generator, so the models above keep their values.
irng = np.random.default_rng(77)
int_reuse = model(
    [helper.make_node("Cast", ["mask"], ["m1"], to=TensorProto.FLOAT),
     helper.make_node("Cast", ["mask"], ["m2"], to=TensorProto.FLOAT),
     helper.make_node("Transpose", ["mask"], ["mt"], perm=[1, 0]),
     helper.make_node("Transpose", ["mt"], ["mtt"], perm=[1, 0]),
     helper.make_node("Cast", ["mtt"], ["m3"], to=TensorProto.FLOAT),
     helper.make_node("Mul", ["x", "m1"], ["a"]),
     helper.make_node("Add", ["a", "m2"], ["b"]),
     helper.make_node("Sub", ["b", "m3"], ["c"]),
     helper.make_node("Gemm", ["c", "w"], ["y"])],
    [vi("x", ["N", 4]), vi("mask", ["N", 4], TensorProto.INT64)],
    [vi("y", ["N", 3])],
    [numpy_helper.from_array(irng.standard_normal((4, 3)).astype(np.float32), "w")])
onnx.checker.check_model(int_reuse, full_check=True)
onnx.save(int_reuse, os.path.join(OUT, "int_reuse.onnx"))
ir_x = irng.standard_normal((2, 4)).astype(np.float32)
ir_m = irng.integers(0, 3, (2, 4)).astype(np.int64)
ir_x.astype("<f4").tofile(os.path.join(OUT, "int_reuse.input.bin"))
ir_m.astype("<i4").tofile(os.path.join(OUT, "int_reuse.input1.bin"))
np.asarray(ReferenceEvaluator(int_reuse).run(None, {"x": ir_x, "mask": ir_m})[0],
           dtype="<f4").tofile(os.path.join(OUT, "int_reuse.output.bin"))


# pooling with ceil_mode, each side's pads and count_include_pad (issue 12):
# one op per model, on its own generator so the models above keep their
# values. ONNX's rules are PyTorch's: a ceil_mode window starting past x's
# end is dropped, and count_include_pad=1 divides by the window clipped to
# the padded input.
prng = np.random.default_rng(1412)


def pool_model(name, op, hw, **attrs):
    x = prng.standard_normal((2, 2) + hw).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], name=name, **attrs)
    # the output's size from the reference evaluator itself
    probe = model([node], [vi("x", ["N", 2, hw[0], hw[1]])],
                  [vi("y", ["N", 2, None, None])], [], opset=13)
    oh, ow = ReferenceEvaluator(probe).run(None, {"x": x})[0].shape[2:]
    m = model([node], [vi("x", ["N", 2, hw[0], hw[1]])],
              [vi("y", ["N", 2, int(oh), int(ow)])], [], opset=13)
    save(m, name, x)


# ceil_mode adds a window that overhangs the end padding
pool_model("maxpool_ceil", "MaxPool", (6, 7), kernel_shape=[3, 3],
           strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
# ceil_mode with pads on one side only, both divisors
pool_model("avgpool_ceil", "AveragePool", (7, 6), kernel_shape=[3, 3],
           strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1, count_include_pad=1)
pool_model("avgpool_ceil_nopad", "AveragePool", (7, 6), kernel_shape=[3, 3],
           strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1)
# asymmetric pads, ONNX's default count_include_pad=0
pool_model("avgpool_pads", "AveragePool", (5, 6), kernel_shape=[3, 2],
           strides=[2, 1], pads=[0, 1, 1, 0])
# SAME_UPPER on an odd size: the pad goes at the end
pool_model("maxpool_same", "MaxPool", (5, 5), kernel_shape=[2, 2],
           strides=[2, 2], auto_pad="SAME_UPPER")

# attention: two self-attention blocks in the pattern the importer maps to
# memgrad's fused attention op, softmax(Q K^T * s + mask) V: the first with
# K^T from a Transpose, Mul by a scale and Add(scores, mask); the second with
# Div by sqrt(d), Add(mask, scores) and Softmax's axis given as 3
arng = np.random.default_rng(3030)


def ainit(name, *shape):
    return numpy_helper.from_array(
        (arng.standard_normal(shape) * 0.5).astype(np.float32), name)


amask = np.triu(np.full((5, 5), -1e9, dtype=np.float32), 1)
amask[:, 0] += 0.25  # a finite additive term too
anodes, ainits = [], [numpy_helper.from_array(amask, "amask"),
                      numpy_helper.from_array(np.array(0.5, np.float32),
                                              "ascale"),
                      numpy_helper.from_array(np.array(2.0, np.float32),
                                              "asqrt_d")]
src = "x"
for b in range(2):
    for part in "qkv":
        ainits.append(ainit(f"w{part}{b}", 4, 4))
        anodes.append(helper.make_node("MatMul", [src, f"w{part}{b}"],
                                       [f"{part}{b}"]))
    anodes.append(helper.make_node("Transpose", [f"k{b}"], [f"kt{b}"],
                                   perm=[0, 1, 3, 2]))
    anodes.append(helper.make_node("MatMul", [f"q{b}", f"kt{b}"], [f"s{b}"]))
    if b == 0:
        anodes.append(helper.make_node("Mul", [f"s{b}", "ascale"],
                                       [f"ss{b}"]))
        anodes.append(helper.make_node("Add", [f"ss{b}", "amask"],
                                       [f"sm{b}"]))
        anodes.append(helper.make_node("Softmax", [f"sm{b}"], [f"p{b}"],
                                       axis=-1))
    else:
        anodes.append(helper.make_node("Div", [f"s{b}", "asqrt_d"],
                                       [f"ss{b}"]))
        anodes.append(helper.make_node("Add", ["amask", f"ss{b}"],
                                       [f"sm{b}"]))
        anodes.append(helper.make_node("Softmax", [f"sm{b}"], [f"p{b}"],
                                       axis=3))
    anodes.append(helper.make_node("MatMul", [f"p{b}", f"v{b}"], [f"o{b}"]))
    src = f"o{b}"
anodes.append(helper.make_node("Identity", [src], ["y"]))
attn = model(anodes, [vi("x", ["N", 2, 5, 4])], [vi("y", ["N", 2, 5, 4])],
             ainits, opset=13)
save(attn, "attention", arng.standard_normal((2, 2, 5, 4)).astype(np.float32))

# attention_where: the masks as torch's masked_fill exports them, which the
# importer also maps to the fused op: block 0 Where(causal, -inf, scores)
# with a constant condition (True where masked), block 1 Where(keep,
# scores, -1e9) with a condition computed from the second input, a padding
# mask of keys to keep (int64 [N, 1, 1, 5], 1 = keep)
wnodes, winits = [], [
    numpy_helper.from_array(np.triu(np.ones((5, 5), dtype=bool), 1),
                            "wcausal"),
    numpy_helper.from_array(np.array(-np.inf, np.float32), "wninf"),
    numpy_helper.from_array(np.array(-1e9, np.float32), "wbig"),
    numpy_helper.from_array(np.array(0.5, np.float32), "wscale"),
    numpy_helper.from_array(np.array(2.0, np.float32), "wsqrt_d")]
wnodes.append(helper.make_node("Cast", ["keep"], ["keepb"],
                               to=TensorProto.BOOL))
src = "x"
for b in range(2):
    for part in "qkv":
        winits.append(ainit(f"w{part}{b}", 4, 4))
        wnodes.append(helper.make_node("MatMul", [src, f"w{part}{b}"],
                                       [f"{part}{b}"]))
    wnodes.append(helper.make_node("Transpose", [f"k{b}"], [f"kt{b}"],
                                   perm=[0, 1, 3, 2]))
    wnodes.append(helper.make_node("MatMul", [f"q{b}", f"kt{b}"], [f"s{b}"]))
    if b == 0:
        wnodes.append(helper.make_node("Mul", [f"s{b}", "wscale"],
                                       [f"ss{b}"]))
        wnodes.append(helper.make_node("Where", ["wcausal", "wninf", f"ss{b}"],
                                       [f"sm{b}"]))
    else:
        wnodes.append(helper.make_node("Div", [f"s{b}", "wsqrt_d"],
                                       [f"ss{b}"]))
        wnodes.append(helper.make_node("Where", ["keepb", f"ss{b}", "wbig"],
                                       [f"sm{b}"]))
    wnodes.append(helper.make_node("Softmax", [f"sm{b}"], [f"p{b}"], axis=-1))
    wnodes.append(helper.make_node("MatMul", [f"p{b}", f"v{b}"], [f"o{b}"]))
    src = f"o{b}"
wnodes.append(helper.make_node("Identity", [src], ["y"]))
attn_where = model(wnodes, [vi("x", ["N", 2, 5, 4]),
                            vi("keep", ["N", 1, 1, 5], TensorProto.INT64)],
                   [vi("y", ["N", 2, 5, 4])], winits, opset=13)
onnx.checker.check_model(attn_where, full_check=True)
onnx.save(attn_where, os.path.join(OUT, "attention_where.onnx"))
w_x = arng.standard_normal((2, 2, 5, 4)).astype(np.float32)
w_keep = np.ones((2, 1, 1, 5), dtype=np.int64)
w_keep[0, ..., 3:] = 0
w_keep[1, ..., 4:] = 0
w_x.astype("<f4").tofile(os.path.join(OUT, "attention_where.input.bin"))
w_keep.astype("<i4").tofile(os.path.join(OUT, "attention_where.input1.bin"))
np.asarray(ReferenceEvaluator(attn_where).run(None, {"x": w_x, "keep": w_keep})[0],
           dtype="<f4").tofile(os.path.join(OUT, "attention_where.output.bin"))


# attention_causal: constant masks the importer may take as the fused op's
# causal flag (issue 46) and one it must not: block 0 Where(triu(T, 1),
# -inf, scores), causal; block 1 Add(scores, constant 0 / -inf above the
# diagonal) from a Constant node (a float initializer would be a trained
# parameter), causal; block 2 Where(triu(T, 2), -inf, scores), which keeps
# the first superdiagonal: a mask tensor
crng = np.random.default_rng(4646)
cnodes, cinits = [], [
    numpy_helper.from_array(np.triu(np.ones((5, 5), dtype=bool), 1), "ccausal"),
    numpy_helper.from_array(np.triu(np.ones((5, 5), dtype=bool), 2), "cshift"),
    numpy_helper.from_array(np.array(-np.inf, np.float32), "cninf"),
    numpy_helper.from_array(np.array(0.5, np.float32), "cscale")]
cnodes.append(helper.make_node(
    "Constant", [], ["cadd"],
    value=numpy_helper.from_array(
        np.triu(np.full((5, 5), -np.inf, dtype=np.float32), 1), "cadd_v")))
src = "x"
for b in range(3):
    for part in "qkv":
        cinits.append(numpy_helper.from_array(
            (crng.standard_normal((4, 4)) * 0.5).astype(np.float32), f"c{part}{b}"))
        cnodes.append(helper.make_node("MatMul", [src, f"c{part}{b}"],
                                       [f"{part}{b}"]))
    cnodes.append(helper.make_node("Transpose", [f"k{b}"], [f"kt{b}"],
                                   perm=[0, 1, 3, 2]))
    cnodes.append(helper.make_node("MatMul", [f"q{b}", f"kt{b}"], [f"s{b}"]))
    cnodes.append(helper.make_node("Mul", [f"s{b}", "cscale"], [f"ss{b}"]))
    if b == 1:
        cnodes.append(helper.make_node("Add", [f"ss{b}", "cadd"], [f"sm{b}"]))
    else:
        cnodes.append(helper.make_node(
            "Where", ["ccausal" if b == 0 else "cshift", "cninf", f"ss{b}"],
            [f"sm{b}"]))
    cnodes.append(helper.make_node("Softmax", [f"sm{b}"], [f"p{b}"], axis=-1))
    cnodes.append(helper.make_node("MatMul", [f"p{b}", f"v{b}"], [f"o{b}"]))
    src = f"o{b}"
cnodes.append(helper.make_node("Identity", [src], ["y"]))
attn_causal = model(cnodes, [vi("x", ["N", 2, 5, 4])], [vi("y", ["N", 2, 5, 4])],
                    cinits, opset=13)
save(attn_causal, "attention_causal",
     crng.standard_normal((2, 2, 5, 4)).astype(np.float32))

print("wrote models to", OUT)
