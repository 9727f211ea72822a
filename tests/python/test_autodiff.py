"""Gradients of small composite graphs (goblin_graph_backward) against torch.autograd.

Each test builds the same network in a goblin graph and in PyTorch, appends the
backward nodes with goblin_graph_backward, evaluates forward loss and all gradients
on the reference backend (and BLIS where built), and compares with torch: f64 to
1e-10 relative (the reference computes these in f64, so only summation order
differs), f32 to 1e-4 relative.
"""
import numpy as np
import pytest

from goblin_ct import Graph, backend_available, backward

torch = pytest.importorskip("torch")

BACKENDS = ["ref"] + (["blis"] if backend_available("blis") else [])
TOL = {"f64": 1e-10, "f32": 2e-4}
TDT = {"f64": torch.float64, "f32": torch.float32}
NPDT = {"f64": np.float64, "f32": np.float32}


def close(got, want, dt, what, floor=1e-3):
    """Max error relative to the tensor's largest entry; floor keeps a gradient that is
    zero in exact arithmetic (a bias before batch norm) relative to the others."""
    want = want.detach().numpy()
    scale = max(np.max(np.abs(want)) if want.size else 0.0, floor)
    err = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))) if want.size else 0.0
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    assert err <= TOL[dt] * scale, f"{what}: max error {err:g} (scale {scale:g})"


def run_and_compare(g, loss, params, arrays, torch_loss_fn, dt, be, extra_inputs=()):
    """params: list of (node id, numpy array) to differentiate; extra_inputs: the
    remaining graph inputs' arrays in graph-input order after the params."""
    grads = backward(g, loss, [pid for pid, _ in params])
    g.output(loss, *grads)
    outs = g.run([a for _, a in params] + list(extra_inputs), backend=be)
    tparams = [torch.tensor(a, dtype=TDT[dt], requires_grad=True) for _, a in params]
    tl = torch_loss_fn(*tparams)
    tl.backward()
    close(outs[0], tl, dt, "loss")
    gscale = max(float(tp.grad.abs().max()) for tp in tparams)
    for i, tp in enumerate(tparams):
        close(outs[1 + i], tp.grad, dt, f"grad {i}", floor=max(1e-3, 0.1 * gscale))


def rnd(rng, shape, dt, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(NPDT[dt])


@pytest.mark.parametrize("dt", ["f64", "f32"])
@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_mlp_cross_entropy(dt, be, smoothing):
    rng = np.random.default_rng(1)
    N, D, H, C = 6, 5, 7, 4
    x = rnd(rng, (N, D), dt)
    w1, b1 = rnd(rng, (D, H), dt), rnd(rng, (H,), dt)
    w2, b2 = rnd(rng, (H, C), dt), rnd(rng, (C,), dt)
    tgt = np.array([0, 3, 1, 2, 3, -100], dtype=np.int64)
    g = Graph()
    ids = [g.input(dt, a.shape) for a in (w1, b1, w2, b2)]
    xi = g.input(dt, x.shape)
    ti = g.input("i64", tgt.shape)
    h = g.op("gelu", g.op("add", g.op("matmul", xi, ids[0]), ids[1]))
    z = g.op("add", g.op("matmul", h, ids[2]), ids[3])
    loss = g.op("cross_entropy", z, ti, label_smoothing=smoothing, ignore_index=-100)

    def tloss(w1_, b1_, w2_, b2_):
        tx = torch.tensor(x, dtype=TDT[dt])
        hh = torch.nn.functional.gelu(tx @ w1_ + b1_)
        return torch.nn.functional.cross_entropy(hh @ w2_ + b2_, torch.tensor(tgt),
                                                 label_smoothing=smoothing, ignore_index=-100)

    run_and_compare(g, loss, list(zip(ids, (w1, b1, w2, b2))), None, tloss, dt, be,
                    extra_inputs=(x, tgt))


@pytest.mark.parametrize("dt", ["f64", "f32"])
@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("pool", ["max", "avg", "adaptive"])
def test_conv_pool_batchnorm_block(dt, be, pool):
    rng = np.random.default_rng(2)
    x = rnd(rng, (2, 3, 8, 7), dt)
    w = rnd(rng, (4, 3, 3, 3), dt)
    b = rnd(rng, (4,), dt)
    gamma, beta = rnd(rng, (4,), dt, 0.5, 1.5), rnd(rng, (4,), dt)
    rm, rv = np.zeros(4, NPDT[dt]), np.ones(4, NPDT[dt])
    wfc = rnd(rng, (4 * 2 * 2, 3), dt)
    tgt = np.array([2, 0], dtype=np.int64)
    g = Graph()
    pids = [g.input(dt, a.shape) for a in (x, w, b, gamma, beta, wfc)]
    rmi, rvi, ti = g.input(dt, (4,)), g.input(dt, (4,)), g.input("i64", (2,))
    y = g.op("conv2d", pids[0], pids[1], pids[2], stride=[1, 1], padding=[1, 1])
    y = g.op("batch_norm", y, pids[3], pids[4], rmi, rvi, training=1, eps=1e-5)
    y = g.op("relu", y)
    if pool == "max":
        y = g.op("max_pool2d", y, kernel=[3, 3], stride=[2, 2], padding=[1, 1])  # 8x7 -> 4x4
        y = g.op("max_pool2d", y, kernel=[2, 2])
    elif pool == "avg":
        y = g.op("avg_pool2d", y, kernel=[3, 3], stride=[3, 3], padding=[1, 1], ceil_mode=0,
                 count_include_pad=0)  # 8x7 -> 3x3
        y = g.op("adaptive_avg_pool2d", y, output_size=[2, 2])
    else:
        y = g.op("adaptive_avg_pool2d", y, output_size=[2, 2])
    y = g.op("reshape", y, shape=[2, 16])
    z = g.op("matmul", y, pids[5])
    loss = g.op("cross_entropy", z, ti)
    F = torch.nn.functional

    def tloss(x_, w_, b_, ga_, be_, wfc_):
        t = F.conv2d(x_, w_, b_, stride=1, padding=1)
        t = F.batch_norm(t, torch.zeros(4, dtype=TDT[dt]), torch.ones(4, dtype=TDT[dt]), ga_, be_,
                         training=True, eps=1e-5)
        t = F.relu(t)
        if pool == "max":
            t = F.max_pool2d(F.max_pool2d(t, 3, 2, 1), 2)
        elif pool == "avg":
            t = F.adaptive_avg_pool2d(F.avg_pool2d(t, 3, 3, 1, count_include_pad=False), (2, 2))
        else:
            t = F.adaptive_avg_pool2d(t, (2, 2))
        return F.cross_entropy(t.reshape(2, 16) @ wfc_, torch.tensor(tgt))

    run_and_compare(g, loss, list(zip(pids, (x, w, b, gamma, beta, wfc))), None, tloss, dt, be,
                    extra_inputs=(rm, rv, tgt))


@pytest.mark.parametrize("dt", ["f64", "f32"])
@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("attn", ["matmul", "sdpa", "sdpa_causal"])
def test_layernorm_attention_block(dt, be, attn):
    """Pre-norm attention (composed from matmul/softmax, or the SDPA op and its fused
    backward) plus an rms-normed SiLU MLP, residuals, and an embedding at the bottom."""
    rng = np.random.default_rng(3)
    B, L, E, V = 2, 4, 6, 9
    emb = rnd(rng, (V, E), dt)
    lw, lb = rnd(rng, (E,), dt, 0.5, 1.5), rnd(rng, (E,), dt)
    wq, wk, wv = rnd(rng, (E, E), dt), rnd(rng, (E, E), dt), rnd(rng, (E, E), dt)
    rw, w3 = rnd(rng, (E,), dt, 0.5, 1.5), rnd(rng, (E, E), dt)
    toks = np.array([[1, 4, 4, 8], [0, 2, 4, 1]], dtype=np.int64)
    params = (emb, lw, lb, wq, wk, wv, rw, w3)
    g = Graph()
    pids = [g.input(dt, a.shape) for a in params]
    ti = g.input("i64", toks.shape)
    h = g.op("embedding", pids[0], ti)                       # [B, L, E]
    n = g.op("layer_norm", h, pids[1], pids[2])
    q, k, v = (g.op("matmul", n, pids[i]) for i in (3, 4, 5))
    if attn == "matmul":
        s = g.op("matmul", q, k, trans_b=1, alpha=1 / np.sqrt(E))
        a = g.op("matmul", g.op("softmax", s, axis=-1), v)
    else:
        a = g.op("scaled_dot_product_attention", q, k, v, causal=int(attn == "sdpa_causal"))
    h2 = g.op("add", h, a)
    m = g.op("matmul", g.op("silu", g.op("rms_norm", h2, pids[6], eps=1e-6)), pids[7])
    out = g.op("add", h2, m)
    loss = g.op("mean", g.op("square", out))
    F = torch.nn.functional

    def tloss(emb_, lw_, lb_, wq_, wk_, wv_, rw_, w3_):
        hh = F.embedding(torch.tensor(toks), emb_)
        nn_ = F.layer_norm(hh, (E,), lw_, lb_, eps=1e-5)
        qq, kk, vv = nn_ @ wq_, nn_ @ wk_, nn_ @ wv_
        if attn == "matmul":
            att = torch.softmax(qq @ kk.transpose(-1, -2) / np.sqrt(E), -1) @ vv
        else:
            att = F.scaled_dot_product_attention(qq, kk, vv, is_causal=attn == "sdpa_causal")
        h2_ = hh + att
        r = h2_ * torch.rsqrt(h2_.pow(2).mean(-1, keepdim=True) + 1e-6) * rw_
        return ((h2_ + F.silu(r) @ w3_) ** 2).mean()

    run_and_compare(g, loss, list(zip(pids, params)), None, tloss, dt, be, extra_inputs=(toks,))


@pytest.mark.parametrize("dt", ["f64", "f32"])
@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("shape,nd", [((4, 7), 1), ((3, 5, 48), 1), ((2, 3, 37), 2), ((9, 70), 1)])
def test_layer_norm_gradients_vs_torch(dt, be, affine, shape, nd):
    """The fused layer_norm_backward (d x, d weight) and the bias sum vs torch.autograd."""
    rng = np.random.default_rng(7)
    norm = shape[-nd:]
    x = rnd(rng, shape, dt, -2.0, 3.0)
    params = [x] + [rnd(rng, norm, dt, 0.5, 1.5), rnd(rng, norm, dt)][:{"none": 0, "weight": 1, "both": 2}[affine]]
    g = Graph()
    ids = [g.input(dt, a.shape) for a in params]
    y = g.op("layer_norm", *ids, norm_ndim=nd, eps=1e-5)
    m = rnd(rng, shape, dt)  # a different weight per element of the output
    mi = g.input(dt, m.shape)
    loss = g.op("sum", g.op("mul", y, mi))

    def tloss(*tp):
        tx, rest = tp[0], list(tp[1:]) + [None, None]
        out = torch.nn.functional.layer_norm(tx, norm, rest[0], rest[1], eps=1e-5)
        return (out * torch.tensor(m, dtype=TDT[dt])).sum()

    run_and_compare(g, loss, list(zip(ids, params)), None, tloss, dt, be, extra_inputs=(m,))


@pytest.mark.parametrize("dt", ["f64", "f32"])
@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("lo,hi", [(-3.0, 3.0), (-9.0, -2.0), (2.0, 9.0)])
def test_gelu_gradient_vs_torch(dt, be, approximate, lo, hi):
    """The fused gelu_backward vs torch.autograd, the middle and both tails; relative to the
    largest gradient (as torch parity everywhere in this file)."""
    rng = np.random.default_rng(8)
    x = rnd(rng, (33, 65), dt, lo, hi)
    m = rnd(rng, x.shape, dt)
    g = Graph()
    xi, mi = g.input(dt, x.shape), g.input(dt, m.shape)
    loss = g.op("sum", g.op("mul", g.op("gelu", xi, approximate=int(approximate == "tanh")), mi))

    def tloss(tx):
        return (torch.nn.functional.gelu(tx, approximate=approximate) * torch.tensor(m, dtype=TDT[dt])).sum()

    run_and_compare(g, loss, [(xi, x)], None, tloss, dt, be, extra_inputs=(m,))


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("dt", ["f64", "f32"])
def test_gelu_and_layer_norm_backward_nonfinite_vs_torch(be, dt):
    """NaN and +-inf inputs give what torch's backward gives: NaN (gelu at NaN and +-inf, a
    layer-norm row holding a non-finite value), finite elsewhere."""
    x = np.array([[np.nan, np.inf, -np.inf, 0.0, -40.0, 40.0, 1.5]], dtype=NPDT[dt])
    gr = np.array([[1.0, 1.0, 1.0, 2.0, 1.0, 3.0, -0.5]], dtype=NPDT[dt])
    for approximate in ("none", "tanh"):
        g = Graph()
        gi, xi = g.input(dt, gr.shape), g.input(dt, x.shape)
        g.output(g.op("gelu_backward", gi, xi, approximate=int(approximate == "tanh")))
        got = g.run([gr, x], backend=be)[0]
        tx = torch.tensor(x, dtype=TDT[dt], requires_grad=True)
        torch.nn.functional.gelu(tx, approximate=approximate).backward(torch.tensor(gr, dtype=TDT[dt]))
        want = tx.grad.numpy()
        assert np.array_equal(np.isnan(got), np.isnan(want)), (approximate, got, want)
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=TOL[dt], atol=1e-12)
    xs = np.array([[0.5, np.nan, 1.0], [2.0, -1.0, 3.0], [np.inf, 0.0, 1.0]], dtype=NPDT[dt])
    gs = np.ones_like(xs) * np.array([1.0, -2.0, 0.5], dtype=NPDT[dt])
    g = Graph()
    gi, xi = g.input(dt, gs.shape), g.input(dt, xs.shape)
    g.output(g.op("layer_norm_backward", gi, xi, index=0))
    got = g.run([gs, xs], backend=be)[0]
    tx = torch.tensor(xs, dtype=TDT[dt], requires_grad=True)
    torch.nn.functional.layer_norm(tx, (3,)).backward(torch.tensor(gs, dtype=TDT[dt]))
    want = tx.grad.numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    np.testing.assert_allclose(got[1], want[1], rtol=TOL[dt], atol=1e-6)


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("dt", ["f64", "f32"])
def test_relu_backward_bits_vs_numpy_and_torch(be, dt):
    """The fused relu_backward is where(x > 0, grad, 0) to the bit (NumPy's where as the
    reference): grad's NaN and inf pass where x > 0, +0 where x is 0, -0, negative or NaN;
    away from a NaN x it is also what torch.relu's backward gives."""
    rng = np.random.default_rng(12)
    n = 1000
    x = rng.uniform(-2, 2, n).astype(NPDT[dt])
    gr = rng.uniform(-2, 2, n).astype(NPDT[dt])
    x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-300 if dt == "f64" else 1e-40, -1.0, 2.0]
    gr[:8] = [1.0, np.nan, 3.0, np.nan, np.inf, -0.0, np.nan, -np.inf]
    gr[8:16] = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan, 1.0]
    g = Graph()
    gi, xi = g.input(dt, gr.shape), g.input(dt, x.shape)
    g.output(g.op("relu_backward", gi, xi))
    got = g.run([gr, x], backend=be)[0]
    want = np.where(x > 0, gr, NPDT[dt](0))
    ui = np.uint64 if dt == "f64" else np.uint32
    np.testing.assert_array_equal(got.view(ui), want.view(ui))
    tx = torch.tensor(x, dtype=TDT[dt], requires_grad=True)
    torch.relu(tx).backward(torch.tensor(gr, dtype=TDT[dt]))
    ok = ~np.isnan(x)  # torch passes grad where x is NaN (NaN <= 0 is false); we give 0
    np.testing.assert_array_equal(got[ok], tx.grad.numpy()[ok])


def test_backward_error_message():
    g = Graph()
    x = g.input("f64", (3,))
    y = g.op("cumsum", x, axis=0)
    loss = g.op("sum", y)
    with pytest.raises(Exception) as ei:
        backward(g, loss, [x])
    assert "cumsum" in str(ei.value)


def _fused_cases(rng):
    """(op, inputs as (array, is_float), attrs) for each fused backward op."""
    r = lambda *s: rng.uniform(-1, 1, size=s)
    t = np.array([2, 0, 1], dtype=np.int64)
    return [
        ("conv2d_backward_input", [r(2, 4, 3, 3), r(4, 2, 2, 2)],
         dict(shape=[2, 2, 4, 4], stride=[1, 1])),
        ("conv2d_backward_weight", [r(2, 4, 3, 3), r(2, 2, 4, 4)], dict(shape=[4, 2, 2, 2])),
        ("max_pool2d_backward", [r(2, 3, 2), r(2, 6, 4)], dict(kernel=[2, 2])),
        ("avg_pool2d_backward", [r(2, 3, 2)], dict(shape=[2, 6, 4], kernel=[2, 2])),
        ("adaptive_avg_pool2d_backward", [r(2, 2, 3)], dict(shape=[2, 5, 7])),
        ("batch_norm_backward", [r(3, 2, 4), r(3, 2, 4), r(2), r(2), 1 + r(2) ** 2],
         dict(training=1, index=0)),
        ("cross_entropy_backward", [np.array(0.7), r(3, 4), t], dict(label_smoothing=0.1)),
        ("nll_loss_backward", [np.array(0.7), t], dict(shape=[3, 4])),
        ("embedding_backward", [r(3, 5), t], dict(shape=[4, 5])),
        ("scaled_dot_product_attention_backward", [r(2, 3, 4), r(2, 3, 4), r(2, 5, 4), r(2, 5, 4)],
         dict(index=1)),
        ("layer_norm_backward", [r(3, 2, 4), r(3, 2, 4), r(2, 4)], dict(norm_ndim=2, index=0)),
        ("layer_norm_backward", [r(3, 5), r(3, 5)], dict(index=1)),
        ("gelu_backward", [r(3, 5), 4 * r(3, 5)], dict(approximate=0)),
        ("gelu_backward", [r(3, 5), 4 * r(3, 5)], dict(approximate=1)),
        ("relu_backward", [r(3, 5), r(3, 5)], dict()),
    ]


@pytest.mark.parametrize("dt", ["f16", "bf16", "f32"])
def test_fused_ops_round_once_in_narrow_dtypes(dt):
    """The reference kernels compute in f64 and round once: on inputs that are exact in
    dt, the dt result is the f64 result rounded to dt."""
    rng = np.random.default_rng(4)
    for name, arrays, attrs in _fused_cases(rng):
        res = {}
        for d in ("f64", dt):
            g = Graph()
            vals = []
            for a in arrays:
                if a.dtype == np.int64:
                    vals.append(a)
                    continue
                a = a.astype(np.float16 if dt == "f16" else np.float32)  # exact in dt after rounding
                if dt == "bf16":
                    a = (a.view(np.uint32) & 0xFFFF0000).view(np.float32)
                vals.append(a)
            ids = [g.input("i64" if a.dtype == np.int64 else d, a.shape) for a in vals]
            g.output(g.op(name, *ids, **attrs))
            res[d] = g.run([a if a.dtype == np.int64 else a.astype(np.float64) if d == "f64" else a
                            for a in vals])[0].astype(np.float64)
        want = res["f64"].astype(np.float16 if dt == "f16" else np.float32)
        if dt == "bf16":
            # round to nearest even in the top 16 bits, as the kernels' store does
            u = want.astype(np.float32).view(np.uint32).astype(np.uint64)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
            want = u.view(np.float32)
        np.testing.assert_array_equal(res[dt], want.astype(np.float64), err_msg=f"{name} {dt}")
