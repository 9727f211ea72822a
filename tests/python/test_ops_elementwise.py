"""The elementwise group against NumPy (libgoblin/ops_elementwise.c, ref_elementwise.c,
blis_elementwise.c).

NumPy is the oracle: its integer ops wrap, x // 0 == x % 0 == 0, its float floor_divide
and remainder use Python's divmod, and its shifts give 0 / sign fill for counts outside
[0, bits). Where NumPy has no such op (trunc_div on ints, shr_logical, integer pow with
negative exponents, clamp on ints) the reference is computed with Python integers.
"""
import math
import warnings

import numpy as np
import pytest

from goblin_ct import GoblinError, backend_available, bf16_to_f32, contract, f32_to_bf16, run_op

BACKENDS = ["ref"] + (["blis"] if backend_available("blis") else [])
FLOATS = ["f32", "f64", "f16", "bf16"]
SINTS = ["i8", "i16", "i32", "i64"]
INTS = SINTS + ["u8"]
ALL = FLOATS + INTS + ["bool"]
NPT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32,
       "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
       "bool": np.bool_}
BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "u8": 8}


def bf16_round(x):
    return bf16_to_f32(f32_to_bf16(np.asarray(x, dtype=np.float32))).reshape(np.shape(x))


def sample(dt, shape, seed, nonzero=False):
    """Test data with the dtype's edge values mixed in."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dt in FLOATS:
        x = (rng.standard_normal(n) * 6).astype(np.float32 if dt != "f64" else np.float64)
        x[::5] = np.round(x[::5])
        edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -7.5, 2.0]
        for i, e in enumerate(edges):
            if i * 7 + 3 < n:
                x[i * 7 + 3] = e
        if nonzero:
            x[x == 0] = 3.0
        if dt == "f16":
            x = x.astype(np.float16)
        elif dt == "bf16":
            x = bf16_round(x)
        return x.reshape(shape)
    if dt == "bool":
        return (rng.random(n) < 0.5).reshape(shape)
    info = np.iinfo(NPT[dt])
    x = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=NPT[dt])
    small = rng.integers(-9 if info.min < 0 else 0, 10, size=n).astype(NPT[dt])
    x[::2] = small[::2]
    edges = [info.min, info.max, 0, 1, info.max - 1] + ([-1, info.min + 1] if info.min < 0 else [])
    for i, e in enumerate(edges):
        if i * 5 + 1 < n:
            x[i * 5 + 1] = e
    if nonzero:
        x[x == 0] = 1
    return x.reshape(shape)


def npy(name, a, b=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = getattr(np, name)
        return f(a) if b is None else f(a, b)


def as_np(x, dt):
    """Inputs as NumPy computes them: bf16 in float32, others as themselves."""
    return np.asarray(x, dtype=np.float32) if dt == "bf16" else np.asarray(x)


def round_out(y, dt):
    if dt == "bf16":
        return bf16_round(y)
    return np.asarray(y).astype(NPT[dt])


def run(op, arrays, dt=None, backend="ref", **attrs):
    if dt == "bf16":
        arrays = [(a, "bf16") if np.asarray(a).dtype == np.float32 else a for a in arrays]
    return run_op(op, arrays, backend=backend, **attrs)


def assert_same(got, want):
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype.kind == "f" or want.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(got.astype(np.float64)),
                                      np.isnan(want.astype(np.float64)))
        m = ~np.isnan(want.astype(np.float64))
        np.testing.assert_array_equal(got[m], want[m])
    else:
        np.testing.assert_array_equal(got, want)


# ---- arithmetic that NumPy defines identically ----------------------------------------

EXACT_BINARY = {
    "add": ("add", FLOATS + INTS),
    "sub": ("subtract", FLOATS + INTS),
    "mul": ("multiply", FLOATS + INTS),
    "div": ("true_divide", FLOATS),
    "maximum": ("maximum", ALL),
    "minimum": ("minimum", ALL),
    "floor_div": ("floor_divide", FLOATS + INTS),
    "rem_floor": ("remainder", FLOATS + INTS),
    "rem_trunc": ("fmod", FLOATS + INTS),
    "eq": ("equal", ALL),
    "ne": ("not_equal", ALL),
    "lt": ("less", ALL),
    "le": ("less_equal", ALL),
    "gt": ("greater", ALL),
    "ge": ("greater_equal", ALL),
    "bitwise_and": ("bitwise_and", INTS + ["bool"]),
    "bitwise_or": ("bitwise_or", INTS + ["bool"]),
    "bitwise_xor": ("bitwise_xor", INTS + ["bool"]),
}
CASES = [(op, dt) for op, (_, dts) in EXACT_BINARY.items() for dt in dts]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op,dt", CASES, ids=[f"{o}-{d}" for o, d in CASES])
def test_binary_matches_numpy(op, dt, backend):
    a = sample(dt, (6, 35), 1)
    b = sample(dt, (6, 35), 2)
    # make a share values with b so that equality and exact division show up
    a[:, ::4] = b[:, ::4]
    got = run(op, [a, b], dt, backend)
    want = npy(EXACT_BINARY[op][0], as_np(a, dt), as_np(b, dt))
    if want.dtype != np.bool_:
        want = round_out(want, dt)
    assert_same(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["f32", "f64", "i32", "i8", "bool"])
def test_broadcasting_and_noncontiguous(dt, backend):
    base = sample(dt, (8, 10), 3)
    a = base[::2, ::-3]                   # strided, reversed: (4, 4)
    b = sample(dt, (1, 4), 4)             # row broadcast
    c = sample(dt, (4, 1), 5)             # column broadcast
    s = sample(dt, (), 6)                 # rank 0
    t = sample(dt, (4, 4), 7).T           # transposed
    for x, y in [(a, b), (c, a), (a, s), (s, t), (t, c), (b, c)]:
        for op, npname in [("maximum", "maximum"), ("eq", "equal"), ("lt", "less")]:
            got = run(op, [x, y], dt, backend)
            want = npy(npname, as_np(x, dt), as_np(y, dt))
            if want.dtype != np.bool_:
                want = round_out(want, dt)
            assert_same(got, want)
        if dt != "bool":
            got = run("add", [x, y], dt, backend)
            assert_same(got, round_out(npy("add", as_np(x, dt), as_np(y, dt)), dt))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty(backend):
    a = np.zeros((0, 3), np.float32)
    b = np.ones((3,), np.float32)
    assert run_op("add", [a, b], backend=backend).shape == (0, 3)
    assert run_op("ge", [a, b], backend=backend).shape == (0, 3)
    assert run_op("where", [np.ones((0, 1), bool), a, b], backend=backend).shape == (0, 3)


# ---- integer semantics --------------------------------------------------------------------

def wrap(v, dt):
    bits = BITS[dt]
    v &= (1 << bits) - 1
    if dt != "u8" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


@pytest.mark.parametrize("dt", SINTS)
def test_floor_vs_trunc_on_negatives(dt):
    a = np.array([-7, 7, -7, 7, -1, 1, 0, -6, 5], NPT[dt])
    b = np.array([2, -2, -2, 2, 3, -3, 5, 3, 0], NPT[dt])
    assert_same(run_op("floor_div", [a, b]), np.array([-4, -4, 3, 3, -1, -1, 0, -2, 0], NPT[dt]))
    assert_same(run_op("trunc_div", [a, b]), np.array([-3, -3, 3, 3, 0, 0, 0, -2, 0], NPT[dt]))
    assert_same(run_op("rem_floor", [a, b]), np.array([1, -1, -1, 1, 2, -2, 0, 0, 0], NPT[dt]))
    assert_same(run_op("rem_trunc", [a, b]), np.array([-1, 1, -1, 1, -1, 1, 0, 0, 0], NPT[dt]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", INTS)
def test_trunc_div_against_python_ints(dt, backend):
    a = sample(dt, (300,), 8)
    b = sample(dt, (300,), 9)
    b[::7] = 0
    got = run_op("trunc_div", [a, b], backend=backend)
    want = []
    for x, y in zip(a.tolist(), b.tolist()):
        if y == 0:
            want.append(0)
        else:
            q = abs(x) // abs(y)
            want.append(wrap(q if (x < 0) == (y < 0) else -q, dt))
    assert_same(got, np.array(want, NPT[dt]))


@pytest.mark.parametrize("dt", INTS)
def test_overflow_wraps_like_numpy(dt):
    info = np.iinfo(NPT[dt])
    a = np.array([info.max, info.min, info.max, info.min], NPT[dt])
    b = np.array([1, 1, 2, info.max], NPT[dt])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same(run_op("add", [a, b]), a + b)
        assert_same(run_op("sub", [a, b]), a - b)
        assert_same(run_op("mul", [a, b]), a * b)
    if info.min < 0:
        m = np.array([info.min], NPT[dt])
        n1 = np.array([-1], NPT[dt])
        assert_same(run_op("floor_div", [m, n1]), m)
        assert_same(run_op("trunc_div", [m, n1]), m)
        assert_same(run_op("rem_floor", [m, n1]), np.zeros(1, NPT[dt]))


@pytest.mark.parametrize("dt", INTS)
def test_shifts(dt):
    bits = BITS[dt]
    a = sample(dt, (200,), 10)
    lo = -3 if dt != "u8" else 0
    c = np.random.default_rng(11).integers(lo, bits + 4, size=200).astype(NPT[dt])
    assert_same(run_op("shl", [a, c]), npy("left_shift", a, c))
    assert_same(run_op("shr_arith", [a, c]), npy("right_shift", a, c))
    ua = a.view(np.dtype(f"u{a.itemsize}"))
    want = np.array([(int(x) >> int(k)) if 0 <= k < bits else 0 for x, k in zip(ua, c.tolist())],
                    dtype=ua.dtype).view(NPT[dt])
    assert_same(run_op("shr_logical", [a, c]), want)
    assert_same(run_op("bitwise_not", [a]), np.invert(a))


@pytest.mark.parametrize("dt", INTS)
def test_integer_pow(dt):
    a = sample(dt, (200,), 12)
    e = np.random.default_rng(13).integers(0 if dt == "u8" else -3, 70, size=200).astype(NPT[dt])
    a[:6] = np.array([1, 1, 0, 0, 2, 3], NPT[dt])
    if dt != "u8":
        a[6:10] = np.array([-1, -1, -1, -2], NPT[dt])
        e[:10] = np.array([-1, 5, 0, -2, -1, 2, -1, -2, 3, 5], NPT[dt])
    want = []
    for x, k in zip(a.tolist(), e.tolist()):
        if k < 0:
            want.append(1 if x == 1 else (-1 if k % 2 else 1) if x == -1 else 0)
        else:
            want.append(wrap(pow(x, k, 1 << 64), dt))
    assert_same(run_op("pow", [a, e]), np.array(want, NPT[dt]))
    nonneg = e >= 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(run_op("pow", [a, e])[nonneg], np.power(a[nonneg], e[nonneg]))


def test_bool_arithmetic():
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    assert_same(run_op("add", [a, b]), a | b)
    assert_same(run_op("mul", [a, b]), a & b)
    with pytest.raises(GoblinError) as ei:
        run_op("sub", [a, b])
    assert ei.value.name == "GOBLIN_EDTYPE"


# ---- floats -----------------------------------------------------------------------------

def test_float_floor_div_is_pythons_divmod():
    a = np.array([1.0, -7.5, 7.5, 5.0, -5.0, 0.0, -0.0, 3.0], np.float64)
    b = np.array([0.1, 2.0, -2.0, np.inf, np.inf, 3.0, 3.0, 0.0], np.float64)
    got = run_op("floor_div", [a, b])
    for x, y, g in zip(a, b, got):
        if y == 0:
            assert g == np.inf
        else:
            q = x // y  # Python's float floor division
            assert g == q and math.copysign(1, g) == math.copysign(1, q), (x, y, g, q)
    got = run_op("rem_floor", [a, b])
    for x, y, g in zip(a, b, got):
        if y == 0:
            assert np.isnan(g)
        else:
            r = x % y
            assert g == r and math.copysign(1, g) == math.copysign(1, r), (x, y, g, r)


@pytest.mark.parametrize("dt", FLOATS)
def test_trunc_div_floats(dt):
    a = sample(dt, (100,), 14)
    b = sample(dt, (100,), 15)
    # trunc of the quotient as computed in the working precision (f32 for the half types)
    want = round_out(np.trunc(npy("true_divide", as_np(a, dt), as_np(b, dt))), dt)
    assert_same(run("trunc_div", [a, b], dt), want)


@pytest.mark.parametrize("op,npname", [("pow", "power"), ("atan2", "arctan2")])
@pytest.mark.parametrize("dt", FLOATS)
def test_pow_atan2_within_contract(op, npname, dt):
    a = np.abs(sample(dt, (200,), 16)) if op == "pow" else sample(dt, (200,), 16)
    b = sample(dt, (200,), 17)
    if op == "pow":
        b = (b / 4).astype(a.dtype)
        if dt == "bf16":
            b = bf16_round(b)
    got = run(op, [a, b], dt).astype(np.float64)
    want = npy(npname, as_np(a, dt).astype(np.float64), as_np(b, dt).astype(np.float64))
    rel, ab = contract(op, dt)
    fin = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    big = {"f16": 65504, "bf16": 3.3e38, "f32": 3.4e38, "f64": 1.7e308}[dt]
    ok = fin & (np.abs(want) < big)
    assert np.all(np.abs(got[ok] - want[ok]) <= ab + rel * np.abs(want[ok]))


@pytest.mark.parametrize("dt", FLOATS)
def test_isnan_and_logical(dt):
    a = sample(dt, (50,), 18)
    assert_same(run("isnan", [a], dt), np.isnan(as_np(a, dt)))
    assert_same(run("logical_not", [a], dt), np.logical_not(as_np(a, dt)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dta,dtb", [("f32", "i32"), ("bool", "f64"), ("u8", "i64"), ("f16", "f16")])
def test_logical_mixed_dtypes(dta, dtb, backend):
    a = sample(dta, (4, 9), 19)
    b = sample(dtb, (9,), 20)
    for op in ["logical_and", "logical_or", "logical_xor"]:
        got = run_op(op, [(a, dta), (b, dtb)], backend=backend)
        assert got.dtype == np.bool_
        assert_same(got, npy(op, a, b))


# ---- where and clamp ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ALL)
def test_where(dt, backend):
    c = sample("bool", (3, 1, 5), 21)
    a = sample(dt, (4, 5), 22)
    b = sample(dt, (1, 4, 1), 23)
    got = run("where", [c, a, b], dt, backend)
    assert_same(got, round_out(np.where(c, as_np(a, dt), as_np(b, dt)), dt))
    # same shapes, strided a, scalar b (the BLIS fast path's shapes, plus a fallback)
    c2 = sample("bool", (6, 8), 24)
    a2 = sample(dt, (6, 16), 25)[:, ::2]
    b2 = sample(dt, (), 26)
    got = run("where", [c2, a2, b2], dt, backend)
    assert_same(got, round_out(np.where(c2, as_np(a2, dt), as_np(b2, dt)), dt))


@pytest.mark.parametrize("dt", FLOATS)
def test_clamp_floats(dt):
    x = sample(dt, (100,), 27)
    for lo, hi in [(-1.5, 2.25), (None, 0.0), (-3.0, None), (2.0, 2.0)]:
        attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        got = run("clamp", [x], dt, **attrs)
        want = as_np(x, dt)
        if lo is not None:
            want = np.where(np.isnan(want), want, np.maximum(want, lo))
        if hi is not None:
            want = np.where(np.isnan(want), want, np.minimum(want, hi))
        assert_same(got, round_out(want, dt))


@pytest.mark.parametrize("dt", INTS)
def test_clamp_ints(dt):
    info = np.iinfo(NPT[dt])
    x = sample(dt, (100,), 28)
    for lo, hi in [(-2.5, 7.5), (None, 3.9), (-1e30, None), (0.2, 0.8), (-1e300, 1e300)]:
        attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        got = run_op("clamp", [x], **attrs)
        ilo = info.min if lo is None else max(info.min, min(info.max, math.ceil(lo)))
        ihi = info.max if hi is None else max(info.min, min(info.max, math.floor(hi)))
        want = [min(max(v, ilo), ihi) for v in x.tolist()]
        assert_same(got, np.array(want, NPT[dt]))


def test_clamp_errors():
    x = np.zeros(3, np.float32)
    for attrs, code in [({}, "GOBLIN_EINVAL"), ({"min": 2.0, "max": 1.0}, "GOBLIN_ERANGE"),
                        ({"min": float("nan")}, "GOBLIN_ERANGE")]:
        with pytest.raises(GoblinError) as ei:
            run_op("clamp", [x], **attrs)
        assert ei.value.name == code


# ---- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("op,arrays,code", [
    ("div", [np.ones(2, np.int32)] * 2, "GOBLIN_EDTYPE"),
    ("add", [np.ones(2, np.float32), np.ones(2, np.float64)], "GOBLIN_EDTYPE"),
    ("add", [np.ones((2, 3), np.float32), np.ones(4, np.float32)], "GOBLIN_ESHAPE"),
    ("shl", [np.ones(2, np.float32)] * 2, "GOBLIN_EDTYPE"),
    ("bitwise_and", [np.ones(2, np.float64)] * 2, "GOBLIN_EDTYPE"),
    ("atan2", [np.ones(2, np.int64)] * 2, "GOBLIN_EDTYPE"),
    ("where", [np.ones(2, np.int32), np.ones(2, np.float32), np.ones(2, np.float32)],
     "GOBLIN_EDTYPE"),
])
def test_errors(op, arrays, code):
    with pytest.raises(GoblinError) as ei:
        run_op(op, arrays)
    assert ei.value.name == code
    if op == "div":
        assert "floor_div" in str(ei.value)


# ---- BLIS against REF, bit for bit -----------------------------------------------------------

@pytest.mark.skipif("blis" not in BACKENDS, reason="BLIS backend not built")
@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum",
                                "eq", "ne", "lt", "le", "gt", "ge"])
def test_blis_equals_ref(op, dt):
    a = sample(dt, (70, 1000), 29)   # 70000 elements: two 64K blocks
    b = sample(dt, (70, 1000), 30)
    for x, y in [(a, b), (a, b[3, 5]), (b[0], a), (a, b[:, :1]), (a[:, ::-1], b)]:
        r = run_op(op, [x, y], backend="ref")
        for threads in (1, 3):
            g = run_op(op, [x, y], backend="blis", threads=threads)
            assert r.tobytes() == g.tobytes(), (op, dt, x.shape, y.shape, threads)
