"""FORMULA against NumPy evaluating the same expression (libgoblin/formula.c, ops_formula.c,
formula_eval.c, ref_formula.c, blis_formula.c).

NumPy is the oracle: it computes each operation in the arrays' dtype (rounding or wrapping
after every operation, as FORMULA does), its // and % follow Python's divmod on floats and
floor on integers with x // 0 == x % 0 == 0, and np.maximum / np.minimum propagate NaN.
Integer literals are wrapped into the dtype explicitly on the NumPy side (FORMULA's
documented rule; NumPy 2 refuses out-of-range Python ints). Float results that go through
transcendental functions are compared within a few ulps of the terms' magnitudes (NumPy has
its own exp/log/tanh); everything else must match bit for bit.
"""
import numpy as np
import pytest

from goblin_ct import GoblinError, Graph, backend_available, bf16_to_f32, contract, f32_to_bf16

BACKENDS = ["ref"] + (["blis"] if backend_available("blis") else [])
NPT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8,
       "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8}


def run_formula(text, arrays, dtype, backend="ref", threads=2):
    """Bind arrays (a dict name -> array, in any order) and evaluate."""
    g = Graph()
    ids = {name: g.input(dtype, np.shape(a)) for name, a in arrays.items()}
    order = list(arrays)
    out = g.formula(text, **ids)
    g.output(out)
    return g.run([arrays[n] for n in order], backend=backend, threads=threads)[0]


def wrap(v, dt):
    """A Python int wrapped into an integer dtype, like a C / NumPy cast."""
    return np.array(v, dtype=np.int64).astype(NPT[dt])


def assert_same(got, want, signed_zero=True):
    """Equal values, NaN where NaN, dtype and shape checked; with signed_zero the sign of
    zeros too (so floats are equal bit for bit up to NaN payloads)."""
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if np.issubdtype(got.dtype, np.floating):
        both_nan = np.isnan(got) & np.isnan(want)
        bad = ~both_nan & (got != want)
        if signed_zero:
            bad |= ~both_nan & (np.signbit(got) != np.signbit(want))
    else:
        bad = got != want
    idx = np.argwhere(bad)
    assert idx.size == 0, f"{idx.shape[0]} elements differ, first at {tuple(idx[0])}: " \
        f"{got[tuple(idx[0])]!r} vs {want[tuple(idx[0])]!r}"


def assert_close(got, want, scale, ulps, dt):
    """|got - want| <= ulps * u * scale elementwise; NaN and inf positions must agree."""
    u = {"f32": 2.0**-24, "f64": 2.0**-53}[dt]
    got64, want64 = got.astype(np.float64), np.asarray(want, dtype=np.float64)
    assert np.array_equal(np.isnan(got64), np.isnan(want64))
    fin = np.isfinite(want64)
    assert np.array_equal(got64[~fin & ~np.isnan(want64)], want64[~fin & ~np.isnan(want64)])
    err = np.abs(got64[fin] - want64[fin])
    lim = ulps * u * np.asarray(scale, dtype=np.float64)[fin]
    worst = np.argmax(err - lim) if err.size else 0
    assert np.all(err <= lim), f"error {err[worst]:.3g} > {lim[worst]:.3g} " \
        f"(got {got64[fin][worst]!r}, want {want64[fin][worst]!r})"


def floats(dt, shape, seed, lo=-10.0, hi=10.0, specials=False):
    rng = np.random.default_rng(seed)
    x = rng.uniform(lo, hi, size=shape).astype(NPT[dt])
    if specials:
        flat = x.reshape(-1)
        vals = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.5, -3.5, 0.5]
        for i, v in enumerate(vals):
            if i * 3 < flat.size:
                flat[i * 3] = v
    return x


def ints(dt, shape, seed, small=False):
    rng = np.random.default_rng(seed)
    info = np.iinfo(NPT[dt])
    if small:
        return rng.integers(-20 if info.min < 0 else 0, 21, size=shape).astype(NPT[dt])
    x = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=NPT[dt])
    flat = x.reshape(-1)
    edges = [info.min, info.max, 0, 1, -1 if info.min < 0 else 2, 7, -7 if info.min < 0 else 9]
    for i, e in enumerate(edges):
        if i * 4 < flat.size:
            flat[i * 4] = e
    return x


# ---- float formulas -------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_decay_curve_with_scalar_parameters(backend, dt):
    T = NPT[dt]
    x = floats(dt, (3001,), 1)
    a, b, c = T(1.5), T(0.75), T(-0.25)
    got = run_formula("a * exp(-b * x) + c", {"a": a, "b": b, "c": c, "x": x}, dt, backend)
    t = a * np.exp(-b * x)
    want = t + c
    # -b*x rounds (relative u), which exp turns into |b x| u; exp itself and the two ops ~ 3u
    assert_close(got, want, (np.abs(b * x) + 4) * (np.abs(t) + abs(c)), 2, dt)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_exact_float_ops_broadcast_bit_for_bit(backend, dt):
    T = NPT[dt]
    x = floats(dt, (4, 1, 37), 2, specials=True)
    y = floats(dt, (5, 1), 3, specials=True)
    z = floats(dt, (), 4)
    text = "where(x > y, x - y, (y - x) * 0.5) + min(x, y) * max(x, z) - abs(y) / 3"
    got = run_formula(text, {"x": x, "y": y, "z": z}, dt, backend)
    with np.errstate(all="ignore"):
        want = (np.where(x > y, x - y, (y - x) * T(0.5)) + np.minimum(x, y) * np.maximum(x, z)
                - np.abs(y) / T(3))
    assert got.shape == (4, 5, 37)
    # min/max of -0 and +0 return the first operand (scalar_ops.h, as PyTorch); NumPy's
    # f32/f64 loops return the second, so zeros are compared by value here
    assert_same(got, want.astype(T), signed_zero=False)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_floor_division_and_modulo_on_negative_floats(backend, dt):
    T = NPT[dt]
    x = floats(dt, (600,), 5, -20, 20, specials=True)
    y = floats(dt, (600,), 6, -5, 5, specials=True)
    y[::7] = np.round(y[::7])  # exact divisors, zero remainders (signed zeros) and y == 0
    y[1::11] = 0
    for text, fn in [("x // y", np.floor_divide), ("x % y", np.remainder)]:
        got = run_formula(text, {"x": x, "y": y}, dt, backend)
        with np.errstate(all="ignore"):
            assert_same(got, fn(x, y))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_comparisons_logic_rounding_and_nan(backend, dt):
    T = NPT[dt]
    x = floats(dt, (500,), 7, specials=True)
    y = floats(dt, (500,), 8, specials=True)
    y[::3] = x[::3]
    text = ("(x < y) + (x <= y) * 2 + (x == y) * 4 + (x != y) * 8 + (x > y) * 16 + (x >= y) * 32"
            " + (not x) * 64 + (x and y) * 128 + (x or y) * 256")
    got = run_formula(text, {"x": x, "y": y}, dt, backend)
    want = ((x < y) * 1 + (x <= y) * 2 + (x == y) * 4 + (x != y) * 8 + (x > y) * 16
            + (x >= y) * 32 + np.logical_not(x) * 64 + np.logical_and(x, y) * 128
            + np.logical_or(x, y) * 256).astype(T)
    assert_same(got, want)
    got = run_formula("round(x) + floor(y) * 2 - ceil(x) + trunc(y) + relu(x)", {"x": x, "y": y},
                      dt, backend)
    with np.errstate(all="ignore"):
        want = np.round(x) + np.floor(y) * T(2) - np.ceil(x) + np.trunc(y) + np.maximum(x, T(0))
    assert_same(got, want.astype(T))
    got = run_formula("clamp(x, -y, y) + where(y, x, -x)", {"x": x, "y": y}, dt, backend)
    with np.errstate(all="ignore"):
        want = np.minimum(np.maximum(x, -y), y) + np.where(y != 0, x, -x)
    assert_same(got, want.astype(T), signed_zero=False)  # min/max of +-0: see above


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_transcendental_functions(backend, dt):
    T = NPT[dt]
    x = floats(dt, (2000,), 9, -6, 6)
    y = floats(dt, (2000,), 10, 0.01, 4)
    text = "sigmoid(x) + tanh(x) * 2 + erf(x) - sqrt(y) + log(y) + sin(x) * cos(x) + rsqrt(y)"
    got = run_formula(text, {"x": x, "y": y}, dt, backend)
    from math import erf
    erfv = np.vectorize(erf)(x.astype(np.float64)).astype(T)
    want = (T(1) / (T(1) + np.exp(-x)) + np.tanh(x) * T(2) + erfv - np.sqrt(y) + np.log(y)
            + np.sin(x) * np.cos(x) + T(1) / np.sqrt(y))
    scale = 2 + np.abs(np.log(y)) + np.sqrt(y) + 1 / np.sqrt(y)
    assert_close(got, want, scale, 16, dt)
    got = run_formula("log1p(y) - expm1(x / 8) + y ** x", {"x": x, "y": y}, dt, backend)
    want = np.log1p(y) - np.expm1(x / T(8)) + y ** x
    assert_close(got, want, 2 + np.abs(np.log1p(y)) + np.abs(y ** x) * (1 + np.abs(x * np.log(y))),
                 8, dt)


@pytest.mark.parametrize("backend", BACKENDS)
def test_exp_special_values(backend):
    x = np.array([0, -0.0, np.inf, -np.inf, np.nan, 88.72283, 88.7229, 89, 100, -87.3, -103.9,
                  -104, -200, 1e-30, -1e-30], dtype=np.float32)
    got = run_formula("exp(x)", {"x": x}, "f32", backend)
    want = np.exp(x.astype(np.float64))
    # inf where (float)exp overflows, 0 where it underflows; within an ulp elsewhere
    with np.errstate(over="ignore"):
        want32 = want.astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want32))
    assert np.array_equal(np.isinf(got), np.isinf(want32))
    fin = np.isfinite(want32)
    ulp = np.spacing(np.abs(want32[fin]))
    assert np.all(np.abs(got[fin].astype(np.float64) - want[fin]) <= 0.98 * ulp)


@pytest.mark.parametrize("backend", BACKENDS)
def test_half_types_compute_in_f32_and_round_once(backend):
    x = floats("f32", (3, 40), 11, -4, 4)
    y = floats("f32", (40,), 12, -2, 2)
    xh, yh = x.astype(np.float16), y.astype(np.float16)
    got = run_formula("x * y + y / 3 - x", {"x": xh, "y": yh}, "f16", backend)
    xf, yf = xh.astype(np.float32), yh.astype(np.float32)
    assert_same(got, (xf * yf + yf / np.float32(3) - xf).astype(np.float16))
    xb, yb = bf16_to_f32(f32_to_bf16(x)).reshape(x.shape), bf16_to_f32(f32_to_bf16(y))
    got = run_formula("x * y + y / 3 - x", {"x": xb, "y": yb}, "bf16", backend)
    want = bf16_to_f32(f32_to_bf16(xb * yb + yb / np.float32(3) - xb)).reshape(x.shape)
    assert_same(got, want)


# ---- integer formulas -----------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["i32", "i64"])
def test_integer_hash(backend, dt):
    i = np.arange(-50000, 50000, 7, dtype=NPT[dt])
    got = run_formula("(i * 2654435761) % 1000003", {"i": i}, dt, backend)
    with np.errstate(all="ignore"):
        want = (i * wrap(2654435761, dt)) % wrap(1000003, dt)
    assert_same(got, want)
    if dt == "i64":  # no wraparound here: Python integers agree exactly
        assert [int(v) for v in got[:50]] == [(int(v) * 2654435761) % 1000003 for v in i[:50]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["i8", "i16", "i32", "i64", "u8"])
def test_integer_division_modulo_and_wraparound(backend, dt):
    T = NPT[dt]
    x = ints(dt, (700,), 13)
    y = ints(dt, (700,), 14, small=True)  # includes 0 and, for signed types, -1
    if np.iinfo(T).min < 0:
        y[5] = -1
        x[5] = np.iinfo(T).min  # INT_MIN // -1 wraps
    for text, fn in [("x // y", np.floor_divide), ("x % y", np.remainder),
                     ("x * y + x - y", lambda a, b: a * b + a - b),
                     ("-x + abs(y) * 3", lambda a, b: -a + np.abs(b) * wrap(3, dt)),
                     ("max(x, y) - min(x, y) ** 2", lambda a, b: np.maximum(a, b) -
                      np.minimum(a, b) ** wrap(2, dt))]:
        got = run_formula(text, {"x": x, "y": y}, dt, backend)
        with np.errstate(all="ignore"):
            assert_same(got, fn(x, y).astype(T))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", ["i8", "i16", "i32", "i64", "u8"])
def test_bitwise_shifts_and_broadcasting(backend, dt):
    T = NPT[dt]
    bits = np.iinfo(T).bits
    x = ints(dt, (6, 1, 50), 15)
    s = np.arange(0, bits, max(1, bits // 8), dtype=T).reshape(-1, 1)  # counts in [0, bits)
    m = ints(dt, (), 16)
    text = "(x << s) ^ (x >> s) | ~m & x"
    got = run_formula(text, {"x": x, "s": s, "m": m}, dt, backend)
    want = (np.left_shift(x, s) ^ np.right_shift(x, s)) | (np.invert(m) & x)
    assert got.shape == want.shape
    assert_same(got, want.astype(T))
    got = run_formula("(x & 0xff) + (x | 1) - where(x > s, s, x) + (not x) + (x == m)",
                      {"x": x, "s": s, "m": m}, dt, backend)
    with np.errstate(all="ignore"):
        want = ((x & wrap(0xff, dt)) + (x | T(1)) - np.where(x > s, s, x)
                + np.logical_not(x).astype(T) + (x == m).astype(T))
    assert_same(got, want.astype(T))


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_inputs(backend):
    base = floats("f64", (40, 30), 17)
    xt = base.T            # transposed view
    ys = base[::2, ::3]    # strided view, shape (20, 10)
    got = run_formula("x * 2 - 1", {"x": xt}, "f64", backend)
    assert_same(got, xt * 2.0 - 1.0)
    got = run_formula("x - y", {"x": ys, "y": base[:20, :10]}, "f64", backend)
    assert_same(got, ys - base[:20, :10])


def test_blis_matches_ref_bit_for_bit():
    if "blis" not in BACKENDS:
        pytest.skip("BLIS backend not built")
    x = floats("f32", (512, 300), 18, specials=True)
    y = floats("f32", (300,), 19)
    text = "where(x > y, exp(-x * x) * y, sigmoid(x + y)) + x // (y + 3) - tanh(y)"
    ref = run_formula(text, {"x": x, "y": y}, "f32", "ref")
    for t in (1, 2, 3):
        assert_same(run_formula(text, {"x": x, "y": y}, "f32", "blis", threads=t), ref)


# ---- errors ---------------------------------------------------------------------------

def test_syntax_error_reports_position():
    with pytest.raises(GoblinError) as e:
        run_formula("a * (b + ", {"a": np.float32(1), "b": np.float32(2)}, "f32")
    assert e.value.name == "GOBLIN_ESYNTAX"
    assert "at 9" in str(e.value)


def test_dtype_rules_at_build_time():
    x = np.arange(4, dtype=np.int32)
    with pytest.raises(GoblinError) as e:
        run_formula("x / 2", {"x": x}, "i32")
    assert e.value.name == "GOBLIN_EDTYPE" and "use '//'" in str(e.value)
    with pytest.raises(GoblinError) as e:
        run_formula("x * 0.5", {"x": x}, "i32")
    assert e.value.name == "GOBLIN_EDTYPE"
    with pytest.raises(GoblinError) as e:
        run_formula("x & 1", {"x": x.astype(np.float32)}, "f32")
    assert e.value.name == "GOBLIN_EDTYPE"
    with pytest.raises(GoblinError) as e:
        run_formula("x + 1", {"x": x.astype(bool)}, "bool")
    assert e.value.name == "GOBLIN_EDTYPE"


def test_contract():
    rel, ab = contract("formula", "f32")
    assert rel == 32 * 2.0**-24 and ab == 32 * 2.0**-24
    assert contract("formula", "i64") == (0.0, 0.0)
