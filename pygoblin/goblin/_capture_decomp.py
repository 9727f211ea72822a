"""goblin.capture: torch ops with no catalogue op of their own, decomposed at capture time
into catalogue ops that exist (exact, and differentiable through their autodiff rules
where those ops have one). Called by _capture._Lowering.lower_more; each function gets
the lowering `low` (its graph low.g, low.take for index selection: index_select in
goblin.capture, gather in goblin.capture_training) and returns the result, or None
when the arguments have no mapping (the caller then raises UnsupportedOpError with
why()). The op table with the limits of each row is _capture_table.py.
"""
import numpy as np

from . import _dtypes
from ._graph import Tensor

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _axis(d, ndim):
    return int(d) % max(ndim, 1)


def _const(g, arr, dt):
    return g.constant(np.ascontiguousarray(arr), dtype=dt)


def _idx(g, arr):
    return g.constant(np.ascontiguousarray(arr, dtype=np.int64), dtype="i64")


def reshape(g, x, shape):
    shape = [int(s) for s in shape]
    return x if list(x.shape) == shape else g.op("reshape", x, shape=shape)


def _unsqueeze(g, x, d):
    s = list(x.shape)
    s.insert(d, 1)
    return reshape(g, x, s)


def flip(low, x, dims):
    for d in dims:
        d = _axis(d, x.ndim)
        n = x.shape[d]
        if n > 1:
            x = low.take(x, d, _idx(low.g, np.arange(n - 1, -1, -1)), list(x.shape))
    return x


def repeat(g, x, reps):
    """x.repeat(*reps): x (padded with leading 1s) interleaved with the repeat counts,
    expanded and folded: [1, s0, 1, s1, ...] -> [r0, s0, r1, s1, ...] -> [r0 s0, r1 s1, ...]
    (dims repeated once get no new dim)."""
    reps = [int(r) for r in reps]
    shape = [1] * (len(reps) - x.ndim) + list(x.shape)
    x = reshape(g, x, shape)
    inter, full = [], []
    for r, s in zip(reps, shape):  # no new dim where r is 1: the batch stays the leading dim
        inter += [1, s] if r != 1 else [s]
        full += [r, s] if r != 1 else [s]
    y = g.op("expand", reshape(g, x, inter), shape=full)
    return reshape(g, y, [r * s for r, s in zip(reps, shape)])


# -- activations ---------------------------------------------------------------
def elu(g, x, alpha, scale, input_scale):
    """scale * (x > 0 ? x : alpha * expm1(input_scale * x)); the negative branch on
    min(x, 0) so that neither it nor its gradient overflows where x > 0."""
    dt = x.dtype
    zero = g._coerce(0, dt)
    neg = g.op("minimum", x, zero)
    if input_scale != 1:
        neg = g.op("mul", neg, g._coerce(float(input_scale), dt))
    neg = g.op("mul", g.op("expm1", neg), g._coerce(float(alpha) * float(scale), dt))
    pos = x if scale == 1 else g.op("mul", x, g._coerce(float(scale), dt))
    return g.op("where", g.op("gt", x, zero), pos, neg)


def leaky_relu(g, x, slope):
    dt = x.dtype
    return g.op("where", g.op("gt", x, g._coerce(0, dt)), x, g.op("mul", x, g._coerce(float(slope), dt)))


# -- norms -----------------------------------------------------------------------
def vector_norm(g, x, p, axes, keep):
    """torch.linalg.vector_norm: ord 2 sqrt(sum x^2), 1 sum |x|, inf max |x|, -inf min |x|,
    0 the count of nonzeros, else (sum |x|^p)^(1/p)."""
    dt = x.dtype
    kd = int(bool(keep))
    if p == 2:
        return g.op("sqrt", g.op("sum", g.op("mul", x, x), axes=axes, keepdim=kd))
    a = g.op("abs", x)
    if p == 1:
        return g.op("sum", a, axes=axes, keepdim=kd)
    if p == float("inf"):
        return g.op("reduce_max", a, axes=axes, keepdim=kd)
    if p == float("-inf"):
        return g.op("reduce_min", a, axes=axes, keepdim=kd)
    if p == 0:
        return g.op("sum", g.op("cast", g.op("ne", x, g._coerce(0, dt)), dtype=dt), axes=axes, keepdim=kd)
    s = g.op("sum", g.op("pow", a, g._coerce(float(p), dt)), axes=axes, keepdim=kd)
    return g.op("pow", s, g._coerce(1.0 / float(p), dt))


def group_norm(g, x, w, b, groups, eps):
    """F.group_norm: x [N, C, *] as [N, G, C/G * prod(*)], layer_norm over the last dim
    (biased variance, as torch), back to x's shape, then the per-channel affine."""
    n, c = x.shape[0], x.shape[1]
    rest = int(np.prod(x.shape[2:], dtype=np.int64))
    y = g.op("layer_norm", reshape(g, x, [n, groups, (c // groups) * rest]), norm_ndim=1, eps=float(eps))
    y = reshape(g, y, x.shape)
    lay = [c] + [1] * (x.ndim - 2)
    if w is not None:
        y = g.op("mul", y, reshape(g, w, lay))
    if b is not None:
        y = g.op("add", y, reshape(g, b, lay))
    return y


# -- ordering --------------------------------------------------------------------
def _greater(g, a, b):
    """a > b with NaN above everything (torch's sort order), and a == b with NaN == NaN."""
    gt = g.op("gt", a, b)
    if a.dtype not in _dtypes.FLOAT:
        return gt, g.op("eq", a, b)
    na, nb = g.op("isnan", a), g.op("isnan", b)
    gt = g.op("logical_or", gt, g.op("logical_and", na, g.op("logical_not", nb)))
    return gt, g.op("logical_or", g.op("eq", a, b), g.op("logical_and", na, nb))


def sort(low, x, dim, descending, k=None):
    """(values, indices) of x sorted along dim (the first k of them): stable, NaN as the
    largest value (torch's order). Each element's rank counts the elements that go before
    it (larger, or equal and earlier); position r takes the element of rank r. O(n^2)
    compares per row along dim (n the dim's length)."""
    g = low.g
    d = _axis(dim, x.ndim)
    n = x.shape[d]
    k = n if k is None else int(k)
    perm = [i for i in range(x.ndim) if i != d] + [d]
    inv = list(np.argsort(perm))
    xl = x if d == x.ndim - 1 else x.permute(perm)
    lead = list(xl.shape[:-1])
    xi = reshape(g, xl, lead + [n, 1])
    xj = reshape(g, xl, lead + [1, n])
    gt, eq = _greater(g, xj, xi) if descending else _greater(g, xi, xj)
    earlier = _const(g, np.tri(n, n, -1, dtype=bool), "bool")  # [i, j]: j < i
    before = g.op("logical_or", gt, g.op("logical_and", eq, earlier))
    rank = g.op("sum", g.op("cast", before, dtype="i64"), axes=[len(lead) + 1], keepdim=0)  # [..., n]
    want = _idx(g, np.arange(k).reshape(k, 1))
    hit = g.op("cast", g.op("eq", reshape(g, rank, lead + [1, n]), want), dtype="u8")  # [..., k, n]
    ix = g.op("argmax", hit, axis=len(lead) + 1, keepdim=0)  # [..., k]
    vals = g.op("gather", xl, ix, axis=len(lead))
    if d != x.ndim - 1:
        vals, ix = vals.permute(inv), ix.permute(inv)
    return vals, ix


def max_dim(low, x, dim, keep, largest):
    """torch.max(x, dim) / torch.min(x, dim): (values, indices); the values gathered at
    the index (gather has a backward rule), NaN propagating as in torch."""
    g = low.g
    d = _axis(dim, x.ndim)
    ix = g.op("argmax" if largest else "argmin", x, axis=d, keepdim=1)
    v = g.op("gather", x, ix, axis=d)
    if not keep:
        shape = [s for i, s in enumerate(x.shape) if i != d]
        v, ix = reshape(g, v, shape), reshape(g, ix, shape)
    return v, ix


def bucketize(g, x, bounds, right, out_dt):
    """torch.bucketize / searchsorted: the count of boundaries below x (right: at or below)
    along the boundaries' last dim; NaN counts as above every boundary (as torch)."""
    nb = bounds.shape[-1]
    if bounds.ndim == 1:
        xe = _unsqueeze(g, x, x.ndim)  # [..., 1] against [nb]
        be = bounds
    else:  # searchsorted over rows: bounds [..., nb], x [..., m]
        xe = _unsqueeze(g, x, x.ndim)  # [..., m, 1]
        be = _unsqueeze(g, bounds, bounds.ndim - 1)  # [..., 1, nb]
    below = g.op("le" if right else "lt", be, xe)
    cnt = g.op("sum", g.op("cast", below, dtype="i64"), axes=[xe.ndim - 1], keepdim=0)
    if x.dtype in _dtypes.FLOAT:
        cnt = g.op("where", g.op("isnan", x), g._coerce(nb, "i64"), cnt)
    return cnt if out_dt == "i64" else g.op("cast", cnt, dtype=out_dt)


def cdist(g, a, b, p):
    """torch.cdist computed directly: (sum_k |a_ik - b_jk|^p)^(1/p) over [..., P, 1, M] -
    [..., 1, R, M] (torch may use the matmul form for p=2 on more than 25 rows; the direct
    form is the more accurate one)."""
    diff = g.op("sub", _unsqueeze(g, a, a.ndim - 1), _unsqueeze(g, b, b.ndim - 2))
    return vector_norm(g, diff, p, [diff.ndim - 1], False)


# -- resampling --------------------------------------------------------------------
def _nearest_index(n_in, n_out, scale, exact):
    """ATen's nearest_idx / nearest_neighbor_exact_compute_source_index (float arithmetic)."""
    s = np.float32(1.0 / scale) if scale else np.float32(n_in) / np.float32(n_out)
    dst = np.arange(n_out, dtype=np.float32)
    if not exact and n_out == 2 * n_in:
        return np.arange(n_out) >> 1
    src = np.floor(((dst + np.float32(0.5)) * s) if exact else (dst * s)).astype(np.int64)
    return np.minimum(src, n_in - 1)


def upsample_nearest(low, x, out_shape, scales, exact):
    nsp = len(out_shape) - 2
    for i in range(nsp):
        d = 2 + i
        n_in, n_out = x.shape[d], out_shape[d]
        sc = scales[i] if scales else None
        ix = _nearest_index(n_in, n_out, sc, exact)
        if not (n_in == n_out and np.array_equal(ix, np.arange(n_in))):
            shape = list(x.shape)
            shape[d] = n_out
            x = low.take(x, d, _idx(low.g, ix), shape)
    return x


def _linear_matrix(n_in, n_out, align, scale):
    """[n_out, n_in] weights of ATen's linear interpolation (upsample_bilinear2d)."""
    if align:
        s = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        s = 1.0 / scale if scale else n_in / n_out
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        src = s * o if align else max(s * (o + 0.5) - 0.5, 0.0)
        i0 = min(int(src), n_in - 1)
        i1 = i0 + (1 if i0 < n_in - 1 else 0)
        l1 = src - i0
        m[o, i0] += 1.0 - l1
        m[o, i1] += l1
    return m


def upsample_linear(g, x, out_shape, align, scales):
    """Bilinear (and linear) interpolation as one matmul per spatial dim with the constant
    interpolation matrix: exact up to rounding, differentiable through matmul."""
    nsp = len(out_shape) - 2
    for i in reversed(range(nsp)):
        d = 2 + i
        n_in, n_out = x.shape[d], out_shape[d]
        if n_in == n_out and not scales:
            continue
        m = _linear_matrix(n_in, n_out, align, scales[i] if scales else None)
        mt = _const(g, m.T, x.dtype)
        if d == x.ndim - 1:
            x = g.op("matmul", x, mt)
        else:
            perm = list(range(x.ndim))
            perm[d], perm[-1] = perm[-1], perm[d]
            x = g.op("matmul", x.permute(perm), mt).permute(perm)
    return x


# -- transposed convolution -----------------------------------------------------------
def conv_transpose2d(low, x, w, b, stride, padding, dilation, out_pad, groups):
    """F.conv_transpose2d as conv2d: the input with stride-1 zeros between its elements,
    padded by dilation (k - 1) - padding on each side (+ output_padding after), convolved
    (stride 1) with the weight per group transposed and flipped in space. Differentiable
    through reshape, pad, conv2d and gather; stride^2 times the work of a direct kernel."""
    g = low.g
    n, c, h, wd = x.shape
    cin, coutg, kh, kw = w.shape
    sh, sw = stride
    if sh > 1 or sw > 1:
        y = reshape(g, x, [n, c, h, 1, wd, 1])
        y = g.op("pad", y, pads=[0, sw - 1, 0, 0, 0, sh - 1, 0, 0, 0, 0, 0, 0], value=0.0)
        y = reshape(g, y, [n, c, h * sh, wd * sw])
        x = g.op("slice", y, axes=[2, 3], starts=[0, 0], stops=[(h - 1) * sh + 1, (wd - 1) * sw + 1],
                 steps=[1, 1])
    pads = []
    for k, p, dl, op in ((kw, padding[1], dilation[1], out_pad[1]), (kh, padding[0], dilation[0], out_pad[0])):
        e = dl * (k - 1) - p
        pads += [e, e + op]
    if any(pads):
        x = g.op("pad", x, pads=pads, value=0.0)
    wt = reshape(g, w, [groups, cin // groups, coutg, kh, kw]).permute(0, 2, 1, 3, 4)
    wt = reshape(g, wt, [groups * coutg, cin // groups, kh, kw])
    wt = flip(low, wt, [2, 3])
    ins = [x, wt] + ([b] if b is not None else [])
    return g.op("conv2d", *ins, stride=[1, 1], padding=[0, 0], dilation=list(dilation), groups=int(groups))


def conv3d(g, x, w, b, stride, padding, dilation, groups):
    """F.conv3d as one conv2d per kernel depth offset, summed: for offset a the input's
    depth slices a*dilation + od*stride (od < OD) go side by side into the channels,
    [N, OD * C, H, W], against the weight's depth slice a repeated OD times with OD * groups
    groups. The batch stays the leading dim; the work is that of a direct conv3d;
    differentiable through slice, permute, reshape, expand and conv2d."""
    n, c, d = x.shape[:3]
    o, cg, kd, kh, kw = w.shape
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = stride, padding, dilation
    if pd:
        x = g.op("pad", x, pads=[0, 0, 0, 0, pd, pd], value=0.0)
        d += 2 * pd
    od = (d - dd * (kd - 1) - 1) // sd + 1
    y = None
    for a in range(kd):
        xa = g.op("slice", x, axes=[2], starts=[a * dd], stops=[a * dd + (od - 1) * sd + 1], steps=[sd])
        xa = reshape(g, xa.permute(0, 2, 1, 3, 4), [n, od * c] + list(x.shape[3:]))
        wa = reshape(g, g.op("select", w, axis=2, index=a), [1, o, cg, kh, kw])
        wa = reshape(g, g.op("expand", wa, shape=[od, o, cg, kh, kw]), [od * o, cg, kh, kw])
        ya = g.op("conv2d", xa, wa, stride=[sh, sw], padding=[ph, pw], dilation=[dh, dw], groups=od * groups)
        y = ya if y is None else g.op("add", y, ya)
    y = reshape(g, y, [n, od, o] + list(y.shape[2:])).permute(0, 2, 1, 3, 4)
    if b is not None:
        y = g.op("add", y, reshape(g, b, [o, 1, 1, 1]))
    return y


def fold(low, x, out_hw, kernel, dilation, padding, stride):
    """F.fold (col2im) as conv_transpose2d of the columns [N, C kh kw, lh, lw] with a one-hot
    weight [C kh kw, 1, kh, kw] and C groups: block (i, j) of channel c adds into the output
    at its place. Exact for finite inputs (an inf column entry meets zero weights: NaN)."""
    g = low.g
    batched = x.ndim == 3
    if not batched:
        x = _unsqueeze(g, x, 0)
    n, ckk, nl = x.shape
    kh, kw = kernel
    blocks = [(o + 2 * p - d * (k - 1) - 1) // s + 1
              for o, k, p, d, s in zip(out_hw, kernel, padding, dilation, stride)]
    c = ckk // (kh * kw)
    if blocks[0] * blocks[1] != nl or c * kh * kw != ckk:
        return None
    w = np.zeros((ckk, 1, kh, kw))
    for r in range(ckk):
        w[r, 0, (r // kw) % kh, r % kw] = 1.0
    cols = reshape(g, x, [n, ckk] + blocks)
    made = [(b - 1) * s - 2 * p + d * (k - 1) + 1
            for b, k, p, d, s in zip(blocks, kernel, padding, dilation, stride)]
    y = conv_transpose2d(low, cols, _const(g, w, x.dtype), None, list(stride), list(padding), list(dilation),
                         [o - m for o, m in zip(out_hw, made)], c)
    return y if batched else reshape(g, y, list(y.shape[1:]))


def embedding_bag_nodes(low, gm):
    """F.embedding_bag over a 2-D input [B, L] (bags of L): torch flattens it to [B L] with
    offsets arange(0, B L, L); the view and the arange stay lazy (the batch stays dim 0)."""
    lazy = set()
    for n in gm.graph.nodes:
        if n.op != "call_function" or getattr(n.target, "__name__", "").split(".")[0] not in (
                "_embedding_bag", "_embedding_bag_forward_only"):
            continue
        v, off = n.args[1], n.args[2]
        if getattr(v, "op", None) != "call_function" or len(v.users) != 1 or \
                getattr(v.target, "__name__", "").split(".")[0] != "view" or \
                getattr(off, "op", None) != "call_function" or len(off.users) != 1 or \
                getattr(off.target, "__name__", "") != "arange.start_step":
            continue
        src = list(low.meta(v.args[0]).shape)
        if len(src) == 2 and list(off.args[:3]) == [0, src[0] * src[1], src[1]]:
            lazy |= {v, off}
    return lazy


def embedding_bag(g, w, idx, mode, per_sample, padding_idx):
    """Fixed-size bags: embedding [B, L, D], then sum (weighted), mean or max over L."""
    if padding_idx not in (None, -1):
        return None
    e = g.op("embedding", w, idx)
    if per_sample is not None:
        if mode != 0:
            return None
        e = g.op("mul", e, _unsqueeze(g, per_sample, 2))
    op = {0: "sum", 1: "mean", 2: "reduce_max"}.get(int(mode))
    return None if op is None else g.op(op, e, axes=[1], keepdim=0)


def adaptive_max_pool2d(g, x, size):
    """max_pool2d with kernel = stride = input / output where the sizes divide; otherwise
    torch's windows [floor(i in / out), ceil((i + 1) in / out)) one dim at a time: a
    max_pool2d over each window's slice, concatenated (differentiable through max_pool2d,
    slice and concat; 2 (out_h + out_w) ops)."""
    h, w = x.shape[-2:]
    oh, ow = [int(v) if v is not None else d for v, d in zip(size, (h, w))]
    if x.ndim != 4:
        return None
    if h % oh == 0 and w % ow == 0:
        k = [h // oh, w // ow]
        return g.op("max_pool2d", x, kernel=k, stride=k, padding=[0], dilation=[1], ceil_mode=0)
    for axis, n_in, n_out in ((2, h, oh), (3, w, ow)):
        if n_in == n_out:
            continue
        parts = []
        for i in range(n_out):
            s0, s1 = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
            piece = g.op("slice", x, axes=[axis], starts=[s0], stops=[s1], steps=[1])
            k = [s1 - s0, 1] if axis == 2 else [1, s1 - s0]
            parts.append(g.op("max_pool2d", piece, kernel=k, stride=[1, 1], padding=[0], dilation=[1],
                              ceil_mode=0))
        x = g.op("concat", *parts, axis=axis)
    return x


# -- instance norm ------------------------------------------------------------------
class Unviewed:
    """A tensor torch reshaped for F.instance_norm ([N, C, *] viewed as [1, N C, *], the
    weight repeated N times), kept in its own shape: `t`. Only the instance-norm pattern
    (instance_norm_nodes) produces and consumes it, so the batch stays the leading dim."""

    def __init__(self, t):
        self.t = t


def _users_are(node, names):
    return all(getattr(u.target, "__name__", "").split(".")[0] in names for u in node.users)


def instance_norm_nodes(low, gm):
    """The FX nodes of F.instance_norm's lowering (a view to [1, N C, *], repeated weight and
    bias, _native_batch_norm_legit.no_stats in training mode, a view back) that the capture
    keeps lazy: the views and repeats become Unviewed, the batch norm a group_norm with one
    group per channel."""
    import operator
    lazy = set()
    for bn in gm.graph.nodes:
        if bn.op != "call_function" or getattr(bn.target, "__name__", "") != "_native_batch_norm_legit.no_stats":
            continue
        v, w, b = bn.args[:3]
        if not bn.args[3] or getattr(v, "op", None) != "call_function" or len(v.users) != 1 or \
                getattr(v.target, "__name__", "").split(".")[0] not in ("view", "reshape", "_unsafe_view"):
            continue
        src, vs = low.meta(v.args[0]).shape, low.meta(v).shape
        if len(src) < 3 or list(vs) != [1, src[0] * src[1]] + list(src[2:]):
            continue
        ok = True
        for p in (w, b):
            if p is not None:
                ok &= (getattr(p, "op", None) == "call_function" and len(p.users) == 1 and
                       getattr(p.target, "__name__", "").split(".")[0] == "repeat" and
                       list(low.meta(p.args[0]).shape) == [src[1]] and list(p.args[1]) == [src[0]])
        for u in bn.users:
            ok &= u.target is operator.getitem and (u.args[1] != 0 or _users_are(u, ("view", "reshape",
                                                                                       "_unsafe_view")))
        if ok:
            lazy |= {n for n in (v, w, b) if n is not None}
    return lazy


# -- the dispatcher ---------------------------------------------------------------------
def lower(low, node, name, args, kw):
    """The decompositions of this module by ATen name; None: not mapped."""
    g = low.g
    out = low.meta(node)

    def arg(i, key, default=None):
        return args[i] if len(args) > i else kw.get(key, default)

    if name == "elu":
        return elu(g, args[0], arg(1, "alpha", 1.0), arg(2, "scale", 1.0), arg(3, "input_scale", 1.0))
    if name == "leaky_relu":
        return leaky_relu(g, args[0], arg(1, "negative_slope", 0.01))
    if name == "hardtanh":
        return g.op("clamp", args[0], min=float(arg(1, "min_val", -1.0)), max=float(arg(2, "max_val", 1.0)))
    if name == "flip":
        return flip(low, args[0], list(arg(1, "dims")))
    if name == "index_select":
        x, d, ix = args[0], _axis(args[1], args[0].ndim), args[2]
        return low.take(x, d, ix, list(out.shape))
    if name == "repeat":
        return repeat(g, args[0], list(args[1]))
    if name in ("any", "all"):
        x = args[0]
        dims = arg(1, "dim")
        if dims is None or dims == []:
            axes = list(range(x.ndim))
        else:
            axes = [_axis(d, x.ndim) for d in ([dims] if isinstance(dims, int) else dims)]
        xb = x if x.dtype == "bool" else g.op("ne", x, g._coerce(0, x.dtype))
        return g.op("reduce_max" if name == "any" else "reduce_min", xb, axes=axes,
                    keepdim=int(bool(arg(2, "keepdim", False))))
    if name == "_assert_async":  # a runtime check (one_hot's range): goblin does not check it
        return args[0]
    if name == "linalg_vector_norm":
        x = args[0]
        p = float(arg(1, "ord", 2))
        dims = arg(2, "dim")
        axes = list(range(x.ndim)) if dims is None or dims == [] else \
            [_axis(d, x.ndim) for d in ([dims] if isinstance(dims, int) else dims)]
        if kw.get("dtype") is not None:
            x = low.cast(x, _dtypes.normalize(kw["dtype"]))
        return vector_norm(g, x, p, axes, arg(3, "keepdim", False))
    if name == "_native_batch_norm_legit" and isinstance(args[0], Unviewed):  # F.instance_norm
        x = args[0].t
        w, b = [p.t if isinstance(p, Unviewed) else None for p in args[1:3]]
        return Unviewed(group_norm(g, x, w, b, x.shape[1], float(args[5]))), None, None
    if name in ("_embedding_bag", "_embedding_bag_forward_only"):
        if not isinstance(args[1], Unviewed) or arg(3, "scale_grad_by_freq", False) or \
                arg(7, "include_last_offset", False):
            return None
        ps = arg(6, "per_sample_weights")
        if ps is not None:
            ps = ps.t if isinstance(ps, Unviewed) else reshape(g, ps, args[1].t.shape)
        y = embedding_bag(g, args[0], args[1].t, arg(4, "mode", 0), ps, arg(8, "padding_idx", -1))
        return None if y is None else (y, None, None, None)
    if name == "col2im":
        return fold(low, args[0], list(args[1]), list(args[2]), list(args[3]), list(args[4]), list(args[5]))
    if name == "native_group_norm":
        x, w, b, _n, _c, _hw, groups, eps = args[:8]
        return group_norm(g, x, w, b, int(groups), eps), None, None
    if name in ("max", "min") and len(args) > 1 and isinstance(args[1], Tensor):  # max.other
        return low.binary(node, "maximum" if name == "max" else "minimum", args[0], args[1])
    if name in ("max", "min") and len(args) == 1:  # the whole tensor
        return g.op("reduce_max" if name == "max" else "reduce_min", args[0], axes=list(range(args[0].ndim)),
                    keepdim=0)
    if name in ("max", "min"):
        return max_dim(low, args[0], args[1], arg(2, "keepdim", False), name == "max")
    if name == "sort":
        if len(args) > 1 and isinstance(args[1], bool) or "stable" in kw:  # sort.stable
            dim, desc = arg(2, "dim", -1), arg(3, "descending", False)
        else:
            dim, desc = arg(1, "dim", -1), arg(2, "descending", False)
        return sort(low, args[0], dim, bool(desc))
    if name == "topk":
        k, dim, largest = int(args[1]), arg(2, "dim", -1), arg(3, "largest", True)
        return sort(low, args[0], dim, bool(largest), k=k)
    if name in ("bucketize", "searchsorted"):
        if name == "bucketize":
            x, bounds = args[0], args[1]
            out_int32, right = arg(2, "out_int32", False), arg(3, "right", False)
        else:
            bounds, x = args[0], args[1]
            out_int32, right = arg(2, "out_int32", False), arg(3, "right", False)
            if kw.get("side") is not None:
                right = kw["side"] == "right"
            if kw.get("sorter") is not None or not isinstance(x, Tensor):
                return None
        return bucketize(g, x, bounds, bool(right), "i32" if out_int32 else "i64")
    if name == "_cdist_forward":
        return cdist(g, args[0], args[1], float(args[2]))
    if name in ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
                "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d"):
        scales = args[2] if len(args) > 2 else kw.get("scale_factors")
        return upsample_nearest(low, args[0], list(out.shape), list(scales) if scales else None,
                                name.startswith("_upsample_nearest_exact"))
    if name in ("upsample_bilinear2d", "upsample_linear1d"):
        align = bool(arg(2, "align_corners", False))
        scales = arg(3, "scale_factors")
        return upsample_linear(g, args[0], list(out.shape), align, list(scales) if scales else None)
    if name == "adaptive_max_pool2d":
        y = adaptive_max_pool2d(g, args[0], list(args[1]))
        return None if y is None else (y, None)
    return None


def why(name, args):
    """The message for a decomposable op whose arguments have no mapping; None: generic."""
    if name == "adaptive_max_pool2d":
        return ("F.adaptive_max_pool2d / nn.AdaptiveMaxPool2d: capture supports a batched 4-D input [N, C, H, W] "
                "(add the batch dim with x.unsqueeze(0)); the indices output (return_indices=True) is not "
                "available")
    if name in ("_embedding_bag", "_embedding_bag_forward_only"):
        return ("F.embedding_bag / nn.EmbeddingBag: capture supports a 2-D input [B, L] (bags of equal size L) "
                "with mode 'sum' (per_sample_weights allowed), 'mean' or 'max', no padding_idx, no "
                "scale_grad_by_freq, no include_last_offset; for ragged bags with offsets, pad the bags to one "
                "length and use F.embedding with a mask instead")
    if name == "searchsorted":
        return "torch.searchsorted: capture supports a tensor of values without a sorter (sort the sequence first)"
    return None
