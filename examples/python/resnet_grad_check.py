"""Diagnostic for the resnet18 gradient mismatch seen in train.py at batch 4:
runs resnet18 (random init, 4 random 64x64 images) through memgrad.torch
from each stage onwards, fed PyTorch's own activations for the stages cut
off, and prints the worst relative parameter-gradient difference against
PyTorch. Measured (bench/results/python-train-resnet18.txt machine): from
stage 0 (the whole net) 6.7e-02, in layer4's parameters; from stage 1 on
(stem cut off) <= 8.5e-06. Needs python3-torch and python3-torchvision.
"""
import copy, torch, torchvision, memgrad.torch as mgt
torch.manual_seed(0)
base = torchvision.models.resnet18(num_classes=10)
x = torch.randn(4, 3, 64, 64); l = torch.randint(0, 10, (4,))
stages = [torch.nn.Sequential(base.conv1, base.bn1, base.relu), base.maxpool, base.layer1, base.layer2, base.layer3, base.layer4]
ins = [x]
with torch.no_grad():
    h = x
    for s in stages: h = s(h); ins.append(h)
for start in range(len(stages)):
    ref = torch.nn.Sequential(*[copy.deepcopy(s) for s in stages[start:]], torch.nn.AdaptiveAvgPool2d((1,1)), torch.nn.Flatten(), copy.deepcopy(base.fc))
    m = mgt.Module(copy.deepcopy(ref), (ins[start],), policy="none")
    for mm in (ref, m): torch.nn.functional.cross_entropy(mm(ins[start]), l).backward()
    w = max(((p.grad-q.grad).abs().max()/p.grad.abs().max()).item() for p,q in zip(ref.parameters(), m.parameters()))
    print("from stage", start, tuple(ins[start].shape), "worst %.1e" % w)
