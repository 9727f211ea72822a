"""Train a small CNN on generated images, on a goblin grid.

    python3 examples/train_cnn.py                                  # embedded grid
    python3 examples/train_cnn.py --connect tcp://127.0.0.1:7702   # a running goblin-node
    python3 examples/train_cnn.py --task-memory 300K               # force pipeline stages + tiles

The images are made here: 16x16 RGB pictures of six shapes (horizontal bar, vertical
bar, diagonal, anti-diagonal, square outline, filled disc) at random places and sizes,
in random colours, with noise. The model is conv -> batch-norm -> ReLU -> max-pool (x2),
linear, ReLU, linear, trained with AdamW on the grid (every task verified), micro-batches
accumulating the gradients of each batch. Batch-norm trains with batch statistics; the
trainer does not track running statistics, so after training they are re-estimated here
by forward passes over training batches (torch, cumulative average) before evaluating
the held-out accuracy in eval mode.
"""
import argparse
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import goblin

CLASSES = ["horizontal", "vertical", "diagonal", "anti-diagonal", "square", "disc"]


def make_images(n, size, rng):
    """n images [n, 3, size, size] (float32) and labels [n] (int64)."""
    x = np.zeros((n, 3, size, size), np.float32)
    y = rng.integers(0, len(CLASSES), n)
    ii, jj = np.mgrid[0:size, 0:size]
    for k in range(n):
        s = rng.integers(size // 3, size - 2)           # extent of the shape
        r0, c0 = rng.integers(0, size - s + 1, 2)        # its top-left corner
        w = rng.integers(1, 3)                           # stroke width
        u, v = ii - r0, jj - c0
        inside = (u >= 0) & (u < s) & (v >= 0) & (v < s)
        cls = y[k]
        if cls == 0:
            m = inside & (np.abs(u - s // 2) < w)
        elif cls == 1:
            m = inside & (np.abs(v - s // 2) < w)
        elif cls == 2:
            m = inside & (np.abs(u - v) < w)
        elif cls == 3:
            m = inside & (np.abs(u + v - (s - 1)) < w)
        elif cls == 4:
            m = inside & ((u < w) | (u >= s - w) | (v < w) | (v >= s - w))
        else:
            m = inside & ((u - (s - 1) / 2) ** 2 + (v - (s - 1) / 2) ** 2 <= (s / 2) ** 2)
        colour = rng.uniform(0.4, 1.0, 3).astype(np.float32)
        x[k] = m[None] * colour[:, None, None]
    x += rng.normal(0, 0.15, x.shape).astype(np.float32)
    return x, y.astype(np.int64)


class SmallCNN(nn.Module):
    def __init__(self, classes=len(CLASSES), size=16):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * (size // 4) ** 2, 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.c1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.c2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))  # flatten(1): the batch stays dim 0


def recalibrate_batch_norm(model, x, batch):
    """Running statistics from forward passes in train mode (cumulative average)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for s in range(0, len(x) - batch + 1, batch):
            model(torch.from_numpy(x[s:s + batch]))
    model.eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connect", metavar="URL", help="a goblin-node's client URL (default: embedded grid)")
    ap.add_argument("--fingerprint", help="the node's certificate fingerprint (tls+tcp://)")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--micro-batch", type=int,
                    help="rows per task (default 16; with --task-memory: the largest that fits)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--train-images", type=int, default=3840)
    ap.add_argument("--task-memory", help="per-task memory budget, e.g. 300K (forces stages and tiles)")
    ap.add_argument("--workers", type=int, help="embedded grid: worker threads")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    if args.micro_batch is None:
        args.micro_batch = 0 if args.task_memory else 16
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    xtr, ytr = make_images(args.train_images, 16, rng)
    xte, yte = make_images(1000, 16, rng)
    model = SmallCNN()
    print(f"{len(xtr)} training / {len(xte)} held-out images of {len(CLASSES)} shapes; model "
          f"{sum(p.numel() for p in model.parameters())} parameters")

    grid = goblin.connect(args.connect, fingerprint=args.fingerprint) if args.connect else \
        goblin.connect(workers=args.workers)
    print(f"grid: {grid!r}")
    t0 = time.time()
    with grid, grid.train(model, F.cross_entropy, optimizer=goblin.optim.AdamW(lr=args.lr),
                          batch_size=args.batch, micro_batch_size=args.micro_batch,
                          task_memory=args.task_memory) as trainer:
        infos = trainer.fit((xtr, ytr), rounds=args.rounds)   # a progress bar with the loss
        print(trainer.plan(args.batch))
        step = max(1, len(infos) // 12)
        for i in infos[::step] + ([infos[-1]] if (len(infos) - 1) % step else []):
            print(f"round {i['round']:4d}  loss {i['loss']:.4f}  tasks {i['tasks']}  {i['seconds']:.2f} s "
                  f"(verify {i['verify_seconds'] * 1e3:.2f} ms)")
        trainer.copy_to(model)
        st = grid.stats()
    print(f"{args.rounds} rounds in {time.time() - t0:.1f} s; node: {st.get('results_accepted', 0)} results "
          f"accepted, {st.get('results_rejected', 0)} rejected, {st.get('replicas_agreed', 0)} replica pairs agreed")
    recalibrate_batch_norm(model, xtr, args.batch)
    with torch.no_grad():
        pred = model(torch.from_numpy(xte)).argmax(1).numpy()
    acc = float((pred == yte).mean())
    print(f"held-out accuracy: {acc:.3f} (chance {1 / len(CLASSES):.3f})")
    return 0 if acc > 2.0 / len(CLASSES) else 1


if __name__ == "__main__":
    sys.exit(main())
