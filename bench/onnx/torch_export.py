#!/usr/bin/env python3
"""torch_export.py - exports the models of tests/onnx_torch_crosscheck.py
(torchvision resnet18 and mobilenet_v2 at 64x64, the GPT-style, BERT-style
and U-Net models; random init) with torch.onnx.export in training mode at a
given batch, for bench/onnx/torch_run.sh.

    python3 bench/onnx/torch_export.py OUTDIR BATCH
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
out, batch = sys.argv[1], int(sys.argv[2])
os.environ.setdefault("MG_XC_IMG", "64")
import onnx_torch_crosscheck as X  # noqa: E402
import torch  # noqa: E402

X.BATCH = batch
warnings.filterwarnings("ignore")
os.makedirs(out, exist_ok=True)
for name in ["resnet18", "mobilenet_v2", "gpt", "bert", "unet"]:
    model, kind = X.build(name)
    model.train()
    x = torch.randn(batch, 3, 64, 64) if kind == "image" else torch.randint(0, 100, (batch, 16))
    torch.onnx.export(model, (x,), os.path.join(out, name + ".onnx"), dynamo=False,
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["x"], output_names=["y"])
    print("exported", name)
