"""Hugging Face GPT-2 (6 layers, d 256, T 256, batch 4, vocabulary 8192,
no dropout) trained through memgrad.torch.Module beside eager PyTorch
(SDPA) and per-block torch.utils.checkpoint (non-reentrant): one thread,
float32, median step time of interleaved steps in one process, and each
run's peak RSS increase over two steps in a fresh process of its own.

    OMP_NUM_THREADS=1 python bench/gpt2_hf.py [--steps 5]

bench/results/gpt2-hf.txt is its output (command line, machine and commit
in its header). Memory: the peak RSS (VmHWM, reset before the steps) over
two training steps less the RSS before them, in a fresh process per run (the model built and,
for memgrad, captured before); for memgrad also the pool's measured peak
and the plan's prediction."""
import argparse
import copy
import resource
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from capture_zoo import _header  # noqa: E402
import memgrad.torch as mt  # noqa: E402


def model():
    import transformers as T
    cfg = T.GPT2Config(n_layer=6, n_embd=256, n_head=4, vocab_size=8192,
                       n_positions=256, resid_pdrop=0.0, embd_pdrop=0.0,
                       attn_pdrop=0.0)
    return T.GPT2LMHeadModel(cfg).train()


def loss_of(logits):
    return logits.logsumexp(-1).mean()


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def make_runs(base, ids, which=None):
    """name -> step function; memgrad's wrappers too, for their peaks."""
    runs, wrappers = {}, {}
    if which in (None, "eager"):
        eager = copy.deepcopy(base)
        runs["eager"] = lambda x: eager(x, use_cache=False).logits
    if which in (None, "per-block checkpoint"):
        # Hugging Face's own per-block checkpointing: torch.utils.checkpoint
        # (non-reentrant) around each GPT2Block
        block = copy.deepcopy(base)
        block.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False})
        runs["per-block checkpoint"] = \
            lambda x: block(x, use_cache=False).logits
    for policy in ("none", "memory"):
        name = "memgrad " + policy
        if which in (None, name):
            w = mt.Module(copy.deepcopy(base), (ids,), policy=policy)
            wrappers[name] = w
            runs[name] = (lambda w: lambda x: w(x).logits)(w)
    return runs, wrappers


def one(which):
    """A fresh process's run: its RSS increase over two steps."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    base = model()
    ids = torch.randint(0, 8192, (4, 256))
    runs, _ = make_runs(base, ids, which)
    before = rss_bytes()
    # the peak from here on: writing 5 to clear_refs resets VmHWM (Linux)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    for _ in range(2):
        loss_of(runs[which](ids)).backward()
    with open("/proc/self/status") as f:
        hwm = [int(line.split()[1]) * 1024 for line in f
               if line.startswith("VmHWM:")][0]
    print(max(0, hwm - before))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    opt = ap.parse_args()
    if opt.one:
        return one(opt.one)
    torch.set_num_threads(1)
    _header(sys.argv)
    torch.manual_seed(0)
    base = model()
    ids = torch.randint(0, 8192, (4, 256))
    runs, wrappers = make_runs(base, ids)
    pool = {}
    for name, w in wrappers.items():
        w.executor.reset_peak()
        loss_of(w(ids).logits).backward()
        pool[name] = (w.executor.pool_stats()["peak_bytes_in_use"],
                      w.predicted_peak)
    times = {k: [] for k in runs}
    for _ in range(opt.steps + 1):
        for k, f in runs.items():
            t = time.perf_counter()
            loss_of(f(ids)).backward()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v[1:]) for k, v in times.items()}
    rss = {k: int(subprocess.check_output(
        [sys.executable, __file__, "--one", k]).decode().split()[-1])
        for k in runs}
    print("# time: median of %d interleaved steps after one; RSS: peak "
          "increase over two steps, fresh process per run" % opt.steps)
    print("run | median step s | x eager | x per-block | RSS MiB | "
          "x per-block | pool peak MiB (predicted)")
    for k in runs:
        p = pool.get(k)
        print("%s | %.3f | %.2f | %.2f | %.1f | %.2f | %s" % (
            k, med[k], med[k] / med["eager"],
            med[k] / med["per-block checkpoint"], rss[k] / 2 ** 20,
            rss[k] / max(rss["per-block checkpoint"], 1),
            "-" if p is None else "%.1f (%.1f)" % (p[0] / 2 ** 20,
                                                   p[1] / 2 ** 20)))


if __name__ == "__main__":
    main()
