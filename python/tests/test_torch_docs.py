"""docs/torch-supported.md is what scripts/torch_supported.py writes from
memgrad.torch's mapping table (issue 27 item 8): a mapping added or
removed without regenerating the list fails here."""
import importlib.util
import os

import pytest

pytest.importorskip("torch", reason="test_torch_docs needs torch")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_supported_layers_list_is_up_to_date():
    spec = importlib.util.spec_from_file_location(
        "torch_supported", os.path.join(ROOT, "scripts", "torch_supported.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    with open(os.path.join(ROOT, "docs", "torch-supported.md")) as f:
        committed = f.read()
    assert committed == gen.render(), (
        "docs/torch-supported.md is out of date: run "
        "python3 scripts/torch_supported.py")
    import memgrad.torch as mgt
    for kind, names in mgt.SUPPORTED.items():
        for n in names:
            assert "- `%s`" % n in committed, n
