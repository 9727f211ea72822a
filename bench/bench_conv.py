#!/usr/bin/env python3
"""CONV2D on the BLIS backend against PyTorch's CPU conv2d, measured side by side.

    python3 bench/bench_conv.py

The layer is a CNN's first convolution: x [64, 3, 32, 32], weight [64, 3, 3, 3],
bias [64], stride 1, padding 1 (f32). Both run with the same thread count
(GOBLIN_BENCH_THREADS, default 2; torch.set_num_threads). libgoblin runs a
one-node CONV2D graph through a reused executor into a caller buffer; torch
allocates its output as a user's call would. Each figure is the median of
several runs after warm-ups. Prints Markdown on stdout (bench/run_all.sh
collects it); the goal is libgoblin / torch speed >= 0.8. Also times a 3x3
64 -> 64 layer on 16 x 16 (the CNN's second convolution) for context.
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


def median_time(fn, reps, warm=3):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts)


class Conv:
    """A one-node CONV2D graph and an executor on the BLIS backend."""

    def __init__(self, xs, ws, threads, padding):
        self.g = G.Graph()
        ix, iw, ib = self.g.input("f32", xs), self.g.input("f32", ws), self.g.input("f32", ws[:1])
        self.g.output(self.g.op("conv2d", ix, iw, ib, padding=[padding]))
        p = G.ExecParams()
        G.lib.goblin_exec_params_default(C.byref(p))
        p.backend = G.BACKENDS["blis"]
        p.threads = threads
        self.ex = C.c_void_p()
        e = G.lib.goblin_exec_new(C.byref(self.ex), self.g.h, C.byref(p))
        if e:
            raise G.GoblinError(e, "exec_new")

    def bind(self, x, w, b, out):
        self.keep = (x, w, b, out)
        self.tin = (G.Tensor * 3)(*[G.to_tensor(v, "f32") for v in (x, w, b)])
        self.tout = (G.Tensor * 1)(G.to_tensor(out, "f32"))

    def run(self):
        e = G.lib.goblin_exec_run(self.ex, self.tin, 3, self.tout, 1)
        if e:
            raise G.GoblinError(e, G.lib.goblin_exec_error(self.ex).decode())

    def __del__(self):
        if getattr(self, "ex", None):
            G.lib.goblin_exec_free(self.ex)
            self.ex = None


def main():
    import torch
    import torch.nn.functional as F

    threads = int(os.environ.get("GOBLIN_BENCH_THREADS", "2") or 2)
    reps = int(os.environ.get("GOBLIN_BENCH_REPS", "30"))
    torch.set_num_threads(threads)
    if not G.backend_available("blis"):
        print("BLIS backend not built: nothing to measure.")
        return
    rng = np.random.default_rng(1)
    layers = [((64, 3, 32, 32), (64, 3, 3, 3)), ((64, 64, 16, 16), (64, 64, 3, 3))]
    print(f"conv2d f32, stride 1, padding 1, bias; {threads} threads for both "
          f"(torch {torch.__version__}, mkldnn {'on' if torch.backends.mkldnn.is_available() else 'off'}); "
          f"median of {reps} runs after warm-up.\n")
    print("| x | weight | GFLOP | libgoblin ms | torch ms | **torch / libgoblin** | "
          "libgoblin GF/s | max abs diff |")
    print("|---|---|---|---|---|---|---|---|")
    for xs, ws in layers:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        b = rng.standard_normal(ws[:1]).astype(np.float32)
        out = np.empty((xs[0], ws[0], xs[2], xs[3]), np.float32)
        conv = Conv(xs, ws, threads, 1)
        conv.bind(x, w, b, out)
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        with torch.no_grad():
            def tconv():
                return F.conv2d(tx, tw, tb, padding=1)
            tg, _ = median_time(conv.run, reps)
            tt, _ = median_time(tconv, reps)
            # a second interleaved pass: the machine is shared, keep the better median
            tg = min(tg, median_time(conv.run, reps, 1)[0])
            tt = min(tt, median_time(tconv, reps, 1)[0])
            diff = float(np.max(np.abs(out - tconv().numpy())))
        fl = 2.0 * xs[0] * ws[0] * xs[2] * xs[3] * ws[1] * ws[2] * ws[3] * 1e-9
        print(f"| {list(xs)} | {list(ws)} | {fl:.3f} | {tg * 1e3:.2f} | {tt * 1e3:.2f} | "
              f"**{tt / tg:.2f}** | {fl / tg:.1f} | {diff:.1e} |")
        sys.stdout.flush()
        del conv
    print("\nRatios above 1 mean libgoblin is faster (goal >= 0.8). libgoblin does im2col "
          "and a BLIS gemm per image, or per block of small images (up to 512 KB of im2col side by side), "
          "blocks split across the threads.")


if __name__ == "__main__":
    main()
