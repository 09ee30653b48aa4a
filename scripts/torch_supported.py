"""scripts/torch_supported.py - writes docs/torch-supported.md, the list of
PyTorch layers, functions and tensor methods memgrad.torch maps, from its
mapping table (memgrad.torch.SUPPORTED), so the list cannot drift from
the code; python/tests/test_torch_docs.py fails when the committed file
is not what this writes.

    MEMGRAD_LIBRARY=build/libmemgrad_shared_check.so PYTHONPATH=python \\
        python3 scripts/torch_supported.py [--check]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "docs", "torch-supported.md")


def render():
    import memgrad.torch as mgt
    lines = [
        "# What memgrad.torch maps",
        "",
        "<!-- written by scripts/torch_supported.py from "
        "memgrad.torch.SUPPORTED; do not edit -->",
        "",
        "Every PyTorch layer, function and tensor method that "
        "`memgrad.torch` maps onto memgrad ops (docs/python.md says how; "
        "the module docstring of `python/memgrad/torch.py` says which "
        "arguments each takes). `memgrad.torch.check(model, inputs)` "
        "lists what a given model uses that is not here. Methods ending in "
        "`_` are the in-place forms, computed out of place and "
        "functionalised.",
        ""]
    for kind, names in mgt.SUPPORTED.items():
        lines += ["## %s (%d)" % (kind.capitalize(), len(names)), ""]
        lines += ["- `%s`" % n for n in names]
        lines.append("")
    return "\n".join(lines)


def main():
    text = render()
    if "--check" in sys.argv[1:]:
        with open(OUT) as f:
            if f.read() != text:
                sys.exit("docs/torch-supported.md is out of date: run "
                         "python3 scripts/torch_supported.py")
        return
    with open(OUT, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
