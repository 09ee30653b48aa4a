#!/usr/bin/env python3
"""torchvision_check.py - tests/onnx_torch_crosscheck.py on any torchvision
classifier: python3 bench/onnx/torchvision_check.py TOOL MODEL IMG
(MG_XC_IMG must match IMG). Used for resnet50 in
bench/results/onnx-torch-crosscheck.txt."""
import sys, warnings, os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'tests'))
import onnx_torch_crosscheck as X
import torch, torchvision
warnings.filterwarnings("ignore")
name = sys.argv[2]
X.IMG = int(sys.argv[3])
def b(n):
    torch.manual_seed(0)
    return getattr(torchvision.models, name)(num_classes=10), "image"
X.build = b
for f in X.check(name, sys.argv[1], os.environ.get('TMPDIR', '/tmp'))[:6]: print("  ", f)
