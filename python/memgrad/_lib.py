"""ctypes declarations of the public C API (memgrad.h, memgrad_dlpack.h,
and memgrad_onnx.h from libmemgrad_onnx, loaded on first use) that the
package uses, and the DLPack capsule plumbing."""
import ctypes
import glob
import os
from ctypes import (POINTER, c_char_p, c_double, c_int, c_int32, c_int64,
                    c_size_t, c_uint8, c_uint16, c_uint64, c_void_p)


class MemgradError(RuntimeError):
    """A memgrad C call failed; the message is the C library's."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _find_library():
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get("MEMGRAD_LIBRARY")
    if env:
        return env
    for pat in ("lib/libmemgrad.so*", "lib64/libmemgrad.so*",
                "lib/libmemgrad*.dylib"):
        hits = sorted(glob.glob(os.path.join(here, pat)))
        if hits:
            return hits[0]
    raise ImportError("memgrad: libmemgrad not found beside the package; "
                      "install with `pip install ./python` or set "
                      "MEMGRAD_LIBRARY")


lib = ctypes.CDLL(_find_library())


class Binding(ctypes.Structure):
    _fields_ = [("tensor", c_int32), ("data", c_void_p)]


class Checkpoints(ctypes.Structure):
    _fields_ = [("policy", c_int), ("tensors", POINTER(c_int32)),
                ("n_tensors", c_int), ("min_bytes", c_size_t),
                ("budget_bytes", c_size_t), ("compact", c_int),
                ("store16", c_int), ("offload", c_int),
                ("host_bandwidth", c_double), ("compute_rate", c_double)]


class PlanOptions(ctypes.Structure):
    _fields_ = [("retain", POINTER(c_int32)), ("n_retain", c_int),
                ("no_grad", c_int), ("without_recompute", c_int),
                ("budget_bytes", c_size_t), ("device", c_int),
                ("offload", POINTER(c_int32)), ("n_offload", c_int),
                ("host_bandwidth", c_double), ("compute_rate", c_double),
                ("no_fusion", c_int)]


class PlanSummary(ctypes.Structure):
    _fields_ = [("n_steps", c_int), ("n_forward", c_int),
                ("n_recompute", c_int), ("n_backward", c_int),
                ("n_segments", c_int), ("n_checkpoints", c_int),
                ("forward_flops", c_double), ("recompute_flops", c_double),
                ("backward_flops", c_double),
                ("predicted_peak", c_size_t),
                ("predicted_peak_without_recompute", c_size_t),
                ("budget_bytes", c_size_t), ("budget_peak", c_size_t)]


class PhasePeaks(ctypes.Structure):
    _fields_ = [("forward", c_size_t), ("backward", c_size_t),
                ("pair", c_size_t), ("saved", c_size_t)]


class PlanArena(ctypes.Structure):
    _fields_ = [("bytes", c_size_t), ("live_peak", c_size_t),
                ("reserved", c_size_t)]


class ExecOptions(ctypes.Structure):
    _fields_ = [("device", c_int), ("max_bytes", c_size_t),
                ("num_threads", c_int)]


class Pool2dOpts(ctypes.Structure):
    _fields_ = [("kernel_h", c_int), ("kernel_w", c_int),
                ("stride_h", c_int), ("stride_w", c_int),
                ("pad_top", c_int), ("pad_left", c_int),
                ("pad_bottom", c_int), ("pad_right", c_int),
                ("ceil_mode", c_int), ("count_include_pad", c_int)]


class OnnxOptions(ctypes.Structure):
    _fields_ = [("batch_size", c_int64), ("dims", c_void_p),
                ("n_dims", c_int), ("training", c_int),
                ("dropout_seed", c_uint64), ("external_data_dir", c_char_p),
                ("external_data_allowed_dir", c_char_p)]


class AttentionOpts(ctypes.Structure):
    _fields_ = [("causal", c_int), ("scale", c_double),
                ("dropout_p", c_double), ("seed", c_uint64)]


class LinearCEOpts(ctypes.Structure):
    _fields_ = [("chunk_rows", c_int64), ("has_ignore_index", c_int),
                ("ignore_index", c_int64)]


class PoolStats(ctypes.Structure):
    _fields_ = [("bytes_in_use", c_size_t), ("peak_bytes_in_use", c_size_t),
                ("bytes_reserved", c_size_t), ("alloc_calls", c_uint64),
                ("cache_hits", c_uint64), ("system_allocs", c_uint64),
                ("exported_blocks", c_uint64), ("exported_bytes", c_size_t)]


class PlanOffload(ctypes.Structure):
    _fields_ = [("n_offloaded", c_int), ("offloaded_bytes", c_size_t),
                ("host_bytes", c_size_t), ("host_peak", c_size_t),
                ("overlap_steps", c_int), ("overlap_flops", c_double),
                ("copy_seconds", c_double), ("hidden_seconds", c_double)]


class HostStats(ctypes.Structure):
    _fields_ = [("bytes_in_use", c_size_t), ("peak_bytes_in_use", c_size_t),
                ("bytes_reserved", c_size_t), ("copies_out", c_uint64),
                ("copies_in", c_uint64)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int), ("device_id", c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                ("deleter", _Deleter)]


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


G, P, E, S = c_void_p, c_void_p, c_void_p, c_void_p
T = c_int32
last_error = _fn("mg_last_error", c_char_p)
last_status = _fn("mg_last_status", c_int)
clear_error = _fn("mg_clear_error", None)
graph_new = _fn("mg_graph_new", G)
graph_free = _fn("mg_graph_free", None, G)
input_ = _fn("mg_input", T, G, c_char_p, c_int, c_int, POINTER(c_int64))
param = _fn("mg_param", T, G, c_char_p, c_int, c_int, POINTER(c_int64))
tensor_shape = _fn("mg_tensor_shape", c_int, G, T, POINTER(c_int),
                   POINTER(c_int64))
tensor_dtype = _fn("mg_tensor_dtype", c_int, G, T, POINTER(c_int))
tensor_name = _fn("mg_tensor_name", c_char_p, G, T)
tensor_find = _fn("mg_tensor_find", T, G, c_char_p)
graph_num_tensors = _fn("mg_graph_num_tensors", c_int32, G)
tensor_op_name = _fn("mg_tensor_op_name", c_char_p, G, T)
tensor_input = _fn("mg_tensor_input", T, G, T, c_int)
gradients = _fn("mg_gradients", c_int, G, POINTER(T), c_int, POINTER(T),
                POINTER(T), c_int, POINTER(Checkpoints), POINTER(T))
graph_write_dot = _fn("mg_graph_write_dot", c_int, G, c_void_p)
plan_compile = _fn("mg_plan_compile", c_int, G, POINTER(T), c_int,
                   POINTER(PlanOptions), POINTER(P))
plan_free = _fn("mg_plan_free", None, P)
plan_predicted_peak = _fn("mg_plan_predicted_peak", c_size_t, P,
                          POINTER(Binding), c_int)
plan_report = _fn("mg_plan_report", c_int, P, POINTER(Binding), c_int,
                  c_void_p)
plan_arena_info = _fn("mg_plan_arena_info", c_int, P, POINTER(Binding),
                      c_int, POINTER(PlanArena))
plan_summarize = _fn("mg_plan_summarize", c_int, P, POINTER(Binding), c_int,
                     POINTER(PlanSummary))
plan_phase_peaks = _fn("mg_plan_phase_peaks", c_int, P, POINTER(Binding),
                       c_int, POINTER(PhasePeaks))
exec_new = _fn("mg_exec_new", c_int, c_void_p, POINTER(E))
exec_free = _fn("mg_exec_free", None, E)
exec_run = _fn("mg_exec_run", c_int, E, P, POINTER(Binding), c_int, c_uint64)
exec_release = _fn("mg_exec_release", None, E)
exec_pool_stats = _fn("mg_exec_pool_stats", c_int, E, POINTER(PoolStats))
exec_pool_reset_peak = _fn("mg_exec_pool_reset_peak", None, E)
exec_host_stats = _fn("mg_exec_host_stats", c_int, E, POINTER(HostStats))
plan_offload_info = _fn("mg_plan_offload_info", c_int, P, POINTER(PlanOffload))
graph_offloads = _fn("mg_graph_offloads", c_int, G, POINTER(T), c_int)
exec_pool_trim = _fn("mg_exec_pool_trim", None, E)
exec_accumulate = _fn("mg_exec_accumulate", c_int, E, POINTER(T), c_int)
pool_size_class = _fn("mg_pool_size_class", c_size_t, c_size_t)
exec_forward = _fn("mg_exec_forward", c_int, E, P, POINTER(Binding), c_int,
                   c_uint64, POINTER(S))
exec_backward = _fn("mg_exec_backward", c_int, E, P, S, POINTER(Binding),
                    c_int)
saved_tensor_data = _fn("mg_saved_tensor_data", c_int, S, T,
                        POINTER(c_void_p))
saved_free = _fn("mg_saved_free", None, S)
dlpack_bind_managed = _fn("mg_dlpack_bind_managed", c_int, E, P, T, c_void_p,
                          POINTER(Binding))
exec_export = _fn("mg_exec_export", c_int, E, T, POINTER(c_void_p))
saved_export = _fn("mg_saved_export", c_int, S, T, POINTER(c_void_p))

# builders taking (g, x) / (g, a, b)
unary = {n: _fn("mg_" + n, T, G, T) for n in
         ("relu", "tanh", "sigmoid", "exp", "log", "sqrt", "neg", "gelu",
          "silu", "erf", "is_nonzero", "reciprocal", "rsqrt", "sin", "cos",
          "abs", "logical_not")}
# the comparisons and logical ops give 1/0 in their inputs' dtype
binary = {n: _fn("mg_" + n, T, G, T, T) for n in
          ("add", "sub", "mul", "div", "mse", "cross_entropy", "maximum",
           "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
           "logical_or")}
matmul = _fn("mg_matmul", T, G, T, T, c_int, c_int)
scale = _fn("mg_scale", T, G, T, c_double)
embedding = _fn("mg_embedding", T, G, T, T)
cast = _fn("mg_cast", T, G, T, c_int)
sum_ = _fn("mg_sum", T, G, T, c_int, POINTER(c_int), c_int)
mean = _fn("mg_mean", T, G, T, c_int, POINTER(c_int), c_int)
reshape = _fn("mg_reshape", T, G, T, c_int, POINTER(c_int64))
softmax = _fn("mg_softmax", T, G, T, c_int)
log_softmax = _fn("mg_log_softmax", T, G, T, c_int)
dropout = _fn("mg_dropout", T, G, T, c_double, c_uint64)
conv2d = _fn("mg_conv2d", T, G, T, T, c_int, c_int, c_int, c_int, c_int,
             c_int, c_int)
max_pool2d = _fn("mg_max_pool2d", T, G, T, c_int, c_int, c_int, c_int, c_int,
                 c_int)
avg_pool2d = _fn("mg_avg_pool2d", T, G, T, c_int, c_int, c_int, c_int, c_int,
                 c_int)
batchnorm = _fn("mg_batchnorm", T, G, T, T, T, c_double)
max_pool2d_ex = _fn("mg_max_pool2d_ex", T, G, T, POINTER(Pool2dOpts))
avg_pool2d_ex = _fn("mg_avg_pool2d_ex", T, G, T, POINTER(Pool2dOpts))
global_avg_pool2d = _fn("mg_global_avg_pool2d", T, G, T)
flatten = _fn("mg_flatten", T, G, T, c_int)
fill = _fn("mg_fill", T, G, c_int, c_int, POINTER(c_int64), c_double)
pow_ = _fn("mg_pow", T, G, T, c_double)
leaky_relu = _fn("mg_leaky_relu", T, G, T, c_double)
concat = _fn("mg_concat", T, G, c_int, POINTER(T), c_int)
slice_ = _fn("mg_slice", T, G, T, c_int, c_int64, c_int64)
pad = _fn("mg_pad", T, G, T, POINTER(c_int64), POINTER(c_int64))
permute = _fn("mg_permute", T, G, T, POINTER(c_int))
transpose = _fn("mg_transpose", T, G, T, c_int, c_int)
layernorm = _fn("mg_layernorm", T, G, T, T, T, c_int, c_double)
causal_mask = _fn("mg_causal_mask", T, G, T, c_double)
attention = _fn("mg_attention", T, G, T, T, T, c_int, c_double)
attention_ex = _fn("mg_attention_ex", T, G, T, T, T, T, POINTER(AttentionOpts))
broadcast_to = _fn("mg_broadcast_to", T, G, T, c_int, POINTER(c_int64))
linear_cross_entropy = _fn("mg_linear_cross_entropy", T, G, T, T, T,
                           c_int64)
linear_cross_entropy_ex = _fn("mg_linear_cross_entropy_ex", T, G, T, T, T,
                              T, POINTER(LinearCEOpts))
where = _fn("mg_where", T, G, T, T, T)
clamp = _fn("mg_clamp", T, G, T, c_double, c_double)
gather = _fn("mg_gather", T, G, T, c_int, T)
index_select = _fn("mg_index_select", T, G, T, c_int, T)
cumsum = _fn("mg_cumsum", T, G, T, c_int)


class _OnnxLib:
    """memgrad_onnx.h's functions, from libmemgrad_onnx beside libmemgrad
    (or MEMGRAD_ONNX_LIBRARY), which links libmemgrad itself: one copy of
    the library, so its graphs are this package's."""

    def __init__(self, path):
        o = ctypes.CDLL(path)

        def fn(name, restype, *argtypes):
            f = getattr(o, name)
            f.restype = restype
            f.argtypes = list(argtypes)
            return f
        M = c_void_p
        self.options_init = fn("mg_onnx_options_init", None,
                               POINTER(OnnxOptions))
        self.import_buffer = fn("mg_onnx_import_buffer", c_int, c_void_p,
                                c_size_t, POINTER(OnnxOptions), G,
                                POINTER(M))
        self.model_free = fn("mg_onnx_model_free", None, M)
        self.num_inputs = fn("mg_onnx_num_inputs", c_int, M)
        self.input = fn("mg_onnx_input", T, M, c_int)
        self.num_outputs = fn("mg_onnx_num_outputs", c_int, M)
        self.output = fn("mg_onnx_output", T, M, c_int)
        self.num_params = fn("mg_onnx_num_params", c_int, M)
        self.param = fn("mg_onnx_param", T, M, c_int)
        self.bindings = fn("mg_onnx_bindings", POINTER(Binding), M,
                           POINTER(c_int))
        self.find = fn("mg_onnx_find", T, M, c_char_p)
        self.op_types = fn("mg_onnx_op_types", POINTER(c_char_p))


_onnx = []


def onnx():
    """The ONNX importer's functions (an _OnnxLib), loaded on first use;
    ImportError where this build has no libmemgrad_onnx."""
    if not _onnx:
        path = os.environ.get("MEMGRAD_ONNX_LIBRARY")
        if not path:
            d, base = os.path.split(lib._name)
            want = [os.path.join(d, base.replace("libmemgrad",
                                                 "libmemgrad_onnx", 1))]
            want += sorted(glob.glob(os.path.join(d, "libmemgrad_onnx*.so*")))
            path = next((w for w in want if os.path.exists(w)), None)
        if not path:
            raise ImportError(
                "memgrad: libmemgrad_onnx not found beside %s (a build "
                "without protobuf-c, or set MEMGRAD_ONNX_LIBRARY)" % lib._name)
        _onnx.append(_OnnxLib(path))
    return _onnx[0]


def check(status):
    """Raise MemgradError with the C message for a failed status."""
    if status != 0:
        raise MemgradError(status, last_error().decode())


def check_tensor(t):
    if t < 0:
        raise MemgradError(last_status(), last_error().decode())
    return t


# ------------------------------------------------------------- capsules
_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, c_void_p, c_char_p,
                                 c_void_p)(("PyCapsule_New", _api))
_capsule_ptr = ctypes.PYFUNCTYPE(c_void_p, ctypes.py_object, c_char_p)(
    ("PyCapsule_GetPointer", _api))
_capsule_valid_raw = ctypes.PYFUNCTYPE(c_int, c_void_p, c_char_p)(
    ("PyCapsule_IsValid", _api))
_capsule_ptr_raw = ctypes.PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(
    ("PyCapsule_GetPointer", _api))
_DLTENSOR = b"dltensor"


@ctypes.CFUNCTYPE(None, c_void_p)
def _capsule_destructor(capsule):
    # Only a capsule nobody consumed still has its name: then its tensor
    # is ours to delete (the DLPack protocol).
    if _capsule_valid_raw(capsule, _DLTENSOR):
        ptr = _capsule_ptr_raw(capsule, _DLTENSOR)
        DLManagedTensor.from_address(ptr).deleter(ptr)


_destructor_ptr = ctypes.cast(_capsule_destructor, c_void_p).value


def capsule_from(managed_ptr):
    return _capsule_new(managed_ptr, _DLTENSOR, _destructor_ptr)


def capsule_pointer(capsule):
    return _capsule_ptr(capsule, _DLTENSOR)
