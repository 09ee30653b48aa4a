"""The ctypes mirrors in memgrad/_lib.py against the C headers (issue 27
item 7): a C program compiled against include/ prints every mirrored
struct's size and each field's offset, and every enum value Python spells
out; each must equal what ctypes computes. A field added to a C struct, or
a reordered enum, fails here instead of corrupting memory at run time."""
import ctypes
import os
import shutil
import subprocess

import pytest

import memgrad
from memgrad import _lib

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")

# C struct -> (ctypes mirror, its fields in order, header)
STRUCTS = {
    "mg_binding": (_lib.Binding, "memgrad.h"),
    "mg_checkpoints": (_lib.Checkpoints, "memgrad.h"),
    "mg_plan_options": (_lib.PlanOptions, "memgrad.h"),
    "mg_plan_summary": (_lib.PlanSummary, "memgrad.h"),
    "mg_phase_peaks": (_lib.PhasePeaks, "memgrad.h"),
    "mg_plan_arena": (_lib.PlanArena, "memgrad.h"),
    "mg_exec_options": (_lib.ExecOptions, "memgrad.h"),
    "mg_pool2d_opts": (_lib.Pool2dOpts, "memgrad.h"),
    "mg_attention_opts": (_lib.AttentionOpts, "memgrad.h"),
    "mg_pool_stats": (_lib.PoolStats, "memgrad.h"),
    "mg_plan_offload": (_lib.PlanOffload, "memgrad.h"),
    "mg_host_stats": (_lib.HostStats, "memgrad.h"),
    "mg_onnx_options": (_lib.OnnxOptions, "memgrad_onnx.h"),
    "DLDevice": (_lib.DLDevice, "dlpack/dlpack.h"),
    "DLDataType": (_lib.DLDataType, "dlpack/dlpack.h"),
    "DLTensor": (_lib.DLTensor, "dlpack/dlpack.h"),
    "DLManagedTensor": (_lib.DLManagedTensor, "dlpack/dlpack.h"),
}

ENUMS = dict(
    [("MG_" + {"float32": "F32", "float64": "F64", "int32": "I32",
               "int64": "I64", "bfloat16": "BF16", "float16": "F16"}[k], v)
      for k, v in memgrad._DTYPES.items()]
    + [("MG_CKPT_" + k.upper(), v) for k, v in memgrad.POLICIES.items()]
    + [("MG_DEVICE_" + k.upper(), v) for k, v in memgrad._DEVICES.items()])


def _c_program():
    lines = ["#include <stddef.h>", "#include <stdio.h>",
             "#include <memgrad.h>", "#include <memgrad_onnx.h>",
             "#include <dlpack/dlpack.h>",
             "int main(void) {"]
    for name, (mirror, _) in STRUCTS.items():
        lines.append('printf("size %s %%zu\\n", sizeof(%s));' % (name, name))
        for field, _ in mirror._fields_:
            lines.append('printf("offset %s.%s %%zu\\n", offsetof(%s, %s));'
                         % (name, field, name, field))
    for name in ENUMS:
        lines.append('printf("enum %s %%d\\n", (int)%s);' % (name, name))
    lines += ["return 0;", "}"]
    return "\n".join(lines)


def test_ctypes_mirrors_match_the_headers(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("skipped: no C compiler to read the headers with")
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text(_c_program())
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"),
                    str(src), "-o", str(exe)], check=True)
    want = {}
    for line in subprocess.run([str(exe)], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        kind, key, value = line.split()
        want[(kind, key)] = int(value)
    bad = []
    for name, (mirror, _) in STRUCTS.items():
        if ctypes.sizeof(mirror) != want[("size", name)]:
            bad.append("%s: sizeof %d in C, %d in ctypes"
                       % (name, want[("size", name)], ctypes.sizeof(mirror)))
        for field, _ in mirror._fields_:
            got = getattr(mirror, field).offset
            if got != want[("offset", "%s.%s" % (name, field))]:
                bad.append("%s.%s: offset %d in C, %d in ctypes" % (
                    name, field, want[("offset", "%s.%s" % (name, field))],
                    got))
    for name, value in ENUMS.items():
        if want[("enum", name)] != value:
            bad.append("%s = %d in C, %d in Python"
                       % (name, want[("enum", name)], value))
    assert not bad, "\n".join(bad)
