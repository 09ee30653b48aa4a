"""The README's PyTorch quick start, run as written: the ```python block
after the line "<!-- quickstart: python" is taken from README.md and
executed. Then what it claims is checked: the wrapped module's gradients
are eager PyTorch's, the report line the README quotes is what the block
prints, and the torch.compile line runs the model in memgrad.

Skips (visibly) without PyTorch, or on a PyTorch without torch.export."""
import contextlib
import io
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def quickstart_block():
    text = README.read_text()
    m = re.search(r"^<!-- quickstart: python\b.*?-->\n```python\n(.*?)^```$",
                  text, re.M | re.S)
    assert m, ("README.md has no '<!-- quickstart: python' line followed by "
               "a ```python block")
    return m.group(1)


def test_readme_has_the_block():
    # Runs without PyTorch too: the block is there and is Python.
    compile(quickstart_block(), "README.md quick start", "exec")


def test_readme_quickstart_runs():
    torch = pytest.importorskip("torch")
    import memgrad.torch as mgt
    if not mgt.HAS_EXPORT:
        pytest.skip("the quick start uses the ATen capture (torch.export), "
                    "which PyTorch %s lacks" % torch.__version__)
    code = quickstart_block()
    # A fresh process runs the quick start: earlier tests' torch.compile
    # calls on the same module classes (nn.Sequential, nn.Linear) make
    # dynamo's automatic dynamic shapes hand the backend symbolic sizes,
    # which memgrad runs in eager (a known limit, docs/python.md).
    torch._dynamo.reset()
    torch.manual_seed(0)
    ns = {"__name__": "readme_quickstart"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md quick start", "exec"), ns)
    printed = out.getvalue()
    model, m, x, y = ns["model"], ns["m"], ns["x"], ns["y"]
    F = torch.nn.functional

    # It trained: the last step's loss is a number, and memgrad's gradients
    # of the trained model are eager PyTorch's.
    assert torch.isfinite(ns["loss"]).item()
    for p in model.parameters():
        p.grad = None
    F.cross_entropy(m(x), y).backward()
    ours = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    F.cross_entropy(model(x), y).backward()
    for (name, p), g in zip(model.named_parameters(), ours):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6,
                                   msg=lambda s: f"{name}: {s}")

    # The report line the README quotes is the one the block printed, and
    # the memory policy keeps less than plain backprop on this model.
    line = re.search(r"^predicted peak: .*\)$", printed, re.M)
    assert line, "the block printed no 'predicted peak' line:\n" + printed
    assert "`%s`" % line.group(0) in " ".join(README.read_text().split()), (
        "README.md quotes a report line the quick start no longer prints; "
        "it now prints: " + line.group(0))
    ratio = float(re.search(r"\(([\d.]+)x\)$", line.group(0)).group(1))
    assert ratio < 1, line.group(0)
    assert m.predicted_peak > 0

    # The one-line alternative: torch.compile runs the model in memgrad.
    before = len(mgt.compile_report())
    got = ns["fast"](x)
    torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)
    ran = [r["ran"] for r in mgt.compile_report()[before:]]
    assert ran and all(r == "memgrad" for r in ran), mgt.compile_report()
