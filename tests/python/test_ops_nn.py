"""matmul, conv2d, pooling and scaled dot-product attention (libgoblin/ops_nn.c,
backends/ref/ref_nn.c, backends/blis/blis_gemm.c) compared with NumPy and PyTorch.

Float results are checked against an exact answer (float64 / long double from the
exactly representable inputs) under the op's own numeric contract
(goblin_op_contract), with the contract's scale computed independently (|a| @ |b|,
conv of |x| with |w|, ...), so the test also checks that the contracts hold.
Integer matmul and max pooling must be bit-exact."""
import zlib

import numpy as np
import pytest

from goblin_ct import GoblinError, backend_available, contract, run_op

torch = pytest.importorskip("torch")
F = torch.nn.functional

FLOATS = ["f32", "f64", "f16", "bf16"]
NPT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32,
       "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8}
BACKENDS = [("ref", 1)] + ([("blis", 1), ("blis", 2)] if backend_available("blis") else [])


def bf16_round(a):
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32).reshape(np.shape(a))


def fdata(shape, dt, rng, scale=1.0):
    """Random floats exactly representable in dt (bf16: float32 holding bf16 values)."""
    a = rng.standard_normal(shape) * scale
    if dt == "bf16":
        return bf16_round(a.astype(np.float32))
    return a.astype(NPT[dt])


def seed(*args):
    """A per-case seed that does not depend on PYTHONHASHSEED."""
    return zlib.crc32(repr(args).encode())


def exact64(a):
    return np.asarray(a, dtype=np.float64)


def within(got, exact, rel, ab, scale, what=""):
    got = np.asarray(got, dtype=np.float64)
    exact = np.asarray(exact, dtype=np.float64)
    assert got.shape == exact.shape, (what, got.shape, exact.shape)
    nan = np.isnan(exact)
    assert np.array_equal(np.isnan(got), nan), (what, got, exact)
    fin = ~nan & ~np.isinf(exact)
    assert np.array_equal(got[~fin & ~nan], exact[~fin & ~nan]), what
    bound = rel * np.broadcast_to(np.asarray(scale, dtype=np.float64), exact.shape)[fin] + ab
    diff = np.abs(got[fin] - exact[fin])
    assert np.all(diff <= bound), (what, diff.max(), (diff - bound).max())


def err(code, fn, *args, **kw):
    with pytest.raises(GoblinError) as ei:
        fn(*args, **kw)
    assert ei.value.name == code, str(ei.value)
    return str(ei.value)


def t64(a):
    return torch.tensor(np.asarray(a, dtype=np.float64))


# ---- matmul ---------------------------------------------------------------------

MM_SHAPES = [
    ((4, 5), (5, 3)),
    ((5,), (5, 3)),
    ((4, 5), (5,)),
    ((7,), (7,)),
    ((2, 1, 6, 5), (3, 5, 4)),
    ((6,), (2, 6, 3)),
    ((3, 40, 70), (70, 50)),
    ((130, 120), (120, 90)),      # large enough for BLIS's threaded path
    ((0, 4, 5), (5, 3)),
    ((4, 0), (0, 3)),
]


def np_matmul_exact(a, b):
    """Exact-enough product: float64 for narrow inputs, long double for f64."""
    if a.dtype == np.float64:
        return np.matmul(a.astype(np.longdouble), b.astype(np.longdouble))
    return np.matmul(exact64(a), exact64(b))


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("sa,sb", MM_SHAPES)
@pytest.mark.parametrize("be,th", BACKENDS)
def test_matmul_vs_numpy(dt, sa, sb, be, th):
    rng = np.random.default_rng(seed(dt, sa, sb))
    a, b = fdata(sa, dt, rng), fdata(sb, dt, rng)
    got = run_op("matmul", [a, b], dtype=dt, backend=be, threads=th)
    exact = np_matmul_exact(a, b)
    k = sa[-1]
    rel, ab = contract("matmul", dt, k)
    scale = np.matmul(np.abs(exact64(a)), np.abs(exact64(b)))
    within(got, np.asarray(exact, dtype=np.float64), rel, ab, scale, f"{dt} {sa}@{sb}")


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("be,th", BACKENDS)
def test_matmul_transposes_alpha_beta(dt, be, th):
    rng = np.random.default_rng(3)
    for ta in (0, 1):
        for tb in (0, 1):
            for m, n, k in ((9, 7, 11), (140, 90, 100)):
                a = fdata((k, m) if ta else (m, k), dt, rng)
                b = fdata((n, k) if tb else (k, n), dt, rng)
                c = fdata((n,), dt, rng)
                got = run_op("matmul", [a, b, c], dtype=dt, backend=be, threads=th, trans_a=ta,
                             trans_b=tb, alpha=-1.5, beta=0.25)
                oa = a.T if ta else a
                ob = b.T if tb else b
                ex = -1.5 * np_matmul_exact(oa, ob) + 0.25 * c.astype(np.longdouble)
                scale = 1.5 * np.abs(exact64(oa)) @ np.abs(exact64(ob)) + 0.25 * np.abs(exact64(c))
                rel, ab = contract("matmul", dt, k)
                within(got, np.asarray(ex, dtype=np.float64), rel, ab, scale, (ta, tb, m))
                # torch.addmm agrees too (same formula)
                tor = torch.addmm(torch.tensor(c), torch.tensor(oa), torch.tensor(ob), beta=0.25,
                                  alpha=-1.5).numpy()
                within(got, tor, 2 * rel, 2 * ab, scale, "addmm")


@pytest.mark.parametrize("be,th", BACKENDS)
def test_matmul_strided_inputs(be, th):
    """Non-contiguous NumPy views go in without a copy by the harness."""
    rng = np.random.default_rng(4)
    big = fdata((60, 80), "f32", rng)
    views = [
        (big[::2, ::3], big[:27, ::4]),                  # every other row / third column
        (big[:, :40].T, big[:, 10:30]),                  # a transposed view (column-major)
        (np.broadcast_to(big[0], (6, 80)), big.T[:, :10]),  # a stride-0 row dim
        (big[5:35, 3:40], big[1:38, 50:60]),             # padded rows
    ]
    for a, b in views:
        assert a.shape[-1] == b.shape[0]
        got = run_op("matmul", [a, b], dtype="f32", backend=be, threads=th)
        rel, ab = contract("matmul", "f32", a.shape[-1])
        within(got, exact64(a) @ exact64(b), rel, ab, np.abs(exact64(a)) @ np.abs(exact64(b)))


@pytest.mark.parametrize("dt", ["i8", "i16", "i32", "i64", "u8"])
@pytest.mark.parametrize("be,th", BACKENDS)
def test_matmul_integers_wrap_like_numpy(dt, be, th):
    rng = np.random.default_rng(5)
    info = np.iinfo(NPT[dt])
    a = rng.integers(info.min, info.max, size=(3, 4, 6), dtype=NPT[dt], endpoint=True)
    b = rng.integers(info.min, info.max, size=(6, 5), dtype=NPT[dt], endpoint=True)
    c = rng.integers(info.min, info.max, size=(5,), dtype=NPT[dt], endpoint=True)
    got = run_op("matmul", [a, b], backend=be, threads=th)
    assert np.array_equal(got, np.matmul(a, b))  # numpy wraps in the operand type too
    got = run_op("matmul", [a, b, c], backend=be, threads=th, alpha=3, beta=-2)
    wide = np.matmul(a.astype(np.int64), b.astype(np.int64)) * 3 - 2 * c.astype(np.int64)
    assert np.array_equal(got, wide.astype(NPT[dt]))  # int64 arithmetic wraps mod 2^64
    if dt in ("i32", "i64"):  # torch agrees on the wrapping product
        assert np.array_equal(run_op("matmul", [a, b], backend=be, threads=th),
                              torch.matmul(torch.tensor(a), torch.tensor(b)).numpy())


def test_matmul_errors():
    a = np.zeros((2, 3), np.float32)
    err("GOBLIN_ESHAPE", run_op, "matmul", [a, np.zeros((4, 2), np.float32)])
    err("GOBLIN_EDTYPE", run_op, "matmul", [a, np.zeros((3, 2), np.float64)])
    err("GOBLIN_ESHAPE", run_op, "matmul", [a, np.zeros((), np.float32)])
    err("GOBLIN_ERANGE", run_op, "matmul", [a, np.zeros((3, 2), np.float32)], trans_b=3)
    err("GOBLIN_EINVAL", run_op, "matmul", [a.astype(np.int32), np.zeros((3, 2), np.int32)],
        alpha=0.5)
    err("GOBLIN_ESHAPE", run_op, "matmul", [a, np.zeros((3, 2), np.float32),
                                            np.zeros((3, 2), np.float32)])


def test_matmul_blis_thread_count_does_not_change_bits():
    if not backend_available("blis"):
        pytest.skip("no blis")
    rng = np.random.default_rng(6)
    for sa, sb in (((17, 33), (33, 65)), ((3, 150, 80), (80, 120)), ((200, 130), (130, 70))):
        a, b = fdata(sa, "f32", rng), fdata(sb, "f32", rng)
        outs = [run_op("matmul", [a, b], backend="blis", threads=t) for t in (1, 2, 3, 5)]
        for o in outs[1:]:
            assert np.array_equal(o.view(np.uint32), outs[0].view(np.uint32))


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_matmul_blis_linear_layer_shapes_bits_and_values(dt):
    """Linear layers ([B, T, D] @ W^T + bias, batch folded into one product and split
    by rows across threads) and a wide product (split by columns): within the contract
    of exact products and the same bits for any thread count."""
    if not backend_available("blis"):
        pytest.skip("no blis")
    rng = np.random.default_rng(16)
    cases = [((4, 64, 80), (120, 80), (120,), 1), ((3, 1, 70), (90, 70), (1, 90), 1),
             ((40, 96), (96, 600), None, 0), ((2, 5, 60, 72), (72, 130), (130,), 0)]
    for sa, sb, sc, tb in cases:
        a, b = fdata(sa, dt, rng), fdata(sb, dt, rng)
        ins = [a, b] + ([fdata(sc, dt, rng)] if sc else [])
        outs = [run_op("matmul", ins, dtype=dt, backend="blis", threads=t, trans_b=tb)
                for t in (1, 2, 3, 5)]
        ob = b.T if tb else b
        ex = np_matmul_exact(a, ob)
        scale = np.abs(exact64(a)) @ np.abs(exact64(ob))
        if sc:
            ex = ex + ins[2].astype(np.longdouble)
            scale = scale + np.abs(exact64(ins[2]))
        rel, ab = contract("matmul", dt, sa[-1])
        within(outs[0], np.asarray(ex, dtype=np.float64), rel, ab, scale, (dt, sa, sb))
        u = np.uint32 if dt == "f32" else np.uint64
        for o in outs[1:]:
            assert np.array_equal(o.view(u), outs[0].view(u)), (dt, sa, sb)


# ---- conv2d ---------------------------------------------------------------------

CONV_CASES = [
    # x shape, w shape, stride, padding, dilation, groups, bias
    ((2, 3, 9, 9), (4, 3, 3, 3), 1, 1, 1, 1, True),
    ((1, 4, 11, 8), (6, 2, 3, 2), (2, 1), (1, 0), (1, 2), 2, False),
    ((3, 6, 10, 10), (6, 1, 3, 3), (1, 2), 1, (2, 1), 6, True),
    ((2, 8, 7, 7), (16, 8, 1, 1), 1, 0, 1, 1, True),
    ((2, 8, 7, 7), (16, 4, 1, 1), 2, 0, 1, 2, False),
    ((1, 5, 12, 12), (7, 5, 5, 5), 3, 2, 1, 1, True),
    ((0, 3, 5, 5), (4, 3, 3, 3), 1, 0, 1, 1, True),
]


def pair(v):
    return list(v) if isinstance(v, tuple) else [v]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("be,th", BACKENDS)
def test_conv2d_vs_torch(dt, case, be, th):
    xs, ws, st, pd, dl, gr, bias = case
    rng = np.random.default_rng(seed(dt, xs, ws))
    x, w, b = fdata(xs, dt, rng), fdata(ws, dt, rng), fdata((ws[0],), dt, rng)
    ins = [x, w, b] if bias else [x, w]
    got = run_op("conv2d", ins, dtype=dt, backend=be, threads=th, stride=pair(st),
                 padding=pair(pd), dilation=pair(dl), groups=gr)
    kw = dict(stride=st, padding=pd, dilation=dl, groups=gr)
    exact = F.conv2d(t64(x), t64(w), t64(b) if bias else None, **kw).numpy()
    scale = F.conv2d(t64(np.abs(exact64(x))), t64(np.abs(exact64(w))),
                     t64(np.abs(exact64(b))) if bias else None, **kw).numpy()
    rel, ab = contract("conv2d", dt, ws[1] * ws[2] * ws[3])
    within(got, exact, rel, ab, scale, f"{dt} {case}")


def test_conv2d_errors():
    x = np.zeros((1, 4, 5, 5), np.float32)
    err("GOBLIN_ESHAPE", run_op, "conv2d", [x, np.zeros((6, 3, 3, 3), np.float32)])
    err("GOBLIN_ESHAPE", run_op, "conv2d", [x, np.zeros((6, 4, 7, 3), np.float32)])
    err("GOBLIN_ERANGE", run_op, "conv2d", [x, np.zeros((6, 4, 3, 3), np.float32)], stride=[0])
    err("GOBLIN_EINVAL", run_op, "conv2d", [x, np.zeros((6, 4, 3, 3), np.float32)],
        padding=[1, 1, 1])
    err("GOBLIN_ESHAPE", run_op, "conv2d", [x, np.zeros((6, 2, 3, 3), np.float32)], groups=3)
    err("GOBLIN_ESHAPE", run_op, "conv2d", [x, np.zeros((6, 4, 3, 3), np.float32),
                                            np.zeros((5,), np.float32)])


# ---- pooling --------------------------------------------------------------------

POOL_CASES = [
    # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    ((3, 2), (2, 1), (1, 0), 1, True),
    (2, 2, 0, 1, True),
    (3, 3, 1, 2, False),
    ((2, 3), 1, (1, 1), (2, 1), True),
]


@pytest.mark.parametrize("dt", FLOATS + ["i32", "i64", "u8", "i8"])
@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("shape", [(2, 3, 9, 7), (3, 10, 10), (1, 1, 5, 5)])
def test_max_pool2d_vs_torch(dt, case, shape):
    k, s, p, d, cm = case
    rng = np.random.default_rng(7)
    if dt in FLOATS:
        x = fdata(shape, dt, rng)
        tx = torch.tensor(exact64(x))
    else:
        info = np.iinfo(NPT[dt])
        x = rng.integers(info.min, info.max, size=shape, dtype=NPT[dt], endpoint=True)
        tx = torch.tensor(x)
    kw = dict(kernel=pair(k), padding=pair(p), dilation=pair(d), ceil_mode=int(cm))
    if s is not None:
        kw["stride"] = pair(s)
    got = run_op("max_pool2d", [x], dtype=dt, **kw)
    want = F.max_pool2d(tx, k, s, p, d, ceil_mode=cm).numpy()
    assert got.shape == want.shape
    assert np.array_equal(np.asarray(got, dtype=want.dtype), want)


def test_max_pool2d_nan():
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    x[0, 0, 1, 2] = np.nan
    got = run_op("max_pool2d", [x], kernel=[2])
    want = F.max_pool2d(torch.tensor(x), 2).numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got).sum() == 1
    assert np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[3] == 1])
@pytest.mark.parametrize("cip", [0, 1])
def test_avg_pool2d_vs_torch(dt, case, cip):
    k, s, p, _, cm = case
    rng = np.random.default_rng(8)
    x = fdata((2, 3, 9, 7), dt, rng)
    kw = dict(kernel=pair(k), padding=pair(p), ceil_mode=int(cm), count_include_pad=cip)
    if s is not None:
        kw["stride"] = pair(s)
    got = run_op("avg_pool2d", [x], dtype=dt, **kw)
    targs = dict(kernel_size=k, stride=s, padding=p, ceil_mode=cm, count_include_pad=bool(cip))
    exact = F.avg_pool2d(t64(x), **targs).numpy()
    scale = F.avg_pool2d(t64(np.abs(exact64(x))), **targs).numpy()
    kk = pair(k)[0] * pair(k)[-1]
    rel, ab = contract("avg_pool2d", dt, kk)
    within(got, exact, rel, ab, scale, f"{dt} {case}")


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("size,out", [((7, 9), (3, 4)), ((5, 5), (5, 5)), ((4, 6), (1, 1)),
                                      ((3, 3), (7, 2)), ((10, 3), (4, 3))])
def test_adaptive_avg_pool2d_vs_torch(dt, size, out):
    rng = np.random.default_rng(9)
    x = fdata((2, 3) + size, dt, rng)
    got = run_op("adaptive_avg_pool2d", [x], dtype=dt, output_size=list(out))
    exact = F.adaptive_avg_pool2d(t64(x), out).numpy()
    scale = F.adaptive_avg_pool2d(t64(np.abs(exact64(x))), out).numpy()
    kmax = (-(-size[0] // out[0]) + 1) * (-(-size[1] // out[1]) + 1)
    rel, ab = contract("adaptive_avg_pool2d", dt, kmax)
    within(got, exact, rel, ab, scale, f"{dt} {size}->{out}")


def test_pool_errors():
    x = np.zeros((1, 1, 4, 4), np.float32)
    err("GOBLIN_EINVAL", run_op, "max_pool2d", [x], kernel=[3], padding=[2])
    err("GOBLIN_ESHAPE", run_op, "max_pool2d", [x], kernel=[5])
    err("GOBLIN_EINVAL", run_op, "max_pool2d", [x])
    err("GOBLIN_EINVAL", run_op, "avg_pool2d", [x], kernel=[2], dilation=[2])
    err("GOBLIN_EDTYPE", run_op, "avg_pool2d", [x.astype(np.int32)], kernel=[2])
    err("GOBLIN_ESHAPE", run_op, "max_pool2d", [x[0, 0]], kernel=[2])
    err("GOBLIN_EINVAL", run_op, "adaptive_avg_pool2d", [x])


# ---- scaled dot-product attention ------------------------------------------------

def sdpa_scale_bound(q, k, v, scale, mask=None, causal=False):
    """(1 + 2T) * sum_j p_j |v_j| from the contract text, computed in float64."""
    q, k, v = exact64(q), exact64(k), exact64(v)
    logits = scale * np.matmul(q, np.swapaxes(k, -1, -2))
    T = np.abs(scale) * np.matmul(np.abs(q), np.swapaxes(np.abs(k), -1, -2)).max(axis=-1,
                                                                                 keepdims=True)
    p = F.softmax(torch.tensor(logits + (0 if mask is None else mask)), dim=-1).numpy()
    if causal:
        L, S = logits.shape[-2:]
        m = np.where(np.tril(np.ones((L, S), bool)), 0.0, -np.inf)
        p = F.softmax(torch.tensor(logits + m), dim=-1).numpy()
    p = np.nan_to_num(p)
    return (1 + 2 * T) * np.matmul(p, np.abs(v))


SDPA_CASES = [
    # q, k, v shapes, causal, mask kind
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), False, None),
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), True, None),
    ((6, 8), (6, 8), (6, 5), True, None),
    ((2, 3, 5, 8), (1, 3, 7, 8), (2, 1, 7, 4), False, "bool"),
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), False, "float"),
    ((4, 5, 16), (4, 9, 16), (4, 9, 16), False, "bool_rows"),
]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("case", SDPA_CASES)
@pytest.mark.parametrize("scale", [None, 0.3])
def test_sdpa_vs_torch(dt, case, scale):
    qs, ks, vs, causal, mk = case
    rng = np.random.default_rng(seed(dt, qs, mk))
    q, k, v = fdata(qs, dt, rng), fdata(ks, dt, rng), fdata(vs, dt, rng)
    L, S = qs[-2], ks[-2]
    ins, tmask, fmask = [q, k, v], None, None
    if mk in ("bool", "bool_rows"):
        m = rng.random((L, S)) > 0.4
        if mk == "bool_rows":
            m[1, :] = False  # a fully masked row: 0 in torch 2.13 and here
        ins.append((m, "bool"))
        tmask = torch.tensor(m)
        fmask = np.where(m, 0.0, -np.inf)
    elif mk == "float":
        m = fdata((L, S), dt, rng)
        m[0, 1] = -np.inf
        ins.append(m)
        tmask = t64(m)
        fmask = exact64(m)
    attrs = {}
    if causal:
        attrs["causal"] = 1
    if scale is not None:
        attrs["scale"] = scale
    got = run_op("scaled_dot_product_attention", ins, dtype=dt, **attrs)
    want = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), attn_mask=tmask,
                                          is_causal=causal, scale=scale).numpy()
    sc = scale if scale is not None else 1 / np.sqrt(qs[-1])
    bound = sdpa_scale_bound(q, k, v, sc, fmask, causal)
    rel, ab = contract("scaled_dot_product_attention", dt, qs[-1] + S + 6)
    within(got, want, rel, ab, bound, f"{dt} {case}")
    if mk == "bool_rows":
        assert np.all(got[:, 1, :] == 0)


def test_sdpa_errors():
    q = np.zeros((2, 4, 8), np.float32)
    k = np.zeros((2, 5, 8), np.float32)
    v = np.zeros((2, 5, 3), np.float32)
    err("GOBLIN_ESHAPE", run_op, "scaled_dot_product_attention", [q, k[..., :7], v])
    err("GOBLIN_ESHAPE", run_op, "scaled_dot_product_attention", [q, k, v[:, :4]])
    err("GOBLIN_EINVAL", run_op, "scaled_dot_product_attention",
        [q, k, v, np.zeros((4, 5), np.float32)], causal=1)
    err("GOBLIN_EDTYPE", run_op, "scaled_dot_product_attention",
        [q, k, v, np.zeros((4, 5), np.float64)])
