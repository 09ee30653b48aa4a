/*
 * fuzz_onnx_extdata.c - libFuzzer harness for the ONNX importer with a real
 * external-data directory, so mutated models reach the external-data reader
 * (offsets, lengths, locations through links, '..', a FIFO) and the
 * constant folding of what they read. fuzz_onnx points external data at a
 * directory that does not exist; this one builds, once per process:
 *
 *   root/m/data.bin        64 bytes the model may read
 *   root/m/link.bin     -> data.bin (refused: a link)
 *   root/m/sub/data.bin    64 bytes, one directory down
 *   root/m/up.bin       -> ../outside/secret.bin (refused)
 *   root/m/pipe.bin        a FIFO (refused, and must not hang)
 *   root/outside/secret.bin  16 bytes of a pattern no binding may hold
 *
 * and imports each input with external_data_dir = root/m. Any bytes must
 * give MG_OK or an error with a message, never a crash, a hang, a leak or
 * the secret in the model's data (unless the model's bytes hold it). Seeds:
 * tests/fuzz/seeds/. Built by cmake/onnx.cmake with -DMG_BUILD_FUZZ=ON; run by
 * scripts/fuzz-onnx.sh.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memgrad_onnx.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char model_dir[512];
static const uint8_t SECRET[16] = {0xa5, 0x5a, 0xc3, 0x3c, 0x0f, 0xf0,
                                   0x69, 0x96, 0xa5, 0x5a, 0xc3, 0x3c,
                                   0x0f, 0xf0, 0x69, 0x96};

static void write_file(const char *root, const char *name, const uint8_t *p,
                       size_t n) {
    char path[640];
    snprintf(path, sizeof path, "%s/%s", root, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static void in_root(char *out, size_t len, const char *root, const char *name) {
    snprintf(out, len, "%s/%s", root, name);
}

static char root_dir[400];

/* Removes the tree at exit (libFuzzer's ends at -max_total_time call exit). */
static void remove_tree(void) {
    static const char *const made[] = {"m/data.bin",
                                       "m/sub/data.bin",
                                       "outside/secret.bin",
                                       "m/link.bin",
                                       "m/up.bin",
                                       "m/pipe.bin",
                                       "m/sub",
                                       "m",
                                       "outside",
                                       ""};
    char p[640];
    for (size_t k = 0; k < sizeof made / sizeof *made; k++) {
        snprintf(p, sizeof p, "%s/%s", root_dir, made[k]);
        if (unlink(p) != 0) rmdir(p);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *t = getenv("TMPDIR");
    char root[400], p[640];
    snprintf(root, sizeof root, "%s/mg-fuzz-extdata.XXXXXX",
             t && t[0] ? t : "/tmp");
    if (!mkdtemp(root)) abort();
    const char *dirs[3] = {"m", "m/sub", "outside"};
    for (int k = 0; k < 3; k++) {
        in_root(p, sizeof p, root, dirs[k]);
        if (mkdir(p, 0700)) abort();
    }
    uint8_t data[64];
    for (int k = 0; k < 64; k++) data[k] = (uint8_t)(k * 7 + 1);
    write_file(root, "m/data.bin", data, sizeof data);
    write_file(root, "m/sub/data.bin", data, sizeof data);
    write_file(root, "outside/secret.bin", SECRET, sizeof SECRET);
    in_root(p, sizeof p, root, "m/link.bin");
    if (symlink("data.bin", p)) abort();
    in_root(p, sizeof p, root, "m/up.bin");
    if (symlink("../outside/secret.bin", p)) abort();
    in_root(p, sizeof p, root, "m/pipe.bin");
    if (mkfifo(p, 0600)) abort();
    in_root(model_dir, sizeof model_dir, root, "m");
    snprintf(root_dir, sizeof root_dir, "%s", root);
    atexit(remove_tree);
    return 0;
}

/* Whether n bytes at p hold the secret. */
static int holds_secret(const uint8_t *p, size_t n) {
    for (size_t k = 0; k + sizeof SECRET <= n; k++)
        if (memcmp(p + k, SECRET, sizeof SECRET) == 0) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mg_graph *g = mg_graph_new();
    if (!g) return 0;
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    o.batch_size = 2;
    o.external_data_dir = model_dir;
    mg_onnx_model *m = NULL;
    mg_status s = mg_onnx_import_buffer(data, size, &o, g, &m);
    if (s == MG_OK) {
        /* the secret may only come from the model's own bytes (libFuzzer
         * finds it through its comparisons and writes it in inline) */
        int nb;
        const mg_binding *b = mg_onnx_bindings(m, &nb);
        bool inline_secret = holds_secret(data, size);
        for (int k = 0; k < nb; k++)
            if (!b[k].data ||
                (!inline_secret &&
                 holds_secret(b[k].data, mg_tensor_nbytes(g, b[k].tensor))))
                abort();
    } else if (m != NULL || !mg_last_error()[0]) {
        abort();
    }
    mg_onnx_model_free(m);
    mg_graph_free(g);
    return 0;
}
