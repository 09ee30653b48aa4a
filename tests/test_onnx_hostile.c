/*
 * test_onnx_hostile.c - the ONNX importer against hostile model files
 * (issue 25, items 1-8): external data reached through symbolic links, '..'
 * or a FIFO; constant folding with bad Transpose perms and mixed-type Range
 * operands; protobuf nesting deep enough to overflow the parser's stack;
 * a Resize whose output size overflows; a graph of many MatMuls, which the
 * attention matcher once made quadratic to import; attributes of the wrong type
 * or out of range, and opsets and IR versions memgrad does not implement; an
 * error message that repeated its own prefix. Each must give a status and
 * a message naming the tensor or node, never a crash, a hang or a read of
 * a file outside the model's directory. And the op table
 * (src/frontends/op_map.def): every ONNX row reaches its converter, and an
 * op type or domain outside it is refused as unsupported.
 *
 * The models are built here with the protobuf-c code generated from
 * onnx.proto (the importer's own parser), so each case is a few lines;
 * only the 5000-level nesting is written as raw wire bytes, since packing
 * it through protobuf-c would recurse as deep as the parse under test.
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/half.h"
#include "helpers.h"
#include "memgrad_onnx.h"
#include "onnx.pb-c.h"

/* ------------------------------------------------------------------ arena */

/* Everything a model is built from, freed at once after packing. */
typedef struct arena {
    void **p;
    int n, cap;
} arena;

static void *A(arena *a, size_t size) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->p = realloc(a->p, sizeof *a->p * (size_t)a->cap);
        ck_assert_ptr_nonnull(a->p);
    }
    void *q = calloc(1, size ? size : 1);
    ck_assert_ptr_nonnull(q);
    a->p[a->n++] = q;
    return q;
}

static char *As(arena *a, const char *s) {
    char *q = A(a, strlen(s) + 1);
    strcpy(q, s);
    return q;
}

static void arena_free(arena *a) {
    for (int k = 0; k < a->n; k++) free(a->p[k]);
    free(a->p);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------------ builders
 */

/* A growing array of pointers inside a protobuf-c message. */
#define PUSH(ar, arr, cnt, x)                                                  \
    do {                                                                       \
        void **grown_ = A(ar, sizeof(void *) * ((cnt) + 1));                   \
        if (cnt) memcpy(grown_, (arr), sizeof(void *) * (cnt));                \
        grown_[(cnt)++] = (x);                                                 \
        (arr) = (void *)grown_;                                                \
    } while (0)

typedef struct model {
    arena a;
    Onnx__ModelProto m;
    Onnx__GraphProto g;
} model;

static void model_init(model *md, int64_t ir, int64_t opset) {
    memset(md, 0, sizeof *md);
    onnx__model_proto__init(&md->m);
    onnx__graph_proto__init(&md->g);
    md->m.has_ir_version = 1;
    md->m.ir_version = ir;
    md->m.graph = &md->g;
    md->g.name = As(&md->a, "hostile");
    Onnx__OperatorSetIdProto *o = A(&md->a, sizeof *o);
    onnx__operator_set_id_proto__init(o);
    o->domain = As(&md->a, "");
    o->has_version = 1;
    o->version = opset;
    PUSH(&md->a, md->m.opset_import, md->m.n_opset_import, o);
}

static Onnx__NodeProto *node(model *md, const char *op, const char *name,
                             const char *in0, const char *in1, const char *in2,
                             const char *out) {
    Onnx__NodeProto *n = A(&md->a, sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = As(&md->a, op);
    n->name = As(&md->a, name);
    const char *ins[3] = {in0, in1, in2};
    for (int k = 0; k < 3 && ins[k]; k++)
        PUSH(&md->a, n->input, n->n_input, As(&md->a, ins[k]));
    PUSH(&md->a, n->output, n->n_output, As(&md->a, out));
    PUSH(&md->a, md->g.node, md->g.n_node, n);
    return n;
}

static Onnx__AttributeProto *attr(model *md, Onnx__NodeProto *n,
                                  const char *name,
                                  Onnx__AttributeProto__AttributeType type) {
    Onnx__AttributeProto *a = A(&md->a, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = As(&md->a, name);
    a->has_type = 1;
    a->type = type;
    PUSH(&md->a, n->attribute, n->n_attribute, a);
    return a;
}

static void attr_int(model *md, Onnx__NodeProto *n, const char *name,
                     int64_t v) {
    Onnx__AttributeProto *a =
        attr(md, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}

static void attr_ints(model *md, Onnx__NodeProto *n, const char *name,
                      const int64_t *v, size_t cnt) {
    Onnx__AttributeProto *a =
        attr(md, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->ints = A(&md->a, sizeof *a->ints * cnt);
    memcpy(a->ints, v, sizeof *a->ints * cnt);
    a->n_ints = cnt;
}

static Onnx__TensorProto *tensor(model *md, const char *name, int32_t type,
                                 int ndim, const int64_t *dims) {
    Onnx__TensorProto *t = A(&md->a, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = As(&md->a, name);
    t->has_data_type = 1;
    t->data_type = type;
    t->dims = A(&md->a, sizeof *t->dims * (size_t)(ndim ? ndim : 1));
    if (ndim) /* a scalar passes dims NULL */
        memcpy(t->dims, dims, sizeof *t->dims * (size_t)ndim);
    t->n_dims = (size_t)ndim;
    return t;
}

/* A Constant node `out` holding t. */
static void constant(model *md, Onnx__TensorProto *t, const char *out) {
    Onnx__NodeProto *n = node(md, "Constant", out, NULL, NULL, NULL, out);
    attr(md, n, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t = t;
}

/* A Constant of n floats (rank 1, or a scalar if rank0) all equal to v. */
static void const_f32(model *md, const char *out, int ndim, const int64_t *dims,
                      float v) {
    Onnx__TensorProto *t =
        tensor(md, out, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ndim, dims);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
    t->float_data = A(&md->a, sizeof(float) * n);
    for (size_t k = 0; k < n; k++) t->float_data[k] = v + (float)k;
    t->n_float_data = n;
    constant(md, t, out);
}

static void const_i64(model *md, const char *out, int ndim, const int64_t *dims,
                      int64_t v) {
    Onnx__TensorProto *t =
        tensor(md, out, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, ndim, dims);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
    t->int64_data = A(&md->a, sizeof(int64_t) * n);
    for (size_t k = 0; k < n; k++) t->int64_data[k] = v + (int64_t)k;
    t->n_int64_data = n;
    constant(md, t, out);
}

static Onnx__ValueInfoProto *value_info(model *md, const char *name) {
    Onnx__ValueInfoProto *v = A(&md->a, sizeof *v);
    onnx__value_info_proto__init(v);
    v->name = As(&md->a, name);
    return v;
}

static void output(model *md, const char *name) {
    PUSH(&md->a, md->g.output, md->g.n_output, value_info(md, name));
}

/* A graph input of element type et and a static shape. */
static void typed_input(model *md, const char *name, int32_t et, int ndim,
                        const int64_t *dims);

/* A float graph input of a static shape. */
static void input(model *md, const char *name, int ndim, const int64_t *dims) {
    typed_input(md, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ndim, dims);
}

static void typed_input(model *md, const char *name, int32_t et, int ndim,
                        const int64_t *dims) {
    Onnx__ValueInfoProto *v = value_info(md, name);
    Onnx__TypeProto *tp = A(&md->a, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = A(&md->a, sizeof *tt);
    Onnx__TensorShapeProto *sp = A(&md->a, sizeof *sp);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sp);
    for (int d = 0; d < ndim; d++) {
        Onnx__TensorShapeProto__Dimension *dm = A(&md->a, sizeof *dm);
        onnx__tensor_shape_proto__dimension__init(dm);
        dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dm->dim_value = dims[d];
        PUSH(&md->a, sp->dim, sp->n_dim, dm);
    }
    tt->has_elem_type = 1;
    tt->elem_type = et;
    tt->shape = sp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    v->type = tp;
    PUSH(&md->a, md->g.input, md->g.n_input, v);
}

/* The packed model (the arena is freed); free() it. */
static uint8_t *pack(model *md, size_t *len) {
    *len = onnx__model_proto__get_packed_size(&md->m);
    uint8_t *buf = malloc(*len ? *len : 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(onnx__model_proto__pack(&md->m, buf), *len);
    arena_free(&md->a);
    return buf;
}

/* Imports the model (freeing it) with opts (NULL: defaults); the graph
 * is freed, the handle returned in *out if out is not NULL. */
static mg_status import_opts(model *md, const mg_onnx_options *opts,
                             mg_onnx_model **out) {
    size_t len;
    uint8_t *buf = pack(md, &len);
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = (mg_onnx_model *)&len; /* must become NULL on failure */
    mg_status s = mg_onnx_import_buffer(buf, len, opts, g, &m);
    if (s) ck_assert_ptr_null(m);
    else ck_assert_ptr_nonnull(m);
    ck_assert_msg(s == MG_OK || mg_last_error()[0],
                  "an error without a message");
    free(buf);
    if (out) *out = m;
    else mg_onnx_model_free(m);
    mg_graph_free(g);
    return s;
}

static mg_status import(model *md) { return import_opts(md, NULL, NULL); }

#define ERR_HAS(...)                                                           \
    do {                                                                       \
        const char *want_[] = {__VA_ARGS__};                                   \
        for (size_t k_ = 0; k_ < sizeof want_ / sizeof *want_; k_++)           \
            ck_assert_msg(strstr(mg_last_error(), want_[k_]),                  \
                          "message lacks '%s': %s", want_[k_],                 \
                          mg_last_error());                                    \
    } while (0)

/* ------------------------------------------------------------------ 1, 2:
 * external data */

static char tmp_root[PATH_MAX];

/* A fresh directory tree under $TMPDIR:
 *   root/outside/secret.bin   16 bytes the model must not read
 *   root/a/m/real.bin          16 bytes of its own data
 * The model directory is root/a/m. */
static void make_tree(void) {
    const char *t = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/mg-onnx-hostile.XXXXXX",
             t && t[0] ? t : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmp_root));
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/outside", tmp_root);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/a", tmp_root);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/a/m", tmp_root);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    const char *files[2] = {"outside/secret.bin", "a/m/real.bin"};
    const char *bytes[2] = {"root:x:0:0:root:", "0123456789abcdef"};
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/%s", tmp_root, files[k]);
        FILE *f = fopen(p, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(bytes[k], 1, 16, f), 16);
        fclose(f);
    }
}

/* Makes link `name` in the model directory pointing at target. */
static void link_in_model_dir(const char *name, const char *target) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/a/m/%s", tmp_root, name);
    ck_assert_msg(symlink(target, p) == 0, "symlink %s", p);
}

static void remove_tree(void) {
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    ck_assert_int_eq(system(cmd), 0);
}

/* A model whose one float initializer 'w' [4] is 16 bytes at `location`,
 * imported from the model directory; its data in got[16] on success. */
static mg_status import_external(const char *location, const char *allowed,
                                 char *got) {
    model md;
    model_init(&md, 8, 13);
    int64_t four = 4;
    Onnx__TensorProto *t =
        tensor(&md, "w", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &four);
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    const char *kv[2][2] = {{"location", location}, {"length", "16"}};
    for (int k = 0; k < 2; k++) {
        Onnx__StringStringEntryProto *e = A(&md.a, sizeof *e);
        onnx__string_string_entry_proto__init(e);
        e->key = As(&md.a, kv[k][0]);
        e->value = As(&md.a, kv[k][1]);
        PUSH(&md.a, t->external_data, t->n_external_data, e);
    }
    PUSH(&md.a, md.g.initializer, md.g.n_initializer, t);
    output(&md, "w");
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/a/m", tmp_root);
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    o.external_data_dir = dir;
    o.external_data_allowed_dir = allowed;
    mg_onnx_model *m;
    mg_status s = import_opts(&md, &o, &m);
    if (s == MG_OK) {
        int nb;
        const mg_binding *b = mg_onnx_bindings(m, &nb);
        ck_assert_int_eq(nb, 1);
        memcpy(got, b[0].data, 16);
        mg_onnx_model_free(m);
    }
    return s;
}

/* Refused, with a message naming the tensor and the location. */
static void expect_refused(const char *location) {
    char got[16];
    ck_assert_msg(import_external(location, NULL, got) == MG_ERR_INVALID_ARG,
                  "location '%s' was read", location);
    ERR_HAS("tensor 'w'", location);
}

START_TEST(test_external_data_confined) {
    make_tree();
    char target[PATH_MAX + 32], got[16];
    snprintf(target, sizeof target, "%s/outside/secret.bin", tmp_root);
    link_in_model_dir("abs.bin", target);
    link_in_model_dir("up.bin", "../../outside/secret.bin");
    link_in_model_dir("inner.bin", "real.bin");
    snprintf(target, sizeof target, "%s/outside", tmp_root);
    link_in_model_dir("sub", target);
    link_in_model_dir("relsub", "../../outside");

    /* the model's own file is read */
    ck_assert_msg(import_external("real.bin", NULL, got) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(memcmp(got, "0123456789abcdef", 16) == 0);
    ck_assert_msg(import_external("./real.bin", NULL, got) == MG_OK, "%s",
                  mg_last_error());

    /* a link to an absolute path, a relative one (even inside the
     * directory), one up and out, a linked subdirectory: all refused */
    const char *links[] = {"abs.bin", "up.bin", "inner.bin", "sub/secret.bin",
                           "relsub/secret.bin"};
    for (size_t k = 0; k < sizeof links / sizeof *links; k++) {
        expect_refused(links[k]);
        ERR_HAS("symbolic link");
    }
    /* no '..' or absolute path either, as before */
    expect_refused("../../outside/secret.bin");
    expect_refused(target);
    expect_refused("no_such.bin");

    /* a directory the caller allows: links into it are followed */
    ck_assert_msg(import_external("abs.bin", target, got) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(memcmp(got, "root:x:0:0:root:", 16) == 0);
    ck_assert(import_external("up.bin", target, got) == MG_OK);
    ck_assert(import_external("sub/secret.bin", target, got) == MG_OK);
    ck_assert(memcmp(got, "root:x:0:0:root:", 16) == 0);
    /* but not elsewhere: inner.bin leads into the model directory, which
     * is not the allowed one */
    ck_assert(import_external("inner.bin", target, got) == MG_ERR_INVALID_ARG);
    remove_tree();
}
END_TEST

START_TEST(test_external_data_fifo) {
    make_tree();
    char p[PATH_MAX + 32], got[16];
    snprintf(p, sizeof p, "%s/a/m/pipe.bin", tmp_root);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    alarm(30); /* a hang fails the test instead of the whole run */
    ck_assert(import_external("pipe.bin", NULL, got) == MG_ERR_INVALID_ARG);
    ERR_HAS("tensor 'w'", "pipe.bin", "not a regular file");
    /* the model file itself may not be a FIFO either */
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m;
    ck_assert_int_eq(mg_onnx_import_file(p, NULL, g, &m), MG_ERR_INVALID_ARG);
    ERR_HAS("not a regular file");
    mg_graph_free(g);
    alarm(0);
    remove_tree();
}
END_TEST

/* ------------------------------------------------------------------ 3, 4:
 * folding */

/* Constant [3, 1000] (f32 or int64) -> Transpose(perm) -> output. */
static mg_status fold_transpose(bool f32, const int64_t *perm, size_t np) {
    model md;
    model_init(&md, 8, 13);
    int64_t dims[2] = {3, 1000};
    if (f32) const_f32(&md, "c", 2, dims, 0.5f);
    else const_i64(&md, "c", 2, dims, 7);
    Onnx__NodeProto *n = node(&md, "Transpose", "tr", "c", NULL, NULL, "y");
    attr_ints(&md, n, "perm", perm, np);
    output(&md, "y");
    return import(&md);
}

START_TEST(test_fold_transpose_perm) {
    const int64_t dup0[2] = {0, 0}, dup1[2] = {1, 1}, ok[2] = {1, 0},
                  three[3] = {1, 0, 2};
    ck_assert_int_eq(fold_transpose(true, dup0, 2), MG_ERR_INVALID_ARG);
    ERR_HAS("'tr'", "Transpose", "perm");
    ck_assert_int_eq(fold_transpose(false, dup1, 2), MG_ERR_INVALID_ARG);
    ERR_HAS("'tr'", "perm");
    ck_assert_int_eq(fold_transpose(true, three, 3), MG_ERR_INVALID_ARG);
    ck_assert_msg(fold_transpose(true, ok, 2) == MG_OK, "%s", mg_last_error());
    ck_assert_msg(fold_transpose(false, ok, 2) == MG_OK, "%s", mg_last_error());
}
END_TEST

/* Range(start, limit, delta) of constant scalars of the given types. */
static mg_status fold_range(bool fs, bool fl, bool fd) {
    model md;
    model_init(&md, 8, 13);
    const char *names[3] = {"start", "limit", "delta"};
    bool fl3[3] = {fs, fl, fd};
    int64_t vals[3] = {0, 10, 1};
    for (int k = 0; k < 3; k++) {
        if (fl3[k]) const_f32(&md, names[k], 0, NULL, (float)vals[k]);
        else const_i64(&md, names[k], 0, NULL, vals[k]);
    }
    node(&md, "Range", "rg", "start", "limit", "delta", "y");
    output(&md, "y");
    return import(&md);
}

START_TEST(test_fold_range_mixed_types) {
    ck_assert_int_eq(fold_range(false, false, true), MG_ERR_DTYPE);
    ERR_HAS("'rg'", "Range", "type");
    ck_assert_int_eq(fold_range(true, false, false), MG_ERR_DTYPE);
    ck_assert_int_eq(fold_range(false, true, true), MG_ERR_DTYPE);
    ck_assert_msg(fold_range(false, false, false) == MG_OK, "%s",
                  mg_last_error());
    ck_assert_msg(fold_range(true, true, true) == MG_OK, "%s", mg_last_error());
}
END_TEST

/* ------------------------------------------------------------------ 5: nesting
 */

/* Appends field `field` of wire type 2 holding buf[0..*len) around it, in
 * place: buf must have room for 11 more bytes. */
static void wrap(uint8_t *buf, size_t *len, uint32_t field) {
    uint8_t hdr[16];
    size_t h = 0;
    hdr[h++] = (uint8_t)(field << 3 | 2);
    for (uint64_t v = *len;; v >>= 7) {
        hdr[h++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        if (v <= 0x7f) break;
    }
    memmove(buf + h, buf, *len);
    memcpy(buf, hdr, h);
    *len += h;
}

/* A model whose graph input 'x' has a type nesting `levels` sequences:
 * ModelProto{ir_version 8, opset_import{version 13}, graph{input{name "x",
 * type{sequence_type{elem_type{sequence_type{...}}}}}}}. */
static uint8_t *nested_model(int levels, size_t *len) {
    size_t cap = (size_t)levels * 16 + 256;
    uint8_t *buf = calloc(1, cap);
    ck_assert_ptr_nonnull(buf);
    size_t n = 0; /* the innermost TypeProto is empty */
    for (int k = 0; k < levels; k++) {
        wrap(buf, &n, 1); /* Sequence.elem_type */
        wrap(buf, &n, 4); /* TypeProto.sequence_type */
    }
    wrap(buf, &n, 2); /* ValueInfoProto.type */
    memmove(buf + 3, buf, n);
    memcpy(buf, "\x0a\x01x", 3); /* ValueInfoProto.name = "x" */
    n += 3;
    wrap(buf, &n, 11); /* GraphProto.input */
    wrap(buf, &n, 7);  /* ModelProto.graph */
    memmove(buf + 6, buf, n);
    memcpy(buf, "\x08\x08\x42\x02\x10\x0d", 6); /* ir_version, opset_import */
    n += 6;
    ck_assert_uint_lt(n, cap);
    *len = n;
    return buf;
}

static mg_status import_nested(int levels) {
    size_t len;
    uint8_t *buf = nested_model(levels, &len);
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = NULL;
    mg_status s = mg_onnx_import_buffer(buf, len, NULL, g, &m);
    ck_assert_ptr_null(m);
    mg_graph_free(g);
    free(buf);
    return s;
}

START_TEST(test_protobuf_nesting_bounded) {
    /* 34 KB nesting 5000 levels: refused before protobuf-c recurses */
    ck_assert_int_eq(import_nested(5000), MG_ERR_INVALID_ARG);
    ERR_HAS("nest");
    /* a model nested 20 levels is parsed, then refused for what it is: a
     * graph input that is not a tensor */
    ck_assert_int_eq(import_nested(20), MG_ERR_UNSUPPORTED);
    ERR_HAS("input 'x'");
    /* the limit is 100 nested messages (protobuf's own default): Model >
     * Graph > ValueInfo > Type, then two per level, the innermost Type at
     * depth 3 + 2 levels */
    ck_assert_int_eq(import_nested(48), MG_ERR_UNSUPPORTED);
    ck_assert_int_eq(import_nested(49), MG_ERR_INVALID_ARG);
    ERR_HAS("nest");
}
END_TEST

/* ------------------------------------------------------------------ 6: Resize
 */

START_TEST(test_resize_size_overflow) {
    model md;
    model_init(&md, 8, 13);
    int64_t xs[4] = {1, 1, INT64_C(1) << 52, 1}, four = 4;
    input(&md, "x", 4, xs);
    Onnx__TensorProto *t =
        tensor(&md, "sc", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &four);
    float sc[4] = {1, 1, 4096, 1};
    t->float_data = A(&md.a, sizeof sc);
    memcpy(t->float_data, sc, sizeof sc);
    t->n_float_data = 4;
    constant(&md, t, "sc");
    node(&md, "Resize", "rs", "x", "", "sc", "y");
    output(&md, "y");
    mg_status s = import(&md);
    ck_assert_msg(s == MG_ERR_SHAPE, "status %d: %s", s, mg_last_error());
    ERR_HAS("'rs'", "Resize", "too large");
}
END_TEST

/* ------------------------------------------------------------------ 7:
 * attributes, opsets */

/* Concat of two graph inputs [2, 3] (or two constants) along `axis`. */
static mg_status concat_axis(bool consts, int64_t axis) {
    model md;
    model_init(&md, 8, 13);
    int64_t dims[2] = {2, 3};
    if (consts) {
        const_f32(&md, "a", 2, dims, 1);
        const_f32(&md, "b", 2, dims, 2);
    } else {
        input(&md, "a", 2, dims);
        input(&md, "b", 2, dims);
    }
    Onnx__NodeProto *n = node(&md, "Concat", "cat", "a", "b", NULL, "y");
    attr_int(&md, n, "axis", axis);
    output(&md, "y");
    return import(&md);
}

START_TEST(test_concat_axis_range) {
    const int64_t bad[] = {INT64_C(1) << 32, (INT64_C(1) << 32) + 1, INT64_MIN,
                           2, -3};
    for (int q = 0; q < 2; q++) {
        for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
            ck_assert_msg(concat_axis(q, bad[k]) == MG_ERR_INVALID_ARG,
                          "axis %lld accepted", (long long)bad[k]);
            ERR_HAS("'cat'", "axis");
        }
        ck_assert_msg(concat_axis(q, 1) == MG_OK, "%s", mg_last_error());
        ck_assert_msg(concat_axis(q, -1) == MG_OK, "%s", mg_last_error());
    }
}
END_TEST

/* Cast(to) of a graph input [2] or of a constant [2]. */
static mg_status cast_to(bool konst, int64_t to) {
    model md;
    model_init(&md, 8, 13);
    int64_t two = 2;
    if (konst) const_f32(&md, "a", 1, &two, 1.5f);
    else input(&md, "a", 1, &two);
    Onnx__NodeProto *n = node(&md, "Cast", "cast", "a", NULL, NULL, "y");
    attr_int(&md, n, "to", to);
    output(&md, "y");
    return import(&md);
}

START_TEST(test_cast_target_type) {
    for (int q = 0; q < 2; q++) {
        ck_assert_int_eq(cast_to(q, 999), MG_ERR_INVALID_ARG);
        ERR_HAS("'cast'", "to");
        ck_assert_int_eq(cast_to(q, ONNX__TENSOR_PROTO__DATA_TYPE__STRING),
                         MG_ERR_UNSUPPORTED);
        ERR_HAS("'cast'", "STRING");
        ck_assert_int_eq(cast_to(q, ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64),
                         MG_ERR_UNSUPPORTED);
        ERR_HAS("'cast'", "COMPLEX64");
        ck_assert_msg(cast_to(q, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16) ==
                          MG_OK,
                      "%s", mg_last_error());
        ck_assert_msg(cast_to(q, ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16) ==
                          MG_OK,
                      "%s", mg_last_error());
        ck_assert_int_eq(cast_to(q, -1), MG_ERR_INVALID_ARG);
        ck_assert_msg(cast_to(q, ONNX__TENSOR_PROTO__DATA_TYPE__INT64) == MG_OK,
                      "%s", mg_last_error());
        ck_assert_msg(cast_to(q, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) == MG_OK,
                      "%s", mg_last_error());
    }
}
END_TEST

/* ------------------------------------------------------------ 16-bit floats
 * (issue 47) */

enum { HALF_OK, HALF_SHORT_RAW, HALF_WIDE_FIELD, HALF_EXTRA_FIELD };

static uint16_t half_bits(int32_t t, double v) {
    return t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ? mg_f16_from_f64(v)
                                                       : mg_bf16_from_f64(v);
}

/* y = Cast<FLOAT>(Relu(MatMul(x, W) + B)) with x [2, 3] an input of type t,
 * W [3, 4] an initializer of type t in raw bytes (W[k] = (k - 6) / 4) and
 * B [4] one in int32_data as bit patterns (B[j] = j / 2 - 3/4), as ONNX
 * stores 16-bit floats; then Cast<t>(y) as a second output z. how spoils
 * one tensor: W's raw bytes one element short, a B element beyond 16
 * bits, or one B element too many. Imported into g (kept), the handle in
 * *out. */
static mg_status half_model(int32_t t, int how, mg_graph *g,
                            mg_onnx_model **out) {
    model md;
    model_init(&md, 8, 13);
    const int64_t xd[2] = {2, 3}, wd[2] = {3, 4}, bd[1] = {4};
    typed_input(&md, "x", t, 2, xd);
    Onnx__TensorProto *w = tensor(&md, "W", t, 2, wd);
    size_t wn = how == HALF_SHORT_RAW ? 11 : 12;
    w->has_raw_data = 1;
    w->raw_data.len = 2 * wn;
    w->raw_data.data = A(&md.a, 2 * wn);
    for (size_t k = 0; k < wn; k++) {
        uint16_t h = half_bits(t, ((double)k - 6) / 4);
        memcpy(w->raw_data.data + 2 * k, &h, 2); /* little-endian host */
    }
    Onnx__TensorProto *b = tensor(&md, "B", t, 1, bd);
    size_t bn = how == HALF_EXTRA_FIELD ? 5 : 4;
    b->int32_data = A(&md.a, sizeof(int32_t) * bn);
    for (size_t j = 0; j < bn; j++)
        b->int32_data[j] = half_bits(t, (double)j / 2 - 0.75);
    if (how == HALF_WIDE_FIELD) b->int32_data[2] = 0x10000;
    b->n_int32_data = bn;
    PUSH(&md.a, md.g.initializer, md.g.n_initializer, w);
    PUSH(&md.a, md.g.initializer, md.g.n_initializer, b);
    node(&md, "MatMul", "mm", "x", "W", NULL, "h");
    node(&md, "Add", "add", "h", "B", NULL, "a");
    node(&md, "Relu", "relu", "a", NULL, NULL, "r");
    attr_int(&md, node(&md, "Cast", "to_float", "r", NULL, NULL, "y"), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    attr_int(&md, node(&md, "Cast", "back", "y", NULL, NULL, "z"), "to", t);
    output(&md, "y");
    output(&md, "z");
    size_t len;
    uint8_t *buf = pack(&md, &len);
    *out = NULL;
    mg_status s = mg_onnx_import_buffer(buf, len, NULL, g, out);
    free(buf);
    return s;
}

/* float16 and bfloat16 initializers and inputs import as MG_F16 and
 * MG_BF16 tensors (parameters train in their own dtype), Cast converts to
 * and from them, and the model computes: every value here is exact in
 * both formats, so y equals the float64 result. Gradients come out in the
 * parameters' dtype: dsum(y)/dB[j] counts the rows where column j is
 * positive. */
START_TEST(test_half_tensors_import) {
    const int32_t types[2] = {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16,
                              ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16};
    const mg_dtype dts[2] = {MG_F16, MG_BF16};
    for (int q = 0; q < 2; q++) {
        const int32_t t = types[q];
        mg_graph *g = mg_graph_new();
        mg_onnx_model *m = NULL;
        ck_assert_msg(half_model(t, HALF_OK, g, &m) == MG_OK, "%s",
                      mg_last_error());
        mg_dtype dt;
        ck_assert_int_eq(mg_onnx_num_params(m), 2);
        for (int k = 0; k < 2; k++) {
            ck_assert(mg_tensor_dtype(g, mg_onnx_param(m, k), &dt) == MG_OK);
            ck_assert_int_eq(dt, dts[q]);
        }
        ck_assert(mg_tensor_dtype(g, mg_onnx_input(m, 0), &dt) == MG_OK);
        ck_assert_int_eq(dt, dts[q]);
        mg_tensor y = mg_onnx_output(m, 0), z = mg_onnx_output(m, 1);
        ck_assert(mg_tensor_dtype(g, y, &dt) == MG_OK);
        ck_assert_int_eq(dt, MG_F32);
        ck_assert(mg_tensor_dtype(g, z, &dt) == MG_OK);
        ck_assert_int_eq(dt, dts[q]);
        /* gradients of sum(y) */
        mg_tensor loss = mg_sum(g, y, 0, NULL, 0);
        TH_OK_T("sum", loss);
        mg_tensor xs[2] = {mg_onnx_param(m, 0), mg_onnx_param(m, 1)}, gr[2];
        ck_assert_msg(mg_gradients(g, &loss, 1, NULL, xs, 2, NULL, gr) == MG_OK,
                      "%s", mg_last_error());
        for (int k = 0; k < 2; k++) {
            ck_assert(mg_tensor_dtype(g, gr[k], &dt) == MG_OK);
            ck_assert_int_eq(dt, dts[q]);
        }
        double xv[6], want[8];
        uint16_t xb[6];
        for (int i = 0; i < 6; i++) {
            xv[i] = 0.5 * i - 1;
            xb[i] = half_bits(t, xv[i]);
        }
        int pos[4] = {0, 0, 0, 0};
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 4; j++) {
                double a = (double)j / 2 - 0.75;
                for (int k = 0; k < 3; k++)
                    a += xv[3 * r + k] * (((double)(4 * k + j)) - 6) / 4;
                want[4 * r + j] = a > 0 ? a : 0;
                pos[j] += a > 0;
            }
        int n;
        mg_binding *bind = NULL;
        {
            int nb;
            const mg_binding *mb = mg_onnx_bindings(m, &nb);
            bind = malloc(sizeof *bind * (size_t)(nb + 1));
            ck_assert_ptr_nonnull(bind);
            memcpy(bind, mb, sizeof *bind * (size_t)nb);
            bind[nb] = (mg_binding){mg_onnx_input(m, 0), xb};
            n = nb + 1;
        }
        float got[8];
        uint16_t zb[8], gw[12], gb[4];
        mg_tensor outs[4] = {y, z, gr[0], gr[1]};
        void *bufs[4] = {got, zb, gw, gb};
        TH_RUN_OK("half model", g, 4, outs, bufs, n, bind, 0);
        for (int k = 0; k < 8; k++) {
            ck_assert_msg(got[k] == (float)want[k], "%s y[%d] = %g, want %g",
                          q ? "bf16" : "f16", k, (double)got[k], want[k]);
            ck_assert_uint_eq(zb[k], half_bits(t, want[k]));
        }
        for (int j = 0; j < 4; j++)
            ck_assert_uint_eq(gb[j], half_bits(t, pos[j]));
        free(bind);
        mg_onnx_model_free(m);
        mg_graph_free(g);
    }
}
END_TEST

/* half_model spoilt by how, in a graph of its own: its status (the
 * handle must come back NULL). */
static mg_status half_refused(int32_t t, int how) {
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = (mg_onnx_model *)g;
    mg_status s = half_model(t, how, g, &m);
    ck_assert_ptr_null(m);
    mg_graph_free(g);
    return s;
}

/* x [2, 4] of type t through LayerNormalization with a scale of type t
 * and no bias, and BatchNormalization in inference (its epsilon), or
 * (mixed) x plus a FLOAT constant. */
static mg_status half_norms(int32_t t, bool mixed, mg_dtype *out_dt) {
    model md;
    model_init(&md, 8, 13);
    const int64_t xd[2] = {2, 4}, sd[1] = {4};
    typed_input(&md, "x", t, 2, xd);
    if (mixed) {
        const_f32(&md, "one", 1, sd, 1.0f);
        node(&md, "Add", "mixed_add", "x", "one", NULL, "y");
    } else {
        const char *names[5] = {"s", "bs", "bb", "bm", "bv"};
        for (int k = 0; k < 5; k++) {
            Onnx__TensorProto *w = tensor(&md, names[k], t, 1, sd);
            w->int32_data = A(&md.a, sizeof(int32_t) * 4);
            for (int j = 0; j < 4; j++)
                w->int32_data[j] = half_bits(t, 0.5 + 0.25 * j);
            w->n_int32_data = 4;
            PUSH(&md.a, md.g.initializer, md.g.n_initializer, w);
        }
        node(&md, "LayerNormalization", "ln", "x", "s", NULL, "h");
        Onnx__NodeProto *bn =
            node(&md, "BatchNormalization", "bn", "h", "bs", "bb", "y");
        PUSH(&md.a, bn->input, bn->n_input, As(&md.a, "bm"));
        PUSH(&md.a, bn->input, bn->n_input, As(&md.a, "bv"));
    }
    output(&md, "y");
    size_t len;
    uint8_t *buf = pack(&md, &len);
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = NULL;
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    o.training = 0;
    mg_status s = mg_onnx_import_buffer(buf, len, &o, g, &m);
    free(buf);
    if (!s) ck_assert(mg_tensor_dtype(g, mg_onnx_output(m, 0), out_dt) == 0);
    mg_onnx_model_free(m);
    mg_graph_free(g);
    return s;
}

/* The converters' own constants (LayerNormalization's missing bias,
 * BatchNormalization's epsilon) take the 16-bit operand's dtype; a
 * float16 or bfloat16 tensor added to a FLOAT one (invalid ONNX) is
 * MG_ERR_DTYPE naming the node. */
START_TEST(test_half_norms_and_mixed) {
    const int32_t types[2] = {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16,
                              ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16};
    const mg_dtype dts[2] = {MG_F16, MG_BF16};
    for (int q = 0; q < 2; q++) {
        mg_dtype dt = MG_F32;
        ck_assert_msg(half_norms(types[q], false, &dt) == MG_OK, "%s",
                      mg_last_error());
        ck_assert_int_eq(dt, dts[q]);
        ck_assert_int_eq(half_norms(types[q], true, &dt), MG_ERR_DTYPE);
        ERR_HAS("mixed_add");
    }
}
END_TEST

/* A 16-bit tensor whose data is not its dims' worth of 2-byte elements,
 * or whose int32_data holds more than 16 bits, is refused naming it. */
START_TEST(test_half_tensors_hostile) {
    const int32_t types[2] = {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16,
                              ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16};
    for (int q = 0; q < 2; q++) {
        ck_assert_int_eq(half_refused(types[q], HALF_SHORT_RAW),
                         MG_ERR_INVALID_ARG);
        ERR_HAS("tensor 'W'", "12 elements", "byte count");
        ck_assert_int_eq(half_refused(types[q], HALF_WIDE_FIELD),
                         MG_ERR_INVALID_ARG);
        ERR_HAS("tensor 'B'", "element 2", "65536", "16-bit");
        ck_assert_int_eq(half_refused(types[q], HALF_EXTRA_FIELD),
                         MG_ERR_INVALID_ARG);
        ERR_HAS("tensor 'B'", "4 elements");
    }
}
END_TEST

/* Relu of a graph input x of the declared dims, imported with batch_size
 * (0: none). */
static mg_status relu_of_input(int ndim, const int64_t *dims,
                               int64_t batch_size) {
    model md;
    model_init(&md, 8, 13);
    input(&md, "x", ndim, dims);
    node(&md, "Relu", "r", "x", NULL, NULL, "y");
    output(&md, "y");
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    o.batch_size = batch_size;
    return import_opts(&md, &o, NULL);
}

/* A declared dim_value 0 is a size (a zero-size tensor), not a dynamic
 * dimension: it was given the batch size ([0, 4] ran as [2, 4]) or called
 * dynamic. memgrad's tensors have no zero-size dimension, so it is refused,
 * naming the input and the dimension, with or without a batch size; a
 * negative dim_value is no size at all. */
START_TEST(test_zero_size_dim_refused) {
    const int64_t zero_first[2] = {0, 4}, zero_last[2] = {3, 0};
    const int64_t batches[2] = {0, 2};
    for (int b = 0; b < 2; b++) {
        ck_assert_int_eq(relu_of_input(2, zero_first, batches[b]),
                         MG_ERR_UNSUPPORTED);
        ERR_HAS("input 'x' dim 0", "declared zero-size");
        ck_assert_ptr_null(strstr(mg_last_error(), "dynamic"));
        ck_assert_int_eq(relu_of_input(2, zero_last, batches[b]),
                         MG_ERR_UNSUPPORTED);
        ERR_HAS("input 'x' dim 1", "declared zero-size");
    }
    const int64_t negative[2] = {-3, 4};
    ck_assert_int_eq(relu_of_input(2, negative, 2), MG_ERR_INVALID_ARG);
    ERR_HAS("input 'x' dim 0", "-3");
    /* a declared size still imports, and a batch size leaves it alone */
    const int64_t good[2] = {3, 4};
    ck_assert_msg(relu_of_input(2, good, 2) == MG_OK, "%s", mg_last_error());
}
END_TEST

/* An attribute of the wrong type, or an int flag out of {0, 1}. */
START_TEST(test_attribute_types) {
    model md;
    model_init(&md, 8, 13);
    int64_t dims[2] = {2, 3};
    input(&md, "a", 2, dims);
    input(&md, "b", 2, dims);
    Onnx__NodeProto *n = node(&md, "Concat", "cat", "a", "b", NULL, "y");
    Onnx__AttributeProto *a =
        attr(&md, n, "axis", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = 1.0f;
    output(&md, "y");
    ck_assert_int_eq(import(&md), MG_ERR_INVALID_ARG);
    ERR_HAS("'cat'", "axis");

    /* Concat without its (required) axis */
    model_init(&md, 8, 13);
    input(&md, "a", 2, dims);
    input(&md, "b", 2, dims);
    node(&md, "Concat", "cat", "a", "b", NULL, "y");
    output(&md, "y");
    ck_assert_int_eq(import(&md), MG_ERR_INVALID_ARG);
    ERR_HAS("'cat'", "axis");

    /* Gemm transB of 2^32 was cast to int 0 */
    model_init(&md, 8, 13);
    int64_t ws[2] = {3, 3};
    input(&md, "a", 2, dims);
    input(&md, "w", 2, ws);
    n = node(&md, "Gemm", "gemm", "a", "w", NULL, "y");
    attr_int(&md, n, "transB", INT64_C(1) << 32);
    output(&md, "y");
    ck_assert_int_eq(import(&md), MG_ERR_INVALID_ARG);
    ERR_HAS("'gemm'", "transB");
}
END_TEST

/* An Identity model under the given IR version and opset. */
static mg_status versions(int64_t ir, int64_t opset) {
    model md;
    model_init(&md, ir, opset);
    int64_t two = 2;
    input(&md, "a", 1, &two);
    node(&md, "Identity", "id", "a", NULL, NULL, "y");
    output(&md, "y");
    return import(&md);
}

START_TEST(test_opset_and_ir_version) {
    const int64_t bad_opsets[] = {1, 6, 99, -5, 0};
    for (size_t k = 0; k < sizeof bad_opsets / sizeof *bad_opsets; k++) {
        ck_assert_msg(versions(8, bad_opsets[k]) == MG_ERR_UNSUPPORTED,
                      "opset %lld accepted", (long long)bad_opsets[k]);
        ERR_HAS("opset");
    }
    ck_assert_int_eq(versions(99, 13), MG_ERR_UNSUPPORTED);
    ERR_HAS("IR version 99");
    ck_assert_int_eq(versions(-1, 13), MG_ERR_UNSUPPORTED);
    ck_assert_int_eq(versions(2, 13), MG_ERR_UNSUPPORTED);
    ck_assert_msg(versions(8, 7) == MG_OK, "%s", mg_last_error());
    ck_assert_msg(versions(8, 21) == MG_OK, "%s", mg_last_error());
    ck_assert_msg(versions(3, 13) == MG_OK, "%s", mg_last_error());

    /* no opset for the default domain at all */
    model md;
    model_init(&md, 8, 13);
    md.m.n_opset_import = 0;
    int64_t two = 2;
    input(&md, "a", 1, &two);
    output(&md, "a");
    ck_assert_int_eq(import(&md), MG_ERR_UNSUPPORTED);
    ERR_HAS("opset");
}
END_TEST

/* ------------------------------------------------------------------ 8:
 * messages */

/* A graph input the builder refuses (2^62 elements): the importer's prefix
 * once, then the builder's reason. */
/* ------------------------------------------------------------------ import
 * time: each MatMul asks the attention matcher who produced its first
 * input. That question once scanned the whole graph, so a model of n
 * MatMuls took n^2 string compares to import (50,000 of them: about 5e9,
 * tens of seconds); the importer now indexes readers once. */

START_TEST(test_many_matmuls_import_linear) {
    enum { N = 50000 };
    model md;
    model_init(&md, 8, 13);
    int64_t dims[2] = {2, 2};
    input(&md, "X", 2, dims);
    /* node() grows the node array by copying it; lay the array out once */
    md.g.node = A(&md.a, sizeof *md.g.node * N);
    for (int k = 0; k < N; k++) {
        Onnx__NodeProto *n = A(&md.a, sizeof *n);
        onnx__node_proto__init(n);
        char in0[32], out[32];
        snprintf(in0, sizeof in0, k ? "m%d" : "X", k - 1);
        snprintf(out, sizeof out, "m%d", k);
        n->op_type = As(&md.a, "MatMul");
        n->name = As(&md.a, out);
        n->input = A(&md.a, sizeof *n->input * 2);
        n->input[0] = As(&md.a, in0);
        n->input[1] = As(&md.a, "X");
        n->n_input = 2;
        n->output = A(&md.a, sizeof *n->output);
        n->output[0] = As(&md.a, out);
        n->n_output = 1;
        md.g.node[k] = n;
    }
    md.g.n_node = N;
    char last[32];
    snprintf(last, sizeof last, "m%d", N - 1);
    output(&md, last);
    clock_t t0 = clock();
    mg_status s = import(&md);
    double cpu_s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    ck_assert_msg(s == MG_OK, "%s", mg_last_error());
    /* linear work is well under a second even under ASan; the quadratic
     * scan took over ten */
    ck_assert_msg(cpu_s < 4.0, "importing %d MatMuls took %.2f s of CPU", N,
                  cpu_s);
}
END_TEST

START_TEST(test_error_prefix_once) {
    model md;
    model_init(&md, 8, 13);
    int64_t dims[3] = {INT64_C(1) << 31, INT64_C(1) << 31, INT64_C(1) << 31};
    input(&md, "X", 3, dims);
    output(&md, "X");
    ck_assert(import(&md) != MG_OK);
    const char *e = mg_last_error();
    const char *first = strstr(e, "input 'X'");
    ck_assert_msg(first && !strstr(first + 1, "input 'X'"), "%s", e);
    ck_assert_msg(strstr(first + 9, ": ") && strlen(first) > 12, "%s", e);
}
END_TEST

/* ------------------------------------------------------------------ the
 * op table */

/* The MG_ONNX_OP rows of src/frontends/op_map.def, read here as the
 * importer reads them. */
static const char *const table_types[] = {
#define MG_ONNX_OP(type, fn, mg_ops, torch) #type,
#include "../src/frontends/op_map.def"
};

/* A model of one node `op` (in `domain`, NULL for the default) on a float
 * [2, 3] input. */
static mg_status one_node(const char *op, const char *domain) {
    model md;
    model_init(&md, 8, 17);
    input(&md, "x", 2, (int64_t[]){2, 3});
    Onnx__NodeProto *n = node(&md, op, "n", "x", NULL, NULL, "y");
    if (domain) n->domain = As(&md.a, domain);
    output(&md, "y");
    return import(&md);
}

START_TEST(test_op_table_dispatch) {
    const char *const *types = mg_onnx_op_types();
    size_t n = sizeof table_types / sizeof *table_types;
    ck_assert_uint_gt(n, 50);
    for (size_t k = 0; k < n; k++) {
        ck_assert_msg(types[k] && strcmp(types[k], table_types[k]) == 0,
                      "mg_onnx_op_types()[%zu] is %s, the table's row %s", k,
                      types[k] ? types[k] : "NULL", table_types[k]);
        for (size_t j = 0; j < k; j++)
            ck_assert_msg(strcmp(types[j], types[k]) != 0, "%s twice",
                          types[k]);
        /* a bare node: its converter may refuse it (a missing input or
         * attribute), but it is the converter that answers */
        mg_status s = one_node(types[k], NULL);
        ck_assert_msg(s == MG_OK || !strstr(mg_last_error(), "unsupported op"),
                      "%s does not reach a converter: %s", types[k],
                      mg_last_error());
    }
    ck_assert_ptr_null(types[n]);
    ck_assert_int_eq(one_node("Relu", NULL), MG_OK);
    ck_assert_int_eq(one_node("NoSuchOp", NULL), MG_ERR_UNSUPPORTED);
    ERR_HAS("'n'", "NoSuchOp", "unsupported op");
    ck_assert_int_eq(one_node("Relu", "com.example"), MG_ERR_UNSUPPORTED);
    ERR_HAS("'n'", "com.example");
}
END_TEST

int main(void) {
    Suite *s = suite_create("onnx_hostile");
    th_add_tcase(
        s, "external_data", 120,
        TH_TESTS(test_external_data_confined, test_external_data_fifo));
    th_add_tcase(s, "folding", 120,
                 TH_TESTS(test_fold_transpose_perm, test_fold_range_mixed_types,
                          test_resize_size_overflow));
    th_add_tcase(s, "parser", 120, TH_TESTS(test_protobuf_nesting_bounded));
    th_add_tcase(s, "scale", 120, TH_TESTS(test_many_matmuls_import_linear));
    th_add_tcase(s, "attributes", 120,
                 TH_TESTS(test_concat_axis_range, test_cast_target_type,
                          test_half_tensors_import, test_half_tensors_hostile,
                          test_half_norms_and_mixed, test_attribute_types,
                          test_opset_and_ir_version, test_error_prefix_once,
                          test_zero_size_dim_refused));
    th_add_tcase(s, "op_table", 120, TH_TESTS(test_op_table_dispatch));
    return th_run_suite(s);
}
