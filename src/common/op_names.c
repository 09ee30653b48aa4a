/*
 * op_names.c - each op's name, from MG_OP_LIST (common/ir.h), below the
 * op table: messages anywhere, a backend's included, name ops without
 * reaching up into the graph.
 */
#include "ir.h"

#define OP_NAME_ENTRY(e, s) [MG_OP_##e] = s,
static const char *const op_names[MG_OP_COUNT] = {MG_OP_LIST(OP_NAME_ENTRY)};
#undef OP_NAME_ENTRY

const char *mgi_op_str(mg_op op) {
    return op >= 0 && op < MG_OP_COUNT && op_names[op] ? op_names[op] : "?";
}
