#!/usr/bin/env python3
"""Fit the float erf polynomials of libgoblin/backends/blis/blis_train3.c (T3_ERF_P1..P3).

    pip install numpy mpmath && python3 tools/fit_erf_f32.py

Three pieces, each a least-squares fit reweighted towards the minimax relative error
(Lawson's iteration) against mpmath's erf at 30 digits:

  P1: erf(x) = x P1(x^2),        0 <= x < 1.25, degree 7 in x^2
  P2: erf(x) = P2(x - 1.875),  1.25 <= x < 2.5,  degree 10
  P3: erf(x) = P3(x - 3),       2.5 <= x < 3.6,  degree 9

Prints each piece's fit error (double) and its error evaluated in float (Horner, no FMA:
a pessimistic stand-in for the kernel's FMAs) relative to erf's contract bound
4u |erf| + 4u (u = 2^-24), then the C arrays. The kernel's own test
(tests/unit/test_blis_train.c) checks the result against long double independently.
"""
import numpy as np
import mpmath as mp

mp.mp.dps = 30
U = 2.0 ** -24


def erf_ref(xs):
    return np.array([float(mp.erf(mp.mpf(float(v)))) for v in xs])


def fit(target, var, deg, iters=80):
    """Coefficients (low to high) of a degree-deg polynomial in var fitting target with
    minimal max relative error."""
    V = np.stack([var ** k for k in range(deg + 1)], 1)
    w = 1.0 / np.abs(target)
    lw = np.ones_like(target)
    best = None
    for _ in range(iters):
        c, *_ = np.linalg.lstsq(V * (np.sqrt(lw) * w)[:, None], target * np.sqrt(lw) * w, rcond=None)
        e = np.abs((V @ c - target) * w)
        if best is None or e.max() < best[0]:
            best = (e.max(), c.copy())
        lw = lw * e
        lw /= lw.mean()
    return best


def horner32(c, v):
    c = c.astype(np.float32)
    p = np.full_like(v, c[-1])
    for k in range(len(c) - 2, -1, -1):
        p = (p * v + c[k]).astype(np.float32)
    return p


def main():
    out = []
    x1 = np.linspace(1e-6, 1.25, 8001)
    r1 = erf_ref(x1)
    e, c1 = fit(r1 / x1, x1 * x1, 7)
    x32 = x1.astype(np.float32)
    y = (x32 * horner32(c1, x32 * x32)).astype(np.float64)
    print(f"P1: fit {e:.2e} relative; in float {np.max(np.abs(y - r1) / (4 * U * (np.abs(r1) + 1))):.2f} of the bound")
    out.append(("T3_ERF_P1", c1))
    for name, lo, hi, c0, deg in (("T3_ERF_P2", 1.25, 2.5, 1.875, 10), ("T3_ERF_P3", 2.5, 3.6, 3.0, 9)):
        xs = np.linspace(lo, hi, 8001)
        r = erf_ref(xs)
        e, c = fit(r, xs - c0, deg)
        u32 = (xs.astype(np.float32) - np.float32(c0)).astype(np.float32)
        y = horner32(c, u32).astype(np.float64)
        print(f"{name[-2:]}: fit {e:.2e} relative; in float {np.max(np.abs(y - r) / (4 * U * (np.abs(r) + 1))):.2f} of the bound")
        out.append((name, c))
    for name, c in out:
        vals = ", ".join("%.9ef" % v for v in c.astype(np.float32))
        print(f"static const float {name}[{len(c)}] = {{{vals}}};")


if __name__ == "__main__":
    main()
