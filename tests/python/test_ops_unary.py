"""The unary group (math, cast, activations, random, creation) against NumPy and
PyTorch, and the random ops against an independent Philox4x32-10 written here.

References are computed in float64 (PyTorch/NumPy) and the goblin results must lie
within the op's own numeric contract (goblin_op_contract) of them; exact ops must
match exactly.
"""
import math
import zlib
from fractions import Fraction

import numpy as np
import pytest

from goblin_ct import Graph, GoblinError, backend_available, contract, run_op

torch = pytest.importorskip("torch")
F = torch.nn.functional

FLOATS = ["f32", "f64", "f16", "bf16"]
INTS = ["i8", "i16", "i32", "i64", "u8"]
ALL = FLOATS + INTS + ["bool"]
BACKENDS = ["ref"] + (["blis"] if backend_available("blis") else [])
TORCH_DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
            "bf16": torch.bfloat16}
NP_DT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8,
         "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "bool": np.bool_}


def representable(vals, dt):
    """Values rounded into dtype dt, returned as float64 (the exact inputs)."""
    t = torch.tensor(np.asarray(vals, dtype=np.float64)).to(TORCH_DT[dt])
    return t.to(torch.float64).numpy()


def round_to(vals, dt):
    """float64 -> dtype (nearest even, once) -> float64, via torch (f64 -> f16/bf16 is direct)."""
    return torch.tensor(np.asarray(vals, dtype=np.float64)).to(TORCH_DT[dt]).to(
        torch.float64).numpy()


def run_cast(x, src, dst, backend="ref"):
    """run_op's own `dtype` parameter names the input dtype, so build the cast here."""
    g = Graph()
    y = g.op("cast", g.input(src, np.shape(x)), dtype=dst)
    g.output(y)
    return g.run([x], backend=backend)[0]


def assert_within_contract(op, dt, got, ref, x=None):
    with np.errstate(invalid="ignore", over="ignore"):
        _within_contract(op, dt, got, ref, x)


def _within_contract(op, dt, got, ref, x):
    rel, ab = contract(op, dt)
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    rref = round_to(ref, dt)
    nan = np.isnan(ref)
    ovf = ~nan & np.isinf(rref)
    ok = np.where(nan, np.isnan(got),
                  np.where(ovf, got == rref,
                           ~np.isnan(got) & (np.abs(got - ref) <= ab + rel * np.abs(ref))))
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, (f"{op} {dt}: {bad.size} outside rel {rel:g} abs {ab:g}; first at "
                           f"x={None if x is None else x[bad[0]]!r} got {got[bad[0]]!r} "
                           f"want {ref[bad[0]]!r}")


# ---- float math vs PyTorch float64 --------------------------------------------------

def t64(fn):
    return lambda x: fn(torch.tensor(x, dtype=torch.float64)).numpy()


MATH = {
    "exp": (t64(torch.exp), -30, 30),
    "log": (t64(torch.log), 0, 100),
    "sqrt": (t64(torch.sqrt), 0, 1000),
    "rsqrt": (t64(torch.rsqrt), 0, 100),
    "reciprocal": (t64(torch.reciprocal), -10, 10),
    "sin": (t64(torch.sin), -50, 50),
    "cos": (t64(torch.cos), -50, 50),
    "tanh": (t64(torch.tanh), -10, 10),
    "erf": (t64(torch.erf), -5, 5),
    "log1p": (t64(torch.log1p), -1, 10),
    "expm1": (t64(torch.expm1), -10, 10),
    "square": (t64(torch.square), -300, 300),
    "sigmoid": (t64(torch.sigmoid), -40, 40),
    "silu": (t64(F.silu), -40, 40),
    "neg": (t64(torch.neg), -10, 10),
    "abs": (t64(torch.abs), -10, 10),
    "sign": (np.sign, -10, 10),  # NumPy: sign(NaN) = NaN (PyTorch says 0)
    "floor": (t64(torch.floor), -10, 10),
    "ceil": (t64(torch.ceil), -10, 10),
    "round": (t64(torch.round), -10, 10),
    "trunc": (t64(torch.trunc), -10, 10),
    "relu": (t64(torch.relu), -10, 10),
}
EDGES = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-30,
         -1e-30, 1e-300, 65504.0, 1e5, -1e5, 3e38, 1e-6, 1e-8]


def math_inputs(dt, lo, hi, seed, n=800):
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(lo, hi, n), EDGES])
    return representable(x, dt)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", sorted(MATH))
def test_float_math_within_contract(op, dt, backend):
    fn, lo, hi = MATH[op]
    x = math_inputs(dt, lo, hi, zlib.crc32(f"{op}/{dt}".encode()))
    got = run_op(op, [(x, dt)], backend=backend)
    assert_within_contract(op, dt, got, fn(x), x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("approx", [None, "none", "tanh"])
def test_gelu_both_forms_vs_torch(approx, dt, backend):
    x = math_inputs(dt, -12, 12, 5)
    x = x[x != math.inf]  # torch's erf-GELU gives NaN at +inf; ours +inf (checked below)
    attrs = {} if approx is None else {"approximate": 0 if approx == "none" else 1}
    got = run_op("gelu", [(x, dt)], backend=backend, **attrs)
    ref = F.gelu(torch.tensor(x), approximate=approx or "none").numpy()
    assert_within_contract("gelu", dt, got, ref, x)
    inf = run_op("gelu", [(np.array([math.inf, -math.inf]), dt)], backend=backend, **attrs)
    assert inf[0] == math.inf and math.isnan(inf[1])


def test_exact_ops_are_bit_exact_in_f32():
    x = math_inputs("f32", -1000, 1000, 9).astype(np.float32)
    for op, ref in [("neg", -x), ("abs", np.abs(x)), ("floor", np.floor(x)), ("ceil", np.ceil(x)),
                    ("round", np.round(x)), ("trunc", np.trunc(x)),
                    ("relu", torch.relu(torch.tensor(x)).numpy())]:
        got = run_op(op, [x])
        np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(x)],
                                      ref.view(np.uint32)[~np.isnan(x)], err_msg=op)
        assert np.isnan(got[np.isnan(x)]).all()


# ---- integers ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", INTS)
def test_integer_ops_wrap_like_numpy(dt, backend):
    info = np.iinfo(NP_DT[dt])
    rng = np.random.default_rng(3)
    x = rng.integers(info.min, info.max, 500, dtype=NP_DT[dt], endpoint=True)
    x = np.concatenate([x, np.array([info.min, info.max, 0, 1, info.min + 1], dtype=NP_DT[dt])])
    with np.errstate(over="ignore"):
        refs = {"neg": np.negative(x), "abs": np.abs(x), "sign": np.sign(x),
                "square": np.square(x), "relu": np.maximum(x, 0), "floor": x, "ceil": x,
                "round": x, "trunc": x}
    for op, ref in refs.items():
        got = run_op(op, [x], backend=backend)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, ref, err_msg=f"{op} {dt}")


@pytest.mark.parametrize("op", ["exp", "log", "sin", "gelu", "silu", "sigmoid", "erf", "sqrt"])
def test_float_only_ops_reject_integers(op):
    g = Graph()
    x = g.input("i32", (3,))
    with pytest.raises(GoblinError) as e:
        g.op(op, x)
    assert e.value.name == "GOBLIN_EDTYPE"


# ---- cast --------------------------------------------------------------------------

def bf16_round(d):
    """Correct rounding of a double (or int) to bf16, as a float (independent of torch)."""
    if isinstance(d, float) and (math.isnan(d) or math.isinf(d) or d == 0):
        return d
    if d == 0:
        return 0.0
    a = Fraction(abs(d))
    if a >= 2 ** 129:
        return math.copysign(math.inf, d)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # then fix up: 2^(e-1) <= a < 2^e
    while Fraction(2) ** e <= a:
        e += 1
    while Fraction(2) ** (e - 1) > a:
        e -= 1
    q = Fraction(2) ** (max(e, -125) - 8)  # quantum: 8 significant bits, subnormals 2^-133
    n = a / q
    fl = math.floor(n)
    fr = n - fl
    if fr > Fraction(1, 2) or (fr == Fraction(1, 2) and fl % 2):
        fl += 1
    r = fl * q
    if r >= 2 ** 128:
        return math.copysign(math.inf, d)
    return math.copysign(float(r), d)


def cast_expect(src_vals, src, dst):
    """The documented cast rule, computed with NumPy / exact arithmetic."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _cast_expect(src_vals, src, dst)


def _cast_expect(src_vals, src, dst):
    if dst == "bool":
        return np.array([bool(v != 0) for v in src_vals])
    if src in FLOATS:
        v = np.asarray(src_vals, dtype=np.float64)
        if dst in INTS:
            info = np.iinfo(NP_DT[dst])
            t = np.trunc(np.where(np.isnan(v), 0, v))
            out = []
            for tv in t:  # exact comparisons against the integer limits
                if tv >= float(info.max) + 1 or tv >= 2.0 ** 63:
                    out.append(info.max)
                elif tv < float(info.min):
                    out.append(info.min)
                else:
                    out.append(int(tv))
            return np.array(out, dtype=NP_DT[dst])
        if dst == "bf16":
            return np.array([bf16_round(float(a)) for a in v], dtype=np.float32)
        return v.astype(NP_DT[dst])  # NumPy: f64 -> f32/f16 rounds once
    iv = [int(a) for a in src_vals]
    if dst in INTS:
        bits = np.dtype(NP_DT[dst]).itemsize * 8
        out = []
        for a in iv:
            a &= (1 << bits) - 1
            if dst != "u8" and a >> (bits - 1):
                a -= 1 << bits
            out.append(a)
        return np.array(out, dtype=NP_DT[dst])
    if dst == "bf16":
        return np.array([bf16_round(a) for a in iv], dtype=np.float32)
    if dst == "f16":
        return np.array([float(np.float16(float(a))) if abs(a) < 2 ** 52 else
                         math.copysign(math.inf, a) for a in iv], dtype=np.float16)
    return np.array(iv, dtype=np.int64).astype(NP_DT[dst])  # correctly rounded


CAST_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.9999, -1.9999, 2.5, 127.0, 127.9, 128.0,
               -128.0, -128.9, -129.0, 255.5, 256.0, 300.7, -300.7, 32767.6, 32768.0, -32769.0,
               65504.0, 65520.0, 1e9, -3e9, 2147483647.0, 2147483648.0, -2147483649.0,
               9.2233720368547758e18, -9.2233720368547758e18, 1e19, -1e19, 3.3961e38, 1e300,
               1.00048828125 + 2 ** -30, 1 + 2 ** -8 + 2 ** -40, 1e-7, 1e-40, math.inf,
               -math.inf, math.nan]
CAST_INTS = [0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 300, -300, 32767, 32768, -32769,
             65504, 65520, 70000, 2 ** 24 + 1, 2 ** 24 + 3, 2 ** 25 + 2 ** 17 + 1, 2 ** 31 - 1,
             -2 ** 31, 2 ** 32, 2 ** 53 + 1, 2 ** 63 - 1, -2 ** 63]


def cast_source(src):
    if src in FLOATS:
        if src == "bf16":  # exact bf16 values (goblin_ct rounds f32 inputs to bf16)
            return np.array([bf16_round(v) for v in CAST_FLOATS], dtype=np.float32)
        with np.errstate(over="ignore"):
            return np.asarray(CAST_FLOATS, dtype=np.float64).astype(NP_DT[src])
    if src == "bool":
        return np.array([False, True, True])
    return cast_expect(CAST_INTS, "i64", src)  # wrapped into the source type


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dst", ALL)
@pytest.mark.parametrize("src", ALL)
def test_cast_all_pairs(src, dst, backend):
    x = cast_source(src)
    got = run_cast(x, src, dst, backend)
    want = cast_expect([float(v) if src in FLOATS else int(v) for v in x], src, dst)
    if dst in FLOATS:
        g = np.asarray(got, dtype=np.float64)
        w = np.asarray(want, dtype=np.float64)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        assert same.all(), f"{src}->{dst}: x={x[~same]} got={g[~same]} want={w[~same]}"
    else:
        np.testing.assert_array_equal(got, want, err_msg=f"{src}->{dst}")


def test_cast_strided_and_broadcast_input():
    base = np.arange(24, dtype=np.float64).reshape(4, 6) * 1.7 - 20
    view = base.T[::-1]  # negative and non-unit strides
    got = run_cast(view, "f64", "i16")
    np.testing.assert_array_equal(got, np.trunc(view).astype(np.int16))
    row = np.broadcast_to(np.array([1.5, -2.5, 1e6], dtype=np.float32), (4, 3))  # stride 0
    got = run_cast(row, "f32", "u8")
    np.testing.assert_array_equal(got, np.tile(np.array([1, 0, 255], dtype=np.uint8), (4, 1)))


@pytest.mark.parametrize("op", ["exp", "neg", "gelu", "round"])
def test_strided_inputs_match_contiguous(op):
    x = np.random.default_rng(1).uniform(-5, 5, (5, 7)).astype(np.float32)
    want = run_op(op, [np.ascontiguousarray(x.T[:, ::-2])])
    got = run_op(op, [x.T[:, ::-2]])
    np.testing.assert_array_equal(got, want)


def test_empty_and_scalar():
    for op in ["exp", "abs", "sigmoid"]:
        got = run_op(op, [np.zeros((0, 4), dtype=np.float32)])
        assert got.shape == (0, 4)
    got = run_op("log1p", [np.array(1e-20)])
    assert got.shape == () and got == 1e-20


# ---- Philox4x32-10, independently --------------------------------------------------------

M32 = 0xFFFFFFFF


def philox(c0, c1, c2, c3, k0, k1):
    """Vectorized over NumPy uint64 arrays holding 32-bit words."""
    c0, c1, c2, c3 = (np.asarray(v, dtype=np.uint64) for v in (c0, c1, c2, c3))
    k0, k1 = np.uint64(k0), np.uint64(k1)
    m32 = np.uint64(M32)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & m32,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & m32)
        k0 = (k0 + np.uint64(0x9E3779B9)) & m32
        k1 = (k1 + np.uint64(0xBB67AE85)) & m32
    return c0, c1, c2, c3


def test_python_philox_known_answers():
    kat = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
           ((M32,) * 4, (M32, M32), (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
           ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
            (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for ctr, key, want in kat:
        got = philox(*[[v] for v in ctr], *key)
        assert tuple(int(w[0]) for w in got) == want


STREAM = {"rand_uniform": 185, "rand_normal": 186, "bernoulli": 187, "randint": 188,
          "dropout": 189}


def words(op, seed, offset, n):
    s = seed & (2 ** 64 - 1)
    ctr = (np.arange(n, dtype=np.uint64) + np.uint64(offset))
    return philox(ctr & np.uint64(M32), ctr >> np.uint64(32), np.full(n, STREAM[op]), np.zeros(n),
                  s & M32, s >> 32)


def gen(op, n, seed, offset=0, backend="ref", **attrs):
    g = Graph()
    y = g.op(op, shape=[n], seed=seed, offset=offset, **attrs)
    g.output(y)
    return g.run([], backend=backend)[0]


def round_dt(v, dt):
    if dt == "bf16":
        return bf16_round(v)
    return float(NP_DT[dt](v))


PBITS = {"f32": 24, "f64": 53, "f16": 11, "bf16": 8}


def uniform_expect(dt, seed, offset, n, low=0.0, high=1.0):
    x0, x1, _, _ = words("rand_uniform", seed, offset, n)
    p = PBITS[dt]
    out = []
    width = high - low  # rounded in double, as specified
    for a, b in zip(x0.tolist(), x1.tolist()):
        u = Fraction(((a << 21) | (b >> 11)), 2 ** 53) if p == 53 else Fraction(a >> (32 - p), 2 ** p)
        v = round_dt(float(Fraction(width) * u + Fraction(low)), dt)  # fma, then the dtype
        if v >= high:
            v = np.nextafter(NP_DT.get(dt, np.float32)(high), -np.inf)
        out.append(v)
    return np.array(out, dtype=np.float64)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", FLOATS)
def test_uniform_is_the_documented_philox_mapping(dt, backend):
    got = gen("rand_uniform", 1500, 12345, 77, backend=backend, dtype=dt, low=-3.0, high=5.5)
    want = uniform_expect(dt, 12345, 77, 1500, -3.0, 5.5)
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), want)
    got = gen("rand_uniform", 500, -9, 0, backend=backend, dtype=dt)  # a negative seed: as uint64
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), uniform_expect(dt, -9, 0, 500))


@pytest.mark.parametrize("dt", FLOATS)
def test_normal_is_box_muller_of_the_philox_words(dt):
    n = 1500
    got = np.asarray(gen("rand_normal", n, 2024, 3, dtype=dt, mean=0.25, std=1.5), dtype=np.float64)
    x0, x1, x2, x3 = (w.tolist() for w in words("rand_normal", 2024, 3, n))
    for i in range(n):
        if dt == "f64":
            u1 = (((x0[i] << 21) | (x1[i] >> 11)) + 1) / 2 ** 53
            u2 = ((x2[i] << 21) | (x3[i] >> 11)) / 2 ** 53
        else:
            u1 = ((x0[i] >> 8) + 1) / 2 ** 24
            u2 = (x1[i] >> 8) / 2 ** 24
        z = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
        want = 0.25 + 1.5 * z
        if dt == "f64":
            assert abs(got[i] - want) <= 1e-14 * (1 + abs(want)), i
        else:  # within one ulp of the dtype (the cos argument differs by ~1e-16 here)
            ulp = {"f32": 2 ** -23, "f16": 2 ** -10, "bf16": 2 ** -7}[dt]
            assert abs(got[i] - round_dt(want, dt)) <= ulp * max(abs(want), 2 ** -14) + 1e-12, i


@pytest.mark.parametrize("op,kw", [("rand_uniform", {}), ("rand_normal", {}),
                                   ("randint", {"high": 100.0}), ("bernoulli", {"p": 0.4})])
@pytest.mark.parametrize("dt", ["f32", "f64", "f16"])
def test_offset_k_is_element_k(op, kw, dt):
    full = gen(op, 1000, 5, 0, dtype=dt, **kw)
    np.testing.assert_array_equal(gen(op, 1000, 5, 0, dtype=dt, **kw), full)
    np.testing.assert_array_equal(gen(op, 300, 5, 700, dtype=dt, **kw), full[700:])
    assert not np.array_equal(gen(op, 1000, 6, 0, dtype=dt, **kw), full)


def test_uniform_and_normal_statistics():
    u = gen("rand_uniform", 400000, 1, dtype="f64", low=2.0, high=4.0)
    assert u.min() >= 2 and u.max() < 4
    assert abs(u.mean() - 3) < 0.006 and abs(u.var() - 4 / 12) < 0.003
    # uniformity: chi-square over 20 bins (19 dof; 99.9% quantile ~ 43.8)
    counts = np.histogram(u, bins=20, range=(2, 4))[0]
    chi2 = ((counts - 20000) ** 2 / 20000).sum()
    assert chi2 < 43.8, chi2
    z = gen("rand_normal", 400000, 2, dtype="f32", mean=-1.0, std=3.0).astype(np.float64)
    s = (z + 1) / 3
    assert abs(z.mean() + 1) < 0.02 and abs(s.var() - 1) < 0.012
    assert abs((s ** 3).mean()) < 0.02 and abs((s ** 4).mean() - 3) < 0.06
    # tails: P(|z| > 3) = 0.0027
    assert abs((np.abs(s) > 3).mean() - 0.0027) < 0.0006


def test_bernoulli_randint_dropout_exact_mappings():
    n = 2000
    x0, x1, _, _ = words("bernoulli", 31, 0, n)
    got = gen("bernoulli", n, 31, 0, p=0.3, dtype="u8")
    np.testing.assert_array_equal(got, ((x0 >> np.uint64(8)) < np.uint64(int(0.3 * 2 ** 24) + 1))
                                  .astype(np.uint8))
    # input probabilities: element i compares with p_i
    p = np.random.default_rng(0).uniform(0, 1, n).astype(np.float32)
    g = Graph()
    y = g.op("bernoulli", g.input("f32", (n,)), seed=31)
    g.output(y)
    got = g.run([p])[0]
    u = (x0 >> np.uint64(8)).astype(np.float64) / 2 ** 24
    np.testing.assert_array_equal(got, (u < p.astype(np.float64)).astype(np.float32))
    # randint: low + floor(r * (high - low) / 2^64), r = x1:x0
    x0, x1, _, _ = words("randint", 8, 4, n)
    got = gen("randint", n, 8, 4, low=-1000.0, high=123457.0, dtype="i32")
    r = [(a << 32) | b for a, b in zip(x1.tolist(), x0.tolist())]
    np.testing.assert_array_equal(got, [-1000 + (v * 124457 >> 64) for v in r])
    got = gen("randint", n, 8, 4, low=-2.0 ** 53, high=2.0 ** 53, dtype="i64")  # a 2^54 span
    np.testing.assert_array_equal(got, [-2 ** 53 + (v * 2 ** 54 >> 64) for v in r])
    x0, x1, _, _ = words("randint", 8, 4, n)
    got = gen("randint", n, 8, 4, low=-5.0, high=2.0 ** 53 - 12345, dtype="f64")
    np.testing.assert_array_equal(got, [-5 + (v * (2 ** 53 - 12340) >> 64) for v in r])
    # dropout: kept iff u >= p, scaled by float32(1 / (1 - p)) in f32
    x = np.random.default_rng(1).normal(size=n).astype(np.float32)
    got = run_op("dropout", [x], seed=17, p=0.2)
    x0, _, _, _ = words("dropout", 17, 0, n)
    keep = (x0 >> np.uint64(8)).astype(np.float64) / 2 ** 24 >= 0.2
    np.testing.assert_array_equal(got, x * np.where(keep, np.float32(1 / 0.8), np.float32(0)))


@pytest.mark.parametrize("dt", FLOATS)
def test_dropout_p_edges_and_nan(dt):
    x = representable(np.linspace(-3, 3, 101), dt)
    np.testing.assert_array_equal(run_op("dropout", [(x, dt)], seed=1, p=0.0), x)
    assert (run_op("dropout", [(x, dt)], seed=1, p=1.0) == 0).all()
    y = run_op("dropout", [(np.array([math.nan] * 50), dt)], seed=1, p=0.5)
    assert np.isnan(y).all()  # x * mask: NaN stays NaN when dropped (as PyTorch)


def test_randint_statistics_and_range():
    v = gen("randint", 200000, 3, low=-5.0, high=5.0, dtype="i8")
    assert v.min() == -5 and v.max() == 4
    counts = np.bincount(v.astype(np.int64) + 5, minlength=10)
    chi2 = ((counts - 20000) ** 2 / 20000).sum()
    assert chi2 < 27.9, chi2  # 9 dof, 99.9%


# ---- creation -----------------------------------------------------------------------------

@pytest.mark.parametrize("dt", ALL)
def test_full(dt):
    g = Graph()
    y = g.op("full", shape=[2, 3], dtype=dt, value=-7.75)
    g.output(y)
    got = g.run([])[0]
    want = cast_expect([-7.75], "f64", dt)[0]
    assert got.shape == (2, 3) and (np.asarray(got, dtype=np.float64) == float(want)).all()


@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "bf16", "i32", "i64", "i16"])
def test_arange_vs_torch(dt):
    g = Graph()
    if dt in INTS:
        y = g.op("arange", shape=[40], start=-17.0, step=3.0, dtype=dt)
        want = torch.arange(-17, -17 + 3 * 40, 3).numpy()
    else:
        y = g.op("arange", shape=[40], start=-1.0, step=0.05, dtype=dt)
        want = round_to(-1.0 + 0.05 * np.arange(40), dt)
    g.output(y)
    got = np.asarray(g.run([])[0], dtype=np.float64)
    if dt in INTS:
        np.testing.assert_array_equal(got, want)
    else:
        # the documented value: start + i*step rounded once to double (an fma), then to dt
        exact = [round_dt(float(Fraction(-1.0) + Fraction(0.05) * i), dt) for i in range(40)]
        np.testing.assert_array_equal(got, exact)
        # and NumPy/PyTorch (two roundings) agree within the contract, with 2^-52 near 0
        rel, _ = contract("arange", dt)
        assert (np.abs(got - want) <= rel * np.abs(want) + 2 ** -52).all()


# ---- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("op,attrs,code", [
    ("rand_uniform", {"shape": [3]}, "GOBLIN_EINVAL"),  # no seed
    ("rand_uniform", {"shape": [3], "seed": 1, "low": 1.0, "high": 0.0}, "GOBLIN_ERANGE"),
    ("rand_uniform", {"shape": [3], "seed": 1, "dtype": "i32"}, "GOBLIN_EDTYPE"),
    ("rand_normal", {"shape": [3], "seed": 1, "std": -1.0}, "GOBLIN_ERANGE"),
    ("rand_normal", {"shape": [3], "seed": 1, "mean": math.nan}, "GOBLIN_ERANGE"),
    ("randint", {"shape": [3], "seed": 1, "high": 300.0, "dtype": "u8"}, "GOBLIN_ERANGE"),
    ("randint", {"shape": [3], "seed": 1, "low": 0.5, "high": 3.0}, "GOBLIN_ERANGE"),
    ("bernoulli", {"shape": [3], "seed": 1, "p": 2.0}, "GOBLIN_ERANGE"),
    ("bernoulli", {"shape": [3], "seed": 1}, "GOBLIN_EINVAL"),
    ("full", {"shape": [3]}, "GOBLIN_EINVAL"),
    ("full", {"shape": [3], "value": 1.0, "dtype": 99}, "GOBLIN_ERANGE"),
    ("arange", {"shape": [3, 3]}, "GOBLIN_ESHAPE"),
    ("arange", {"shape": [300], "dtype": "i8"}, "GOBLIN_ERANGE"),
    ("rand_uniform", {"shape": [3], "seed": 1, "offset": -2}, "GOBLIN_ERANGE"),
])
def test_generator_attribute_errors(op, attrs, code):
    g = Graph()
    with pytest.raises(GoblinError) as e:
        g.op(op, **attrs)
    assert e.value.name == code, str(e.value)


def test_unary_attribute_errors():
    g = Graph()
    x = g.input("f32", (4,))
    for op, attrs, code in [("cast", {}, "GOBLIN_EINVAL"), ("cast", {"dtype": 10}, "GOBLIN_ERANGE"),
                            ("gelu", {"approximate": 3}, "GOBLIN_ERANGE"),
                            ("dropout", {"seed": 1, "p": 1.5}, "GOBLIN_ERANGE"),
                            ("dropout", {"p": 0.5}, "GOBLIN_EINVAL"),
                            ("exp", {"axis": 0}, "GOBLIN_EINVAL"),
                            ("bernoulli", {"seed": 1, "p": 0.5}, "GOBLIN_EINVAL")]:
        with pytest.raises(GoblinError) as e:
            g.op(op, x, **attrs)
        assert e.value.name == code, (op, str(e.value))


# ---- BLIS against the reference -----------------------------------------------------------

@pytest.mark.skipif("blis" not in BACKENDS, reason="no BLIS backend")
@pytest.mark.parametrize("op", sorted(MATH) + ["gelu"])
def test_blis_matches_ref_within_contract(op):
    for dt in FLOATS:
        lo, hi = MATH[op][1:] if op in MATH else (-8, 8)
        x = math_inputs(dt, lo, hi, 11, n=2990).reshape(-1, 7)[:, ::-1]  # strided too
        r = run_op(op, [(x, dt)], backend="ref")
        b = run_op(op, [(x, dt)], backend="blis", threads=2)
        assert_within_contract(op, dt, b, r, x.ravel())
