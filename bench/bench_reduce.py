#!/usr/bin/env python3
"""Reductions and softmax against NumPy, measured side by side.

    python3 bench/bench_reduce.py [N]        (default N = 10**8 float32 elements)

Prints Markdown on stdout (bench/run_all.sh collects it): the time of

  * sum and max over N f32 (a full reduction): np.sum / np.max against libgoblin's
    SUM / REDUCE_MAX;
  * softmax over the last axis of [N/1000, 1000] f32: NumPy's stable softmax as one
    writes it (x - max, exp, / sum, with temporaries) and in its best case (every step
    in place into one preallocated buffer), against libgoblin's SOFTMAX;

with libgoblin on the BLIS backend with 1 and 2 threads (and GOBLIN_BENCH_THREADS if
set to something else), writing into a caller buffer, and the ratios NumPy time /
goblin time (above 1 means goblin is faster; NumPy runs these single-threaded). Each
figure is the median of several runs after one warm-up run. The script also checks
that the results agree (goblin's SUM is blocked, NumPy's pairwise: they differ in the
last bits, within SUM's contract). The library comes from $GOBLIN_LIB (else the
newest build, see tests/python/goblin_ct.py).
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

COLS = 1000


def median_time(fn, reps):
    fn()  # warm-up: page faults, caches, thread pools
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


class OneOp:
    """A one-node graph over one f32 input and an executor that writes into a caller buffer."""

    def __init__(self, op, shape, backend, threads, **attrs):
        self.g = G.Graph()
        x = self.g.input("f32", shape)
        self.g.output(self.g.op(op, x, **attrs))
        p = G.ExecParams()
        G.lib.goblin_exec_params_default(C.byref(p))
        p.backend = G.BACKENDS[backend]
        p.threads = threads
        self.ex = C.c_void_p()
        e = G.lib.goblin_exec_new(C.byref(self.ex), self.g.h, C.byref(p))
        if e:
            raise G.GoblinError(e, "exec_new")

    def bind(self, x, out):
        self.keep = (x, out)
        self.tin = (G.Tensor * 1)(G.to_tensor(x, "f32"))
        self.tout = (G.Tensor * 1)(G.to_tensor(out, "f32"))

    def run(self):
        e = G.lib.goblin_exec_run(self.ex, self.tin, 1, self.tout, 1)
        if e:
            raise G.GoblinError(e, G.lib.goblin_exec_error(self.ex).decode())

    def __del__(self):
        if getattr(self, "ex", None):
            G.lib.goblin_exec_free(self.ex)
            self.ex = None


def np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_softmax_inplace(x, out):
    np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=-1, keepdims=True)


def main():
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 10**8
    n -= n % COLS
    reps = int(os.environ.get("GOBLIN_BENCH_REPS", "5"))
    thread_counts = [1, 2]
    env_t = int(os.environ.get("GOBLIN_BENCH_THREADS", "0") or 0)
    if env_t > 0 and env_t not in thread_counts:
        thread_counts.append(env_t)
    if not G.backend_available("blis"):
        print("The BLIS backend is not built: nothing to measure.")
        return

    rng = np.random.default_rng(1)
    x = rng.standard_normal(n, dtype=np.float32)
    x2 = x.reshape(n // COLS, COLS)
    print(f"N = {n:,} float32 ({n * 4 / 2**20:.0f} MiB); softmax over [{n // COLS:,}, {COLS}]; "
          f"median of {reps} runs after a warm-up; NumPy {np.__version__} (single-threaded ufuncs "
          f"and reductions); libgoblin BLIS backend with the thread counts shown, results written "
          f"into a caller buffer.")
    print()

    rows = []  # (what, numpy label, numpy seconds, {threads: goblin seconds}, check)
    # -- sum / max over all N
    for op, npfn, label in (("sum", np.sum, "np.sum(x)"), ("reduce_max", np.max, "np.max(x)")):
        t_np = median_time(lambda: npfn(x), reps)
        want = npfn(x)
        tg, got = {}, None
        for t in thread_counts:
            r = OneOp(op, (n,), "blis", t)
            out = np.zeros((), np.float32)
            r.bind(x, out)
            tg[t] = median_time(r.run, reps)
            if got is None:
                got = float(out)
            elif float(out) != got:
                raise SystemExit(f"{op}: result depends on the thread count")
        if op == "sum":
            rel, _ = G.contract("sum", "f32", n)
            exact = float(np.sum(x, dtype=np.float64))
            bound = rel * float(np.sum(np.abs(x), dtype=np.float64))
            ok = abs(got - exact) <= bound
            check = f"goblin {got:.6g}, numpy {float(want):.6g}, exact {exact:.6g}"
        else:
            ok = got == float(want)
            check = f"goblin {got:.6g}, numpy {float(want):.6g}"
        if not ok:
            raise SystemExit(f"{op}: wrong result ({check})")
        rows.append((f"{op} over [{n:,}]", label, t_np, tg, check))

    # -- softmax over rows of 1000
    out = np.empty_like(x2)
    t_np = median_time(lambda: np_softmax(x2), reps)
    t_np_ip = median_time(lambda: np_softmax_inplace(x2, out), reps)
    want = out.copy()
    del out
    tg = {}
    outs = {}
    for t in thread_counts:
        r = OneOp("softmax", x2.shape, "blis", t, axis=-1)
        o = np.empty_like(x2)
        r.bind(x2, o)
        tg[t] = median_time(r.run, reps)
        outs[t] = o
        del r
    base = outs[thread_counts[0]]
    for t in thread_counts[1:]:
        if not np.array_equal(outs[t].view(np.uint32), base.view(np.uint32)):
            raise SystemExit("softmax: result depends on the thread count")
    err = float(np.max(np.abs(base - want)))
    rel, ab = G.contract("softmax", "f32", COLS)
    if err > rel + ab:
        raise SystemExit(f"softmax: max |goblin - numpy| = {err:g} over the contract")
    outs.clear()
    del base
    check = f"max abs diff vs numpy {err:.2g}"
    rows.append((f"softmax over [{n // COLS:,}, {COLS}]", "stable softmax, as written", t_np, tg, check))
    rows.append((f"softmax over [{n // COLS:,}, {COLS}]", "stable softmax, in place", t_np_ip, tg, check))

    head = "| op | NumPy | NumPy ms | " + " | ".join(f"goblin {t}T ms" for t in thread_counts)
    head += " | " + " | ".join(f"ratio {t}T" for t in thread_counts) + " | check |"
    print(head)
    print("|" + "---|" * (4 + 2 * len(thread_counts)))
    for what, label, t_np, tg, check in rows:
        cells = [what, label, f"{t_np * 1e3:.1f}"]
        cells += [f"{tg[t] * 1e3:.1f}" for t in thread_counts]
        cells += [f"**{t_np / tg[t]:.2f}**" if t == 2 else f"{t_np / tg[t]:.2f}" for t in thread_counts]
        cells.append(check)
        print("| " + " | ".join(cells) + " |")
    print()
    print("ratio = NumPy time / goblin time with that many threads (goal >= 1.0 at 2 threads). "
          "Results are bit-identical across thread counts (checked above).")


if __name__ == "__main__":
    main()
