#!/usr/bin/env python3
"""scripts/wheel-check.py - an installed memgrad wheel works on its own
(issue 48 item 3). scripts/check-wheel.sh copies this file out of the
repository and runs it in a fresh virtual environment, with no
MEMGRAD_LIBRARY and no LD_LIBRARY_PATH, so that only the installed wheel
can answer.

    python wheel-check.py [--forbid DIR]... [--cuda]

Checks, each a failure when it does not hold:
- `import memgrad` comes from site-packages, and its libmemgrad from inside
  the installed package (not a build tree, not /usr/lib);
- an MLP's graph, its gradients (mg_gradients, policy memory) and a plan
  run on the CPU: loss and gradients within 1e-4 of numpy's in float64,
  and the pool's measured peak equal to the plan's prediction;
- the ONNX importer's library (libmemgrad_onnx, protobuf-c) loads and lists
  its op types;
- every shared object that importing and running memgrad mapped is inside
  the environment, or is one of the C and C++ runtimes every Linux has
  (glibc's, libstdc++, libgcc_s): the wheel carries igraph, OpenBLAS,
  oneDNN, libgomp and the rest itself; and none is under a --forbid DIR;
- the CUDA module (memgrad/lib/libmemgrad-cuda.so) is in the wheel, and
  whether it can load here (it needs libcudart.so.13, libcublas.so.13 and
  libcudnn.so.9 from the machine or from NVIDIA's pip wheels: docs/install.md)
  is reported; with --cuda it must load, and the same plan must run on
  the GPU with torch's CUDA tensors and match the CPU's result.
"""
import argparse
import ctypes
import glob
import os
import sys
import sysconfig
import tempfile  # noqa: F401 (imported before the snapshot: memgrad uses it)

import numpy as np

# The C and C++ runtimes a manylinux wheel may take from the system.
SYSTEM_OK = ("libc.so", "libm.so", "libmvec.so", "libdl.so", "librt.so",
             "libpthread.so", "ld-linux", "libstdc++.so", "libgcc_s.so",
             "libutil.so", "libresolv.so")


def mapped():
    """Paths of the shared objects mapped into this process."""
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and ".so" in parts[5]:
                out.add(parts[5].strip())
    return out


def fail(msg):
    print("wheel-check: FAIL: " + msg)
    sys.exit(1)


def mlp():
    import memgrad as mg
    g = mg.Graph()
    x = g.input("x", "float32", (8, 6))
    t = g.input("t", "float32", (8, 3))
    w1 = g.param("w1", "float32", (6, 10))
    w2 = g.param("w2", "float32", (10, 3))
    loss = g.mse(g.matmul(g.tanh(g.matmul(x, w1)), w2), t)
    grads = g.gradients([loss], [w1, w2], policy="memory")
    r = np.random.default_rng(0)
    feeds = {"x": r.standard_normal((8, 6)).astype(np.float32),
             "t": r.standard_normal((8, 3)).astype(np.float32),
             "w1": (0.5 * r.standard_normal((6, 10))).astype(np.float32),
             "w2": (0.5 * r.standard_normal((10, 3))).astype(np.float32)}
    return g, loss, grads, feeds


def reference(f):
    x, t, w1, w2 = (f[k].astype(np.float64) for k in ("x", "t", "w1", "w2"))
    h = np.tanh(x @ w1)
    d = h @ w2 - t
    gy = 2 * d / d.size
    gw2 = h.T @ gy
    gw1 = x.T @ ((gy @ w2.T) * (1 - h ** 2))
    return np.mean(d ** 2), [gw1, gw2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--forbid", action="append", default=[],
                    help="no loaded object may lie under this directory")
    ap.add_argument("--cuda", action="store_true",
                    help="require the CUDA module to load and run on a GPU")
    a = ap.parse_args()
    for var in ("MEMGRAD_LIBRARY", "MEMGRAD_BACKEND_DIR", "LD_LIBRARY_PATH"):
        if os.environ.get(var):
            fail(f"{var} is set ({os.environ[var]}): the check must find "
                 "everything through the installed wheel alone")

    # Python's own modules that the check itself (numpy.random, hashlib
    # under it) would load later: loaded now, so that only memgrad's
    # objects are new below
    import binascii  # noqa: F401
    import hashlib  # noqa: F401
    np.random.default_rng(0).standard_normal(1)
    before = mapped()
    import memgrad as mg
    from memgrad import _lib
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    pkg = os.path.dirname(os.path.realpath(mg.__file__))
    print(f"memgrad {pkg}")
    if not pkg.startswith(site + os.sep):
        fail(f"memgrad imported from {pkg}, not from {site}")
    libpath = os.path.realpath(_lib._find_library())
    print(f"libmemgrad {libpath}")
    if not libpath.startswith(pkg + os.sep):
        fail(f"libmemgrad is {libpath}, not inside the package")

    # a graph, mg_gradients, a plan, a run
    g, loss, grads, feeds = mlp()
    plan = g.compile([loss] + grads)
    ex = mg.Executor()
    out = ex.run(plan, feeds)
    ref_loss, ref = reference(feeds)
    got = float(np.asarray(out[loss]))
    if abs(got - ref_loss) > 1e-4 * abs(ref_loss):
        fail(f"loss {got} against numpy's {ref_loss}")
    for gt, r in zip(grads, ref):
        err = np.max(np.abs(np.asarray(out[gt]) - r)) / np.max(np.abs(r))
        if err > 1e-4:
            fail(f"gradient {gt.name}: relative error {err:.3g} against numpy")
    pred = plan.predicted_peak
    meas = ex.pool_stats()["peak_bytes_in_use"]
    print(f"cpu: loss {got:.6f} (numpy {ref_loss:.6f}), gradients within "
          f"1e-4, pool peak {meas} bytes, predicted {pred}")
    if pred != meas:
        fail(f"pool peak {meas} != predicted {pred}")

    ops = mg.onnx_op_types()
    print(f"onnx: libmemgrad_onnx loaded, {len(ops)} op types")
    if len(ops) < 10:
        fail("the ONNX importer lists fewer than 10 op types")

    # everything that memgrad brought in
    new = sorted(mapped() - before)
    env = os.path.realpath(sys.prefix)
    bad = []
    for p in new:
        rp = os.path.realpath(p)
        if any(rp.startswith(os.path.realpath(d) + os.sep) for d in a.forbid):
            bad.append(f"{p} (under a forbidden directory)")
        elif not rp.startswith(env + os.sep) and \
                not os.path.basename(rp).startswith(SYSTEM_OK):
            bad.append(f"{p} (outside the environment {env})")
    print("loaded by memgrad:")
    for p in new:
        print("  " + p)
    if bad:
        fail("objects from outside the wheel: " + "; ".join(bad))

    mod = os.path.join(pkg, "lib", "libmemgrad-cuda.so")
    if not os.path.exists(mod):
        if a.cuda:
            fail("no libmemgrad-cuda.so in the wheel")
        print("cuda: no libmemgrad-cuda.so in this wheel (built without nvcc)")
        return
    try:
        ctypes.CDLL(mod, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        print("cuda: libmemgrad-cuda.so is in the wheel and loads here "
              "(its CUDA runtime libraries were found by the loader)")
        loaded = True
    except OSError as e:
        print(f"cuda: libmemgrad-cuda.so is in the wheel; it does not load "
              f"on its own here ({e}): it needs the CUDA runtime, "
              "docs/install.md")
        loaded = False
    if not a.cuda:
        return
    # As memgrad.torch runs: torch imported first has loaded its own CUDA
    # libraries (libcudart.so.13, libcublas.so.13, libcudnn.so.9 from its
    # nvidia-* wheels), which the module's same-named needs then reuse.
    import torch
    if not loaded:
        try:
            ctypes.CDLL(mod, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        except OSError as e:
            fail(f"libmemgrad-cuda.so does not load even after import "
                 f"torch: {e}")
        print("cuda: libmemgrad-cuda.so loads once torch is imported "
              "(torch's CUDA libraries)")
    cuda_libs = sorted(p for p in mapped() if any(
        n in os.path.basename(p) for n in ("libcudart", "libcublas",
                                           "libcudnn.so")))
    print("cuda: the CUDA libraries in use: " + ", ".join(cuda_libs))
    exc = mg.Executor(device="cuda")
    tf = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    outc = exc.run(plan, tf)
    for t in [loss] + grads:
        c = outc[t].cpu().numpy()
        h = np.asarray(out[t])
        if not np.allclose(c, h, rtol=1e-5, atol=1e-6):
            fail(f"{t.name}: the GPU's result differs from the CPU's")
    measc = exc.pool_stats()["peak_bytes_in_use"]
    print(f"cuda: the plan ran on {torch.cuda.get_device_name()} through the "
          f"wheel's module, results equal the CPU's within 1e-5, pool peak "
          f"{measc}, predicted {plan.predicted_peak}")


if __name__ == "__main__":
    main()
    print("wheel-check: passed")
