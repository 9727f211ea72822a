#!/usr/bin/env python3
"""Fit the double-precision polynomials of libgoblin/random.h (goblin__rng_log,
goblin__rng_ksin, goblin__rng_kcos: the log and cos(2 pi t) of Box-Muller sampling).

    pip install numpy mpmath && python3 tools/fit_rng_f64.py      (a few seconds)

Each kernel is a fixed leading part plus a polynomial P(z) whose error we minimize in
the units that matter for the final double result (the error of the polynomial term
relative to the function value):

  log:  log(1+f) = 2 atanh(s) = 2s + s R(z),  s = f/(2+f),  z = s^2,  R(z) = z P(z),
        P of degree 6 (L1..L7),  0 <= z <= (3 - 2 sqrt 2)^2 (m = 1+f in [sqrt2/2, sqrt2]),
        error measured as  s z dP / log(1+f)  =  z dP / (2 atanh(s)/s)
  sin:  sin x = x + x^3 P(z),            z = x^2, P of degree 5 (S1..S6), |x| <= pi/4,
        error  x^3 dP / sin x
  cos:  cos x = 1 - x^2/2 + x^4 P(z),    z = x^2, P of degree 5 (C1..C6), |x| <= pi/4,
        error  x^4 dP / cos x

The fit is a Remez exchange in mpmath arithmetic (50 digits) on a dense Chebyshev grid
of z, so the weighted error equioscillates (the minimax polynomial for that grid). The
coefficients are then rounded to double one at a time, lowest power first, refitting
the remaining ones after each rounding so later coefficients absorb earlier rounding
errors. The script prints, per kernel, the minimax error and the error of the rounded
double coefficients (checked on a 5x finer grid), as -log2 (53 would be half an ulp).

It also derives the split constants of the argument handling:
  ln2_hi  ln2 rounded to 42 significant bits, so k * ln2_hi is exact for |k| < 2^11
          (the log's exponent k is at most 1076 in magnitude, subnormals included)
  ln2_lo  ln2 - ln2_hi rounded to double
  pio2_hi pi/2 rounded to double;  pio2_lo  pi/2 - pio2_hi rounded to double

The kernels' accuracy in double arithmetic is measured by the unit test
Test(random, log_and_cos2pi_are_accurate) (tests/unit/test_ops_unary.c) against long
double libm, independently of this script.
"""
import numpy as np
import mpmath as mp

mp.mp.dps = 50


def cheb_grid(b, n):
    """n Chebyshev points of the first kind on (0, b) plus the endpoint b (mpf, sorted)."""
    pts = [b * (1 - mp.cos(mp.pi * (2 * k + 1) / (2 * n))) / 2 for k in range(n)]
    return sorted(pts) + [b]


def remez(xs, target, weight, powers, iters=60):
    """Coefficients c (for x^powers[k]) minimizing max_i |weight_i (sum c_k x_i^p_k - target_i)|
    over the discrete grid xs; returns (c, max error)."""
    n = len(powers)
    m = len(xs)
    basis = [[x ** p for p in powers] for x in xs]
    ref = [int(round((m - 1) * (1 - np.cos(np.pi * i / n)) / 2)) for i in range(n + 1)]
    best = None
    for _ in range(iters):
        A = mp.matrix(n + 1, n + 1)
        rhs = mp.matrix(n + 1, 1)
        for r, j in enumerate(ref):
            for k in range(n):
                A[r, k] = weight[j] * basis[j][k]
            A[r, n] = -((-1) ** r)
            rhs[r] = weight[j] * target[j]
        sol = mp.lu_solve(A, rhs)
        c = [sol[k] for k in range(n)]
        lev = abs(sol[n])
        err = [weight[j] * (mp.fsum(ck * bk for ck, bk in zip(c, basis[j])) - target[j])
               for j in range(m)]
        emax = max(abs(e) for e in err)
        if best is None or emax < best[1]:
            best = (c, emax)
        if emax - lev <= emax * mp.mpf(2) ** -20:
            break
        # exchange: the largest |err| of every run of one sign, then trim to n + 1
        ext = []
        for j in range(m):
            if err[j] == 0:
                continue
            if ext and (err[ext[-1]] > 0) == (err[j] > 0):
                if abs(err[j]) > abs(err[ext[-1]]):
                    ext[-1] = j
            else:
                ext.append(j)
        while len(ext) > n + 1:
            if len(ext) == n + 2:
                ext.pop(0 if abs(err[ext[0]]) < abs(err[ext[-1]]) else -1)
                continue
            i = min(range(len(ext)), key=lambda q: abs(err[ext[q]]))
            if i == 0 or i == len(ext) - 1:
                ext.pop(i)
            else:
                nb = i - 1 if abs(err[ext[i - 1]]) < abs(err[ext[i + 1]]) else i + 1
                for q in sorted((i, nb), reverse=True):
                    ext.pop(q)
        if len(ext) < n + 1:
            break  # degenerate (cannot happen for these smooth targets); keep the best
        ref = ext
    return best


def fit_rounded(xs, target, weight, deg):
    """Minimax fit of P(z) = sum_{k<=deg} c_k z^k, then round c_0, c_1, ... to double one
    at a time, refitting the rest. Returns (minimax error, coefficients as doubles)."""
    powers = list(range(deg + 1))
    _, e0 = remez(xs, target, weight, powers)
    fixed = []
    tgt = list(target)
    for k in range(deg + 1):
        c, _ = remez(xs, tgt, weight, powers[k:])
        ck = float(c[0])
        fixed.append(ck)
        tgt = [t - mp.mpf(ck) * x ** k for t, x in zip(tgt, xs)]
    return e0, fixed


def max_err(xs, target, weight, coef):
    return max(abs(w * (mp.polyval(coef[::-1], x) - t)) for x, t, w in zip(xs, target, weight))


def lg(e):
    return float(-mp.log(e, 2))


def log_kernel(z):
    s = mp.sqrt(z)
    a = 2 * mp.atanh(s) / s  # log(1+f) / s
    return (a - 2) / z, z / a


def sin_kernel(z):
    x = mp.sqrt(z)
    sx = mp.sin(x)
    return (sx - x) / (x * z), x * z / sx


def cos_kernel(z):
    x = mp.sqrt(z)
    cx = mp.cos(x)
    return (cx - 1 + z / 2) / (z * z), z * z / cx


def tables(kernel, b, n):
    xs = cheb_grid(b, n)
    with mp.workdps(2 * mp.mp.dps):  # the targets cancel for small z: extra digits
        tw = [kernel(x) for x in xs]
    return xs, [+t for t, _ in tw], [+w for _, w in tw]


def main():
    zlog = (3 - 2 * mp.sqrt(2)) ** 2 * (1 + mp.mpf(2) ** -40)  # s is rounded: a hair beyond
    ztrig = (mp.pi / 4) ** 2 * (1 + mp.mpf(2) ** -40)
    out = []
    for name, prefix, kernel, b, deg in (("log", "L", log_kernel, zlog, 6),
                                         ("sin", "S", sin_kernel, ztrig, 5),
                                         ("cos", "C", cos_kernel, ztrig, 5)):
        xs, t, w = tables(kernel, b, 600)
        e0, coef = fit_rounded(xs, t, w, deg)
        xf, tf, wf = tables(kernel, b, 3000)
        ed = max_err(xf, tf, wf, coef)
        print(f"{name}: minimax error 2^-{lg(e0):.2f}, with double coefficients 2^-{lg(ed):.2f} "
              f"(relative to the function value)")
        out.append((name, prefix, coef))
    ln2 = mp.log(2)
    ln2_hi = float(mp.nint(ln2 * 2 ** 42)) / 2 ** 42
    ln2_lo = float(ln2 - mp.mpf(ln2_hi))
    pio2_hi = float(mp.pi / 2)
    pio2_lo = float(mp.pi / 2 - mp.mpf(pio2_hi))
    n = int(ln2_hi * 2 ** 53)  # exact: ln2_hi is in [1/2, 1)
    hi_bits = n.bit_length() - (n & -n).bit_length() + 1
    print(f"ln2_hi has {hi_bits} significant bits; |ln2 - ln2_hi - ln2_lo| = "
          f"2^-{lg(abs(ln2 - ln2_hi - ln2_lo)):.1f}; "
          f"|pi/2 - pio2_hi - pio2_lo| = 2^-{lg(abs(mp.pi / 2 - pio2_hi - pio2_lo)):.1f}")
    print()
    print(f"const double ln2_hi = {ln2_hi:.17e}, ln2_lo = {ln2_lo:.17e};")
    print(f"const double pio2_hi = {pio2_hi:.17e}, pio2_lo = {pio2_lo:.17e};")
    for name, prefix, coef in out:
        print(f"/* {name} */")
        for k, c in enumerate(coef):
            print(f"const double {prefix}{k + 1} = {c:.17e}; /* {c.hex()} */")


if __name__ == "__main__":
    main()
