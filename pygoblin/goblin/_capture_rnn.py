"""Recurrent layers in capture: aten.lstm / gru / rnn_tanh / rnn_relu by bounded unrolling.

nn.LSTM, nn.GRU and nn.RNN reach the lowering whole (_capture_table.KEEP), and become
plain catalogue ops here, one cell step after another, with the sequence length fixed
by the example (goblin graphs have static shapes):

    xs = x @ W_ih^T + b_ih                     one matmul over every time step
    per step t: g = select(xs, time, t) + h @ W_hh^T + b_hh; the gates by slice;
                sigmoid / tanh / relu, mul, add (torch's cell formulas)
    output = stack of the h_t along time; bidirectional: concat of both directions

The recurrence is unrolled rather than a scan node over a body graph: every op of the
unrolled graph already has kernels on every backend, a backward rule (so grid.train
differentiates it like any other graph) and a batch-axis rule (each step's state is
[batch, hidden], so the graph is cut by the batch wherever the input keeps it); a
scan node would need all three anew. The price is graph size, linear in the cell
steps (sequence length x layers x directions, about 16 nodes each, twice that with the
backward) and task memory (every step's values are kept for the backward).
MAX_CELL_STEPS bounds it; past it capture refuses with advice (windows of the
sequence, the state carried between them through the module's hx input).

A zero initial state (hx omitted: nn.LSTM builds zeros of [layers * dirs, batch,
hidden]) is not materialised: the first step skips h @ W_hh^T. The input's batch dim
(dim 1 seq-first, dim 0 batch_first) is reported to the capture as a batch-dim hint
for the graph input it comes from (through embedding, elementwise ops, linear,
permutes), which is how goblin.capture knows where the batch of an RNN model sits.
"""
import numpy as np

MAX_CELL_STEPS = 4096

NAMES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_MODULE = {"lstm": "nn.LSTM", "gru": "nn.GRU", "rnn_tanh": "nn.RNN", "rnn_relu": "nn.RNN(nonlinearity='relu')"}


class ZeroState:
    """The lowered value of a zeros tensor used only as an RNN's initial state."""


ZERO = ZeroState()


def _name(node):
    n = getattr(node.target, "__name__", str(node.target))
    return n.split(".")[0]


def _is_rnn(node):
    return node.op == "call_function" and _name(node) in NAMES


def zero_state_nodes(gm):
    """fx nodes that are zeros used only as the hx of RNN ops (left out of the graph)."""
    found = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        n = _name(node)
        zero = n in ("zeros", "new_zeros", "zeros_like") or (n in ("full", "new_full") and len(node.args) > 1
                                                             and node.args[1] == 0)
        if zero and node.users and all(_is_rnn(u) for u in node.users):
            found.add(node)
    return found


def limit_error(name, steps, t, layers, dirs):
    mod = _MODULE[name]
    per = max(1, MAX_CELL_STEPS // max(1, layers * dirs))
    return (f"{mod} over a sequence of {t} steps x {layers} layer(s) x {dirs} direction(s) = {steps} cell steps, "
            f"more than the {MAX_CELL_STEPS} that goblin.capture unrolls (the graph grows by about 16 nodes per "
            f"cell step, and a task keeps every step's values): capture windows of at most {per} steps and "
            "carry the state between them through the module's hx input (out, hx = rnn(x[s:s+w], hx))")


def hint(name, args):
    """Why an RNN op's arguments have no mapping; None: they do."""
    mod = _MODULE.get(name)
    if mod is None:
        return None
    return (f"{mod}: capture supports a padded tensor input (seq-first or batch_first, 1 or more layers, "
            "bidirectional, with or without biases), not a PackedSequence (pack_padded_sequence: pad the batch and "
            "mask the outputs instead), not proj_size; inter-layer dropout in training mode only in "
            "goblin.capture_training / grid.train (goblin.capture: eval mode)")


def _cell_lstm(g, xt, h, c, whh, bhh, hs):
    gates = xt
    if h is not None:
        gates = gates + (g.op("matmul", h, whh, bhh, trans_b=1) if bhh is not None else
                         g.op("matmul", h, whh, trans_b=1))
    elif bhh is not None:
        gates = gates + bhh

    def part(k):
        return g.op("slice", gates, axes=[1], starts=[k * hs], stops=[(k + 1) * hs], steps=[1])

    i, f, gg, o = g.op("sigmoid", part(0)), g.op("sigmoid", part(1)), g.op("tanh", part(2)), g.op("sigmoid", part(3))
    c = i * gg if c is None else f * c + i * gg
    return o * g.op("tanh", c), c


def _cell_gru(g, xt, h, whh, bhh, hs):
    if h is not None:
        gh = g.op("matmul", h, whh, bhh, trans_b=1) if bhh is not None else g.op("matmul", h, whh, trans_b=1)
    else:
        gh = bhh  # [3H] or None

    def part(t, k, axis):
        return g.op("slice", t, axes=[axis], starts=[k * hs], stops=[(k + 1) * hs], steps=[1])

    xr, xz, xn = (part(xt, k, 1) for k in range(3))
    if gh is None:
        r, z, n = g.op("sigmoid", xr), g.op("sigmoid", xz), g.op("tanh", xn)
    else:
        hr, hz, hn = (part(gh, k, gh.ndim - 1) for k in range(3))  # gh [B, 3H], or b_hh [3H]
        r, z = g.op("sigmoid", xr + hr), g.op("sigmoid", xz + hz)
        n = g.op("tanh", xn + r * hn)
    # h' = (1 - z) * n + z * h, as torch's cell: n + z * (h - n)
    return n - z * n if h is None else n + z * (h - n)


def _cell_rnn(g, xt, h, whh, bhh, act):
    a = xt
    if h is not None:
        a = a + (g.op("matmul", h, whh, bhh, trans_b=1) if bhh is not None else g.op("matmul", h, whh, trans_b=1))
    elif bhh is not None:
        a = a + bhh
    return g.op(act, a)


def lower(low, node, name, args):
    """The outputs of aten.<name>.input as a tuple of goblin Tensors; None: not mapped."""
    g = low.g
    if name not in NAMES or _name(node) != name or not str(node.target).endswith(".input"):
        return None  # the .data overloads: packed sequences
    lstm = name == "lstm"
    x, hx, params, has_b, layers, dropout, train, bidir, batch_first = args[:9]
    layers, dirs = int(layers), 2 if bidir else 1
    drop = bool(train and dropout and layers > 1)
    if drop and low.rnn_dropout(name, float(dropout), None, None) is None:
        return None  # refused before anything is added to the graph
    unbatched = x.ndim == 2
    per = 4 if has_b else 2
    if len(params) != per * layers * dirs:
        return None  # proj_size adds a weight per layer and direction
    hs = params[1].shape[1]
    if params[1].shape[0] != _GATES[name] * hs:
        return None
    if unbatched:
        x = g.op("reshape", x, shape=[x.shape[0], 1, x.shape[1]])
        batch_first = False
    tax = 1 if batch_first else 0
    t_len = x.shape[tax]
    if t_len * layers * dirs > MAX_CELL_STEPS:
        from . import _goblin
        raise _goblin.RangeError(limit_error(name, t_len * layers * dirs, t_len, layers, dirs))
    h0s = [hx[0], hx[1]] if lstm else [hx]
    h0s = [None if v is ZERO else (g.op("reshape", v, shape=[v.shape[0], 1, v.shape[1]]) if unbatched else v)
           for v in h0s]
    h_n, c_n = [], []
    inp = x
    for layer in range(layers):
        outs = []
        for d in range(dirs):
            k = (layer * dirs + d) * per
            wih, whh = params[k], params[k + 1]
            bih, bhh = (params[k + 2], params[k + 3]) if has_b else (None, None)
            xs = g.op("matmul", inp, wih, bih, trans_b=1) if bih is not None else g.op("matmul", inp, wih, trans_b=1)
            idx = layer * dirs + d
            h = None if h0s[0] is None else g.op("select", h0s[0], axis=0, index=idx)
            c = None if not lstm or h0s[1] is None else g.op("select", h0s[1], axis=0, index=idx)
            seq = [None] * t_len
            steps = range(t_len - 1, -1, -1) if d == 1 else range(t_len)
            for t in steps:
                xt = g.op("select", xs, axis=tax, index=t)
                if lstm:
                    h, c = _cell_lstm(g, xt, h, c, whh, bhh, hs)
                elif name == "gru":
                    h = _cell_gru(g, xt, h, whh, bhh, hs)
                else:
                    h = _cell_rnn(g, xt, h, whh, bhh, "tanh" if name == "rnn_tanh" else "relu")
                seq[t] = h
            outs.append(g.op("stack", *seq, axis=tax))
            h_n.append(h)
            c_n.append(c)
        inp = outs[0] if dirs == 1 else g.op("concat", *outs, axis=2)
        if drop and layer < layers - 1:  # torch: dropout on every layer's output but the last's
            inp = low.rnn_dropout(name, float(dropout), inp, 0 if batch_first else 1)
    res = [inp, g.op("stack", *h_n, axis=0)]
    if lstm:
        res.append(g.op("stack", *c_n, axis=0))
    if unbatched:
        res = [g.op("reshape", r, shape=[r.shape[0], r.shape[2]]) for r in res]
    return tuple(res)


# ---- where the batch sits in the graph's inputs ------------------------------------------

_SAME_DIMS = frozenset(("relu", "sigmoid", "tanh", "gelu", "silu", "neg", "exp", "abs", "clone", "alias",
                        "detach", "contiguous", "_to_copy", "to", "dropout", "native_dropout", "mul", "add",
                        "sub", "div", "where", "leaky_relu", "elu", "hardtanh", "clamp"))


def batch_hints(low, gm, user_index):
    """{user input index: batch dim} for the inputs that feed an RNN's input, traced back
    through ops that keep or move dims (embedding, linear, elementwise ops, permutes)."""
    hints = {}
    for node in gm.graph.nodes:
        if not _is_rnn(node) or not str(node.target).endswith(".input"):
            continue
        x = node.args[0]
        v = low.meta(x)
        if v is None or v.dim() != 3:
            continue
        bf = node.args[8] if len(node.args) > 8 else False
        _trace(low, x, 0 if bf else 1, user_index, hints, 0)
    return hints


def _trace(low, n, d, user_index, hints, depth):
    fx = low.torch.fx
    if depth > 64 or not isinstance(n, fx.Node):
        return
    if n.op == "placeholder":
        if n in user_index:
            hints.setdefault(user_index[n], d)
        return
    if n.op != "call_function":
        return
    name = _name(n)
    out = low.meta(n)
    if out is None or not hasattr(out, "dim"):
        return
    if name == "embedding" and len(n.args) > 1:
        ix = low.meta(n.args[1])
        if ix is not None and d < ix.dim():
            _trace(low, n.args[1], d, user_index, hints, depth + 1)
        return
    if name in ("linear", "matmul") and d < out.dim() - 1:
        _trace(low, n.args[0], d, user_index, hints, depth + 1)
        return
    if name in ("permute", "permute_copy"):
        perm = [int(p) % out.dim() for p in n.args[1]]
        _trace(low, n.args[0], perm[d], user_index, hints, depth + 1)
        return
    if name == "transpose":
        a, b = int(n.args[1]) % out.dim(), int(n.args[2]) % out.dim()
        _trace(low, n.args[0], b if d == a else a if d == b else d, user_index, hints, depth + 1)
        return
    if name in _SAME_DIMS:
        for a in n.args:
            m = low.meta(a) if isinstance(a, fx.Node) else None
            if m is not None and hasattr(m, "dim") and tuple(m.shape) == tuple(out.shape):
                _trace(low, a, d, user_index, hints, depth + 1)


def infer_dims(shapes, hints, what):
    """Per input: its batch dim from `hints` ({index: dim}), the others by the batch size:
    the one dim of that size (None when it has none). ValueError naming batch_dims when a
    dim is ambiguous or the hints disagree on the batch size."""
    if not hints:
        return None
    sizes = {shapes[i][d] for i, d in hints.items()}
    if len(sizes) != 1:
        raise ValueError(f"{what}: the inputs' batch dims {dict(sorted(hints.items()))} have different sizes "
                         f"{sorted(sizes)}: pass batch_dims=(one dim per input, None for an unbatched one)")
    b = sizes.pop()
    dims = []
    for i, s in enumerate(shapes):
        if i in hints:
            dims.append(hints[i])
            continue
        cand = [k for k, n in enumerate(s) if n == b]
        if len(cand) > 1:
            raise ValueError(f"{what}: input {i} of shape {tuple(s)} has several dims of the batch size {b} "
                             f"(dims {cand}): pass batch_dims=(one dim per input, None for an unbatched one)")
        dims.append(cand[0] if cand else None)
    return tuple(dims)


def move_batch_first(shape, d):
    """The shape with dim d moved to the front, and the permutation back to the original."""
    order = [d] + [k for k in range(len(shape)) if k != d]
    back = list(np.argsort(order))
    return [shape[k] for k in order], [int(k) for k in back]
