#!/usr/bin/env python3
"""FORMULA against NumPy on the same expression, measured side by side.

    python3 bench/bench_formula.py [N]        (default N = 10**8 float32 elements)

Prints Markdown on stdout (bench/run_all.sh collects it): the time of
`a * exp(-b * x) + c` with scalars a, b, c and a vector x of N f32, for

  * NumPy as one writes it (temporaries for every operation; single-threaded),
  * NumPy with every operation in place into one preallocated buffer (its best case),
  * libgoblin's FORMULA op (one fused pass) on the BLIS backend with 1 and 2 threads
    (and GOBLIN_BENCH_THREADS if set to something else), writing into a caller buffer,
    and on the reference backend (1 thread),

and the ratios NumPy time / goblin time (above 1 means goblin is faster). Each
figure is the median of several interleaved rounds after one warm-up run. The library comes
from $GOBLIN_LIB (else the newest build, see tests/python/goblin_ct.py).
"""
import ctypes as C
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import goblin_ct as G  # noqa: E402

EXPR = "a * exp(-b * x) + c"


class Formula:
    """A one-node FORMULA graph and an executor, run into a caller buffer."""

    def __init__(self, n, backend, threads):
        self.g = G.Graph()
        ids = {v: self.g.input("f32", ()) for v in "abc"}
        ids["x"] = self.g.input("f32", (n,))
        self.g.output(self.g.formula(EXPR, **ids))
        p = G.ExecParams()
        G.lib.goblin_exec_params_default(C.byref(p))
        p.backend = G.BACKENDS[backend]
        p.threads = threads
        self.ex = C.c_void_p()
        e = G.lib.goblin_exec_new(C.byref(self.ex), self.g.h, C.byref(p))
        if e:
            raise G.GoblinError(e, "exec_new")

    def bind(self, a, b, c, x, out):
        self.keep = (a, b, c, x, out)
        self.tin = (G.Tensor * 4)(*[G.to_tensor(v, "f32") for v in (a, b, c, x)])
        self.tout = (G.Tensor * 1)(G.to_tensor(out, "f32"))

    def run(self):
        e = G.lib.goblin_exec_run(self.ex, self.tin, 4, self.tout, 1)
        if e:
            raise G.GoblinError(e, G.lib.goblin_exec_error(self.ex).decode())

    def __del__(self):
        if getattr(self, "ex", None):
            G.lib.goblin_exec_free(self.ex)
            self.ex = None


def main():
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 10**8
    reps = int(os.environ.get("GOBLIN_BENCH_REPS", "5"))
    rng = np.random.default_rng(1)
    x = rng.uniform(-10.0, 10.0, n).astype(np.float32)
    a, b, c = (np.array(v, dtype=np.float32) for v in (1.5, 0.75, -0.25))
    print(f"[bench_formula] N = {n}, {reps} runs per figure", file=sys.stderr)

    def numpy_naive():
        return a * np.exp(-b * x) + c

    tmp = np.empty_like(x)

    def numpy_inplace():
        np.multiply(x, -b, out=tmp)
        np.exp(tmp, out=tmp)
        np.multiply(tmp, a, out=tmp)
        np.add(tmp, c, out=tmp)
        return tmp

    threads = [1, 2]
    env_t = int(os.environ.get("GOBLIN_BENCH_THREADS", "0") or 0)
    if env_t > 0 and env_t not in threads:
        threads.append(env_t)
    configs = [("ref", 1)] + ([("blis", t) for t in threads] if G.backend_available("blis") else [])
    out = np.empty_like(x)
    formulas = []
    for backend, t in configs:
        f = Formula(n, backend, t)
        f.bind(a, b, c, x, out)
        formulas.append(f)

    # Interleaved: each round times every implementation once, so that load from other
    # processes on a shared machine falls on all of them alike; medians per implementation.
    runs = [numpy_naive, numpy_inplace] + [f.run for f in formulas]
    times = [[] for _ in runs]
    for fn in runs:
        fn()  # warm-up: page faults, caches, thread pools
    for _ in range(reps):
        for k, fn in enumerate(runs):
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    med = [statistics.median(ts) for ts in times]
    t_np, t_np_in = med[0], med[1]

    expect = numpy_naive().astype(np.float64)
    # the terms' size: near a e^(-bx) == -c the result cancels, so relative error means little
    scale = np.abs(a * np.exp(-b * x)).astype(np.float64) + abs(float(c))
    rows = []
    for (backend, t), f, secs in zip(configs, formulas, med[2:]):
        f.run()
        err = float(np.max(np.abs(out - expect) / scale)) / 2.0**-24  # in f32 unit roundoffs
        rows.append((backend, t, secs, err))

    gbs = lambda s: 8.0 * n / s / 1e9  # noqa: E731  (4 bytes read + 4 written per element)
    print(f"`{EXPR}` on N = {n:.0e} float32 elements (a, b, c scalars); median of {reps} runs.\n")
    print("| implementation | threads | time (ms) | GB/s (x read + out written) | "
          "NumPy / this | NumPy in-place / this | max diff vs NumPy (u of the terms) |")
    print("|---|---|---|---|---|---|---|")
    print(f"| NumPy (temporaries) | 1 | {t_np * 1e3:.1f} | {gbs(t_np):.2f} | 1.00 | "
          f"{t_np_in / t_np:.2f} | 0 |")
    print(f"| NumPy (in place, out=) | 1 | {t_np_in * 1e3:.1f} | {gbs(t_np_in):.2f} | "
          f"{t_np / t_np_in:.2f} | 1.00 | - |")
    for backend, t, secs, err in rows:
        print(f"| goblin FORMULA, {backend} backend | {t} | {secs * 1e3:.1f} | {gbs(secs):.2f} | "
              f"**{t_np / secs:.2f}** | {t_np_in / secs:.2f} | {err:.1f} |")
    print("\nRatios above 1 mean FORMULA is faster. The goblin rows write into a caller-provided "
          "output buffer (the executor writes in place); NumPy's first row allocates its "
          "temporaries as a user would. The last column is max |goblin - NumPy| / (|a e^(-bx)| + "
          "|c|) in units of 2^-24 (both sides round; NumPy has its own exp).")
    print(f"\nMachine load average when done: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
          "(other processes share the cores; ratios are measured side by side).")


if __name__ == "__main__":
    main()
