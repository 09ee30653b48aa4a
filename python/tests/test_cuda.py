"""memgrad on CUDA from Python: Executor(device="cuda") with torch's CUDA
tensors in and out through DLPack (no copy through the host), and
memgrad.torch.fx.Module on a .cuda() module, against PyTorch on the same GPU.
Without a CUDA device the GPU tests skip with "skipped: no CUDA device", and
the error a user gets is checked instead."""
import copy

import pytest

import memgrad as mg

torch = pytest.importorskip(
    "torch", reason="test_cuda needs torch (Debian python3-torch)")


def _cuda_executor_or_none():
    try:
        return mg.Executor(device="cuda")
    except mg.MemgradError:
        return None


HAVE_CUDA = torch.cuda.is_available() and _cuda_executor_or_none() is not None
needs_gpu = pytest.mark.skipif(not HAVE_CUDA,
                               reason="skipped: no CUDA device")


def test_bad_device_name():
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        mg.Executor(device="tpu")


@pytest.mark.skipif(HAVE_CUDA, reason="a CUDA device is present")
def test_cuda_without_a_device_is_a_clear_error():
    with pytest.raises(mg.MemgradError, match="CUDA"):
        mg.Executor(device="cuda")


def _small_graph():
    g = mg.Graph()
    x = g.input("x", "float32", (4, 5))
    w = g.param("w", "float32", (5, 3))
    y = g.sum(g.tanh(g.matmul(x, w)))
    (gw,) = g.gradients([y], [w])
    return g, g.compile([y, gw]), y, gw


@needs_gpu
def test_executor_cuda_tensors_in_and_out():
    torch.manual_seed(0)
    g, plan, y, gw = _small_graph()
    x, w = torch.randn(4, 5), torch.randn(5, 3)
    cpu = mg.Executor(wrap=torch.from_dlpack).run(plan, {"x": x, "w": w})
    ex = mg.Executor(device="cuda")
    out = ex.run(plan, {"x": x.cuda(), "w": w.cuda()})
    assert out[gw].device.type == "cuda" and out[y].device.type == "cuda"
    assert torch.allclose(out[gw].cpu(), cpu[gw], rtol=1e-5, atol=1e-6)
    assert torch.allclose(out[y].cpu(), cpu[y], rtol=1e-5, atol=1e-6)


@needs_gpu
def test_cuda_executor_refuses_host_tensors():
    g, plan, y, gw = _small_graph()
    ex = mg.Executor(device="cuda")
    with pytest.raises(mg.MemgradError, match="executor runs on CUDA"):
        ex.run(plan, {"x": torch.randn(4, 5), "w": torch.randn(5, 3)})


def _resnet18(dtype):
    tv = pytest.importorskip("torchvision", reason="needs torchvision")
    torch.manual_seed(0)
    return tv.models.resnet18(num_classes=10).to(dtype)


def _grads(model, x, target):
    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), target)
    loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def _matches_torch(ref64, x, target, policy):
    """memgrad.torch on ref64 (float64, on the GPU) against PyTorch on the
    same GPU: float64 within 1e-9, and float32 within 10x PyTorch
    float32's own error against float64."""
    mine64 = mg_torch_module(copy.deepcopy(ref64), x, policy)
    g_ref64, g_mine64 = _grads(ref64, x, target), _grads(mine64, x, target)
    assert g_mine64.device.type == "cuda"
    assert _rel(g_mine64, g_ref64) < 1e-9
    ref32 = copy.deepcopy(ref64).float()
    mine32 = mg_torch_module(copy.deepcopy(ref32), x.float(), policy)
    g_ref32 = _grads(ref32, x.float(), target)
    g_mine32 = _grads(mine32, x.float(), target)
    e_torch, e_mine = _rel(g_ref32.double(), g_ref64), _rel(g_mine32.double(),
                                                            g_ref64)
    assert e_mine <= 10 * e_torch + 1e-5, (e_mine, e_torch)


@needs_gpu
@pytest.mark.parametrize("policy", ["none", "memory"])
def test_resnet18_on_cuda_matches_torch(policy):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref64 = _resnet18(torch.float64).cuda()
    x = torch.randn(4, 3, 32, 32, dtype=torch.float64).cuda()
    target = torch.randint(0, 10, (4,)).cuda()
    _matches_torch(ref64, x, target, policy)


@needs_gpu
@pytest.mark.parametrize("policy", ["none", "memory"])
def test_gpt_on_cuda_matches_torch(policy):
    """test_torch_zoo's GPT-2-style model (two blocks, causal attention,
    both GELUs, LayerNorm) on CUDA tensors against PyTorch on the GPU."""
    torch.backends.cuda.matmul.allow_tf32 = False
    zoo = pytest.importorskip("test_torch_zoo")
    torch.manual_seed(0)
    ref64 = zoo.no_randomness(zoo.TinyGPT()).double().cuda()
    x = torch.randn(3, 8, 16, dtype=torch.float64).cuda()
    target = torch.tensor([0, 3, 4]).cuda()
    _matches_torch(ref64, x, target, policy)


def mg_torch_module(model, x, policy):
    import memgrad.torch as mgt
    return mgt.fx.Module(model, (x,), policy=policy)


@needs_gpu
def test_checkpointed_equals_plain_on_cuda_bit_for_bit():
    import memgrad.torch as mgt
    ref = _resnet18(torch.float32).cuda()
    x = torch.randn(4, 3, 32, 32).cuda()
    target = torch.randint(0, 10, (4,)).cuda()
    plain = mgt.fx.Module(copy.deepcopy(ref), (x,), policy="none")
    ckpt = mgt.fx.Module(copy.deepcopy(ref), (x,), policy="memory")
    assert torch.equal(_grads(plain, x, target), _grads(ckpt, x, target))
    # resnet18 at batch 4 and 32x32: its gradients of the parameters
    # dominate, and the memory policy finds no smaller peak (46054912 bytes
    # both, on an H100); it must never find a larger one
    assert ckpt.predicted_peak <= plain.predicted_peak


@needs_gpu
def test_module_follows_cuda_and_back():
    """The same memgrad.torch.fx.Module runs where its parameters are."""
    import memgrad.torch as mgt
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                              torch.nn.Linear(8, 2))
    m = mgt.fx.Module(copy.deepcopy(ref), (torch.zeros(3, 6),))
    x = torch.randn(3, 6)
    cpu_out = m(x)
    m.cuda()
    gpu_out = m(x.cuda())
    assert gpu_out.device.type == "cuda"
    assert torch.allclose(gpu_out.cpu(), cpu_out, rtol=1e-5, atol=1e-6)
    gpu_out.sum().backward()
    assert all(p.grad.device.type == "cuda" for p in m.parameters())
    with pytest.raises(RuntimeError, match="one device"):
        m(x)  # host input, CUDA parameters
