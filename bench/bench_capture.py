#!/usr/bin/env python3
"""Captured-graph inference on the embedded grid against PyTorch eager on the CPU.

    python3 bench/bench_capture.py

Three models (an MLP, a small CNN with batch-norm in eval form, a transformer encoder
block) are captured with goblin.capture and run with grid.run on an embedded grid of
T workers x 1 thread (T = GOBLIN_BENCH_THREADS, default all cores), the batch split into
tasks by the node; PyTorch runs the same module eagerly under no_grad with
torch.set_num_threads(T). Both sides get the same NumPy/torch input each time and the
goblin output is checked against torch's. Each figure is the median of
GOBLIN_BENCH_CAPTURE_REPS (default 7) runs after a warm-up. The grid runs with its
default verification (adaptive replication: a new worker's tasks are all replicated,
so early jobs pay up to 2x), again once the workers' trust is built (replication at its
min_replication floor of 25%, as on a grid whose workers have been up a while), and
with verify='spot' (the node recomputes a few secret rows of each
checked task: every task with min_replication=1, then at the trust-built rate), and
with verify='none' to show what verification costs, and the same captured graph is evaluated directly in this process (Graph.evaluate
on the BLIS backend with T threads, no grid) to tell kernel time from runtime overhead.
Markdown on stdout, progress on stderr. Needs the goblin package installed
(pip install .) and torch.
"""
import os
import statistics
import sys
import time


def log(*a):
    print(*a, file=sys.stderr, flush=True)


THREADS = int(os.environ.get("GOBLIN_BENCH_THREADS") or os.cpu_count() or 2)
REPS = int(os.environ.get("GOBLIN_BENCH_CAPTURE_REPS", "7"))
# Agreed replica pairs after which "trust built" is measured: a pair credits both of its
# workers, so 30 pairs per worker give each about 60 agreements, which at the default
# trust_halflife of 20 puts its replication rate at the min_replication floor.
TRUST_AGREEMENTS = 30 * THREADS


def median_time(fn, reps=REPS):
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def build_models(torch):
    nn, F = torch.nn, torch.nn.functional

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2, self.l3 = nn.Linear(512, 1024), nn.Linear(1024, 1024), nn.Linear(1024, 256)

        def forward(self, x):
            return self.l3(F.gelu(self.l2(F.relu(self.l1(x)))))

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32)
            self.c2, self.b2 = nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64)
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
            x = F.max_pool2d(F.relu(self.b2(self.c2(x))), 2)
            return F.log_softmax(self.head(F.adaptive_avg_pool2d(x, 1).flatten(1)), dim=1)

    class Block(nn.Module):
        def __init__(self, d=256, heads=8):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(a)
            return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))

    torch.manual_seed(0)
    return [("MLP 512-1024-1024-256", MLP().eval(), torch.randn(4096, 512)),
            ("CNN 2 conv + BN, 32x32", CNN().eval(), torch.randn(256, 3, 32, 32)),
            ("Transformer block d=256 h=8 t=64", Block().eval(), torch.randn(64, 64, 256))]


def main():
    try:
        import numpy as np
        import torch
        import goblin
    except ImportError as e:
        print(f"Not run: {e} (needs the goblin package installed with `pip install .`, and torch).")
        return 0
    if not hasattr(goblin, "connect"):
        print("Not run: the installed goblin package has no grid (goblin.connect).")
        return 0
    torch.set_num_threads(THREADS)
    print(f"Captured inference: goblin.capture + grid.run on an embedded grid of {THREADS} workers x 1 "
          f"thread vs PyTorch {torch.__version__} eager (no_grad, torch.set_num_threads({THREADS})). "
          f"Median of {REPS} runs after a warm-up; speed = torch time / goblin time (> 1: goblin faster).\n")
    print("| model | batch | torch ms | goblin ms (replicate) | speed | goblin ms (replicate, trust built) | speed "
          "| goblin ms (spot, every task) | speed | goblin ms (spot, trust built) | speed "
          "| goblin ms (verify='none') | speed | verification cost (replicate cold / built; spot every / built) "
          "| goblin direct ms (no grid) | max rel. error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with goblin.connect(workers=THREADS, threads=1) as grid:
        for name, m, x in build_models(torch):
            log(f"[capture] {name}")
            cg = goblin.capture(m, x)
            xn = x.numpy()
            with torch.no_grad():
                ref = m(x).numpy()
                t_torch = median_time(lambda: m(x))
            out = grid.run(cg, xn, progress=False)
            err = float(np.abs(out - ref).max() / max(1.0, float(np.abs(ref).max())))
            t_ver = median_time(lambda: grid.run(cg, xn, progress=False))
            # Every task spot-checked (min_replication 1: no task skips the check).
            t_spot = median_time(lambda: grid.run(cg, xn, verify="spot", min_replication=1.0, progress=False))
            # Trust built: run verified jobs until the workers' agreements put the replication
            # rate at its floor (min_replication 0.25 by default: 1 / (1 + a / 20) <= 0.25 once a
            # worker has 60 agreements), as on a grid whose workers have been up for a while.
            for _ in range(200):
                if grid.stats()["replicas_agreed"] >= TRUST_AGREEMENTS:
                    break
                grid.run(cg, xn, progress=False)
            t_built = median_time(lambda: grid.run(cg, xn, progress=False))
            t_spot_b = median_time(lambda: grid.run(cg, xn, verify="spot", progress=False))
            t_none = median_time(lambda: grid.run(cg, xn, verify="none", progress=False))
            t_direct = median_time(lambda: cg.evaluate(xn, backend="blis", threads=THREADS))
            print(f"| {name} | {x.shape[0]} | {t_torch * 1e3:.1f} | {t_ver * 1e3:.1f} | {t_torch / t_ver:.2f} | "
                  f"{t_built * 1e3:.1f} | {t_torch / t_built:.2f} | "
                  f"{t_spot * 1e3:.1f} | **{t_torch / t_spot:.2f}** | "
                  f"{t_spot_b * 1e3:.1f} | {t_torch / t_spot_b:.2f} | "
                  f"{t_none * 1e3:.1f} | {t_torch / t_none:.2f} | "
                  f"{100 * (t_ver / t_none - 1):+.0f}% / {100 * (t_built / t_none - 1):+.0f}%; "
                  f"{100 * (t_spot / t_none - 1):+.0f}% / {100 * (t_spot_b / t_none - 1):+.0f}% | "
                  f"{t_direct * 1e3:.1f} | {err:.2g} |")
            sys.stdout.flush()
        s = grid.stats()
    print(f"\nGrid counters after the runs: {s['tasks_completed']} tasks, {s['replicas_issued']} replicas "
          f"({s['replicas_agreed']} agreed), {s['spot_checks']} spot-checks ({s['spot_rows_checked']} rows), "
          f"{s['node_recomputed']} recomputed on the node, {s['results_rejected']} rejected.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
