/*
 * onnx_wire.c - a bound on how deeply a model's protobuf messages nest,
 * checked on the wire bytes before protobuf-c unpacks them.
 *
 * protobuf_c_message_unpack recurses once per nested message and has no
 * depth limit (protobuf-c 1.4 offers none), so a 34 KB file nesting
 * TypeProto.sequence_type 5000 levels deep overflows the stack. The walk
 * below follows the generated descriptors, descending exactly where
 * protobuf-c will (a length-delimited field that the descriptor says is a
 * message), with a recursion of its own bounded by MAX_NESTING; other
 * fields are skipped unread. Bytes it cannot walk (a truncated varint, a
 * length past the end, a group) end the walk of that message only:
 * protobuf-c scans a whole message before it unpacks any submessage of it,
 * so it refuses that message without descending into it.
 */
#include <protobuf-c/protobuf-c.h>

#include "onnx_internal.h"

/* protobuf's own default recursion limit (C++ and Python): a model the
 * reference implementation loads is not refused here. */
#define MAX_NESTING 100

/* The varint at p[0..n): its length (0 if it does not end in n or 10
 * bytes) and its value in *v. */
static size_t varint(const uint8_t *p, size_t n, uint64_t *v) {
    uint64_t x = 0;
    for (size_t k = 0; k < n && k < 10; k++) {
        x |= (uint64_t)(p[k] & 0x7f) << (7 * k);
        if (!(p[k] & 0x80)) {
            *v = x;
            return k + 1;
        }
    }
    return 0;
}

/* The submessage descriptor for field `id` of d, or NULL if that field is
 * not a message (or not known: protobuf-c keeps it as unknown bytes). */
static const ProtobufCMessageDescriptor *
submessage(const ProtobufCMessageDescriptor *d, uint64_t id) {
    if (id == 0 || id > UINT32_MAX) return NULL;
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(d, (unsigned)id);
    return f && f->type == PROTOBUF_C_TYPE_MESSAGE ? f->descriptor : NULL;
}

/* False if a message of type d in p[0..n) nests more than `left` levels of
 * messages inside it. */
static bool nesting_ok(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                       size_t n, int left) {
    size_t at = 0;
    while (at < n) {
        uint64_t tag, len;
        size_t h = varint(p + at, n - at, &tag);
        if (!h) return true;
        at += h;
        switch (tag & 7) {
        case PROTOBUF_C_WIRE_TYPE_VARINT:
            h = varint(p + at, n - at, &len);
            if (!h) return true;
            at += h;
            break;
        case PROTOBUF_C_WIRE_TYPE_64BIT:
        case PROTOBUF_C_WIRE_TYPE_32BIT: {
            size_t w = (tag & 7) == PROTOBUF_C_WIRE_TYPE_64BIT ? 8 : 4;
            if (n - at < w) return true;
            at += w;
            break;
        }
        case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED: {
            h = varint(p + at, n - at, &len);
            if (!h || len > n - at - h) return true;
            at += h;
            const ProtobufCMessageDescriptor *sub = submessage(d, tag >> 3);
            if (sub &&
                (left == 0 || !nesting_ok(sub, p + at, (size_t)len, left - 1)))
                return false;
            at += (size_t)len;
            break;
        }
        default: /* groups, wire types 6 and 7: protobuf-c refuses them */
            return true;
        }
    }
    return true;
}

mg_status mgi_onnx_check_nesting(const void *data, size_t size) {
    if (!size ||
        nesting_ok(&onnx__model_proto__descriptor, data, size, MAX_NESTING))
        return MG_OK;
    return mg_set_error(MG_ERR_INVALID_ARG,
                        "onnx: not a usable ONNX model: its messages nest "
                        "more than %d levels deep (the protobuf parser would "
                        "recurse once per level)",
                        MAX_NESTING);
}
