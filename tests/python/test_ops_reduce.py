"""Reductions, softmax, normalization and losses (libgoblin/ops_reduce.c,
backends/ref/ref_reduce.c, backends/blis/blis_reduce.c) compared with NumPy and
PyTorch: every op, several dtypes, axis sets, keepdim, empty and NaN inputs,
ignore_index and label smoothing, batch norm in both modes. Float results are
checked against an exact (float64) answer under the op's own numeric contract
(goblin_op_contract), so the test also checks that the contracts hold."""
import numpy as np
import pytest

from goblin_ct import GoblinError, Graph, backend_available, contract, run_op

torch = pytest.importorskip("torch")
F = torch.nn.functional

FLOATS = ["f32", "f64", "f16", "bf16"]
INTS = ["i8", "i16", "i32", "i64", "u8"]
NPT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32,
       "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
       "bool": np.bool_}
BACKENDS = ["ref"] + (["blis"] if backend_available("blis") else [])
AXES = [None, [0], [1], [-1], [0, 2], [2, 0], [1, 2], [0, 1, 2], [-3, -2]]


def bf16_round(a):
    """float32 values rounded to bf16 (nearest even), kept as float32."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32).reshape(np.shape(a))


def fdata(shape, dt, rng, scale=1.0, offset=0.0):
    """Random floats exactly representable in dt (bf16: float32 holding bf16 values)."""
    a = (rng.standard_normal(shape) * scale + offset).astype(np.float32 if dt in ("bf16", "f16") else NPT[dt])
    if dt == "bf16":
        return bf16_round(a)
    return a.astype(NPT[dt])


def err(code, fn, *args, **kw):
    with pytest.raises(GoblinError) as ei:
        fn(*args, **kw)
    assert ei.value.name == code, str(ei.value)
    return str(ei.value)


def within(got, exact, rel, ab, scale):
    """|got - exact| <= rel * scale + ab elementwise; NaN must match NaN, inf must match."""
    got = np.asarray(got, dtype=np.float64)
    exact = np.asarray(exact, dtype=np.float64)
    assert got.shape == exact.shape, (got.shape, exact.shape)
    nan = np.isnan(exact)
    assert np.array_equal(np.isnan(got), nan), (got, exact)
    inf = np.isinf(exact)
    assert np.array_equal(got[inf], exact[inf]), (got, exact)
    fin = ~nan & ~inf
    bound = rel * np.broadcast_to(np.asarray(scale, dtype=np.float64), exact.shape)[fin] + ab
    diff = np.abs(got[fin] - exact[fin])
    assert np.all(diff <= bound), (diff.max(), (diff - bound).max(), got, exact)


def norm_axes(axes, rank):
    return tuple(range(rank)) if axes is None else tuple(a % rank for a in axes)


def attrs_axes(axes, keepdim):
    kw = {"keepdim": keepdim}
    if axes is not None:
        kw["axes"] = axes
    return kw


# ---- sum, mean, max, min, prod ---------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", FLOATS)
def test_sum_mean_float_axes(dt, backend):
    rng = np.random.default_rng(10)
    x = fdata((3, 5, 7), dt, rng)
    x64 = x.astype(np.float64)
    for axes in AXES:
        ax = norm_axes(axes, 3)
        k = int(np.prod([x.shape[a] for a in ax]))
        for keepdim in (0, 1):
            kw = attrs_axes(axes, keepdim)
            y = run_op("sum", [x], dtype=dt, backend=backend, **kw)
            assert y.dtype == NPT[dt]
            rel, ab = contract("sum", dt, k)
            within(y, x64.sum(axis=ax, keepdims=bool(keepdim)), rel, ab,
                   np.abs(x64).sum(axis=ax, keepdims=bool(keepdim)))
            m = run_op("mean", [x], dtype=dt, backend=backend, **kw)
            rel, ab = contract("mean", dt, k)
            within(m, x64.mean(axis=ax, keepdims=bool(keepdim)), rel, ab,
                   np.abs(x64).mean(axis=ax, keepdims=bool(keepdim)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", FLOATS + INTS + ["bool"])
def test_max_min_exact(dt, backend):
    rng = np.random.default_rng(11)
    if dt in FLOATS:
        x = fdata((4, 3, 6), dt, rng)
    elif dt == "bool":
        x = rng.integers(0, 2, size=(4, 3, 6)).astype(np.bool_)
    else:
        info = np.iinfo(NPT[dt])
        x = rng.integers(info.min, info.max, size=(4, 3, 6), endpoint=True, dtype=NPT[dt])
    t = torch.from_numpy(x)
    for axes in AXES:
        ax = norm_axes(axes, 3)
        for keepdim in (0, 1):
            kw = attrs_axes(axes, keepdim)
            for op, fn in (("reduce_max", torch.amax), ("reduce_min", torch.amin)):
                y = run_op(op, [x], dtype=dt, backend=backend, **kw)
                want = fn(t, dim=ax, keepdim=bool(keepdim)).numpy()
                assert y.dtype == want.dtype
                np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["f32", "f64", "f16"])
def test_max_min_nan_propagates(dt, backend):
    x = np.array([[1, np.nan, 3, -np.inf], [2, 5, np.inf, 0], [np.nan, np.nan, 1, 1]], NPT[dt])
    for op, fn in (("reduce_max", torch.amax), ("reduce_min", torch.amin)):
        for axes in ([0], [1], None):
            y = run_op(op, [x], backend=backend, **({} if axes is None else {"axes": axes}))
            want = fn(torch.from_numpy(x), dim=tuple(axes) if axes else (0, 1)).numpy()
            np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("dt", INTS + ["bool"])
def test_sum_int_is_i64_like_torch(dt):
    rng = np.random.default_rng(12)
    if dt == "bool":
        x = rng.integers(0, 2, size=(5, 4, 3)).astype(np.bool_)
    else:
        info = np.iinfo(NPT[dt])
        x = rng.integers(info.min, info.max, size=(5, 4, 3), endpoint=True, dtype=NPT[dt])
    t = torch.from_numpy(x)
    for axes in AXES:
        ax = norm_axes(axes, 3)
        y = run_op("sum", [x], dtype=dt, **attrs_axes(axes, 0))
        want = t.sum(dim=ax).numpy()
        assert y.dtype == np.int64 and want.dtype == np.int64
        np.testing.assert_array_equal(y, want)
        y = run_op("cumsum", [x], dtype=dt, axis=ax[0])
        want = t.cumsum(dim=ax[0]).numpy()
        assert y.dtype == np.int64
        np.testing.assert_array_equal(y, want)


def test_int_sum_and_prod_wrap_modulo_2_64():
    big = np.array([2**62, 2**62, 2**62, 3], np.int64)
    y = run_op("sum", [big])
    want = (3 * 2**62 + 3 + 2**63) % 2**64 - 2**63
    assert int(y) == want
    p = run_op("prod", [np.array([2**40, 2**30, 3], np.int64)])
    assert int(p) == (2**70 * 3 + 2**63) % 2**64 - 2**63
    p = run_op("prod", [np.array([-128, -128, -128], np.int8)])
    assert p.dtype == np.int64 and int(p) == -128**3
    s = run_op("sum", [np.full(300, 255, np.uint8)])
    assert s.dtype == np.int64 and int(s) == 300 * 255


@pytest.mark.parametrize("dt", FLOATS + INTS + ["bool"])
def test_prod(dt):
    rng = np.random.default_rng(13)
    if dt in FLOATS:
        x = (1 + 0.25 * fdata((3, 4, 5), dt, rng)).astype(NPT[dt])
        if dt == "bf16":
            x = bf16_round(x)
    elif dt == "bool":
        x = rng.integers(0, 2, size=(3, 4, 5)).astype(np.bool_)
    else:
        x = rng.integers(0, 4, size=(3, 4, 5)).astype(NPT[dt])
    t = torch.from_numpy(x)
    for axes in AXES:
        ax = norm_axes(axes, 3)
        y = run_op("prod", [x], dtype=dt, **attrs_axes(axes, 1))
        if dt in FLOATS:
            exact = np.prod(x.astype(np.float64), axis=ax, keepdims=True)
            rel, ab = contract("prod", dt, int(np.prod([x.shape[a] for a in ax])))
            within(y, exact, rel, ab, np.abs(exact))
        else:
            want = t.to(torch.int64)
            for a in sorted(ax, reverse=True):
                want = want.prod(dim=a, keepdim=True)
            assert y.dtype == np.int64
            np.testing.assert_array_equal(y, want.numpy())


def test_empty_reductions():
    x = np.zeros((2, 0, 3), np.float32)
    np.testing.assert_array_equal(run_op("sum", [x], axes=[1]), np.zeros((2, 3)))
    np.testing.assert_array_equal(run_op("prod", [x], axes=[1]), np.ones((2, 3)))
    assert np.isnan(run_op("mean", [x], axes=[1])).all()
    assert run_op("sum", [x], axes=[1]).shape == (2, 3)
    assert run_op("reduce_max", [x], axes=[2]).shape == (2, 0)  # nothing empty is reduced
    assert run_op("sum", [x], axes=[0, 2], keepdim=1).shape == (1, 0, 1)
    assert int(run_op("sum", [np.zeros((0,), np.int32)])) == 0
    assert int(run_op("prod", [np.zeros((0,), np.int32)])) == 1
    assert np.isnan(run_op("var", [x], axes=[1])).all()
    for be in BACKENDS:
        np.testing.assert_array_equal(run_op("sum", [x], axes=[1], backend=be), np.zeros((2, 3)))
        assert np.isnan(run_op("mean", [x], axes=[1], backend=be)).all()
        assert run_op("softmax", [x], axis=1, backend=be).shape == (2, 0, 3)
        assert run_op("layer_norm", [x], backend=be).shape == (2, 0, 3)
        assert run_op("cumsum", [x], axis=1, backend=be).shape == (2, 0, 3)
    m = err("GOBLIN_ERANGE", run_op, "reduce_max", [x], axes=[1])
    assert "zero elements" in m
    err("GOBLIN_ERANGE", run_op, "reduce_min", [x])
    err("GOBLIN_ERANGE", run_op, "argmax", [x])
    err("GOBLIN_ERANGE", run_op, "argmin", [x], axis=1)


def test_scalar_inputs():
    s = np.float32(2.5)
    assert float(run_op("sum", [s])) == 2.5
    assert float(run_op("sum", [s], axes=[0])) == 2.5
    assert float(run_op("reduce_max", [s], axes=[-1], keepdim=1)) == 2.5
    assert int(run_op("argmax", [s])) == 0
    assert float(run_op("softmax", [s])) == 1.0
    assert float(run_op("log_softmax", [s])) == 0.0
    assert float(run_op("cumsum", [s], axis=0)) == 2.5
    err("GOBLIN_EINVAL", run_op, "sum", [s], axes=[0, -1])


def test_reduce_errors():
    x = np.zeros((2, 3), np.float32)
    m = err("GOBLIN_EINVAL", run_op, "sum", [x], axes=[1, -1])
    assert "twice" in m
    err("GOBLIN_ERANGE", run_op, "sum", [x], axes=[2])
    err("GOBLIN_ERANGE", run_op, "mean", [x], axes=[-3])
    err("GOBLIN_ERANGE", run_op, "argmax", [x], axis=2)
    err("GOBLIN_ERANGE", run_op, "sum", [x], keepdim=2)
    err("GOBLIN_EDTYPE", run_op, "mean", [np.zeros(3, np.int32)])
    err("GOBLIN_EDTYPE", run_op, "var", [np.zeros(3, np.int64)])
    err("GOBLIN_EDTYPE", run_op, "softmax", [np.zeros(3, np.int64)])
    err("GOBLIN_EDTYPE", run_op, "argmax", [np.zeros(3, np.bool_)])
    err("GOBLIN_EINVAL", run_op, "cumsum", [x])  # AXIS required
    err("GOBLIN_ERANGE", run_op, "var", [x], correction=-1)


# ---- argmax / argmin -------------------------------------------------------------------

@pytest.mark.parametrize("dt", FLOATS + INTS)
def test_argmax_argmin(dt):
    rng = np.random.default_rng(14)
    # few distinct values: many ties, so "first index" matters
    x = rng.integers(0, 4, size=(4, 5, 6)).astype(np.float32 if dt == "bf16" else NPT[dt])
    t = torch.from_numpy(x)
    for axis in (None, 0, 1, 2, -1):
        for keepdim in (0, 1):
            kw = {"keepdim": keepdim}
            if axis is not None:
                kw["axis"] = axis
            for op, fn in (("argmax", torch.argmax), ("argmin", torch.argmin)):
                y = run_op(op, [x], dtype=dt, **kw)
                want = fn(t, dim=axis, keepdim=bool(keepdim)).numpy()
                assert y.dtype == np.int64
                np.testing.assert_array_equal(y, want)
                if axis is not None:  # torch documents first-occurrence; check it directly
                    ext = (np.max if op == "argmax" else np.min)(x, axis=axis, keepdims=True)
                    first = np.argmax(x == ext, axis=axis)
                    np.testing.assert_array_equal(y.reshape(first.shape), first)


def test_argmax_nan_is_extreme():
    x = np.array([[1, np.nan, 5, np.nan], [3, 2, 9, 9], [-np.inf, -np.inf, 0, np.nan]], np.float32)
    t = torch.from_numpy(x)
    for axis in (0, 1, None):
        kw = {} if axis is None else {"axis": axis}
        np.testing.assert_array_equal(run_op("argmax", [x], **kw), torch.argmax(t, dim=axis).numpy())
        np.testing.assert_array_equal(run_op("argmin", [x], **kw), torch.argmin(t, dim=axis).numpy())
    assert int(run_op("argmax", [x])) == 1


# ---- var, cumsum -------------------------------------------------------------------------

@pytest.mark.parametrize("dt", FLOATS)
def test_var(dt):
    rng = np.random.default_rng(15)
    x = fdata((4, 5, 6), dt, rng, scale=2.0, offset=3.0)
    x64 = torch.from_numpy(x.astype(np.float64))
    for axes in AXES:
        ax = norm_axes(axes, 3)
        k = int(np.prod([x.shape[a] for a in ax]))
        for corr in (0, 1, 2):
            kw = attrs_axes(axes, 1)
            if corr != 1:
                kw["correction"] = corr
            y = run_op("var", [x], dtype=dt, **kw)
            want = x64.var(dim=ax, correction=corr, keepdim=True).numpy()
            rel, ab = contract("var", dt, k)
            scale = (x64 ** 2).sum(dim=ax, keepdim=True).numpy() / max(1, k - corr)
            within(y, want, rel, ab, scale)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_var_small_counts_like_torch():
    x = np.array([[1.0, 2.0], [3.0, 3.0]], np.float64)
    for corr in (0, 1, 2, 3):
        y = run_op("var", [x], axes=[1], correction=corr)
        want = torch.from_numpy(x).var(dim=1, correction=corr).numpy()
        np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
        np.testing.assert_allclose(y[~np.isnan(y)], want[~np.isnan(want)])


@pytest.mark.parametrize("dt", FLOATS)
def test_cumsum_float(dt):
    rng = np.random.default_rng(16)
    x = fdata((3, 7, 5), dt, rng)
    x64 = x.astype(np.float64)
    for axis in (0, 1, 2, -1, -3):
        y = run_op("cumsum", [x], dtype=dt, axis=axis)
        assert y.dtype == NPT[dt]
        rel, ab = contract("cumsum", dt, x.shape[axis])
        within(y, np.cumsum(x64, axis=axis), rel, ab, np.cumsum(np.abs(x64), axis=axis))


# ---- softmax / log_softmax ----------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", FLOATS)
def test_softmax_log_softmax(dt, backend):
    rng = np.random.default_rng(17)
    for shape, offset in (((3, 4, 37), 0.0), ((2, 5, 64), 1e3), ((6, 1), 0.0)):
        x = fdata(shape, dt, rng, scale=4.0, offset=offset)
        x64 = torch.from_numpy(x.astype(np.float64))
        for axis in (None, 0, 1, -1):
            if axis is not None and axis >= x.ndim:
                continue
            kw = {} if axis is None else {"axis": axis}
            dim = -1 if axis is None else axis
            k = x.shape[dim]
            rel, ab = contract("softmax", dt, k)
            y = run_op("softmax", [x], dtype=dt, backend=backend, **kw)
            want = torch.softmax(x64, dim=dim).numpy()
            within(y, want, rel, ab, np.abs(want))
            y = run_op("log_softmax", [x], dtype=dt, backend=backend, **kw)
            want = torch.log_softmax(x64, dim=dim).numpy()
            rel, ab = contract("log_softmax", dt, k)
            within(y, want, rel, ab, np.abs(want))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_softmax_special_values(dt, backend):
    x = np.array([[0, -np.inf, 1, 2, -np.inf, 3, 4, 5, 6, 7],
                  [np.nan, 1, 2, 3, 4, 5, 6, 7, 8, 9],
                  [np.inf, 1, 2, 3, 4, 5, 6, 7, 8, 9],
                  [-np.inf] * 10,
                  [-1e30, 0, 1e30, 0, 0, 0, 0, 0, 0, -200]], NPT[dt])
    t = torch.from_numpy(x.astype(np.float64))
    for op, fn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        y = run_op(op, [x], backend=backend)
        want = fn(t, dim=-1).numpy()
        rel, ab = contract(op, dt, 10)
        within(y, want, rel, ab, np.abs(np.where(np.isfinite(want), want, 0)))


# ---- normalization ---------------------------------------------------------------------------

@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("training", [0, 1])
def test_batch_norm(dt, training):
    rng = np.random.default_rng(18)
    for shape in ((6, 3), (4, 3, 5), (2, 3, 4, 5)):
        c = shape[1]
        x = fdata(shape, dt, rng, scale=2.0, offset=1.0)
        w, b = fdata((c,), dt, rng), fdata((c,), dt, rng)
        rm, rv = fdata((c,), dt, rng), np.abs(fdata((c,), dt, rng)) + np.float32(0.5)
        rv = (bf16_round(rv) if dt == "bf16" else rv).astype(NPT[dt])
        ts = [torch.from_numpy(np.asarray(a, np.float64)) for a in (x, w, b, rm, rv)]
        eps = 1e-3
        y = run_op("batch_norm", [x, w, b, rm, rv], dtype=dt, training=training, eps=eps,
                   momentum=0.3)
        want = F.batch_norm(ts[0], ts[3].clone(), ts[4].clone(), ts[1], ts[2], training=bool(training),
                            momentum=0.3, eps=eps).numpy()
        k = x.size // c
        rel, ab = contract("batch_norm", dt, k)
        red = tuple(d for d in range(x.ndim) if d != 1)
        bshape = [1, c] + [1] * (x.ndim - 2)
        if training:
            var = ts[0].var(dim=red, correction=0, keepdim=True).numpy()
        else:
            var = rv.astype(np.float64).reshape(bshape)
        rstd = 1 / np.sqrt(var + eps)
        scale = ((np.abs(x.astype(np.float64)) + np.abs(x.astype(np.float64)).mean(axis=red, keepdims=True)
                  + np.abs(rm.astype(np.float64)).reshape(bshape)) * rstd
                 * np.abs(w.astype(np.float64)).reshape(bshape) + np.abs(b.astype(np.float64)).reshape(bshape))
        within(y, want, rel, ab, scale)
    # defaults: eval mode, eps 1e-5
    x = fdata((4, 2), "f64", rng)
    ones, zeros = np.ones(2), np.zeros(2)
    y = run_op("batch_norm", [x, ones, zeros, zeros, ones])
    np.testing.assert_allclose(y, x / np.sqrt(1 + 1e-5), rtol=1e-15)


def test_batch_norm_errors():
    x = np.zeros((2, 3, 4), np.float32)
    c = np.zeros(3, np.float32)
    err("GOBLIN_EINVAL", run_op, "batch_norm", [x, c, c, c])
    err("GOBLIN_ESHAPE", run_op, "batch_norm", [x, c, c, c, np.zeros(4, np.float32)])
    err("GOBLIN_EDTYPE", run_op, "batch_norm", [x, (c.astype(np.float64), "f64"), c, c, c])
    err("GOBLIN_ESHAPE", run_op, "batch_norm", [np.zeros(3, np.float32), c, c, c, c])
    err("GOBLIN_ERANGE", run_op, "batch_norm", [x, c, c, c, c], training=2)
    err("GOBLIN_ERANGE", run_op, "batch_norm", [x, c, c, c, c], eps=-1.0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", FLOATS)
def test_layer_norm_rms_norm(dt, backend):
    rng = np.random.default_rng(19)
    x = fdata((3, 4, 40), dt, rng, scale=3.0, offset=2.0)
    x64 = torch.from_numpy(x.astype(np.float64))
    for nd in (1, 2, 3):
        ns = x.shape[x.ndim - nd:]
        k = int(np.prod(ns))
        w, b = fdata(ns, dt, rng), fdata(ns, dt, rng)
        w64, b64 = torch.from_numpy(w.astype(np.float64)), torch.from_numpy(b.astype(np.float64))
        red = tuple(range(x.ndim - nd, x.ndim))
        ax = np.abs(x.astype(np.float64))
        var = x64.var(dim=red, correction=0, keepdim=True).numpy()
        rel, ab = contract("layer_norm", dt, k)
        for ins, tw, tb in (([x], None, None), ([x, w], w64, None), ([x, w, b], w64, b64)):
            y = run_op("layer_norm", ins, dtype=dt, backend=backend, norm_ndim=nd, eps=1e-4)
            want = F.layer_norm(x64, ns, tw, tb, eps=1e-4).numpy()
            aw = np.abs(w.astype(np.float64)) if tw is not None else 1.0
            abb = np.abs(b.astype(np.float64)) if tb is not None else 0.0
            scale = (ax + ax.mean(axis=red, keepdims=True)) / np.sqrt(var + 1e-4) * aw + abb
            within(y, want, rel, ab, scale)
        ms = (x64 ** 2).mean(dim=red, keepdim=True).numpy()
        for ins, tw in (([x], None), ([x, w], w64)):
            y = run_op("rms_norm", ins, dtype=dt, backend=backend, norm_ndim=nd, eps=1e-5)
            want = F.rms_norm(x64, ns, tw, eps=1e-5).numpy()
            aw = np.abs(w.astype(np.float64)) if tw is not None else 1.0
            within(y, want, rel, ab, ax / np.sqrt(ms + 1e-5) * aw)
    # default eps: 1e-5 for layer_norm, 1e-6 for rms_norm
    x = np.array([[1.0, 1.0, 1.0, 1.0]])
    np.testing.assert_allclose(run_op("rms_norm", [x]), x / np.sqrt(1 + 1e-6), rtol=1e-15)
    x = np.array([[0.0, 2.0]])
    np.testing.assert_allclose(run_op("layer_norm", [x]), [[-1 / np.sqrt(1 + 1e-5), 1 / np.sqrt(1 + 1e-5)]],
                               rtol=1e-15)


def test_norm_errors():
    x = np.zeros((2, 3, 4), np.float32)
    err("GOBLIN_ERANGE", run_op, "layer_norm", [x], norm_ndim=4)
    err("GOBLIN_ERANGE", run_op, "rms_norm", [x], norm_ndim=0)
    err("GOBLIN_ESHAPE", run_op, "layer_norm", [x, np.zeros(3, np.float32)])
    err("GOBLIN_ESHAPE", run_op, "layer_norm", [x, np.zeros(4, np.float32), np.zeros(3, np.float32)],
        )
    err("GOBLIN_EDTYPE", run_op, "rms_norm", [x, (np.zeros(4), "f64")])
    err("GOBLIN_EINVAL", run_op, "rms_norm", [x, np.zeros(4, np.float32), np.zeros(4, np.float32)])
    err("GOBLIN_EDTYPE", run_op, "layer_norm", [np.zeros((2, 3), np.int32)])


# ---- losses -----------------------------------------------------------------------------------

RED = {"none": 0, "mean": 1, "sum": 2}


def loss_case(rng, dt, shape, tdt, ignore):
    c = shape[1] if len(shape) > 1 else shape[0]
    logits = fdata(shape, dt, rng, scale=2.0)
    tshape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
    target = rng.integers(0, c, size=tshape).astype(np.int64 if tdt == "i64" else np.int32)
    if target.ndim and target.size > 1:
        target.flat[1] = ignore
    w = np.abs(fdata((c,), dt, rng)) + (0.25 if dt != "bf16" else 0.25)
    w = (bf16_round(w) if dt == "bf16" else w).astype(NPT[dt])
    return logits, target, w


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2, 3), (6,)])
def test_nll_loss_and_cross_entropy(dt, shape):
    rng = np.random.default_rng(20)
    for tdt in ("i64", "i32"):
        for ignore in (-100, 1):
            logits, target, w = loss_case(rng, dt, shape, tdt, ignore)
            x64 = torch.from_numpy(logits.astype(np.float64))
            lp64 = torch.log_softmax(x64, dim=0 if len(shape) == 1 else 1)
            lp = lp64.numpy().astype(NPT[dt])
            if dt == "bf16":
                lp = bf16_round(lp)
            tt = torch.from_numpy(target.astype(np.int64))
            w64 = torch.from_numpy(w.astype(np.float64))
            n_t = max(1, target.size)
            c = shape[1] if len(shape) > 1 else shape[0]
            for red in ("none", "mean", "sum"):
                for weighted in (False, True):
                    ins = [(lp, dt), (target, tdt)] + ([(w, dt)] if weighted else [])
                    y = run_op("nll_loss", ins, reduction=RED[red], ignore_index=ignore)
                    want = F.nll_loss(torch.from_numpy(lp.astype(np.float64)), tt,
                                      weight=w64 if weighted else None, reduction=red,
                                      ignore_index=ignore).numpy()
                    rel, ab = contract("nll_loss", dt, c + n_t)
                    scale = np.abs(want) if red == "none" else np.abs(want) + 1
                    within(y, want, rel, ab, scale)
                    for ls in (0.0, 0.1, 1.0):
                        ins = [(logits, dt), (target, tdt)] + ([(w, dt)] if weighted else [])
                        kw = {"reduction": RED[red], "ignore_index": ignore}
                        if ls:
                            kw["label_smoothing"] = ls
                        y = run_op("cross_entropy", ins, **kw)
                        want = F.cross_entropy(x64, tt, weight=w64 if weighted else None,
                                               reduction=red, ignore_index=ignore,
                                               label_smoothing=ls).numpy()
                        rel, ab = contract("cross_entropy", dt, c + n_t)
                        # terms are |w * log p| with log p up to ~|logits| + log C
                        scale = np.abs(want) + np.abs(logits.astype(np.float64)).max() + np.log(c) + 1
                        within(y, want, rel, ab, scale)


def test_loss_all_ignored_and_defaults():
    lp = np.log(np.full((2, 3), 1 / 3, np.float64))
    t = np.array([-100, -100], np.int64)
    assert np.isnan(run_op("nll_loss", [lp, t]))  # mean over no targets
    assert float(run_op("nll_loss", [lp, t], reduction=2)) == 0.0
    np.testing.assert_array_equal(run_op("nll_loss", [lp, t], reduction=0), [0.0, 0.0])
    # default reduction is mean, default ignore_index -100
    t = np.array([0, 2], np.int64)
    np.testing.assert_allclose(run_op("nll_loss", [lp, t]), np.log(3), rtol=1e-15)
    np.testing.assert_allclose(run_op("cross_entropy", [np.zeros((2, 3)), t]), np.log(3), rtol=1e-15)


def test_loss_errors():
    lp = np.zeros((2, 3), np.float32)
    m = err("GOBLIN_EINDEX", run_op, "nll_loss", [lp, np.array([0, 3], np.int64)])
    assert "target 3" in m
    err("GOBLIN_EINDEX", run_op, "nll_loss", [lp, np.array([-1, 0], np.int64)])
    err("GOBLIN_EINDEX", run_op, "cross_entropy", [lp, np.array([0, 7], np.int32)])
    # a target equal to ignore_index may be anything, even out of range
    assert float(run_op("nll_loss", [lp, np.array([0, 7], np.int64)], ignore_index=7,
                        reduction=2)) == 0.0
    err("GOBLIN_EDTYPE", run_op, "nll_loss", [lp, np.array([0, 1], np.float32)])
    err("GOBLIN_EDTYPE", run_op, "nll_loss", [np.zeros((2, 3), np.int64), np.array([0, 1])])
    err("GOBLIN_ESHAPE", run_op, "nll_loss", [lp, np.array([0, 1, 2], np.int64)])
    err("GOBLIN_ESHAPE", run_op, "nll_loss", [lp, np.array([0, 1], np.int64), np.ones(2, np.float32)])
    err("GOBLIN_EDTYPE", run_op, "nll_loss", [lp, np.array([0, 1], np.int64), np.ones(3)])
    err("GOBLIN_ERANGE", run_op, "nll_loss", [lp, np.array([0, 1], np.int64)], reduction=3)
    err("GOBLIN_ERANGE", run_op, "cross_entropy", [lp, np.array([0, 1], np.int64)],
        label_smoothing=1.5)
    err("GOBLIN_ESHAPE", run_op, "cross_entropy", [np.float32(1), np.int64(0)])


# ---- non-contiguous inputs, BLIS vs REF, thread-count determinism ----------------------------

def test_noncontiguous_inputs():
    rng = np.random.default_rng(21)
    base = rng.standard_normal((6, 8)).astype(np.float32)
    v = base.T[::2]  # (4, 6), strided
    assert not v.flags.c_contiguous
    x64 = v.astype(np.float64)
    for be in BACKENDS:
        rel, ab = contract("sum", "f32", 6)
        within(run_op("sum", [v], axes=[1], backend=be), x64.sum(1), rel, ab, np.abs(x64).sum(1))
        y = run_op("softmax", [v], backend=be)
        rel, ab = contract("softmax", "f32", 6)
        want = torch.softmax(torch.from_numpy(x64), -1).numpy()
        within(y, want, rel, ab, want)
        np.testing.assert_array_equal(run_op("argmax", [v], axis=1, backend=be), np.argmax(v, 1))


@pytest.mark.skipif("blis" not in BACKENDS, reason="BLIS backend not built")
def test_blis_bits_do_not_depend_on_threads():
    rng = np.random.default_rng(22)
    big = rng.standard_normal((3, 70001)).astype(np.float32)  # > one reduction block per row
    cols = rng.standard_normal((5000, 3, 7)).astype(np.float64)  # leading-axis, row-blocked
    cases = [("sum", big, {}), ("sum", big, {"axes": [1]}), ("mean", big, {"axes": [-1]}),
             ("reduce_max", big, {}), ("reduce_min", big, {"axes": [1]}),
             ("sum", cols, {"axes": [0]}), ("mean", cols, {"axes": [0, 1]}),
             ("reduce_max", cols, {"axes": [0]}), ("softmax", big, {}),
             ("log_softmax", big, {}), ("layer_norm", big, {}), ("rms_norm", big, {}),
             ("sum", cols, {"axes": [1]})]
    for op, x, kw in cases:
        outs = [run_op(op, [x], backend="blis", threads=t, **kw) for t in (1, 2, 3)]
        for o in outs[1:]:
            assert o.tobytes() == outs[0].tobytes(), op
        ref = run_op(op, [x], backend="ref", **kw)
        x64 = x.astype(np.float64)
        k = x.size // max(1, ref.size) if op in ("sum", "mean", "reduce_max", "reduce_min") else x.shape[-1]
        rel, ab = contract(op, "f32" if x.dtype == np.float32 else "f64", k)
        if op in ("sum", "mean"):
            ax = tuple(kw.get("axes", range(x.ndim)))
            scale = np.abs(x64).sum(axis=ax) / (k if op == "mean" else 1)
            within(outs[0], ref, rel * 2, ab, scale)
        elif op in ("reduce_max", "reduce_min"):
            np.testing.assert_array_equal(outs[0], ref)
        elif op in ("softmax", "log_softmax"):
            within(outs[0], ref, rel * 2, ab * 2, np.abs(ref))
        else:
            mu = np.abs(x64).mean(-1, keepdims=True)
            sd = np.sqrt(x64.var(-1, keepdims=True) if op == "layer_norm" else (x64 ** 2).mean(-1, keepdims=True))
            within(outs[0], ref, rel * 2, ab, (np.abs(x64) + mu) / sd)


@pytest.mark.skipif("blis" not in BACKENDS, reason="BLIS backend not built")
def test_blis_falls_back_for_other_cases():
    # middle axes of a 4-d tensor (two runs), an int dtype, softmax over axis 0: the reference runs
    rng = np.random.default_rng(23)
    x = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)
    for op, kw in (("sum", {"axes": [0, 2]}), ("reduce_max", {"axes": [1, 3]})):
        np.testing.assert_array_equal(run_op(op, [x], backend="blis", **kw),
                                      run_op(op, [x], backend="ref", **kw))
    # f32 softmax over a non-last axis has its own kernel (blis_softmax.c, vector exp): within
    # its contract of the reference, not its bits
    np.testing.assert_allclose(run_op("softmax", [x], axis=0, backend="blis"),
                               run_op("softmax", [x], axis=0, backend="ref"), rtol=1e-6, atol=1e-7)
    xi = rng.integers(-5, 5, size=(7, 9)).astype(np.int32)
    np.testing.assert_array_equal(run_op("sum", [xi], axes=[1], backend="blis"), xi.sum(1))
