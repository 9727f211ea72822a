#!/usr/bin/env python3
"""Fit the float exp of libgoblin/expf_impl.h (GOBLIN__EXPF_LN2_HI/LO, GOBLIN__EXPF_P0..P5).

    pip install numpy mpmath && python3 tools/fit_expf_f32.py

The scheme (textbook Cody-Waite reduction): n = round(x / ln2), r = x - n ln2 computed as
(x - n C1) - n C2 with ln2 = C1 + C2, then e^x = 2^n e^r with

    e^r = 1 + r + r^2 p(r),  p of degree 5,  |r| <= ln2/2 (plus a little slack).

1. The split of ln2 is derived: x is clamped to [-104, 89], so |n| <= 150 (8 bits); C1 is
   ln2 rounded to 24 - 8 = 16 significant bits, so n C1 is exact in float for |n| <= 150
   (checked), and then x - n C1 is exact too (both are multiples of min(ulp(x), ulp(C1))
   and |r| < 1/2). C2 = float(ln2 - C1).
2. The interval: n comes from float(x L + 1.5 * 2^23) - 1.5 * 2^23 with L = float(1/ln2),
   so |x / ln2 - n| <= 1/2 + 2^-17 (the rounding of x L, |x L| < 256, in the kernels
   without FMA) + 104 |1/ln2 - L|; r is fitted on [-R, R], R = ln2 times that.
3. p is fitted minimizing the max relative error of 1 + r + r^2 p(r) against e^r (mpmath,
   40 digits), by least squares reweighted towards the minimax (Lawson's iteration), with
   weight r^2 / e^r on the residual of p.
4. The coefficients are rounded to float one at a time, lowest degree first, the higher
   ones refitted after each rounding (the fitted P0 is 1/2 + 7e-9, which rounds to 1/2;
   the refit absorbs that: 1e-10 relative, against 1e-9 when all are rounded at once; a
   float ulp is 6e-8 to 1.2e-7 relative). The result is evaluated through the
   whole kernel, emulated bit for bit over a sample of inputs (see below). A search that
   nudged each coefficient by +-1 or 2 ulps was tried: it changed the sampled max ulp error
   by less than 0.002 and the count of misrounded results by under 0.02% (noise, at the
   price of a larger polynomial error), so the script does not do it.

Kernel emulation: float products of two floats are exact in double (48 bits), so
fmaf(a, b, c) is the float rounding of a*b + c. That sum is formed in double with its
rounding error (two-sum) and rounded to odd (an inexact double with an even last bit is
moved one double ulp towards the exact value), so the final rounding to float is correct:
a plain double sum followed by a float rounding could round twice and be wrong in rare
ties. Float additions and multiplications are numpy float32 operations (IEEE, correctly
rounded, subnormals kept). Two kernels share the constants: the scalar one with FMAs
(goblin__expf_inline) and the vector one without (GOBLIN__VEXPF_NEG, x <= 0); both are
emulated and reported. The exhaustive check (all 2^32 floats against exp in double) is
done in C; tests/unit/test_formula.c checks every 257th input and a sweep of the vector
kernel.
"""
import numpy as np
import mpmath as mp

mp.mp.dps = 40
F = np.float32
MAGIC = F(12582912.0)  # 1.5 * 2^23: adding it rounds to an integer
XLO, XHI = -104.0, 89.0  # the kernels' clamp
NMAX = 150  # |n| <= 150 for x in [XLO, XHI]


def f32(v):
    return float(np.float32(float(v)))


def ln2_split():
    ln2 = mp.log(2)
    bits = 24 - int(NMAX).bit_length()
    e = int(mp.floor(mp.log(ln2, 2)))  # ln2 in [2^e, 2^(e+1))
    scale = mp.mpf(2) ** (bits - 1 - e)
    c1 = float(mp.nint(ln2 * scale) / scale)
    c2 = f32(ln2 - c1)
    ns = np.arange(-NMAX, NMAX + 1, dtype=np.float64)
    assert np.all((ns.astype(F) * F(c1)).astype(np.float64) == ns * c1), "n C1 not exact"
    return bits, c1, c2


def fmaf(a, b, c):
    """Correctly rounded float fused multiply-add of float32 arrays (see the docstring)."""
    p = a.astype(np.float64) * b.astype(np.float64)  # exact
    c = c.astype(np.float64)
    s = p + c
    bp = s - c
    err = (p - bp) + (c - (s - bp))  # two-sum: s + err == p + c exactly
    bits = s.view(np.uint64)
    fix = (err != 0) & ((bits & 1) == 0)
    s = np.where(fix, np.nextafter(s, s + err), s)  # round to odd
    return s.astype(F)


def pow2(n):
    return ((n + 127).astype(np.int32) << 23).view(F)


def kernel_scalar(x, c1, c2, P):
    x = np.clip(x, F(XLO), F(XHI))
    t = fmaf(x, np.full_like(x, F(1 / np.log(2))), np.full_like(x, MAGIC))
    nf = t - MAGIC
    n = (t.view(np.uint32) - np.uint32(0x4B400000)).view(np.int32)
    r = fmaf(nf, np.full_like(x, F(-c1)), x)
    r = fmaf(nf, np.full_like(x, F(-c2)), r)
    z = r * r
    y = np.full_like(x, F(P[5]))
    for k in (4, 3, 2, 1, 0):
        y = fmaf(y, r, np.full_like(x, F(P[k])))
    y = fmaf(y, z, r) + F(1)
    n1 = n >> 1
    return (y * pow2(n1)) * pow2(n - n1)


def kernel_vector(x, c1, c2, P):
    """The vector kernel for x <= 0: the same steps, every operation rounded (no FMA)."""
    x = np.maximum(x, F(XLO))
    t = x * F(1 / np.log(2)) + MAGIC
    n = t.view(np.int32) - MAGIC.view(np.int32)
    nf = t - MAGIC
    r = x - nf * F(c1)
    r = r - nf * F(c2)
    p = np.full_like(x, F(P[5]))
    for k in (4, 3, 2, 1, 0):
        p = p * r + F(P[k])
    y = p * (r * r) + r + F(1)
    n1 = n >> 1
    return y * pow2(n1) * pow2(n - n1)


def ulp_err(got, want):
    """|got - want| in ulps of want (as the C tests measure it; subnormal ulp 2^-149)."""
    e = np.frexp(want)[1]
    u = np.where(np.abs(want) < 2.0 ** -126, 2.0 ** -149, np.ldexp(1.0, e - 24))
    return np.abs(got.astype(np.float64) - want) / u


def sample(lo, hi, count, seed):
    """2 count floats in [lo, hi]: count uniform, count with r within 1e-3 ln2/2 of +-ln2/2."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(lo, hi, count)
    n = np.round(x / np.log(2))
    side = rng.choice([-1.0, 1.0], count)
    edge = n * np.log(2) + np.log(2) / 2 * side * (1 - rng.uniform(0, 1e-3, count))
    x = np.concatenate([x, np.clip(edge, lo, hi)]).astype(F)
    return x, np.exp(x.astype(np.float64))


def fit(R, fixed, deg=5, pts=4001, iters=60):
    """Coefficients c0..c_deg of p minimizing max |1 + r + r^2 p(r) - e^r| / e^r on [-R, R],
    with c0..c_{len(fixed)-1} fixed. Returns (max relative error, coefficients)."""
    r = R * np.cos(np.linspace(np.pi, 0, pts))  # dense near the ends
    r = r[np.abs(r) > 1e-9]
    er = np.array([float(mp.exp(mp.mpf(v))) for v in r])
    tail = np.array([float((mp.expm1(mp.mpf(v)) - mp.mpf(v)) / mp.mpf(v) ** 2) for v in r])
    w = r * r / er  # residual of p times this = relative error of e^r
    k0 = len(fixed)
    rhs = tail - sum(c * r ** k for k, c in enumerate(fixed))
    if k0 > deg:
        return np.abs(rhs * w).max(), np.array(fixed)
    V = np.stack([r ** k for k in range(k0, deg + 1)], 1)
    lw = np.ones_like(r)
    best = None
    for _ in range(iters):
        sw = np.sqrt(lw) * w
        c, *_ = np.linalg.lstsq(V * sw[:, None], rhs * sw, rcond=None)
        e = np.abs((V @ c - rhs) * w)
        if best is None or e.max() < best[0]:
            best = (e.max(), np.concatenate([fixed, c]))
        lw = lw * e
        lw /= lw.mean()
    return best


def main():
    bits, c1, c2 = ln2_split()
    L = f32(1 / mp.log(2))
    slack = 2.0 ** -17 + max(-XLO, XHI) * abs(float(1 / mp.log(2)) - L)
    R = float(mp.log(2) * (mp.mpf(0.5) + slack))
    print(f"ln2 = C1 + C2: C1 = {c1!r} ({bits} significant bits: n C1 exact for |n| <= {NMAX}),"
          f" C2 = {c2:.9e} (C1 + C2 - ln2 = {float(mp.mpf(c1) + c2 - mp.log(2)):.2e})")
    print(f"reduced interval |r| <= {R:.9f} (ln2/2 + {R - float(mp.log(2) / 2):.2e})")

    e, c = fit(R, [])
    print(f"degree-5 fit: max relative error {e:.3e} (2^{np.log2(e):.1f}) in double")
    fixed = []
    for k in range(6):  # round the low-order coefficients first, refit the rest
        fixed.append(f32(c[k]))
        if k < 5:
            e, c = fit(R, fixed)
    P = np.array(fixed)
    print(f"after rounding to float: max relative error {fit(R, fixed)[0]:.3e}"
          f" (2^{np.log2(fit(R, fixed)[0]):.1f})")

    xs, want = sample(XLO, 88.72, 1 << 21, 1)  # exp(88.72) < FLT_MAX
    xv, wantv = sample(XLO, 0.0, 1 << 21, 2)

    es = ulp_err(kernel_scalar(xs, c1, c2, P), want)
    print(f"scalar kernel (FMA), {xs.size} sampled inputs: max {es.max():.4f} ulp,"
          f" {np.mean(es > 0.5):.2%} not correctly rounded")
    ev = ulp_err(kernel_vector(xv, c1, c2, P), wantv)
    print(f"vector kernel (no FMA, x <= 0), {xv.size} sampled inputs: max {ev.max():.4f} ulp,"
          f" {np.mean(ev > 0.5):.2%} not correctly rounded")

    print("\n/* tools/fit_expf_f32.py */")
    print(f"#define GOBLIN__EXPF_LOG2E {L:.9e}f")
    print(f"#define GOBLIN__EXPF_LN2_HI {c1!r}f")
    print(f"#define GOBLIN__EXPF_LN2_LO {c2:.9e}f")
    for k, v in enumerate(P):
        print(f"#define GOBLIN__EXPF_P{k} {v:.9e}f")


if __name__ == "__main__":
    main()
