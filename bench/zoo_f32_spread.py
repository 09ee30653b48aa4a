"""bench/zoo_f32_spread.py MODEL...: PyTorch float32 against PyTorch float64
on the zoo models of bench/torch_zoo.py (batch 4, 64x64, dropout off), with
torch_zoo's grad-err metric: how far float32 itself is from the exact
gradient at these sizes, the scale against which torch_zoo.txt's grad err
column (memgrad float32 against PyTorch float32) is read."""
import sys, copy, torch, torch.nn.functional as F
sys.path.insert(0, __import__("os").path.dirname(__file__))
import torch_zoo as Z
torch.set_num_threads(1)
for name in sys.argv[1:]:
    model, _ = Z.build(name)
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout): mod.p = 0.0
    x = torch.randn(4, 3, 64, 64); labels = torch.arange(4) % 10
    def grads(m, xx):
        F.cross_entropy(m(xx), labels).backward(); return [p.grad.double() for p in m.parameters()]
    g32 = grads(copy.deepcopy(model), x); g64 = grads(copy.deepcopy(model).double(), x.double())
    floor = 1e-4 * max(float(w.abs().max()) for w in g64)
    err = max(float((a - b).abs().max()) / max(float(b.abs().max()), floor) for a, b in zip(g32, g64))
    print(name, "torch f32 vs f64, same metric: %.2g" % err, flush=True)
