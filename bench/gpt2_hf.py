"""Hugging Face GPT-2 (6 layers, d 256, T 256, batch 4, vocabulary 8192,
no dropout, SDPA attention) trained through memgrad.torch.Module beside
PyTorch's own points: eager, per-block torch.utils.checkpoint
(non-reentrant), selective activation checkpointing (the same per-block
checkpoint with torch's SAC policy API saving the matmuls' and the
attention's outputs and recomputing the rest), and torch.compile (Inductor)
at its default partitioner and at activation_memory_budget 0.5. One thread,
float32. The loss: by default logsumexp of the logits (mean), in PyTorch
for all; with --loss labels the model's own (labels given: Hugging Face's
shifted cross-entropy), inside what memgrad and torch.compile capture.

    OMP_NUM_THREADS=1 python bench/gpt2_hf.py [--steps 5] [--runs a,b]
        [--loss logsumexp|labels]

bench/results/gpt2-hf.txt is its output (date, command line, machine and
commit in its header).
Time: the median of interleaved training steps in one process (zero_grad
(set_to_none=True), forward, loss, backward), after one step that
compiles what torch.compile compiles.
Memory: in a fresh process per run, the model built (wrapped, compiled)
and one step taken, then .grad set to None, memgrad's pool trimmed,
Python's garbage collected and malloc trimmed; the peak RSS (VmHWM, reset
through /proc/self/clear_refs) over two more steps, less the RSS before
them. For memgrad also the pool's measured peak and the plan's
prediction."""
import argparse
import copy
import ctypes
import functools
import json
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from capture_zoo import (_header, _rss_bytes as rss_bytes,  # noqa: E402
                         _trim)
import memgrad.torch as mt  # noqa: E402

RUNS = ["eager", "per-block checkpoint", "selective checkpoint",
        "torch.compile", "torch.compile budget 0.5", "memgrad none",
        "memgrad memory"]


def model():
    import transformers as T
    cfg = T.GPT2Config(n_layer=6, n_embd=256, n_head=4, vocab_size=8192,
                       n_positions=256, resid_pdrop=0.0, embd_pdrop=0.0,
                       attn_pdrop=0.0)
    cfg._attn_implementation = "sdpa"
    return T.GPT2LMHeadModel(cfg).train()


def loss_of(logits):
    return logits.logsumexp(-1).mean()


def _sac_policy():
    """torch's selective checkpointing: keep what the matmuls and the
    attention make, recompute everything else in the backward pass."""
    from torch.utils.checkpoint import CheckpointPolicy
    aten = torch.ops.aten
    save = {aten.mm.default, aten.addmm.default, aten.bmm.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default,
            aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default}

    def policy(ctx, op, *args, **kwargs):
        return (CheckpointPolicy.MUST_SAVE if op in save else
                CheckpointPolicy.PREFER_RECOMPUTE)
    return policy


def make(name, base, ids, labels=False):
    """(step function, module whose .grad it fills, memgrad wrapper or
    None) for run `name`; labels: the model computes the loss."""
    m = copy.deepcopy(base)
    kw = {"labels": ids} if labels else {}

    def out(o):
        return o.loss if labels else loss_of(o.logits)
    if name == "eager":
        def fwd(x):
            return out(m(x, use_cache=False, **kw))
    elif name in ("per-block checkpoint", "selective checkpoint"):
        ck = {"use_reentrant": False}
        if name == "selective checkpoint":
            from torch.utils.checkpoint import \
                create_selective_checkpoint_contexts
            ck["context_fn"] = functools.partial(
                create_selective_checkpoint_contexts, _sac_policy())
        m.activation_checkpointing_enable(activation_checkpointing_kwargs=ck)

        def fwd(x):
            return out(m(x, use_cache=False, **kw))
    elif name.startswith("torch.compile"):
        c = torch.compile(m)
        budget = 0.5 if name.endswith("0.5") else 1.0

        def fwd(x):
            # the partitioner reads the budget when it compiles (the
            # first call); later calls run what it made
            with torch._functorch.config.patch(
                    activation_memory_budget=budget):
                return out(c(x, use_cache=False, **kw))
    elif name.startswith("memgrad "):
        w = mt.Module(m, (ids,), policy=name.split()[1],
                      example_kwargs=kw)

        def fwd(x):
            return out(w(x, **kw))
        return _step(fwd, m, ids), m, w
    else:
        raise ValueError("no run %r" % name)
    return _step(fwd, m, ids), m, None


def _step(fwd, m, ids):
    def step():
        m.zero_grad(set_to_none=True)
        fwd(ids).backward()
    return step


def one(name, labels):
    """A fresh process's run: its peak RSS increase over two steps."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    base = model()
    ids = torch.randint(0, 8192, (4, 256))
    step, m, w = make(name, base, ids, labels)
    del base
    step()  # compiles, for torch.compile
    m.zero_grad(set_to_none=True)
    if w is not None:
        w.executor.pool_trim()
    _trim()
    before = rss_bytes()
    # the peak from here on: writing 5 to clear_refs resets VmHWM (Linux)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    for _ in range(2):
        step()
    with open("/proc/self/status") as f:
        hwm = [int(line.split()[1]) * 1024 for line in f
               if line.startswith("VmHWM:")][0]
    # where it went: memgrad's pool, the gradients (.grad, torch's), and
    # what malloc holds freed but not returned (glibc's mallinfo2)
    pool = w.executor.pool_stats()["bytes_reserved"] if w else 0
    grads = sum(p.grad.numel() * p.grad.element_size()
                for p in m.parameters() if p.grad is not None)
    print(json.dumps({"rss": max(0, hwm - before), "pool": pool,
                      "grads": grads, "malloc_free": _malloc_free()}))


def _malloc_free():
    class Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
            "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        f = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return -1
    f.restype = Mallinfo2
    return f().fordblks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--runs", default=",".join(RUNS),
                    help="comma-separated, of: " + ", ".join(RUNS))
    ap.add_argument("--loss", choices=("logsumexp", "labels"),
                    default="logsumexp")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    opt = ap.parse_args()
    labels = opt.loss == "labels"
    if opt.one:
        return one(opt.one, labels)
    names = opt.runs.split(",")
    torch.set_num_threads(1)
    _header(sys.argv)
    torch.manual_seed(0)
    base = model()
    ids = torch.randint(0, 8192, (4, 256))
    runs, pool = {}, {}
    for name in names:
        step, m, w = make(name, base, ids, labels)
        if w is not None:
            w.executor.reset_peak()
        step()  # compiles, for torch.compile
        if w is not None:
            pool[name] = (w.executor.pool_stats()["peak_bytes_in_use"],
                          w.predicted_peak)
        runs[name] = step
    times = {k: [] for k in runs}
    for _ in range(opt.steps):
        for k, step in runs.items():
            t = time.perf_counter()
            step()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    del runs
    _trim()
    parts = {}
    for k in names:
        try:
            parts[k] = json.loads(subprocess.check_output(
                [sys.executable, __file__, "--one", k, "--loss",
                 opt.loss]).decode()
                .splitlines()[-1])
        except (subprocess.CalledProcessError, ValueError, IndexError):
            parts[k] = {"rss": 0, "pool": 0, "grads": 0, "malloc_free": 0,
                        "failed": True}
    rss = {k: v["rss"] for k, v in parts.items()}
    print("# time: median of %d interleaved steps, after one that compiles;"
          " RSS: peak increase over two steps after a first one, fresh "
          "process per run; SAC saves mm, addmm, bmm and SDPA outputs; "
          "torch.compile budget: torch._functorch.config."
          "activation_memory_budget; loss: %s" % (
              opt.steps, "the model's own (labels)" if labels else
              "logsumexp of the logits, mean, in PyTorch"))
    print("# of RSS, after the steps: pool MiB: memgrad's pool reserved; "
          ".grad MiB: the gradients; malloc free MiB: freed heap malloc "
          "keeps (mallinfo2 fordblks; part of the RSS, or not, as pages "
          "were touched)")
    print("run | median step s | x eager | x per-block | RSS MiB | x eager | "
          "x per-block | pool peak MiB (predicted) | pool MiB | .grad MiB | "
          "malloc free MiB")
    ref_t, ref_r = med.get("eager"), rss.get("eager")
    blk_t, blk_r = med.get("per-block checkpoint"), rss.get(
        "per-block checkpoint")

    def ratio(a, b):
        return "-" if not b else "%.2f" % (a / b)
    for k in names:
        p = pool.get(k)
        if parts[k].get("failed"):
            print("%s | %.3f | %s | %s | FAILED (fresh process) | - | - | - "
                  "| - | - | -" % (k, med[k], ratio(med[k], ref_t),
                                   ratio(med[k], blk_t)))
            continue
        print("%s | %.3f | %s | %s | %.1f | %s | %s | %s | %.1f | %.1f | "
              "%.1f" % (
                  k, med[k], ratio(med[k], ref_t), ratio(med[k], blk_t),
                  rss[k] / 2 ** 20, ratio(rss[k], ref_r),
                  ratio(rss[k], blk_r),
                  "-" if p is None else "%.1f (%.1f)" % (p[0] / 2 ** 20,
                                                         p[1] / 2 ** 20),
                  parts[k]["pool"] / 2 ** 20, parts[k]["grads"] / 2 ** 20,
                  parts[k]["malloc_free"] / 2 ** 20))


if __name__ == "__main__":
    main()
