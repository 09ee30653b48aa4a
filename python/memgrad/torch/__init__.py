"""memgrad.torch: PyTorch models trained through memgrad.

The rooms:
- capture.py: torch.export and the core ATen decompositions, the split
  into a PyTorch prologue and a memgrad body;
- aten.py: the table from core ATen ops to memgrad's builder;
- module.py: `Module`, a wrapper that trains as the model does in eager;
- backend.py: `torch.compile(model, backend="memgrad")`, which runs in
  eager PyTorch what memgrad cannot map, so no model is refused;
- fx.py: the torch.fx capture of PyTorch 1.13 (Debian's), with its module
  and function maps and the ONNX fallback; on PyTorch 2 it is
  memgrad.torch.fx.Module.

On PyTorch 2 (torch.export present), `Module` is the ATen capture; on
PyTorch 1.13 it is the torch.fx one.
"""
import torch

from . import fx
from .fx import (SUPPORTED, CheckReport, UnsupportedModelError, check,
                 size_class)
from .. import MemgradError

HAS_EXPORT = hasattr(torch, "export") and hasattr(
    torch.export, "default_decompositions")

if HAS_EXPORT:
    from .capture import Unsupported
    from .module import Module
    from . import backend  # registers backend="memgrad"
    from .backend import report as compile_report
else:  # PyTorch 1.13: the torch.fx capture
    from .fx import Module
    Unsupported = UnsupportedModelError

# the fx capture's private tables, which its tests read
from .fx import (_Captured, _FUNCTIONS, _FUNCTIONS_BY_NAME, _METHODS,  # noqa
                 _MODULES, _class_name, _fn_name, _onnx_export)

__all__ = ["Module", "check", "CheckReport", "UnsupportedModelError",
           "Unsupported", "SUPPORTED", "MemgradError", "HAS_EXPORT", "fx",
           "size_class", "backend", "compile_report"]
