#!/usr/bin/env python3
"""make_models.py - writes the ONNX models bench/onnx/run.sh trains with
memgrad-onnx: a ResNet-18-shaped CNN (64x64 images), a 4-layer GPT-style
decoder and a 3-level U-Net, built with the onnx package's helper API in the
node patterns torch.onnx.export emits (no PyTorch on this machine), random
init. Not committed (tens of MB); run.sh regenerates them.

    python3 bench/onnx/make_models.py OUTDIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1]
rng = np.random.default_rng(5)
os.makedirs(OUT, exist_ok=True)


class B:
    def __init__(self):
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, p):
        self.k += 1
        return "%s%d" % (p, self.k)

    def w(self, *shape, scale=None, value=None):
        n = self.name("w")
        if value is not None:
            arr = np.asarray(value)
        else:
            fan = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            arr = (rng.standard_normal(shape) * (scale or (1.0 / fan) ** 0.5)).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, n))
        return n

    def op(self, t, ins, **attrs):
        o = self.name(t.lower())
        self.nodes.append(helper.make_node(t, ins, [o], name=o, **attrs))
        return o

    def conv_bn(self, x, cin, cout, k, s=1, relu=True):
        c = self.op("Conv", [x, self.w(cout, cin, k, k, scale=(2.0 / (cin * k * k)) ** 0.5)],
                    kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4)
        ones, zeros = np.ones(cout, np.float32), np.zeros(cout, np.float32)
        y = self.op("BatchNormalization", [c, self.w(value=ones), self.w(value=zeros),
                                           self.w(value=zeros), self.w(value=ones)])
        return self.op("Relu", [y]) if relu else y

    def save(self, name, inputs, out_name, classes, opset):
        self.nodes[-1].output[0] = "y"
        g = helper.make_graph(self.nodes, name, inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", classes])],
                              self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        onnx.save(m, os.path.join(OUT, out_name))


def head(b, x, c, classes):
    g = b.op("GlobalAveragePool", [x])
    f = b.op("Flatten", [g], axis=1)
    return b.op("Gemm", [f, b.w(classes, c), b.w(value=np.zeros(classes, np.float32))], transB=1)


# ResNet-18 layout (2 basic blocks per stage), 32..256 channels, 64x64 input
b = B()
x = b.conv_bn("x", 3, 32, 3)
x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
cin = 32
for stage, c in enumerate([32, 64, 128, 256]):
    for blk in range(2):
        s = 2 if stage > 0 and blk == 0 else 1
        h = b.conv_bn(x, cin, c, 3, s)
        h = b.conv_bn(h, c, c, 3, 1, relu=False)
        sc = b.conv_bn(x, cin, c, 1, s, relu=False) if (s != 1 or cin != c) else x
        x = b.op("Relu", [b.op("Add", [h, sc])])
        cin = c
head(b, x, 256, 10)
b.save("resnet18", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 64, 64])],
       "resnet18.onnx", 10, 14)

# U-Net, 3 levels, 32..128 channels, 64x64 input, 10 classes after pooling
b = B()
skips, x, cin = [], "x", 3
for c in [32, 64]:
    x = b.conv_bn(b.conv_bn(x, cin, c, 3), c, c, 3)
    skips.append((x, c))
    x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    cin = c
x = b.conv_bn(b.conv_bn(x, cin, 128, 3), 128, 128, 3)
cin = 128
scales = b.w(value=np.array([1, 1, 2, 2], np.float32))
for (s, c) in reversed(skips):
    up = b.op("Resize", [x, "", scales], mode="nearest",
              coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    x = b.op("Concat", [s, up], axis=1)
    x = b.conv_bn(b.conv_bn(x, c + cin, c, 3), c, c, 3)
    cin = c
head(b, x, 32, 10)
b.save("unet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 64, 64])],
       "unet.onnx", 10, 13)

# GPT-style decoder: 4 pre-norm layers, d 256, 4 heads, 128 tokens
L, D, H, V, NL = 128, 256, 4, 1000, 4
b = B()
h = b.op("Add", [b.op("Gather", [b.w(V, D, scale=0.02), "x"]),
                 b.op("Gather", [b.w(L, D, scale=0.02),
                                 b.w(value=np.arange(L, dtype=np.int64))])])
hs = b.w(value=np.array([0, 0, H, D // H], np.int64))
ms = b.w(value=np.array([0, 0, D], np.int64))
mask = b.w(value=np.triu(np.ones((L, L), bool), 1))
ninf = b.w(value=np.array(-np.inf, np.float32))
for _ in range(NL):
    ln = b.op("LayerNormalization", [h, b.w(value=np.ones(D, np.float32)),
                                     b.w(value=np.zeros(D, np.float32))], axis=-1)
    q, k, v = [b.op("Reshape", [b.op("MatMul", [ln, b.w(D, D)]), hs]) for _ in range(3)]
    q = b.op("Transpose", [q], perm=[0, 2, 1, 3])
    kT = b.op("Transpose", [k], perm=[0, 2, 3, 1])
    v = b.op("Transpose", [v], perm=[0, 2, 1, 3])
    sc = b.op("Div", [b.op("MatMul", [q, kT]),
                      b.w(value=np.array((D // H) ** 0.5, np.float32))])
    att = b.op("Softmax", [b.op("Where", [mask, ninf, sc])], axis=-1)
    o = b.op("Reshape", [b.op("Transpose", [b.op("MatMul", [att, v])], perm=[0, 2, 1, 3]), ms])
    h = b.op("Add", [h, b.op("MatMul", [o, b.w(D, D)])])
    ln = b.op("LayerNormalization", [h, b.w(value=np.ones(D, np.float32)),
                                     b.w(value=np.zeros(D, np.float32))], axis=-1)
    f = b.op("MatMul", [ln, b.w(D, 4 * D)])
    g = b.op("Mul", [b.op("Mul", [f, b.op("Add", [b.op("Erf", [b.op("Div", [f, b.w(value=np.array(2 ** 0.5, np.float32))])]),
                                                   b.w(value=np.array(1.0, np.float32))])]),
                     b.w(value=np.array(0.5, np.float32))])
    h = b.op("Add", [h, b.op("MatMul", [g, b.w(4 * D, D)])])
pool = b.op("ReduceMean", [h], axes=[1], keepdims=0)
b.op("Gemm", [pool, b.w(10, D), b.w(value=np.zeros(10, np.float32))], transB=1)
b.save("gpt", [helper.make_tensor_value_info("x", TensorProto.INT64, ["N", L])], "gpt.onnx", 10, 17)
print("wrote", OUT)
