#!/usr/bin/env python3
"""make_seeds.py - writes tests/fuzz/seeds/: small ONNX models from the
hostile cases of issue 25 (test_onnx_hostile.c builds the same ones), as
starting points for the libFuzzer harnesses: external data (fuzz_onnx_extdata
serves a directory with a data file, a link and a FIFO in it), folded
Transpose, Range, Resize, Concat and Cast with their attributes at the edges
that once crashed or misled the importer, bad opsets and IR versions, and a
model nesting TypeProto 5000 levels deep. The files are committed; run this
again (python3-onnx) only to change them:

    python3 tests/fuzz/make_seeds.py tests/fuzz/seeds
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "seeds")


def model(nodes, inputs, outputs, inits=(), opset=13, ir=8):
    g = helper.make_graph(nodes, "seed", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def out(name):
    return helper.make_empty_tensor_value_info(name)


def const(name, array):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(array, name))


def save(m, name):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(m.SerializeToString())


def external(location, offset=None):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location), ("length", "16")]
    if offset is not None:
        entries.append(("offset", offset))
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    return model([], [], [out("w")], [t])


os.makedirs(OUT, exist_ok=True)
# external data: fuzz_onnx_extdata's directory holds data.bin (64 bytes),
# link.bin -> data.bin, sub/ with data.bin, and pipe.bin (a FIFO)
for name, loc in [("ext_plain", "data.bin"), ("ext_link", "link.bin"),
                  ("ext_sub", "sub/data.bin"), ("ext_fifo", "pipe.bin"),
                  ("ext_up", "../data.bin"), ("ext_abs", "/etc/passwd")]:
    save(external(loc), name + ".onnx")
save(external("data.bin", "48"), "ext_offset.onnx")

# folding
c = np.arange(3000, dtype=np.float32).reshape(3, 1000)
for perm, name in [([0, 0], "transpose_dup"), ([1, 0], "transpose_ok")]:
    save(model([const("c", c),
                helper.make_node("Transpose", ["c"], ["y"], name="tr", perm=perm)],
               [], [out("y")]), name + ".onnx")
save(model([const("s", np.array(0, np.int64)), const("l", np.array(10, np.int64)),
            const("d", np.array(1.0, np.float32)),
            helper.make_node("Range", ["s", "l", "d"], ["y"], name="rg")],
           [], [out("y")]), "range_mixed.onnx")
save(model([const("sc", np.array([1, 1, 4096, 1], np.float32)),
            helper.make_node("Resize", ["x", "", "sc"], ["y"], name="rs")],
           [vi("x", [1, 1, 2**52, 1])], [out("y")]), "resize_overflow.onnx")
save(model([helper.make_node("Concat", ["a", "b"], ["y"], name="cat", axis=2**32 + 1)],
           [vi("a", [2, 3]), vi("b", [2, 3])], [out("y")]), "concat_axis.onnx")
save(model([const("a", np.ones(2, np.float32)),
            helper.make_node("Cast", ["a"], ["y"], name="cast", to=999)],
           [], [out("y")]), "cast_to.onnx")
for opset, ir in [(1, 8), (99, 8), (13, 99)]:
    save(model([helper.make_node("Identity", ["a"], ["y"], name="id")],
               [vi("a", [2])], [out("y")], opset=opset, ir=ir),
         "versions_%d_%d.onnx" % (opset, ir))

# 5000 levels of TypeProto.sequence_type.elem_type, as raw wire bytes


def wrap(buf, field):
    n, hdr = len(buf), bytearray([field << 3 | 2])
    while True:
        hdr.append((n & 0x7f) | (0x80 if n > 0x7f else 0))
        n >>= 7
        if not n:
            break
    return bytes(hdr) + buf


t = b""
for _ in range(5000):
    t = wrap(wrap(t, 1), 4)
graph = wrap(b"\x0a\x01x" + wrap(t, 2), 11)
with open(os.path.join(OUT, "nesting_5000.onnx"), "wb") as f:
    f.write(b"\x08\x08\x42\x02\x10\x0d" + wrap(graph, 7))

# 16-bit floats (issue 47): a bfloat16 input times a bfloat16 initializer
# in raw bytes, Cast to FLOAT; a float16 initializer as bit patterns in
# int32_data, added and cast back to FLOAT16
w = TensorProto(name="w", data_type=TensorProto.BFLOAT16, dims=[3, 2],
                raw_data=np.array([0x3f80, 0xbf80, 0x4000, 0, 0x3f00, 0x7f80],
                                  "<u2").tobytes())
save(model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Cast", ["h"], ["y"], name="cast",
                             to=TensorProto.FLOAT)],
           [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])],
           [out("y")], [w]), "half_raw.onnx")
b = TensorProto(name="b", data_type=TensorProto.FLOAT16, dims=[2],
                int32_data=[0x3c00, 0xfc00])
save(model([helper.make_node("Add", ["x", "b"], ["h"], name="add"),
            helper.make_node("Cast", ["h"], ["y"], name="cast",
                             to=TensorProto.FLOAT16)],
           [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 2])],
           [out("y")], [b]), "half_field.onnx")
