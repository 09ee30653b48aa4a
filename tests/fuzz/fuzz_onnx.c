/*
 * fuzz_onnx.c - libFuzzer harness for the ONNX importer: any bytes given to
 * mg_onnx_import_buffer must give MG_OK or an error status with a message,
 * never a crash, an overread, a leak or a huge allocation (libFuzzer's
 * -rss_limit_mb and -malloc_limit_mb catch those). Seeds: the models in
 * tests/data.
 * Built by cmake/onnx.cmake with -DMG_BUILD_FUZZ=ON and clang; run by
 * scripts/fuzz-onnx.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "memgrad_onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mg_graph *g = mg_graph_new();
    if (!g) return 0;
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    o.batch_size = 2;
    /* external data must not escape the corpus directory */
    o.external_data_dir = "/nonexistent-memgrad-fuzz";
    mg_onnx_model *m = NULL;
    mg_status s = mg_onnx_import_buffer(data, size, &o, g, &m);
    if (s == MG_OK) {
        /* the handle must describe the graph it built */
        int n = mg_onnx_num_outputs(m);
        for (int k = 0; k < n; k++)
            if (mg_tensor_numel(g, mg_onnx_output(m, k)) < 0) abort();
        int nb;
        const mg_binding *b = mg_onnx_bindings(m, &nb);
        for (int k = 0; k < nb; k++)
            if (!b[k].data || mg_tensor_nbytes(g, b[k].tensor) == 0) abort();
    } else if (m != NULL || !mg_last_error()[0]) {
        abort();
    }
    mg_onnx_model_free(m);
    mg_graph_free(g);
    return 0;
}
