"""bench/bench_checked.py - checked execution against no verification and replication.

    python3 bench/bench_checked.py

For the CNN and the char GPT of bench_train.py (examples/train_cnn.py, batch 64 of 16x16
images; examples/train_lm.py, batch 32 x 32 tokens), grid.train() rounds on an embedded
grid of GOBLIN_BENCH_THREADS workers x 1 thread, one task a round, under verify 'none',
'checked' and 'replicate' (min_replication 1.0: every task twice). Per policy: the median
round time, the process CPU per round (time.process_time: workers and node together) and
the node's counters. Reported as ratios measured in this run:

- node CPU / task CPU: (CPU per round under 'checked' - CPU under 'none') / CPU under
  'none', i.e. what the node's checks (Freivalds passes and the cheap nodes it evaluates)
  cost against the task itself (goal <= 10 %); and the node's own verify_cpu_ns per
  task against the same task CPU;
- extra bytes per task: the products a checked RESULT carries (products_bytes / tasks),
  and that against the task's output bytes;
- round time against 'none' and against 'replicate'.

Where checked execution does not apply to a model (a CNN's convolutions are not checked
products yet, or too much of a task is other work) the node falls back to replication;
the table says so ("fell back"). Markdown on stdout, progress on stderr.

Environment: GOBLIN_BENCH_THREADS (default 2), GOBLIN_BENCH_CHECKED_ROUNDS (default 20,
after 2 warm-up rounds).
"""
import os
import statistics
import sys
import time

THREADS = int(os.environ.get("GOBLIN_BENCH_THREADS", "2") or 2)
ROUNDS = int(os.environ.get("GOBLIN_BENCH_CHECKED_ROUNDS", "20"))
WARMUP = 2
HERE = os.path.dirname(os.path.abspath(__file__))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def rounds(goblin, grid, make, loss_fn, x, y, b, verify, max_share=None):
    import torch
    torch.manual_seed(0)
    model = make()
    kw = {} if max_share is None else {"checked_max_share": max_share}
    st0 = grid.stats()
    times, cpus = [], []
    with grid.train(model, loss_fn, optimizer=goblin.optim.AdamW(lr=1e-3), batch_size=b, micro_batch_size=b,
                    progress=False, verify=verify, **kw) as tr:
        for r in range(ROUNDS + WARMUP):
            c0 = time.process_time()
            info = tr.step(x[r * b:(r + 1) * b], y[r * b:(r + 1) * b])
            c1 = time.process_time()
            if r >= WARMUP:
                times.append(info["seconds"])
                cpus.append(c1 - c0)
    st1 = grid.stats()
    d = {k: st1.get(k, 0) - st0.get(k, 0) for k in st1 if isinstance(st1.get(k), int)}
    return statistics.median(times), statistics.median(cpus), d


def main():
    try:
        import numpy as np
        import torch
        import goblin
    except ImportError as e:
        print(f"Not run: {e} (needs the goblin package installed with `pip install .`, and torch).")
        return 0
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
    import train_cnn
    import train_lm
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    xi, yi = train_cnn.make_images(64 * (ROUNDS + WARMUP), 16, rng)
    text = open(os.path.join(os.path.dirname(HERE), "examples", "data", "village.txt")).read()
    chars = sorted(set(text))
    data = np.array([chars.index(c) for c in text[:20000]], dtype=np.int64)
    starts = rng.integers(0, len(data) - 33, size=32 * (ROUNDS + WARMUP))
    xt, yt = train_lm.windows(data, starts, 32)
    cases = [("CNN (train_cnn.py), batch 64", lambda: train_cnn.SmallCNN(), F.cross_entropy,
              (torch.from_numpy(xi), torch.from_numpy(yi)), 64),
             ("char GPT (train_lm.py), batch 32 x 32", lambda: train_lm.CharGPT(len(chars), 32), train_lm.lm_loss,
              (xt, yt), 32)]
    print(f"Checked execution: grid.train() rounds on an embedded grid of {THREADS} workers x 1 thread, one task "
          f"a round, AdamW; medians of {ROUNDS} rounds after {WARMUP} warm-up rounds; CPU is the process's "
          f"(workers and node). 'checked (forced)' applies checked execution whatever the node's estimate of its "
          f"share (checked_max_share 1).\n")
    print("| model | policy | round | CPU / round | node CPU / task CPU | node verify CPU / task CPU | extra bytes "
          "/ task | round / none | round / replicate |")
    print("|---|---|---|---|---|---|---|---|---|")
    grid = goblin.connect(workers=THREADS, threads=1)
    try:
        for name, make, loss_fn, (x, y), b in cases:
            res = {}
            for label, verify, share in (("none", "none", None), ("replicate", "replicate", None),
                                         ("checked", "checked", None), ("checked (forced)", "checked", 1.0)):
                res[label] = rounds(goblin, grid, make, loss_fn, x, y, b, verify, share)
                t, c, d = res[label]
                log(f"{name}: {label}: round {t * 1e3:.1f} ms, cpu {c * 1e3:.1f} ms, tasks checked "
                    f"{d.get('tasks_checked', 0)}, replicas {d.get('replicas_issued', 0)}")
            t0, c0, _ = res["none"]
            tr = res["replicate"][0]
            for label in ("none", "replicate", "checked", "checked (forced)"):
                t, c, d = res[label]
                tasks = max(1, d.get("tasks_completed", 0))
                checked = d.get("tasks_checked", 0)
                if label.startswith("checked") and checked == 0:
                    note = "fell back to replicate"
                    ncpu = vcpu = extra = note
                elif label.startswith("checked"):
                    ncpu = f"{100 * (c - c0) / c0:.1f} %"
                    vcpu = f"{100 * d.get('verify_cpu_ns', 0) * 1e-9 / checked / c0:.1f} %"
                    extra = f"{d.get('products_bytes', 0) / checked / 1024:.0f} KiB"
                else:
                    ncpu = vcpu = extra = "-"
                print(f"| {name} | {label} | {t * 1e3:.1f} ms | {c * 1e3:.1f} ms | {ncpu} | {vcpu} | {extra} | "
                      f"{t / t0:.2f}x | {t / tr:.2f}x |")
    finally:
        grid.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
