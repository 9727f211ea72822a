"""bench/bench_train.py - training rounds on the embedded grid vs a torch CPU training step.

    python3 bench/bench_train.py

For the CNN of examples/train_cnn.py (batch 64 of 16x16 images) and the char GPT of
examples/train_lm.py (batch 32 x 32 tokens, 41 symbols): the median time of one round
of grid.train() on an embedded grid of GOBLIN_BENCH_THREADS workers x 1 thread (every
task replicated on two workers and compared: min_replication 1.0, the trainer's
default), against the median time of the same training step in PyTorch on the CPU
(forward, backward, AdamW step; torch.set_num_threads(GOBLIN_BENCH_THREADS)). The
round is one micro-batch (the whole batch in one task; its replica runs on the second
worker at the same time) and, in a second row, 4 micro-batches. "verify" is the share
of the round the lab's process spent verifying (round info verify_seconds / seconds).
Markdown on stdout, progress on stderr.

Environment: GOBLIN_BENCH_THREADS (default 2), GOBLIN_BENCH_TRAIN_ROUNDS (default 40,
after 2 warm-up rounds).
"""
import os
import statistics
import sys
import time

THREADS = int(os.environ.get("GOBLIN_BENCH_THREADS", "2") or 2)
ROUNDS = int(os.environ.get("GOBLIN_BENCH_TRAIN_ROUNDS", "40"))
WARMUP = 2
HERE = os.path.dirname(os.path.abspath(__file__))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def main():
    try:
        import numpy as np
        import torch
        import goblin
    except ImportError as e:
        print(f"Not run: {e} (needs the goblin package installed with `pip install .`, and torch).")
        return 0
    if not hasattr(goblin, "connect") or not hasattr(goblin._goblin, "Trainer"):
        print("Not run: the installed goblin package has no grid trainer (grid.train).")
        return 0
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
    import train_cnn
    import train_lm
    F = torch.nn.functional
    torch.set_num_threads(THREADS)
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

    print(f"Training rounds: grid.train() on an embedded grid of {THREADS} workers x 1 thread, every task "
          f"replicated and compared, vs one torch CPU training step ({THREADS} threads); AdamW; median of "
          f"{ROUNDS} rounds after {WARMUP} warm-up rounds. torch is timed before and after the grid's rounds; "
          f"the ratio uses the faster of the two (goal <= 1.5x).\n")
    print("| model | micro-batches | goblin round | torch step (before / after the rounds) | goblin / torch "
          "| verify share | tasks/round |")
    print("|---|---|---|---|---|---|---|")
    grid = goblin.connect(workers=THREADS, threads=1)
    try:
        for name, make, loss_fn, (x, y), b in cases:
            def torch_step_time():
                torch.manual_seed(0)
                model = make()
                opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
                ts = []
                for r in range(ROUNDS + WARMUP):
                    xb, yb = x[r * b:(r + 1) * b], y[r * b:(r + 1) * b]
                    t0 = time.perf_counter()
                    opt.zero_grad()
                    loss_fn(model(xb), yb).backward()
                    opt.step()
                    ts.append(time.perf_counter() - t0)
                return statistics.median(ts[WARMUP:])

            # torch is timed before and after the grid's rounds and its better median
            # kept: a small model's 2-thread step varies from run to run, and the
            # comparison should not flatter goblin.
            t_torch_before = torch_step_time()
            g_times = {}
            for mbs in (1, 4):
                torch.manual_seed(0)
                model = make()
                with grid.train(model, loss_fn, optimizer=goblin.optim.AdamW(lr=1e-3), batch_size=b,
                                micro_batch_size=b // mbs, progress=False) as tr:
                    infos = []
                    for r in range(ROUNDS + WARMUP):
                        infos.append(tr.step(x[r * b:(r + 1) * b], y[r * b:(r + 1) * b]))
                infos = infos[WARMUP:]
                t_g = statistics.median(i["seconds"] for i in infos)
                vs = sum(i["verify_seconds"] for i in infos)
                share = f"{100 * vs / sum(i['seconds'] for i in infos):.2f} %"
                g_times[mbs] = (t_g, share, infos[-1]["tasks"])
            t_torch_after = torch_step_time()
            t_torch = min(t_torch_before, t_torch_after)
            for mbs, (t_g, share, tasks) in g_times.items():
                log(f"{name}: {mbs} micro-batch(es): goblin {t_g * 1e3:.1f} ms, torch {t_torch * 1e3:.1f} ms "
                    f"(before {t_torch_before * 1e3:.1f}, after {t_torch_after * 1e3:.1f})")
                print(f"| {name} | {mbs} | {t_g * 1e3:.1f} ms | {t_torch * 1e3:.1f} ms "
                      f"({t_torch_before * 1e3:.1f} / {t_torch_after * 1e3:.1f}) | {t_g / t_torch:.2f}x | "
                      f"{share} | {tasks} |")
        st = grid.stats()
        print(f"\nNode: {st.get('results_accepted', 0)} results accepted, {st.get('replicas_agreed', 0)} replica "
              f"pairs agreed, {st.get('node_recomputed', 0)} tasks recomputed by the node, "
              f"{st.get('results_rejected', 0)} rejected.")
    finally:
        grid.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
