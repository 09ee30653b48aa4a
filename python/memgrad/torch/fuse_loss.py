"""The final projection and its cross-entropy, found in a captured ATen
graph and mapped onto memgrad's fused, chunked linear_cross_entropy
(issue 46 item 3), so that the [N, V] logits, their log-softmax and
their gradient never live in memgrad's pool.

What it finds is what torch.export's core decompositions make of
F.cross_entropy(logits.view(-1, V), labels, ignore_index=i) with
reduction='mean' (Hugging Face's ForCausalLMLoss among others):

    logits = mm(h, permute(w, [1, 0]))          (w [V, D]: a Linear weight)
    x      = view(... logits ...)                [N, V], rows in order
    ls     = _log_softmax(x, 1)
    pick   = where(ne(L, i), L, 0)
    nll    = neg(squeeze(gather(ls, 1, unsqueeze(pick, 1)), [1]))
    loss   = div(sum(where(ne(L, i), nll, 0)),
                 _to_copy(sum(ne(L, i)), float))

with L the integer labels [N], computed by the prologue (Hugging Face's
shift: pad with i, slice). The match is refused (and the graph mapped op
by op as before) when anything else reads the log-softmax or the
intermediate values, when the logits are read by the body other than
through views to an output of the model, or when a dtype conversion lies
between the logits and the log-softmax (Hugging Face's logits.float() on
a float64 model: eager then computes the loss in float32, which the
fused op, computing in h's dtype, would not reproduce).

The logits themselves, when the model returns them (Hugging Face always
does), are still made in the forward pass by their own matmul, as a
forward-only output: nothing in memgrad's backward pass reads them, and
a gradient arriving through them is refused (module.py), since the plan
has no path for it.
"""
import torch

aten = torch.ops.aten

# ops that keep the rows of a [N, V] tensor in order (contiguous views)
_VIEWS = {aten.view.default, aten.reshape.default, aten.alias.default,
          aten._unsafe_view.default, aten.clone.default}


class Match:
    """One recognised loss: loss (the div node), h (the [N, D] node), w
    (the [V, D] weight node), labels (the [N] integer node), the
    ignore_index (or None), the logits' mm node, and the output nodes
    that are the logits' views (returned as forward-only outputs)."""

    def __init__(self, loss, h, w, labels, ignore_index, mm, outputs):
        self.loss, self.h, self.w, self.labels = loss, h, w, labels
        self.ignore_index, self.mm, self.outputs = ignore_index, mm, outputs


def _is(n, *targets):
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and \
        n.target in targets


def _arg(n, k, default=None):
    return n.args[k] if len(n.args) > k else default


def _sum_all(n):
    """x for sum(x) over every dim (dim None or []), else None."""
    if _is(n, aten.sum.default):
        return n.args[0]
    if _is(n, aten.sum.dim_IntList) and not _arg(n, 1) and \
            not _arg(n, 2, False):
        return n.args[0]
    return None


def _ne_label(n):
    """(labels node, ignore_index) for ne(labels, i), else None."""
    if _is(n, aten.ne.Scalar) and isinstance(n.args[0], torch.fx.Node) \
            and isinstance(n.args[1], int):
        return n.args[0], n.args[1]
    return None


def _zero(v):
    if isinstance(v, (int, float)):
        return v == 0
    return _is(v, aten.scalar_tensor.default) and v.args[0] == 0


def _dtype(n):
    v = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
    return getattr(v, "dtype", None)


def _match_one(div, body, output_node):
    if not _is(div, aten.div.Tensor):
        return None
    num, den = div.args[0], div.args[1]
    # the divisor: the count of labels that are not ignored
    if _is(den, aten._to_copy.default):
        den = den.args[0]
    cnt = _sum_all(den)
    key = _ne_label(cnt) if cnt is not None else None
    if key is None:
        return None
    labels, ii = key
    # the dividend: the picked losses, zero where ignored
    w1 = _sum_all(num)
    if not _is(w1, aten.where.self) or _ne_label(w1.args[0]) != key or \
            not _zero(w1.args[2]):
        return None
    neg = w1.args[1]
    if not _is(neg, aten.neg.default):
        return None
    sq = neg.args[0]
    if not _is(sq, aten.squeeze.dims, aten.squeeze.dim):
        return None
    ga = sq.args[0]
    if not _is(ga, aten.gather.default) or ga.args[1] != 1:
        return None
    ls, idx = ga.args[0], ga.args[2]
    if not _is(idx, aten.unsqueeze.default) or idx.args[1] != 1:
        return None
    pick = idx.args[0]
    if not _is(pick, aten.where.self) or _ne_label(pick.args[0]) != key or \
            pick.args[1] is not labels or not _zero(pick.args[2]):
        return None
    if not _is(ls, aten._log_softmax.default) or ls.args[1] not in (1, -1):
        return None
    if labels in body:  # labels must come from the prologue
        return None
    # every value between the log-softmax and the loss is read only here
    for n in (ls, ga, sq, neg, w1, num):
        if len(n.users) != 1:
            return None
    # back from the log-softmax through row-keeping views to the matmul
    x = ls.args[0]
    chain = []
    while not _is(x, aten.mm.default):
        if _is(x, aten._to_copy.default) and _dtype(x) == _dtype(x.args[0]) \
                and set(x.kwargs) <= {"dtype", "device", "layout"}:
            pass
        elif not _is(x, *_VIEWS):
            return None
        chain.append(x)
        x = x.args[0]
    mm = x
    h, wt = mm.args
    if not (_is(wt, aten.permute.default) and list(wt.args[1]) == [1, 0]) \
            and not _is(wt, aten.t.default):
        return None
    w = wt.args[0]
    hv, wv, mv = (n.meta.get("val") for n in (h, w, mm))
    if hv is None or wv is None or mv is None or hv.dim() != 2 or \
            wv.dim() != 2 or hv.shape[1] != wv.shape[1] or \
            _dtype(ls) != _dtype(mm):
        return None
    # the logits' other readers: views only, ending at the model's outputs
    outputs, todo, seen = [], [mm], set(chain)
    while todo:
        n = todo.pop()
        for u in n.users:
            if u in seen or u is ls:
                continue
            if u is output_node:
                outputs.append(n)
            elif _is(u, aten._assert_tensor_metadata.default):
                continue
            elif _is(u, *_VIEWS):
                seen.add(u)
                todo.append(u)
            else:
                return None
    # the chain to the log-softmax is read by nothing else
    for n in chain:
        if any(u not in seen and u is not ls and u is not output_node and
               not _is(u, aten._assert_tensor_metadata.default)
               for u in n.users):
            return None
        if output_node in n.users:
            outputs.append(n)
    return Match(div, h, w, labels, ii, mm, outputs)


def find(nodes, body):
    """The losses in the graph's nodes (in order) that map onto
    linear_cross_entropy; body: the nodes memgrad computes."""
    out = [n for n in nodes if n.op == "output"]
    output_node = out[0] if out else None
    found = []
    for n in nodes:
        if n in body and _is(n, aten.div.Tensor):
            m = _match_one(n, body, output_node)
            if m is not None:
                found.append(m)
    return found
