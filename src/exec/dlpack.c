/*
 * dlpack.c - DLPack in and out (include/memgrad_dlpack.h): checks that a
 * DLTensor can stand for a plan tensor, and exports kept outputs as
 * DLManagedTensors holding a reference on their pool block.
 */
#include "memgrad_dlpack.h"

#include "../rewrite/schedule.h"
#include "backend/backend.h"
#include "exec_internal.h"

#include <stdlib.h>
#include <string.h>

static bool dtype_matches(mg_dtype d, DLDataType t) {
    if (t.lanes != 1) return false;
    switch (d) {
    case MG_F32: return t.code == kDLFloat && t.bits == 32;
    case MG_F64: return t.code == kDLFloat && t.bits == 64;
    case MG_I32: return t.code == kDLInt && t.bits == 32;
    case MG_I64: return t.code == kDLInt && t.bits == 64;
    case MG_BF16: return t.code == kDLBfloat && t.bits == 16;
    case MG_F16: return t.code == kDLFloat && t.bits == 16;
    }
    return false;
}

static const char *device_name(int type) {
    switch (type) {
    case kDLCPU: return "CPU";
    case kDLCUDA: return "CUDA";
    case kDLCUDAHost: return "CUDA host";
    case kDLCUDAManaged: return "CUDA managed";
    default: return "another device";
    }
}

mg_status mg_dlpack_bind(const mg_exec *ex, const mg_plan *p, mg_tensor t,
                         const DLTensor *dl, mg_binding *out) {
    if (!ex || !p || !dl || !out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_dlpack_bind: %s is NULL",
                            !ex   ? "executor"
                            : !p  ? "plan"
                            : !dl ? "tensor"
                                  : "out");
    if (t < 0 || t >= p->n_tensors)
        return mg_set_error(MG_ERR_UNKNOWN_ID,
                            "mg_dlpack_bind: tensor id %d is not in the plan",
                            (int)t);
    char label[160], want[96], got[96];
    mgi_graph_tensor_label(p->g, t, label, sizeof label);
    const mg_tdesc *d = mg_plan_desc(p, t);
    const mg_backend_reg *reg = mgi_exec_reg(ex);
    if ((int)dl->device.device_type != reg->dlpack_device)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_dlpack_bind: %s: the tensor is on %s, the "
                            "executor runs on %s",
                            label, device_name(dl->device.device_type),
                            reg->name);
    if (!dtype_matches(d->dtype, dl->dtype))
        return mg_set_error(MG_ERR_DTYPE,
                            "mg_dlpack_bind: %s is %s; the tensor has DLPack "
                            "dtype code %d, %d bits, %d lanes",
                            label, mg_dtype_name(d->dtype), (int)dl->dtype.code,
                            (int)dl->dtype.bits, (int)dl->dtype.lanes);
    bool same = dl->ndim == d->ndim && (dl->ndim == 0 || dl->shape);
    for (int i = 0; same && i < d->ndim; i++)
        same = dl->shape[i] == d->shape[i];
    if (!same) {
        mg_tdesc dd = {.dtype = d->dtype, .ndim = 0};
        if (dl->shape && dl->ndim > 0 && dl->ndim <= MG_MAX_DIMS) {
            dd.ndim = dl->ndim;
            memcpy(dd.shape, dl->shape, (size_t)dl->ndim * sizeof *dd.shape);
            mgi_shape_str(&dd, got, sizeof got);
        } else {
            snprintf(got, sizeof got, "%d dims", (int)dl->ndim);
        }
        return mg_set_error(MG_ERR_SHAPE,
                            "mg_dlpack_bind: %s has shape %s; the tensor has "
                            "%s",
                            label, mgi_shape_str(d, want, sizeof want), got);
    }
    if (dl->strides) {
        int64_t expect = 1;
        for (int i = d->ndim - 1; i >= 0; i--) {
            if (d->shape[i] != 1 && dl->strides[i] != expect)
                return mg_set_error(
                    MG_ERR_INVALID_ARG,
                    "mg_dlpack_bind: %s: the tensor is not contiguous "
                    "(dim %d has stride %lld, a row-major array %lld); pass "
                    "a contiguous copy",
                    label, i, (long long)dl->strides[i], (long long)expect);
            expect *= d->shape[i];
        }
    }
    if (!dl->data)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_dlpack_bind: %s: the tensor has NULL data",
                            label);
    void *data = (char *)dl->data + dl->byte_offset;
    if ((uintptr_t)data % mg_dtype_size(d->dtype) != 0)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_dlpack_bind: %s: data plus byte_offset %llu "
                            "is not aligned to %s",
                            label, (unsigned long long)dl->byte_offset,
                            mg_dtype_name(d->dtype));
    *out = (mg_binding){t, data};
    return MG_OK;
}

mg_status mg_dlpack_bind_managed(const mg_exec *ex, const mg_plan *p,
                                 mg_tensor t, const DLManagedTensor *m,
                                 mg_binding *out) {
    if (!m)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_dlpack_bind_managed: tensor is NULL");
    return mg_dlpack_bind(ex, p, t, &m->dl_tensor, out);
}

typedef struct export_ctx {
    DLManagedTensor m;
    int64_t shape[MG_MAX_DIMS];
    mgi_block_ref *ref;
} export_ctx;

static void export_deleter(DLManagedTensor *m) {
    export_ctx *e = m->manager_ctx;
    mgi_block_ref_drop(e->ref);
    free(e);
}

mg_status mgi_dlpack_export_ref(mg_exec *ex, mgi_block_ref *r,
                                DLManagedTensor **out, const char *what) {
    export_ctx *e = calloc(1, sizeof *e);
    if (!e) return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", what);
    r->refs++;
    e->ref = r;
    const mg_tdesc *d = &r->d;
    memcpy(e->shape, d->shape, sizeof e->shape);
    DLDataType dt = {d->dtype == MG_I32 || d->dtype == MG_I64 ? kDLInt
                     : d->dtype == MG_BF16                    ? kDLBfloat
                                                              : kDLFloat,
                     (uint8_t)(8 * mg_dtype_size(d->dtype)), 1};
    e->m.dl_tensor =
        (DLTensor){.data = r->data,
                   .device = {(DLDeviceType)mgi_exec_reg(ex)->dlpack_device, 0},
                   .ndim = d->ndim,
                   .dtype = dt,
                   .shape = e->shape,
                   .strides = NULL,
                   .byte_offset = 0};
    e->m.manager_ctx = e;
    e->m.deleter = export_deleter;
    *out = &e->m;
    return MG_OK;
}

mg_status mg_exec_export(mg_exec *ex, mg_tensor t, DLManagedTensor **out) {
    if (!ex || !out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_exec_export: %s is NULL",
                            ex ? "out" : "executor");
    *out = NULL;
    mgi_block_ref *r = NULL;
    mg_status s = mgi_exec_share(ex, t, &r);
    if (s != MG_OK) return s;
    /* mgi_exec_share counted the consumer's reference already. */
    s = mgi_dlpack_export_ref(ex, r, out, "mg_exec_export");
    mgi_block_ref_drop(r);
    return s;
}
