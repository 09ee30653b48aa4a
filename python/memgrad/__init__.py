"""memgrad: gradient checkpointing with exact peak-memory prediction.

A thin binding over the public C API (ctypes over libmemgrad). Arrays go in
and out through DLPack: anything with ``__dlpack__`` (numpy, torch) is bound
zero-copy, and outputs come back as :class:`Array` objects that
``numpy.from_dlpack`` or ``torch.from_dlpack`` take without a copy. Every C
error raises :class:`MemgradError` carrying the C message.
"""
import ctypes
import math
import os
import tempfile

from . import _lib
from ._lib import MemgradError

__all__ = ["Graph", "Tensor", "Plan", "Executor", "Array", "Saved",
           "OnnxModel", "onnx_import", "onnx_op_types", "MemgradError",
           "POLICIES"]

_DTYPES = {"float32": 0, "float64": 1, "int32": 2, "int64": 3,
           "bfloat16": 4, "float16": 5}
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}
POLICIES = {"none": 0, "collection": 1, "memory": 2, "speed": 3, "budget": 4}


def _shape(shape):
    shape = tuple(int(s) for s in shape)
    return len(shape), (ctypes.c_int64 * max(len(shape), 1))(*shape)


def _ids(tensors):
    tensors = list(tensors)
    return len(tensors), (ctypes.c_int32 * max(len(tensors), 1))(
        *[t.id for t in tensors])


def _via_file(write):
    """Run write(FILE*) and return what it wrote."""
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    fd, path = tempfile.mkstemp(suffix=".txt")
    os.close(fd)
    try:
        f = libc.fopen(path.encode(), b"w")
        if not f:
            raise OSError("cannot open " + path)
        try:
            _lib.check(write(f))
        finally:
            libc.fclose(f)
        with open(path) as fh:
            return fh.read()
    finally:
        os.unlink(path)


def _bound_binds(bound, what):
    """Bindings of the tensors in `bound` to caller memory (no data: a
    prediction only needs to know they are not in the pool), and their
    count."""
    bound = list(bound)
    for t in bound:
        if not isinstance(t, Tensor):
            raise TypeError("%s: bound holds %r, not a memgrad Tensor"
                            % (what, t))
    binds = (_lib.Binding * max(len(bound), 1))(
        *[_lib.Binding(t.id, None) for t in bound])
    return binds, len(bound)


class Tensor:
    """A tensor id of a Graph."""

    def __init__(self, graph, tid):
        self.graph, self.id = graph, tid

    @property
    def name(self):
        n = _lib.tensor_name(self.graph._g, self.id)
        return n.decode() if n else None

    @property
    def shape(self):
        nd = ctypes.c_int()
        sh = (ctypes.c_int64 * 8)()
        _lib.check(_lib.tensor_shape(self.graph._g, self.id, nd, sh))
        return tuple(sh[: nd.value])

    @property
    def dtype(self):
        d = ctypes.c_int()
        _lib.check(_lib.tensor_dtype(self.graph._g, self.id, d))
        return _DTYPE_NAMES[d.value]

    def __hash__(self):
        return hash((id(self.graph), self.id))

    def __eq__(self, other):
        return (isinstance(other, Tensor) and other.graph is self.graph
                and other.id == self.id)

    def __repr__(self):
        return "Tensor(%d, %r, %s)" % (self.id, self.name, self.shape)


class Graph:
    """A static graph; builder methods return Tensors."""

    def __init__(self):
        self._g = _lib.graph_new()
        if not self._g:
            raise MemoryError("mg_graph_new failed")

    def __del__(self):
        if getattr(self, "_g", None):
            _lib.graph_free(self._g)
            self._g = None

    def _t(self, tid):
        return Tensor(self, _lib.check_tensor(tid))

    def input(self, name, dtype, shape):
        return self._t(_lib.input_(self._g, name.encode(), _DTYPES[dtype],
                                   *_shape(shape)))

    def param(self, name, dtype, shape):
        return self._t(_lib.param(self._g, name.encode(), _DTYPES[dtype],
                                  *_shape(shape)))

    def find(self, name):
        return self._t(_lib.tensor_find(self._g, name.encode()))

    def tensors(self, op=None):
        """Every tensor of the graph in creation order, or those that op
        (a name such as "relu") computes."""
        out = []
        for i in range(_lib.graph_num_tensors(self._g)):
            name = _lib.tensor_op_name(self._g, i)
            if op is None or (name and name.decode() == op):
                out.append(self._t(i))
        return out

    def input_of(self, t, k=0):
        """Input k of the op that computes t."""
        return self._t(_lib.tensor_input(self._g, t.id, k))

    def matmul(self, a, b, trans_a=False, trans_b=False):
        return self._t(_lib.matmul(self._g, a.id, b.id, int(trans_a),
                                   int(trans_b)))

    def scale(self, x, alpha):
        return self._t(_lib.scale(self._g, x.id, alpha))

    def sum(self, x, axes=(), keepdims=False):
        ax = (ctypes.c_int * max(len(axes), 1))(*axes)
        return self._t(_lib.sum_(self._g, x.id, len(axes), ax, int(keepdims)))

    def mean(self, x, axes=(), keepdims=False):
        ax = (ctypes.c_int * max(len(axes), 1))(*axes)
        return self._t(_lib.mean(self._g, x.id, len(axes), ax, int(keepdims)))

    def reshape(self, x, shape):
        return self._t(_lib.reshape(self._g, x.id, *_shape(shape)))

    def softmax(self, x, axis=-1):
        return self._t(_lib.softmax(self._g, x.id, axis))

    def log_softmax(self, x, axis=-1):
        return self._t(_lib.log_softmax(self._g, x.id, axis))

    def dropout(self, x, p, seed=0):
        return self._t(_lib.dropout(self._g, x.id, p, seed))

    def conv2d(self, x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
               groups=1):
        return self._t(_lib.conv2d(self._g, x.id, w.id, stride[0], stride[1],
                                   padding[0], padding[1], dilation[0],
                                   dilation[1], groups))

    @staticmethod
    def _pool_opts(kernel, stride, padding, ceil_mode, count_include_pad):
        """mg_pool2d_opts; padding is (h, w) or (top, left, bottom,
        right)."""
        p = tuple(padding)
        if len(p) == 2:
            p = p + p
        if len(p) != 4:
            raise ValueError("padding must have 2 or 4 entries, not %r"
                             % (padding,))
        return _lib.Pool2dOpts(kernel[0], kernel[1], stride[0], stride[1],
                               p[0], p[1], p[2], p[3], int(bool(ceil_mode)),
                               int(bool(count_include_pad)))

    def max_pool2d(self, x, kernel, stride, padding=(0, 0), ceil_mode=False):
        o = self._pool_opts(kernel, stride, padding, ceil_mode, True)
        return self._t(_lib.max_pool2d_ex(self._g, x.id, ctypes.byref(o)))

    def avg_pool2d(self, x, kernel, stride, padding=(0, 0), ceil_mode=False,
                   count_include_pad=True):
        o = self._pool_opts(kernel, stride, padding, ceil_mode,
                            count_include_pad)
        return self._t(_lib.avg_pool2d_ex(self._g, x.id, ctypes.byref(o)))

    def batchnorm(self, x, gamma, beta, eps=1e-5):
        return self._t(_lib.batchnorm(self._g, x.id, gamma.id, beta.id, eps))

    def global_avg_pool2d(self, x):
        return self._t(_lib.global_avg_pool2d(self._g, x.id))

    def flatten(self, x, start_axis=1):
        return self._t(_lib.flatten(self._g, x.id, start_axis))

    def fill(self, dtype, shape, value):
        """A tensor of `shape` holding `value` (mg_fill); shape () is a
        scalar."""
        return self._t(_lib.fill(self._g, _DTYPES[dtype], *_shape(shape),
                                 float(value)))

    def pow(self, x, p):
        return self._t(_lib.pow_(self._g, x.id, float(p)))

    def leaky_relu(self, x, alpha):
        return self._t(_lib.leaky_relu(self._g, x.id, float(alpha)))

    def concat(self, xs, axis):
        n, ids = _ids(xs)
        return self._t(_lib.concat(self._g, n, ids, axis))

    def slice(self, x, axis, start, length):
        """x narrowed to [start, start + length) along axis."""
        return self._t(_lib.slice_(self._g, x.id, axis, start, length))

    def pad(self, x, before, after):
        """Zeros around each axis: before[i] and after[i] of them."""
        nd = len(x.shape)
        b = (ctypes.c_int64 * nd)(*before)
        a = (ctypes.c_int64 * nd)(*after)
        return self._t(_lib.pad(self._g, x.id, b, a))

    def permute(self, x, perm):
        p = (ctypes.c_int * max(len(perm), 1))(*perm)
        return self._t(_lib.permute(self._g, x.id, p))

    def transpose(self, x, axis0, axis1):
        return self._t(_lib.transpose(self._g, x.id, axis0, axis1))

    def layernorm(self, x, gamma, beta, n_norm_axes, eps=1e-5):
        return self._t(_lib.layernorm(self._g, x.id, gamma.id, beta.id,
                                      n_norm_axes, eps))

    def cast(self, x, dtype):
        """x converted to dtype ("float32", "float64", ...; mg_cast)."""
        return self._t(_lib.cast(self._g, x.id, _DTYPES[dtype]))

    def embedding(self, table, indices):
        """Rows of table [V, D] picked by integer indices (mg_embedding)."""
        return self._t(_lib.embedding(self._g, table.id, indices.id))

    def causal_mask(self, x, value):
        return self._t(_lib.causal_mask(self._g, x.id, float(value)))

    def attention(self, q, k, v, causal=False, scale=0.0, mask=None,
                  dropout_p=0.0, seed=0):
        """Fused scaled dot-product attention (mg_attention_ex): q [..., Lq,
        d], k [..., Lk, d], v [..., Lk, dv]; an additive float mask that
        broadcasts to [..., Lq, Lk] (None: none); scale 0 is 1/sqrt(d)."""
        o = _lib.AttentionOpts(int(bool(causal)), float(scale),
                               float(dropout_p), int(seed))
        m = mask.id if mask is not None else -1
        return self._t(_lib.attention_ex(self._g, q.id, k.id, v.id, m,
                                         ctypes.byref(o)))

    def broadcast_to(self, x, shape):
        return self._t(_lib.broadcast_to(self._g, x.id, *_shape(shape)))

    def linear_cross_entropy(self, h, w, labels, chunk_rows=0,
                             ignore_index=None, logits=None):
        """Mean cross-entropy of the logits h w^T against integer labels
        (mg_linear_cross_entropy_ex): h [N, D], w [V, D] as a Linear
        layer's weight, labels [N]; the value of cross_entropy(matmul(h, w,
        trans_b=True), labels), made chunk_rows rows of logits at a time
        in both passes (0: the default, 2^21 / V rows), so the [N, V]
        logits are never whole. ignore_index (PyTorch's, e.g. -100): rows
        with that label add nothing and the mean is over the others (NaN
        when every row is ignored, as PyTorch's); None: none ignored. Any
        other label outside [0, V) fails the run. logits: None, or
        matmul(h, w, trans_b=True) itself, made anyway (returned by the
        model): the forward reads its rows instead of making them."""
        o = _lib.LinearCEOpts(int(chunk_rows), int(ignore_index is not None),
                              int(ignore_index or 0))
        lg = logits.id if logits is not None else -1
        return self._t(_lib.linear_cross_entropy_ex(
            self._g, h.id, w.id, labels.id, lg, ctypes.byref(o)))

    def where(self, cond, a, b):
        """a where cond is nonzero, b elsewhere (mg_where); the three
        broadcast together, cond of any dtype, a and b of one."""
        return self._t(_lib.where(self._g, cond.id, a.id, b.id))

    def clamp(self, x, lo=None, hi=None):
        """min(max(x, lo), hi) as torch.clamp; None: no bound."""
        lo = -math.inf if lo is None else float(lo)
        hi = math.inf if hi is None else float(hi)
        return self._t(_lib.clamp(self._g, x.id, lo, hi))

    def gather(self, x, axis, index):
        """torch.gather(x, axis, index): index (int32 or int64) of x's
        rank; the result has index's shape."""
        return self._t(_lib.gather(self._g, x.id, int(axis), index.id))

    def index_select(self, x, axis, index):
        """torch.index_select(x, axis, index) with a 1-D int index."""
        return self._t(_lib.index_select(self._g, x.id, int(axis), index.id))

    def cumsum(self, x, axis):
        return self._t(_lib.cumsum(self._g, x.id, int(axis)))

    def __getattr__(self, name):
        if name in _lib.unary:
            return lambda x: self._t(_lib.unary[name](self._g, x.id))
        if name in _lib.binary:
            return lambda a, b: self._t(_lib.binary[name](self._g, a.id, b.id))
        raise AttributeError(name)

    def gradients(self, ys, xs, policy="none", grad_ys=None, checkpoints=(),
                  budget_bytes=0, compact=False, store16=False,
                  offload=False, host_bandwidth=0.0, compute_rate=0.0):
        """d(sum <grad_ys, ys>)/d xs under a checkpoint policy ("none",
        "collection", "memory", "speed", "budget": the least recomputation
        whose peak fits budget_bytes); grad_ys None means ones.

        budget_bytes is mg_checkpoints.budget_bytes: the most bytes of
        memgrad's pool the training step may use, measured with the ys
        and the gradients in caller memory (activations, recomputed
        copies, intermediate gradients and kernel workspace; not the
        parameters, inputs, ys or gradients). Pass the same budget_bytes
        to compile() so that the plan's summary and report compare its
        budget_peak with it.

        compact is mg_checkpoints.compact: keep what a gradient rule
        reads only in part compact (a relu's sign as 1 bit per element, a
        max pool's argmax as 1 byte per output); lossless, off by
        default under every policy.

        store16 is mg_checkpoints.store16: keep the float32 activations
        the backward pass reads in 16 bits (bfloat16). LOSSY: the
        gradients differ from exact ones (bench/results/store16.txt); off
        by default.

        offload, host_bandwidth (bytes/s), compute_rate (flops/s) are
        mg_checkpoints.offload and its rates (policy "budget" only): host
        offload of saved tensors is priced beside recomputation, and
        offloads() lists the tensors chosen; compile with them and the
        same rates (docs/offload.md)."""
        if policy not in POLICIES:
            raise ValueError("policy must be one of %s" % sorted(POLICIES))
        ny, yid = _ids(ys)
        nx, xid = _ids(xs)
        gid = None
        if grad_ys is not None:
            gid = (ctypes.c_int32 * ny)(
                *[-1 if t is None else t.id for t in grad_ys])
        nck, ckid = _ids(checkpoints)
        ck = _lib.Checkpoints(POLICIES[policy], ckid, nck, 0, budget_bytes,
                              1 if compact else 0, 1 if store16 else 0,
                              1 if offload else 0, float(host_bandwidth),
                              float(compute_rate))
        out = (ctypes.c_int32 * nx)()
        _lib.check(_lib.gradients(self._g, yid, ny, gid, xid, nx,
                                  ctypes.byref(ck), out))
        return [Tensor(self, out[i]) for i in range(nx)]

    def offloads(self):
        """The tensors the last budget gradients() call with offload
        chose to offload (mg_graph_offloads)."""
        n = _lib.graph_offloads(self._g, None, 0)
        ids = (ctypes.c_int32 * max(n, 1))()
        _lib.graph_offloads(self._g, ids, n)
        return [Tensor(self, ids[i]) for i in range(n)]

    def dot(self):
        """Graphviz DOT text of the graph."""
        return _via_file(lambda f: _lib.graph_write_dot(self._g, f))

    def compile(self, outputs, budget_bytes=0, device="cpu", offload=(),
                host_bandwidth=0.0, compute_rate=0.0, fusion=True):
        """A Plan of `outputs`; budget_bytes: the budget the gradients
        were made for (mg_plan_options.budget_bytes), carried into
        summary() and report(); device: where it will run, "cpu" or
        "cuda" (mg_plan_options.device: a CUDA plan lends cuBLAS a
        workspace on long products, counted in its predictions);
        offload: saved tensors to copy to the host tier and back
        (mg_plan_options.offload, with its two rates; docs/offload.md);
        fusion: False for one step per op (mg_plan_options.no_fusion; a
        CPU plan fuses chains of element-wise ops by default, and then runs
        only on an Executor whose device fuses)."""
        return Plan(self, outputs, budget_bytes, device, offload,
                    host_bandwidth, compute_rate, fusion)


def size_class(nbytes):
    """The bytes a request of nbytes occupies in the pool
    (mg_pool_size_class)."""
    return _lib.pool_size_class(nbytes)


# mg_device (memgrad.h) by the names torch and JAX use
_DEVICES = {"cpu": 0, "cuda": 1}


def _device_kind(device, who):
    """"cpu" or "cuda" from a device name ("cuda:0" too), else ValueError
    naming who asked."""
    dev = str(device).split(":")[0]
    if dev not in _DEVICES:
        raise ValueError("%s: device must be 'cpu' or 'cuda', not %r"
                         % (who, device))
    return dev


class Plan:
    """A compiled schedule of `outputs` (mg_plan_compile) for a device."""

    def __init__(self, graph, outputs, budget_bytes=0, device="cpu",
                 offload=(), host_bandwidth=0.0, compute_rate=0.0,
                 fusion=True):
        self.graph, self.outputs = graph, list(outputs)
        n, ids = _ids(self.outputs)
        budget_bytes = int(budget_bytes or 0)
        if budget_bytes < 0:
            raise ValueError("memgrad: budget_bytes must be >= 0, not %d"
                             % budget_bytes)
        self.device = _device_kind(device, "memgrad.Plan")
        n_off, off = _ids(offload)
        opts = _lib.PlanOptions(budget_bytes=budget_bytes,
                                device=_DEVICES[self.device], offload=off,
                                n_offload=n_off,
                                host_bandwidth=float(host_bandwidth),
                                compute_rate=float(compute_rate),
                                no_fusion=0 if fusion else 1)
        p = ctypes.c_void_p()
        _lib.check(_lib.plan_compile(graph._g, ids, n, ctypes.byref(opts),
                                     ctypes.byref(p)))
        self._p = p

    def __del__(self):
        if getattr(self, "_p", None):
            _lib.plan_free(self._p)
            self._p = None

    @property
    def predicted_peak(self):
        return _lib.plan_predicted_peak(self._p, None, 0)

    def arena(self, bound=()):
        """The plan's arena (mg_plan_arena_info), with the outputs in
        `bound` given memory of the caller's and the rest left in the pool:
        {"bytes": its size, "live_peak": the most of its bytes live at once,
        "reserved": what a new Executor reserves after one run}."""
        a = _lib.PlanArena()
        binds, n = _bound_binds(bound, "Plan.arena")
        _lib.check(_lib.plan_arena_info(self._p, binds, n, a))
        return {"bytes": a.bytes, "live_peak": a.live_peak,
                "reserved": a.reserved}

    def phase_peaks(self, bound=()):
        """Predicted peaks of the forward and backward phases, with the
        outputs in `bound` given memory of the caller's (as arena())."""
        pk = _lib.PhasePeaks()
        binds, n = _bound_binds(bound, "Plan.phase_peaks")
        _lib.check(_lib.plan_phase_peaks(self._p, binds, n, pk))
        return {"forward": pk.forward, "backward": pk.backward,
                "pair": pk.pair, "saved": pk.saved}

    def offload(self):
        """What the plan offloads (mg_plan_offload_info) as a dict."""
        o = _lib.PlanOffload()
        _lib.check(_lib.plan_offload_info(self._p, o))
        return {name: getattr(o, name) for name, _ in o._fields_}

    def summary(self):
        """mg_plan_summary as a dict, with nothing bound: predicted_peak
        counts the outputs in the pool; budget_peak is the peak in the
        budget's measure (outputs in caller memory), budget_bytes the
        budget given to compile() (0: none)."""
        s = _lib.PlanSummary()
        _lib.check(_lib.plan_summarize(self._p, None, 0, ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in s._fields_}

    def report(self):
        return _via_file(lambda f: _lib.plan_report(self._p, None, 0, f))

    def dot(self):
        return self.graph.dot()


class Array:
    """An exported memgrad output: hand it to numpy.from_dlpack or
    torch.from_dlpack (once); no copy is made."""

    def __init__(self, managed_ptr, shape, dtype):
        self._ptr, self.shape, self.dtype = managed_ptr, shape, dtype

    def __dlpack__(self, stream=None):
        if self._ptr is None:
            raise MemgradError(1, "this memgrad Array was already consumed")
        cap, self._ptr = _lib.capsule_from(self._ptr), None
        return cap

    def __dlpack_device__(self):
        """(kDLCPU, 0) or (kDLCUDA, device): where the executor ran."""
        if self._ptr is None:
            raise MemgradError(1, "this memgrad Array was already consumed")
        dev = _lib.DLManagedTensor.from_address(self._ptr).dl_tensor.device
        return (dev.device_type, dev.device_id)

    def __del__(self):
        if getattr(self, "_ptr", None):
            _lib.DLManagedTensor.from_address(self._ptr).deleter(self._ptr)
            self._ptr = None


class Saved:
    """The state one forward phase leaves for its backward phase."""

    def __init__(self, ex, ptr):
        self._ex, self._s = ex, ptr

    def free(self):
        if self._s:
            _lib.saved_free(self._s)
            self._s = None

    def __del__(self):
        self.free()


def _default_wrap(a):
    import numpy
    return numpy.from_dlpack(a)


def _torch_wrap(a):
    import torch
    return torch.from_dlpack(a)


class Executor:
    """Runs plans from a caching pool, on the CPU or on a CUDA device.

    `device`: "cpu" (default) or "cuda"; without a CUDA device (or in a
    build without CUDA) "cuda" raises MemgradError with the C library's
    message. With "cuda" every array fed in must be a CUDA DLPack tensor
    (torch's CUDA tensors, say) and outputs are CUDA tensors: nothing is
    copied through the host. `wrap` turns each output Array into the
    caller's array type: numpy.from_dlpack by default on the CPU,
    torch.from_dlpack on CUDA. `num_threads`: the CPU threads each run
    uses (mg_exec_options.num_threads; 0 keeps OpenMP's, whose default is
    OMP_NUM_THREADS)."""

    def __init__(self, wrap=None, num_threads=0, device="cpu", max_bytes=0):
        dev = _device_kind(device, "memgrad.Executor")
        e = ctypes.c_void_p()
        opts = _lib.ExecOptions(device=_DEVICES[dev], max_bytes=max_bytes,
                                num_threads=num_threads)
        _lib.check(_lib.exec_new(ctypes.cast(ctypes.pointer(opts),
                                             ctypes.c_void_p),
                                 ctypes.byref(e)))
        if wrap is None:
            wrap = _torch_wrap if dev == "cuda" else _default_wrap
        self._e, self.wrap, self.device = e, wrap, dev

    def __del__(self):
        if getattr(self, "_e", None):
            _lib.exec_free(self._e)
            self._e = None

    def pool_stats(self):
        """The pool's counters (mg_exec_pool_stats) as a dict."""
        st = _lib.PoolStats()
        _lib.check(_lib.exec_pool_stats(self._e, st))
        return {name: getattr(st, name) for name, _ in st._fields_}

    def host_stats(self):
        """The host tier's counters (mg_exec_host_stats) as a dict."""
        st = _lib.HostStats()
        _lib.check(_lib.exec_host_stats(self._e, st))
        return {name: getattr(st, name) for name, _ in st._fields_}

    def reset_peak(self):
        _lib.exec_pool_reset_peak(self._e)

    def pool_trim(self):
        """Give the pool's cached free blocks, and the arena, back to the
        system (mg_exec_pool_trim); the next run takes new ones. Blocks
        still in use (outputs held through DLPack) stay."""
        _lib.exec_pool_trim(self._e)

    def accumulate(self, tensors):
        """From now on, each of these outputs that a run computes into
        an array fed for it gets its value added into that array (+=, as
        PyTorch's AccumulateGrad adds into .grad) instead of written over
        it (mg_exec_accumulate); an empty list ends that."""
        ts = list(tensors)
        ids = (ctypes.c_int32 * max(len(ts), 1))(*[t.id for t in ts])
        _lib.check(_lib.exec_accumulate(self._e, ids, len(ts)))

    def _key(self, plan, k):
        return plan.graph.find(k) if isinstance(k, str) else k

    def _bind(self, plan, feeds):
        """Bindings for a dict {Tensor or name: array}; the capsules keep
        the arrays' memory alive while the call runs."""
        feeds = dict(feeds or {})
        binds = (_lib.Binding * max(len(feeds), 1))()
        keep = []
        for i, (k, arr) in enumerate(feeds.items()):
            t = self._key(plan, k)
            cap = arr.__dlpack__()
            keep.append((arr, cap))
            _lib.check(_lib.dlpack_bind_managed(
                self._e, plan._p, t.id, _lib.capsule_pointer(cap),
                ctypes.byref(binds[i])))
        return binds, len(feeds), keep

    def _export(self, tensors):
        out = {}
        for t in tensors:
            ptr = ctypes.c_void_p()
            _lib.check(_lib.exec_export(self._e, t.id, ctypes.byref(ptr)))
            out[t] = self.wrap(Array(ptr.value, t.shape, t.dtype))
        return out

    def run(self, plan, feeds, seed=0):
        """Run plan with {Tensor or name: array}; returns {Tensor: array}
        for every output, sharing memgrad's memory."""
        binds, n, keep = self._bind(plan, feeds)
        _lib.check(_lib.exec_run(self._e, plan._p, binds, n, seed))
        del keep
        # an output bound to the caller's memory is the caller's array
        bound = {self._key(plan, k) for k in (feeds or {})}
        return self._export([t for t in plan.outputs if t not in bound])

    def forward(self, plan, feeds, seed=0):
        """The forward phase: ({Tensor: array} of the forward outputs,
        sharing memgrad's memory, and the Saved state for backward). An
        output's block stays valid after the Saved is freed, until the last
        array on it goes."""
        binds, n, keep = self._bind(plan, feeds)
        s = ctypes.c_void_p()
        _lib.check(_lib.exec_forward(self._e, plan._p, binds, n, seed,
                                     ctypes.byref(s)))
        del keep
        saved = Saved(self, s)
        outs = {}
        # an output bound to the caller's memory is the caller's array
        bound = {self._key(plan, k) for k in (feeds or {})}
        for t in plan.outputs:
            if t in bound:
                continue
            ptr = ctypes.c_void_p()
            if _lib.saved_tensor_data(s, t.id, ctypes.byref(ptr)) != 0:
                continue  # a gradient: the backward phase computes it
            _lib.check(_lib.saved_export(s, t.id, ctypes.byref(ptr)))
            outs[t] = self.wrap(Array(ptr.value, t.shape, t.dtype))
        _lib.clear_error()
        return outs, saved

    def backward(self, plan, saved, feeds):
        """The backward phase for `saved`, with the seeds (and leaves) in
        feeds; returns {Tensor: array} of the gradients. A gradient fed
        an array of its own is computed into that array (the caller's
        memory, nothing of the pool) and returned as given."""
        binds, n, keep = self._bind(plan, feeds)
        _lib.check(_lib.exec_backward(self._e, plan._p, saved._s, binds, n))
        del keep
        grads = [t for t in plan.outputs
                 if _lib.saved_tensor_data(
                     saved._s, t.id, ctypes.byref(ctypes.c_void_p())) != 0]
        _lib.clear_error()
        bound = {t: feeds[t] for t in grads if t in feeds}
        out = self._export([t for t in grads if t not in bound])
        out.update(bound)
        return out


_CTYPES = {0: ctypes.c_float, 1: ctypes.c_double, 2: ctypes.c_int32,
           3: ctypes.c_int64, 4: ctypes.c_uint16, 5: ctypes.c_uint16}


class OnnxModel:
    """An ONNX model imported into a new Graph (memgrad_onnx.h), from
    onnx_import. graph: the Graph; inputs, outputs: its graph inputs (not
    initializers) and outputs as Tensors, in the model's order; params:
    the float initializers as parameter Tensors; constants(): every
    binding the model owns (parameters' initial values, then constants read
    as inputs) as (Tensor, numpy array copy). find(name): the Tensor an
    ONNX value name became, or None."""

    def __init__(self, data, training=True, batch_size=0, dropout_seed=0):
        o = _lib.onnx()
        self._o = o
        self._m = None
        self.graph = Graph()
        opts = _lib.OnnxOptions()
        o.options_init(ctypes.byref(opts))
        opts.training = int(bool(training))
        opts.batch_size = int(batch_size)
        opts.dropout_seed = int(dropout_seed)
        buf = bytes(data)
        m = ctypes.c_void_p()
        _lib.check(o.import_buffer(buf, len(buf), ctypes.byref(opts),
                                   self.graph._g, ctypes.byref(m)))
        self._m = m
        t = self.graph._t
        self.inputs = [t(o.input(m, i)) for i in range(o.num_inputs(m))]
        self.outputs = [t(o.output(m, i)) for i in range(o.num_outputs(m))]
        self.params = [t(o.param(m, i)) for i in range(o.num_params(m))]

    def __del__(self):
        if getattr(self, "_m", None):
            self._o.model_free(self._m)
            self._m = None

    def find(self, name):
        tid = self._o.find(self._m, name.encode())
        return None if tid < 0 else self.graph._t(tid)

    def constants(self):
        import numpy as np
        n = ctypes.c_int()
        b = self._o.bindings(self._m, ctypes.byref(n))
        out = []
        for i in range(n.value):
            t = self.graph._t(b[i].tensor)
            d = ctypes.c_int()
            _lib.check(_lib.tensor_dtype(self.graph._g, t.id,
                                         ctypes.byref(d)))
            count = 1
            for s in t.shape:
                count *= s
            arr = (_CTYPES[d.value] * count).from_address(b[i].data)
            out.append((t, np.frombuffer(arr, dtype=_CTYPES[d.value]).copy()
                        .reshape(t.shape)))
        return out


def onnx_import(data, training=True, batch_size=0, dropout_seed=0):
    """Import an ONNX model (its bytes) into a new Graph: an OnnxModel.
    training: BatchNormalization on batch statistics and Dropout on (as
    mg_onnx_options.training). Needs libmemgrad_onnx (a build with
    protobuf-c); a model file is untrusted input, refused with a
    MemgradError naming the node where it is bad."""
    return OnnxModel(data, training, batch_size, dropout_seed)


def onnx_op_types():
    """The ONNX op types the importer converts (mg_onnx_op_types: the
    ONNX rows of src/frontends/op_map.def, the table memgrad.torch is held
    to as well; docs/supported-ops.md lists them)."""
    types, out = _lib.onnx().op_types(), []
    while types[len(out)] is not None:
        out.append(types[len(out)].decode())
    return out
