/*
 * onnx_import.c - reading an ONNX model: the file or buffer through the
 * protobuf-c parser generated from onnx.proto, initializers (inline or
 * external data) into parameters and constants, graph inputs with their
 * dynamic dims made static, the nodes in dependency order, and the model
 * handle of memgrad_onnx.h.
 *
 * Every size the file declares is checked against the bytes that back it
 * before anything of that size is allocated: protobuf-c bounds each field by
 * the buffer, and a tensor's dims must match its data's length here.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/half.h"
#include "onnx_internal.h"

#define S(x) ((x) ? (x) : "")

void mg_onnx_options_init(mg_onnx_options *opts) {
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->training = 1;
}

mg_status mgi_onnx_node_error(mgi_octx *c, mg_status s, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const Onnx__NodeProto *n = c->node;
    if (!n) return mg_set_error(s, "onnx: %s", msg);
    return mg_set_error(
        s, "onnx node '%s' (op_type %s, domain '%s', opset %lld): %s",
        S(n->name), S(n->op_type), S(n->domain), (long long)c->opset, msg);
}

/* The builder's error, prefixed with the value the importer was making
 * unless it names that value already. The message is copied first:
 * formatting mg_last_error() into the buffer it lives in read the prefix
 * back, and printed it twice. */
static mg_status builder_error(const char *what, const char *name) {
    char msg[512], quoted[300];
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    snprintf(quoted, sizeof quoted, "'%s'", name);
    mg_status s = mg_last_status() ? mg_last_status() : MG_ERR_INTERNAL;
    if (strstr(msg, quoted)) return mg_set_error(s, "onnx: %s", msg);
    return mg_set_error(s, "onnx: %s %s: %s", what, quoted, msg);
}

/* ------------------------------------------------------------------ names */

static uint32_t hash_str(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

mgi_oval *mgi_onnx_lookup(mgi_octx *c, const char *name) {
    if (!name || !c->n_slots) return NULL;
    uint32_t mask = (uint32_t)c->n_slots - 1;
    for (uint32_t h = hash_str(name) & mask;; h = (h + 1) & mask) {
        int32_t k = c->slots[h];
        if (k < 0) return NULL;
        if (strcmp(c->vals[k].name, name) == 0) return &c->vals[k];
    }
}

/* Names are defined once (SSA); the table was sized for every name the
 * model can define, so it never fills. */
mg_status mgi_onnx_define(mgi_octx *c, const char *name, mg_tensor t,
                          mgi_oconst *k) {
    if (!name || !name[0]) return MG_OK; /* an output nobody may read */
    if (mgi_onnx_lookup(c, name))
        return mgi_onnx_node_error(c, MG_ERR_INVALID_ARG,
                                   "value '%s' is defined twice", name);
    if (c->n_vals >= c->cap_vals)
        return mgi_onnx_node_error(c, MG_ERR_INTERNAL, "name table full");
    uint32_t mask = (uint32_t)c->n_slots - 1;
    uint32_t h = hash_str(name) & mask;
    while (c->slots[h] >= 0) h = (h + 1) & mask;
    c->slots[h] = c->n_vals;
    c->vals[c->n_vals++] = (mgi_oval){name, t, k, NULL};
    if (t != MG_NO_TENSOR && !mg_tensor_name(c->g, t))
        mg_tensor_set_name(c->g, t, name); /* names are only a courtesy */
    mg_clear_error();
    return MG_OK;
}

static mgi_oread *read_find(const mgi_octx *c, const char *name) {
    if (!name || !name[0] || !c->n_reads) return NULL;
    uint32_t mask = (uint32_t)c->n_reads - 1;
    for (uint32_t h = hash_str(name) & mask; c->reads[h].name;
         h = (h + 1) & mask)
        if (strcmp(c->reads[h].name, name) == 0) return &c->reads[h];
    return NULL;
}

bool mgi_onnx_is_read(const mgi_octx *c, const char *name) {
    return read_find(c, name) != NULL;
}

const Onnx__NodeProto *mgi_onnx_sole_producer(const mgi_octx *c,
                                              const char *name) {
    const mgi_oread *r = read_find(c, name);
    if (!r || r->readers != 1 || r->producer < 0) return NULL;
    return c->gp->node[r->producer];
}

/* The read-name index: one pass over the inputs for the counts, one over
 * the outputs for the producers, so that the attention matcher's walk up
 * its chain costs a lookup per step, not a scan of a (hostile) graph. */
static mg_status build_reads(mgi_octx *c, const Onnx__GraphProto *gp) {
    size_t n = gp->n_output + 1;
    for (size_t k = 0; k < gp->n_node; k++) {
        if (gp->node[k]->n_input > (size_t)INT32_MAX / 4 ||
            n > (size_t)INT32_MAX / 4)
            return mg_set_error(MG_ERR_INVALID_ARG, "onnx: too many values");
        n += gp->node[k]->n_input;
    }
    if (gp->n_node > (size_t)INT32_MAX)
        return mg_set_error(MG_ERR_INVALID_ARG, "onnx: too many nodes");
    size_t slots = 16;
    while (slots < 2 * n) slots *= 2;
    if (slots > (size_t)INT32_MAX / 2)
        return mg_set_error(MG_ERR_INVALID_ARG, "onnx: too many values");
    c->reads = calloc(slots, sizeof *c->reads);
    if (!c->reads) return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    c->n_reads = (int)slots;
    uint32_t mask = (uint32_t)slots - 1;
    for (size_t k = 0; k <= gp->n_node; k++) {
        size_t cnt = k < gp->n_node ? gp->node[k]->n_input : gp->n_output;
        for (size_t i = 0; i < cnt; i++) {
            const char *nm =
                k < gp->n_node ? gp->node[k]->input[i] : S(gp->output[i]->name);
            if (!nm[0]) continue;
            mgi_oread *r = read_find(c, nm);
            if (!r) {
                uint32_t h = hash_str(nm) & mask;
                while (c->reads[h].name) h = (h + 1) & mask;
                r = &c->reads[h];
                *r = (mgi_oread){nm, 0, -1};
            }
            if (r->readers < INT32_MAX) r->readers++;
        }
    }
    for (size_t k = 0; k < gp->n_node; k++) {
        const Onnx__NodeProto *nd = gp->node[k];
        mgi_oread *r = nd->n_output > 0 ? read_find(c, S(nd->output[0])) : NULL;
        if (r) r->producer = (int32_t)k;
    }
    return MG_OK;
}

/* ------------------------------------------------------------------ constants
 */

/* Room in c->consts for one more constant. */
static mg_status consts_reserve(mgi_octx *c) {
    if (c->n_consts < c->cap_consts) return MG_OK;
    int cap = c->cap_consts ? 2 * c->cap_consts : 64;
    mgi_oconst **p = realloc(c->consts, (size_t)cap * sizeof *p);
    if (!p) return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    c->consts = p;
    c->cap_consts = cap;
    return MG_OK;
}

mgi_oconst *mgi_onnx_const_new(mgi_octx *c, int32_t onnx_type, bool is_float,
                               int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > MG_MAX_DIMS) {
        mgi_onnx_node_error(c, MG_ERR_SHAPE, "constant of rank %d (at most %d)",
                            ndim, MG_MAX_DIMS);
        return NULL;
    }
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 ||
            (shape[d] > 0 && n > MGI_ONNX_MAX_CONST_ELEMS / shape[d])) {
            mgi_onnx_node_error(c, MG_ERR_SHAPE,
                                "constant too large or negative dim %lld",
                                (long long)shape[d]);
            return NULL;
        }
        n *= shape[d];
    }
    if (consts_reserve(c) != MG_OK) return NULL;
    mgi_oconst *k = calloc(1, sizeof *k);
    size_t es = is_float ? sizeof(double) : sizeof(int64_t);
    void *data = calloc(n ? (size_t)n : 1, es);
    if (!k || !data) {
        free(k);
        free(data);
        mg_set_error(MG_ERR_NOMEM, "onnx: out of memory for a constant");
        return NULL;
    }
    k->onnx_type = onnx_type;
    k->ndim = ndim;
    for (int d = 0; d < ndim; d++) k->shape[d] = shape[d];
    k->n = n;
    if (is_float) k->f = data;
    else k->i = data;
    c->consts[c->n_consts++] = k;
    return k;
}

static bool type_is_float(int32_t t) {
    return t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ||
           t == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ||
           t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ||
           t == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
}

static bool type_is_16bit_float(int32_t t) {
    return t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ||
           t == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
}

/* The value of 16-bit float bits h of ONNX type t (exact). */
static double half_value(int32_t t, uint16_t h) {
    return t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ? mg_f32_from_f16(h)
                                                       : mg_f32_from_bf16(h);
}

static size_t type_size(int32_t t) {
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: return 4;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: return 8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: return 2;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: return 1;
    default: return 0; /* strings, complex: not supported */
    }
}

/* Element k of little-endian raw bytes of type t. */
static void raw_elem(const uint8_t *p, int32_t t, double *f, int64_t *i) {
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: {
        float v;
        memcpy(&v, p, 4);
        *f = v;
        return;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: memcpy(f, p, 8); return;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        *f = half_value(t, h);
        return;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        *i = v;
        return;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        *i = v;
        return;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: memcpy(i, p, 8); return;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        *i = (int64_t)v;
        return;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        *i = v;
        return;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *i = v;
        return;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: *i = (int8_t)p[0]; return;
    default: /* uint8, bool */ *i = p[0]; return;
    }
}

/* Tensor tp's element size *es (its type t must be supported) and its
 * element count *n from its dims. */
static mg_status tensor_header(mgi_octx *c, const Onnx__TensorProto *tp,
                               const char *tname, int32_t t, size_t *es,
                               int64_t *n) {
    *es = type_size(t);
    if (!*es)
        return mgi_onnx_node_error(c, MG_ERR_DTYPE,
                                   "tensor '%s': data type %d is not "
                                   "supported (float, double, float16, "
                                   "bfloat16 and integer types are)",
                                   tname, (int)t);
    if (tp->n_dims > MG_MAX_DIMS)
        return mgi_onnx_node_error(c, MG_ERR_SHAPE,
                                   "tensor '%s' has %zu dims (at most %d)",
                                   tname, tp->n_dims, MG_MAX_DIMS);
    *n = 1;
    for (size_t d = 0; d < tp->n_dims; d++) {
        int64_t v = tp->dims[d];
        if (v < 0 || (v > 0 && *n > INT64_MAX / 16 / v))
            return mgi_onnx_node_error(c, MG_ERR_INVALID_ARG,
                                       "tensor '%s': dim %lld is negative "
                                       "or makes it larger than any file",
                                       tname, (long long)v);
        *n *= v;
    }
    return MG_OK;
}

/* The raw bytes of an external tensor of n elements of es bytes, read into
 * *ext (the caller's to free) from its location, offset and length, the
 * length checked against the dims; *have the elements read. */
static mg_status tensor_external(mgi_octx *c, const Onnx__TensorProto *tp,
                                 const char *tname, int64_t n, size_t es,
                                 uint8_t **ext, int64_t *have) {
    const char *loc = NULL;
    int64_t off = 0, len = -1;
    for (size_t k = 0; k < tp->n_external_data; k++) {
        const char *key = S(tp->external_data[k]->key);
        const char *val = S(tp->external_data[k]->value);
        char *end;
        if (strcmp(key, "location") == 0) loc = val;
        else if (strcmp(key, "offset") == 0 || strcmp(key, "length") == 0) {
            errno = 0;
            long long v = strtoll(val, &end, 10);
            if (errno || *end || v < 0)
                return mg_set_error(MG_ERR_INVALID_ARG,
                                    "onnx: tensor '%s': bad external %s '%s'",
                                    tname, key, val);
            if (key[0] == 'o') off = v;
            else len = v;
        }
    }
    if (len >= 0 && len != n * (int64_t)es)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "onnx: tensor '%s': external length %lld, but its "
                            "dims need %lld bytes",
                            tname, (long long)len,
                            (long long)(n * (int64_t)es));
    if (len < 0) len = n * (int64_t)es;
    mg_status s = mgi_onnx_read_external(c, tname, loc, off, len, ext);
    if (s) return s;
    *have = len / (int64_t)es;
    return MG_OK;
}

/* Where tp's n elements are, and how many the file really holds (*have;
 * -1 for raw bytes of another length): raw bytes (*raw; external ones in
 * *ext, the caller's to free), or else (*raw NULL) the typed field of its
 * type t. */
static mg_status tensor_where(mgi_octx *c, const Onnx__TensorProto *tp,
                              const char *tname, int32_t t, int64_t n,
                              size_t es, const uint8_t **raw, uint8_t **ext,
                              int64_t *have) {
    *raw = NULL;
    *ext = NULL;
    if (tp->has_data_location &&
        tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        mg_status s = tensor_external(c, tp, tname, n, es, ext, have);
        *raw = *ext;
        return s;
    }
    if (tp->has_raw_data) {
        *raw = tp->raw_data.data;
        *have = (int64_t)(tp->raw_data.len / es);
        if ((int64_t)tp->raw_data.len != n * (int64_t)es) *have = -1;
    } else if (t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
        *have = (int64_t)tp->n_float_data;
    } else if (t == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE) {
        *have = (int64_t)tp->n_double_data;
    } else if (t == ONNX__TENSOR_PROTO__DATA_TYPE__INT64) {
        *have = (int64_t)tp->n_int64_data;
    } else if (t == ONNX__TENSOR_PROTO__DATA_TYPE__UINT32 ||
               t == ONNX__TENSOR_PROTO__DATA_TYPE__UINT64) {
        *have = (int64_t)tp->n_uint64_data;
    } else {
        *have = (int64_t)tp->n_int32_data;
    }
    return MG_OK;
}

/* Element e of tp's typed field for its type t (no raw bytes). float16
 * and bfloat16 elements are bit patterns in int32_data (the caller has
 * checked that each fits 16 bits). */
static void field_elem(const Onnx__TensorProto *tp, int32_t t, int64_t e,
                       double *fv, int64_t *iv) {
    if (type_is_16bit_float(t))
        *fv = half_value(t, (uint16_t)tp->int32_data[e]);
    else if (t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) *fv = tp->float_data[e];
    else if (t == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE)
        *fv = tp->double_data[e];
    else if (t == ONNX__TENSOR_PROTO__DATA_TYPE__INT64) *iv = tp->int64_data[e];
    else if (t == ONNX__TENSOR_PROTO__DATA_TYPE__UINT32 ||
             t == ONNX__TENSOR_PROTO__DATA_TYPE__UINT64)
        *iv = (int64_t)tp->uint64_data[e];
    else *iv = tp->int32_data[e];
}

/* A constant of tp's type t and dims with n zeroed elements, registered in
 * c. Parameters may exceed the folding limit of mgi_onnx_const_new: the
 * constant is built here. */
static mg_status tensor_const_new(mgi_octx *c, const Onnx__TensorProto *tp,
                                  const char *tname, int32_t t, int64_t n,
                                  mgi_oconst **out) {
    mgi_oconst *k = calloc(1, sizeof *k);
    void *data = calloc(n ? (size_t)n : 1, 8);
    if (!k || !data || c->n_consts == INT_MAX) {
        free(k);
        free(data);
        return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory for '%s'",
                            tname);
    }
    mg_status s = consts_reserve(c);
    if (s != MG_OK) {
        free(k);
        free(data);
        return s;
    }
    c->consts[c->n_consts++] = k;
    k->onnx_type = t;
    k->ndim = (int)tp->n_dims;
    for (size_t d = 0; d < tp->n_dims; d++) k->shape[d] = tp->dims[d];
    k->n = n;
    if (type_is_float(t)) k->f = data;
    else k->i = data;
    *out = k;
    return MG_OK;
}

mg_status mgi_onnx_decode_tensor(mgi_octx *c, const Onnx__TensorProto *tp,
                                 mgi_oconst **out) {
    *out = NULL;
    const char *tname = S(tp->name);
    int32_t t = tp->has_data_type ? tp->data_type : 0;
    size_t es = 0;
    int64_t n = 0;
    mg_status s = tensor_header(c, tp, tname, t, &es, &n);
    if (s) return s;
    const uint8_t *raw;
    uint8_t *ext;
    int64_t have = 0;
    s = tensor_where(c, tp, tname, t, n, es, &raw, &ext, &have);
    if (s) return s;
    if (have != n) {
        free(ext);
        return mgi_onnx_node_error(c, MG_ERR_INVALID_ARG,
                                   "tensor '%s': its dims say %lld elements "
                                   "but the file holds %s",
                                   tname, (long long)n,
                                   have < 0 ? "a different byte count"
                                            : "a different count");
    }
    if (n > MGI_ONNX_MAX_CONST_ELEMS * 64) {
        free(ext);
        return mgi_onnx_node_error(c, MG_ERR_SHAPE, "tensor '%s' too large",
                                   tname);
    }
    mgi_oconst *k = NULL;
    s = tensor_const_new(c, tp, tname, t, n, &k);
    if (s) {
        free(ext);
        return s;
    }
    const bool fl = type_is_float(t);
    for (int64_t e = 0; e < n; e++) {
        double fv = 0;
        int64_t iv = 0;
        if (!raw && type_is_16bit_float(t) &&
            (tp->int32_data[e] < 0 || tp->int32_data[e] > 0xffff)) {
            free(ext);
            return mgi_onnx_node_error(
                c, MG_ERR_INVALID_ARG,
                "tensor '%s': %s element %lld is %d, "
                "not a 16-bit pattern",
                tname,
                t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ? "float16"
                                                            : "bfloat16",
                (long long)e, (int)tp->int32_data[e]);
        }
        if (raw) raw_elem(raw + (size_t)e * es, t, &fv, &iv);
        else field_elem(tp, t, e, &fv, &iv);
        if (fl) k->f[e] = fv;
        else k->i[e] = iv;
    }
    free(ext);
    *out = k;
    return MG_OK;
}

/* ------------------------------------------------------------------ bindings
 */

static mg_status add_binding(mgi_octx *c, mg_tensor t, void *data) {
    mg_onnx_model *m = c->model;
    if (m->n_binds == m->cap_binds) {
        int cap = m->cap_binds ? 2 * m->cap_binds : 32;
        mg_binding *b = realloc(m->binds, (size_t)cap * sizeof *b);
        if (!b) return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
        m->binds = b;
        void **d = realloc(m->bind_data, (size_t)cap * sizeof *d);
        if (!d) return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
        m->bind_data = d;
        m->cap_binds = cap;
    }
    m->binds[m->n_binds] = (mg_binding){t, data};
    m->bind_data[m->n_binds++] = data;
    return MG_OK;
}

static float *to_f32(const mgi_oconst *k) {
    float *p = malloc(k->n ? (size_t)k->n * sizeof(float) : sizeof(float));
    if (!p) return NULL;
    for (int64_t e = 0; e < k->n; e++)
        p[e] = k->f ? (float)k->f[e] : (float)k->i[e];
    return p;
}

/* The dtype a float constant or initializer of ONNX type t becomes:
 * float16 and bfloat16 keep their 16 bits (MG_F16, MG_BF16); float and
 * double are float32, as memgrad's ONNX graphs compute. */
static mg_dtype float_dtype_of(int32_t t) {
    if (t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16) return MG_F16;
    if (t == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16) return MG_BF16;
    return MG_F32;
}

/* k's values as a new buffer of dtype dt (MG_F32, MG_F16 or MG_BF16),
 * each rounded once to it (exact for values decoded from that type). */
static void *to_dtype(const mgi_oconst *k, mg_dtype dt) {
    if (dt == MG_F32) return to_f32(k);
    uint16_t *p = malloc(k->n ? (size_t)k->n * sizeof *p : sizeof *p);
    if (!p) return NULL;
    for (int64_t e = 0; e < k->n; e++) {
        double x = k->f ? k->f[e] : (double)k->i[e];
        p[e] = dt == MG_F16 ? mg_f16_from_f64(x) : mg_bf16_from_f64(x);
    }
    return p;
}

mg_tensor mgi_onnx_tensor(mgi_octx *c, mgi_oval *v) {
    if (!v) return MG_NO_TENSOR;
    if (v->t != MG_NO_TENSOR) return v->t;
    mgi_oconst *k = v->c;
    if (!k) return MG_NO_TENSOR;
    if (k->n == 0) {
        mgi_onnx_node_error(c, MG_ERR_SHAPE, "constant '%s' is empty", v->name);
        return MG_NO_TENSOR;
    }
    mg_tensor t;
    if (k->f) {
        const mg_dtype dt = float_dtype_of(k->onnx_type);
        bool uniform = true;
        for (int64_t e = 1; e < k->n && uniform; e++)
            uniform = (float)k->f[e] == (float)k->f[0];
        if (uniform) {
            t = mg_fill(c->g, dt, k->ndim, k->shape, (float)k->f[0]);
        } else {
            void *p = to_dtype(k, dt);
            if (!p) {
                mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
                return MG_NO_TENSOR;
            }
            char nm[64];
            snprintf(nm, sizeof nm, "onnx_const_%d", c->model->n_binds);
            t = mg_input(c->g, nm, dt, k->ndim, k->shape);
            if (t == MG_NO_TENSOR || add_binding(c, t, p)) {
                free(p);
                return MG_NO_TENSOR;
            }
        }
    } else {
        /* integer constants read by tensor ops are indices (Gather) */
        int32_t *p = malloc((size_t)k->n * sizeof *p);
        if (!p) {
            mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
            return MG_NO_TENSOR;
        }
        for (int64_t e = 0; e < k->n; e++) {
            if (k->i[e] < INT32_MIN || k->i[e] > INT32_MAX) {
                free(p);
                mgi_onnx_node_error(c, MG_ERR_INVALID_ARG,
                                    "constant '%s' does not fit int32",
                                    v->name);
                return MG_NO_TENSOR;
            }
            p[e] = (int32_t)k->i[e];
        }
        char nm[64];
        snprintf(nm, sizeof nm, "onnx_const_%d", c->model->n_binds);
        t = mg_input(c->g, nm, MG_I32, k->ndim, k->shape);
        if (t == MG_NO_TENSOR || add_binding(c, t, p)) {
            free(p);
            return MG_NO_TENSOR;
        }
    }
    if (t == MG_NO_TENSOR) {
        mgi_onnx_node_error(c, mg_last_status(), "%s", mg_last_error());
        return MG_NO_TENSOR;
    }
    v->t = t;
    return t;
}

/* ------------------------------------------------------------------ graph */

static mg_status import_inputs(mgi_octx *c, const Onnx__GraphProto *gp) {
    mg_onnx_model *m = c->model;
    m->inputs = calloc(gp->n_input ? gp->n_input : 1, sizeof *m->inputs);
    if (!m->inputs) return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    for (size_t k = 0; k < gp->n_input; k++) {
        const Onnx__ValueInfoProto *vi = gp->input[k];
        const char *name = S(vi->name);
        if (mgi_onnx_lookup(c, name))
            continue; /* an initializer listed as an input (IR < 4) */
        const Onnx__TypeProto *tp = vi->type;
        if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
            !tp->tensor_type || !tp->tensor_type->shape)
            return mg_set_error(MG_ERR_UNSUPPORTED,
                                "onnx: input '%s' is not a tensor of known "
                                "rank",
                                name);
        const Onnx__TensorShapeProto *sp = tp->tensor_type->shape;
        if (sp->n_dim > MG_MAX_DIMS)
            return mg_set_error(MG_ERR_SHAPE,
                                "onnx: input '%s' has rank %zu "
                                "(at most %d)",
                                name, sp->n_dim, MG_MAX_DIMS);
        int64_t shape[MG_MAX_DIMS];
        for (size_t d = 0; d < sp->n_dim; d++) {
            const Onnx__TensorShapeProto__Dimension *dm = sp->dim[d];
            int64_t v = -1;
            const char *pname = NULL;
            if (dm->value_case ==
                ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
                /* A declared size, never replaced: 0 is a zero-size
                 * dimension, not a dynamic one (it was given the batch
                 * size, issue 49), and memgrad's tensors have none. */
                if (dm->dim_value == 0)
                    return mg_set_error(MG_ERR_UNSUPPORTED,
                                        "onnx: input '%s' dim %zu has the "
                                        "declared zero-size dim_value 0: "
                                        "zero-size tensors are not "
                                        "supported (every dimension must "
                                        "be >= 1)",
                                        name, d);
                if (dm->dim_value < 0)
                    return mg_set_error(MG_ERR_INVALID_ARG,
                                        "onnx: input '%s' dim %zu has "
                                        "dim_value %lld, no size",
                                        name, d, (long long)dm->dim_value);
                v = dm->dim_value;
            } else {
                if (dm->value_case ==
                    ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
                    pname = dm->dim_param;
                for (int j = 0; pname && j < c->opts.n_dims; j++)
                    if (c->opts.dims[j].name &&
                        strcmp(c->opts.dims[j].name, pname) == 0)
                        v = c->opts.dims[j].size;
                if (v < 0 && d == 0 && c->opts.batch_size > 0)
                    v = c->opts.batch_size;
            }
            if (v < 1)
                return mg_set_error(MG_ERR_INVALID_ARG,
                                    "onnx: input '%s' dim %zu ('%s') is "
                                    "dynamic: give its size in the options "
                                    "(batch_size, or dims by name)",
                                    name, d, S(pname));
            shape[d] = v;
        }
        int32_t et =
            tp->tensor_type->has_elem_type ? tp->tensor_type->elem_type : 0;
        mg_dtype dt;
        if (et == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) dt = MG_F32;
        else if (et == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE) dt = MG_F64;
        else if (et == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16) dt = MG_F16;
        else if (et == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16) dt = MG_BF16;
        else if (et == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
                 et == ONNX__TENSOR_PROTO__DATA_TYPE__INT32)
            dt = MG_I32;
        else
            return mg_set_error(MG_ERR_DTYPE,
                                "onnx: input '%s' has element "
                                "type %d (float, double, float16, "
                                "bfloat16, int32 and int64 are supported)",
                                name, (int)et);
        mg_tensor t = mg_input(c->g, name, dt, (int)sp->n_dim, shape);
        if (t == MG_NO_TENSOR) return builder_error("input", name);
        mg_status s = mgi_onnx_define(c, name, t, NULL);
        if (s) return s;
        m->inputs[m->n_inputs++] = t;
    }
    return MG_OK;
}

static mg_status import_initializers(mgi_octx *c, const Onnx__GraphProto *gp) {
    mg_onnx_model *m = c->model;
    m->params =
        calloc(gp->n_initializer ? gp->n_initializer : 1, sizeof *m->params);
    if (!m->params) return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    for (size_t k = 0; k < gp->n_initializer; k++) {
        const Onnx__TensorProto *tp = gp->initializer[k];
        mgi_oconst *kc;
        mg_status s = mgi_onnx_decode_tensor(c, tp, &kc);
        if (s) return s;
        mg_tensor t = MG_NO_TENSOR;
        if ((tp->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ||
             type_is_16bit_float(tp->data_type)) &&
            kc->n > 0) {
            /* float16 and bfloat16 weights train in their own dtype */
            const mg_dtype dt = float_dtype_of(tp->data_type);
            t = mg_param(c->g, S(tp->name), dt, kc->ndim, kc->shape);
            if (t == MG_NO_TENSOR)
                return builder_error("initializer", S(tp->name));
            void *p = to_dtype(kc, dt);
            if (!p) return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
            if ((s = add_binding(c, t, p))) {
                free(p);
                return s;
            }
            m->params[m->n_params++] = t;
            /* Parameters are trained: never folded as constants. */
            if ((s = mgi_onnx_define(c, S(tp->name), t, NULL))) return s;
            if (kc->n > MGI_ONNX_KEEP_INIT) {
                /* A weight, not a bound or a scale an op reads as a
                 * constant: its f32 binding is all that is needed, so the
                 * decoded copy (8 bytes an element) and the file's bytes
                 * go now, not at the end of the import (issue 28: the
                 * parameters were held four times over, in the file
                 * buffer, the protobuf, the decoded constants and the
                 * bindings). The message is ours (import_buffer unpacked
                 * it with the default allocator). */
                free(kc->f);
                kc->f = NULL;
                Onnx__TensorProto *mtp = (Onnx__TensorProto *)tp;
                if (mtp->has_raw_data) {
                    free(mtp->raw_data.data);
                    mtp->raw_data.data = NULL;
                    mtp->raw_data.len = 0;
                    mtp->has_raw_data = 0;
                }
                continue;
            }
            mgi_oval *v = mgi_onnx_lookup(c, S(tp->name));
            if (v) v->init = kc;
            continue;
        }
        if ((s = mgi_onnx_define(c, S(tp->name), t, kc))) return s;
    }
    return MG_OK;
}

/* Nodes in dependency order (ONNX asks for a sorted list; this accepts any
 * order and finds cycles): depth-first with an explicit stack, since a
 * hostile file may chain a million nodes. */
static mg_status node_order(mgi_octx *c, const Onnx__GraphProto *gp,
                            int32_t **order_out) {
    size_t n = gp->n_node;
    *order_out = NULL;
    size_t nslots = 16;
    size_t nout = 0;
    for (size_t i = 0; i < n; i++) nout += gp->node[i]->n_output;
    while (nslots < 2 * nout + 2) nslots *= 2;
    int32_t *prod_slot = malloc(nslots * sizeof *prod_slot);
    int32_t *prod_node = malloc(nslots * sizeof *prod_node);
    const char **prod_name = malloc(nslots * sizeof *prod_name);
    int32_t *order = malloc((n ? n : 1) * sizeof *order);
    uint8_t *state = calloc(n ? n : 1, 1);
    int32_t *stk_node = malloc((n ? n : 1) * sizeof *stk_node);
    size_t *stk_next = malloc((n ? n : 1) * sizeof *stk_next);
    mg_status s = MG_OK;
    if (!prod_slot || !prod_node || !prod_name || !order || !state ||
        !stk_node || !stk_next) {
        s = mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
        goto done;
    }
    for (size_t i = 0; i < nslots; i++) prod_slot[i] = -1;
    uint32_t mask = (uint32_t)nslots - 1;
    for (size_t i = 0; i < n; i++)
        for (size_t o = 0; o < gp->node[i]->n_output; o++) {
            const char *nm = gp->node[i]->output[o];
            if (!nm[0]) continue;
            uint32_t h = hash_str(nm) & mask;
            while (prod_slot[h] >= 0) {
                if (strcmp(prod_name[h], nm) == 0) {
                    c->node = gp->node[i];
                    s = mgi_onnx_node_error(c, MG_ERR_INVALID_ARG,
                                            "output '%s' is produced twice",
                                            nm);
                    goto done;
                }
                h = (h + 1) & mask;
            }
            prod_slot[h] = 1;
            prod_node[h] = (int32_t)i;
            prod_name[h] = nm;
        }
    size_t n_order = 0;
    for (size_t r = 0; r < n; r++) {
        if (state[r]) continue;
        size_t sp = 0;
        stk_node[sp] = (int32_t)r;
        stk_next[sp++] = 0;
        state[r] = 1;
        while (sp) {
            const Onnx__NodeProto *nd = gp->node[stk_node[sp - 1]];
            if (stk_next[sp - 1] < nd->n_input) {
                const char *nm = nd->input[stk_next[sp - 1]++];
                if (!nm[0]) continue;
                uint32_t h = hash_str(nm) & mask;
                int32_t p = -1;
                for (; prod_slot[h] >= 0; h = (h + 1) & mask)
                    if (strcmp(prod_name[h], nm) == 0) {
                        p = prod_node[h];
                        break;
                    }
                if (p < 0)
                    continue; /* an input or initializer: checked later */
                if (state[p] == 1) {
                    c->node = nd;
                    s = mgi_onnx_node_error(c, MG_ERR_CYCLE,
                                            "the graph has a cycle through "
                                            "value '%s'",
                                            nm);
                    goto done;
                }
                if (state[p] == 0) {
                    state[p] = 1;
                    stk_node[sp] = p;
                    stk_next[sp++] = 0;
                }
            } else {
                state[stk_node[sp - 1]] = 2;
                order[n_order++] = stk_node[--sp];
            }
        }
    }
    *order_out = order;
    order = NULL;
done:
    free(prod_slot);
    free(prod_node);
    free(prod_name);
    free(order);
    free(state);
    free(stk_node);
    free(stk_next);
    return s;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The handle's name -> tensor map: every value that became a tensor. */
static mg_status build_name_map(mgi_octx *c) {
    mg_onnx_model *m = c->model;
    int n = 0;
    for (int k = 0; k < c->n_vals; k++) n += c->vals[k].t != MG_NO_TENSOR;
    m->names = calloc(n ? (size_t)n : 1, sizeof *m->names);
    char **tmp = calloc(n ? (size_t)n : 1, sizeof *tmp);
    m->name_tensors = calloc(n ? (size_t)n : 1, sizeof *m->name_tensors);
    if (!m->names || !tmp || !m->name_tensors) {
        free(tmp);
        return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    }
    /* Sort "name\0id" strings so names and ids stay paired. */
    int j = 0;
    for (int k = 0; k < c->n_vals; k++) {
        if (c->vals[k].t == MG_NO_TENSOR) continue;
        size_t len = strlen(c->vals[k].name);
        char *s = malloc(len + 16);
        if (!s) {
            for (int q = 0; q < j; q++) free(tmp[q]);
            free(tmp);
            return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
        }
        memcpy(s, c->vals[k].name, len + 1);
        memcpy(s + len + 1, &c->vals[k].t, sizeof(mg_tensor));
        tmp[j++] = s;
    }
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_names);
    for (int k = 0; k < n; k++) {
        m->names[k] = tmp[k];
        memcpy(&m->name_tensors[k], tmp[k] + strlen(tmp[k]) + 1,
               sizeof(mg_tensor));
    }
    m->n_names = n;
    free(tmp);
    return MG_OK;
}

/* The IR versions and default-domain opsets whose semantics the converters
 * follow (docs/onnx.md, "Versions"). IR 3 is the first with opset_import;
 * 14 the newest the committed test models carry. Opset 7 is the first with
 * numpy broadcasting and without the legacy attributes (broadcast, axis on
 * Add, consumed_inputs, is_test) the converters do not read; 21 the newest
 * whose changes to the supported ops have been read (and where they
 * matter, refused or implemented). */
#define MIN_IR 3
#define MAX_IR 14
#define MIN_OPSET 7
#define MAX_OPSET 21

/* Refuses a model outside those versions; sets c->opset. */
static mg_status check_versions(mgi_octx *c, const Onnx__ModelProto *mp) {
    int64_t ir = mp->has_ir_version ? mp->ir_version : 0;
    if (ir < MIN_IR || ir > MAX_IR)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "onnx: IR version %lld is not "
                            "supported (%d to %d are)",
                            (long long)ir, MIN_IR, MAX_IR);
    bool found = false;
    for (size_t k = 0; k < mp->n_opset_import; k++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[k];
        const char *d = S(o->domain);
        if (d[0] && strcmp(d, "ai.onnx") != 0)
            continue; /* other domains: their nodes are refused as such */
        int64_t v = o->has_version ? o->version : 0;
        if (found && c->opset != v)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "onnx: the model imports "
                                "two opsets (%lld and %lld) of the default "
                                "domain",
                                (long long)c->opset, (long long)v);
        c->opset = v;
        found = true;
    }
    if (!found)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "onnx: the model imports no "
                            "opset of the default domain ('' or ai.onnx)");
    if (c->opset < MIN_OPSET || c->opset > MAX_OPSET)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "onnx: opset %lld of the "
                            "default domain is not supported (%d to %d are)",
                            (long long)c->opset, MIN_OPSET, MAX_OPSET);
    return MG_OK;
}

static mg_status import_model(mgi_octx *c, const Onnx__ModelProto *mp) {
    mg_status s;
    const Onnx__GraphProto *gp = mp->graph;
    if (!gp)
        return mg_set_error(MG_ERR_INVALID_ARG, "onnx: the model has no graph");
    if ((s = check_versions(c, mp))) return s;
    c->model->opset = c->opset;
    c->gp = gp;

    /* every name the model can define, for the table's size */
    size_t cap = gp->n_input + gp->n_initializer + 16;
    for (size_t k = 0; k < gp->n_node; k++) {
        if (gp->node[k]->n_output > (size_t)INT32_MAX / 4 ||
            cap > (size_t)INT32_MAX / 4)
            return mg_set_error(MG_ERR_INVALID_ARG, "onnx: too many values");
        cap += gp->node[k]->n_output;
    }
    if (cap > (size_t)INT32_MAX / 4)
        return mg_set_error(MG_ERR_INVALID_ARG, "onnx: too many values");
    int nslots = 16;
    while ((size_t)nslots < 2 * cap) nslots *= 2;
    c->vals = calloc(cap, sizeof *c->vals);
    c->slots = malloc((size_t)nslots * sizeof *c->slots);
    if (!c->vals || !c->slots)
        return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    for (int k = 0; k < nslots; k++) c->slots[k] = -1;
    c->cap_vals = (int)cap;
    c->n_slots = nslots;

    if ((s = import_initializers(c, gp)) || (s = import_inputs(c, gp)) ||
        (s = build_reads(c, gp)))
        return s;
    int32_t *order;
    if ((s = node_order(c, gp, &order))) return s;
    for (size_t k = 0; k < gp->n_node; k++) {
        c->node = gp->node[order[k]];
        if ((s = mgi_onnx_convert_node(c, c->node))) {
            free(order);
            return s;
        }
    }
    free(order);
    c->node = NULL;

    mg_onnx_model *m = c->model;
    m->outputs = calloc(gp->n_output ? gp->n_output : 1, sizeof *m->outputs);
    if (!m->outputs) return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    for (size_t k = 0; k < gp->n_output; k++) {
        const char *nm = S(gp->output[k]->name);
        mgi_oval *v = mgi_onnx_lookup(c, nm);
        if (!v)
            return mg_set_error(MG_ERR_UNKNOWN_ID,
                                "onnx: graph output '%s' "
                                "is not defined by any node",
                                nm);
        mg_tensor t = mgi_onnx_tensor(c, v);
        if (t == MG_NO_TENSOR)
            return mg_last_status() ? mg_last_status() : MG_ERR_INTERNAL;
        m->outputs[m->n_outputs++] = t;
    }
    return build_name_map(c);
}

/* A refusal before the unpack: an owned buffer goes too. */
static mg_status import_drop(void *data, bool owned, mg_status s) {
    if (owned) free(data);
    return s;
}

/* owned: data is a malloc'd copy of the file that import_buffer frees as
 * soon as it is unpacked (the message holds copies of its bytes), so that
 * the import does not hold the model's bytes twice. */
static mg_status import_buffer(void *data, bool owned, size_t size,
                               const mg_onnx_options *opts, const char *dir,
                               mg_graph *g, mg_onnx_model **out) {
    if (!out)
        return import_drop(
            data, owned,
            mg_set_error(MG_ERR_INVALID_ARG, "mg_onnx_import: out is NULL"));
    *out = NULL;
    if (!g || (!data && size))
        return import_drop(data, owned,
                           mg_set_error(MG_ERR_INVALID_ARG,
                                        "mg_onnx_import: graph or data is "
                                        "NULL"));
    mgi_octx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    if (opts) c.opts = *opts;
    else mg_onnx_options_init(&c.opts);
    if (!c.opts.external_data_dir) c.opts.external_data_dir = dir;
    if (c.opts.n_dims < 0 || (c.opts.n_dims && !c.opts.dims))
        return import_drop(
            data, owned,
            mg_set_error(MG_ERR_INVALID_ARG, "mg_onnx_import: bad dims"));
    c.next_seed = c.opts.dropout_seed;
    c.model = calloc(1, sizeof *c.model);
    if (!c.model)
        return import_drop(data, owned,
                           mg_set_error(MG_ERR_NOMEM, "onnx: out of memory"));
    /* bound the nesting first: protobuf-c's unpack recursion has none */
    mg_status s = mgi_onnx_check_nesting(data, size);
    Onnx__ModelProto *mp =
        s ? NULL : onnx__model_proto__unpack(NULL, size, (const uint8_t *)data);
    if (owned) free(data);
    if (s)
        ; /* already says why */
    else if (!mp)
        s = mg_set_error(MG_ERR_INVALID_ARG,
                         "onnx: not a valid ONNX model "
                         "(the protobuf does not parse: truncated or "
                         "corrupt, %zu bytes)",
                         size);
    else s = import_model(&c, mp);
    if (mp) onnx__model_proto__free_unpacked(mp, NULL);
    for (int k = 0; k < c.n_consts; k++) {
        free(c.consts[k]->f);
        free(c.consts[k]->i);
        free(c.consts[k]);
    }
    free(c.consts);
    free(c.vals);
    free(c.slots);
    free(c.reads);
    free(c.f32_of);
    if (s) {
        mg_onnx_model_free(c.model);
        return s;
    }
    *out = c.model;
    return MG_OK;
}

mg_status mg_onnx_import_buffer(const void *data, size_t size,
                                const mg_onnx_options *opts, mg_graph *g,
                                mg_onnx_model **out) {
    return import_buffer((void *)data, false, size, opts, ".", g, out);
}

/* The whole of file `path` in a new buffer. O_NONBLOCK, so that a FIFO
 * given as the model returns at once (and is refused as not a regular
 * file) instead of waiting for a writer. */
static mg_status read_model_file(const char *path, uint8_t **out,
                                 size_t *size) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return mg_set_error(MG_ERR_INVALID_ARG, "onnx: cannot open '%s': %s",
                            path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size > (uint64_t)SIZE_MAX / 2) {
        close(fd);
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "onnx: '%s' is not a regular "
                            "file",
                            path);
    }
    size_t len = (size_t)st.st_size, have = 0;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        close(fd);
        return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory reading '%s'",
                            path);
    }
    while (have < len) {
        ssize_t got = read(fd, buf + have, len - have);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        have += (size_t)got;
    }
    close(fd);
    if (have != len) {
        free(buf);
        return mg_set_error(MG_ERR_INVALID_ARG, "onnx: reading '%s' failed",
                            path);
    }
    *out = buf;
    *size = len;
    return MG_OK;
}

mg_status mg_onnx_import_file(const char *path, const mg_onnx_options *opts,
                              mg_graph *g, mg_onnx_model **out) {
    if (out) *out = NULL;
    if (!path)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_onnx_import_file: path is NULL");
    uint8_t *buf;
    size_t size = 0;
    mg_status s = read_model_file(path, &buf, &size);
    if (s) return s;
    char *dir = strdup(path);
    if (!dir) {
        free(buf);
        return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    }
    /* external data lies beside the model: its directory */
    char *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = '\0'; /* "/m.onnx": the root */
    else if (slash) *slash = '\0';
    s = import_buffer(buf, true, size, opts, slash ? dir : ".", g, out);
    free(dir);
    return s;
}

void mg_onnx_model_free(mg_onnx_model *m) {
    if (!m) return;
    for (int k = 0; k < m->n_binds; k++) free(m->bind_data[k]);
    for (int k = 0; k < m->n_names; k++) free(m->names[k]);
    free(m->names);
    free(m->name_tensors);
    free(m->binds);
    free(m->bind_data);
    free(m->inputs);
    free(m->outputs);
    free(m->params);
    free(m);
}

int mg_onnx_num_inputs(const mg_onnx_model *m) { return m ? m->n_inputs : 0; }
int mg_onnx_num_outputs(const mg_onnx_model *m) { return m ? m->n_outputs : 0; }
int mg_onnx_num_params(const mg_onnx_model *m) { return m ? m->n_params : 0; }

mg_tensor mg_onnx_input(const mg_onnx_model *m, int i) {
    return m && i >= 0 && i < m->n_inputs ? m->inputs[i] : MG_NO_TENSOR;
}

mg_tensor mg_onnx_output(const mg_onnx_model *m, int i) {
    return m && i >= 0 && i < m->n_outputs ? m->outputs[i] : MG_NO_TENSOR;
}

mg_tensor mg_onnx_param(const mg_onnx_model *m, int i) {
    return m && i >= 0 && i < m->n_params ? m->params[i] : MG_NO_TENSOR;
}

const mg_binding *mg_onnx_bindings(const mg_onnx_model *m, int *n_bindings) {
    if (n_bindings) *n_bindings = m ? m->n_binds : 0;
    return m ? m->binds : NULL;
}

mg_tensor mg_onnx_find(const mg_onnx_model *m, const char *name) {
    if (!m || !name) return MG_NO_TENSOR;
    int lo = 0, hi = m->n_names - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int r = strcmp(name, m->names[mid]);
        if (r == 0) return m->name_tensors[mid];
        if (r < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return MG_NO_TENSOR;
}

int64_t mg_onnx_opset(const mg_onnx_model *m) { return m ? m->opset : -1; }
