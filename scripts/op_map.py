"""scripts/op_map.py - reads src/frontends/op_map.def, the one table of
what memgrad's ONNX importer and its PyTorch bridge map onto memgrad ops,
for scripts/gen-tables.py (docs/supported-ops.md) and
python/tests/test_op_map.py. Plain Python, no torch and no libmemgrad.

    python3 scripts/op_map.py    # prints the rows
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEF = ROOT / "src" / "frontends" / "op_map.def"

# the table's short prefixes of torch names, and what memgrad.torch.SUPPORTED
# calls them
PREFIXES = (("nn.", "torch.nn."), ("F.", "torch.nn.functional."))


class Row:
    """One MG_ONNX_OP or MG_TORCH_OP row: name (the ONNX op type, or the
    torch row's name), onnx (the op type, or None), converter, mg_ops
    (memgrad op names), torch (names as the table writes them)."""

    def __init__(self, name, onnx, converter, mg_ops, torch, line):
        self.name, self.onnx, self.converter = name, onnx, converter
        self.mg_ops, self.torch, self.line = mg_ops, torch, line

    def __repr__(self):
        return "op_map.def:%d %s" % (self.line, self.name)


def torch_name(n):
    """The name memgrad.torch.SUPPORTED gives a table name: nn.ReLU is
    torch.nn.ReLU, F.relu torch.nn.functional.relu, Tensor.add the method
    add."""
    if n.startswith("Tensor."):
        return n[len("Tensor."):]
    for short, full in PREFIXES:
        if n.startswith(short):
            return full + n[len(short):]
    return n


def _args(text):
    """A macro call's arguments: bare tokens, or C string literals (adjacent
    ones joined)."""
    out, cur = [], None
    for tok in re.findall(r'"(?:[^"\\]|\\.)*"|[^\s,"]+|,', text):
        if tok == ",":
            out.append(cur)
            cur = None
        elif tok.startswith('"'):
            cur = (cur or "") + tok[1:-1]
        else:
            cur = tok
    out.append(cur)
    return out


def rows(path=DEF):
    text = path.read_text()
    # comments out (their newlines kept, for line numbers), then the
    # preprocessor lines
    text = re.sub(r"/\*.*?\*/",
                  lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = "\n".join("" if ln.lstrip().startswith("#") else ln
                     for ln in text.split("\n"))
    out = []
    for m in re.finditer(r"\bMG_(ONNX|TORCH)_OP\(([^()]*)\)", text):
        line = text.count("\n", 0, m.start()) + 1
        a = _args(m.group(2))
        if m.group(1) == "ONNX":
            if len(a) != 4:
                raise ValueError("op_map.def:%d: MG_ONNX_OP takes 4 "
                                 "arguments" % line)
            name, conv, ops, torch = a
            onnx = name
        else:
            if len(a) != 3:
                raise ValueError("op_map.def:%d: MG_TORCH_OP takes 3 "
                                 "arguments" % line)
            name, ops, torch = a
            onnx = conv = None
        out.append(Row(name, onnx, conv, ops.split(), torch.split(), line))
    return out


def mg_op_names():
    """memgrad's op names, as mg_op_name prints them (src/common/ir.h's
    MG_OP_LIST)."""
    text = (ROOT / "src" / "common" / "ir.h").read_text()
    return set(re.findall(r'^\s*X\(\w+, "(\w+)"\)', text, flags=re.M))


if __name__ == "__main__":
    for r in rows():
        print("%-20s %-18s %-40s %s" % (r.name, r.onnx or "-",
                                        " ".join(r.mg_ops),
                                        " ".join(r.torch)))
