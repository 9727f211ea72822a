"""Train a small character-level GPT on a text file, on a goblin grid.

    python3 examples/train_lm.py                       # embedded grid, examples/data/village.txt
    python3 examples/train_lm.py book.txt --rounds 400
    python3 examples/train_lm.py --connect tcp://127.0.0.1:7702   # a running goblin-node

The text is tokenized here (one token per character) and only integers travel; each
round is a batch of random windows, cut into micro-batches (gradient accumulation) and
run as verified tasks on the grid; the trainer (libgoblin) applies AdamW with a warm-up +
cosine schedule and gradient clipping. Prints the loss of every round, then the held-out
loss (the last 10 % of the text, never trained on) against the unigram baseline (the
entropy of the character frequencies: what a model without context can do), and a
sample. Exit status 1 if the held-out loss is not clearly below the baseline.
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import goblin

HERE = os.path.dirname(os.path.abspath(__file__))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, 4 * d)
        self.ff2 = nn.Linear(4 * d, d)

    def forward(self, h):
        b, t, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).split(d, dim=2)

        def split(z):  # keep the batch leading: the trainer re-batches by micro-batch
            return z.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        a = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return h + self.ff2(F.gelu(self.ff1(self.ln2(h))))


class CharGPT(nn.Module):
    def __init__(self, vocab, context, d=48, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(context, d))
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied input/output embedding
        for n, p in self.named_parameters():
            if p.dim() >= 2 or n == "pos":
                nn.init.normal_(p, std=0.02)

    def forward(self, x):
        h = self.tok(x) + self.pos[:x.shape[1]]
        for b in self.blocks:
            h = b(h)
        return self.head(self.lnf(h))


def lm_loss(logits, targets):
    # logits [B, T, V] -> [B, V, T]: the batch stays the leading dim (no view(B * T, V))
    return F.cross_entropy(logits.transpose(1, 2), targets)


def windows(data, starts, t):
    idx = starts[:, None] + np.arange(t + 1)[None, :]
    w = data[idx]
    return torch.from_numpy(w[:, :-1].copy()), torch.from_numpy(w[:, 1:].copy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("text", nargs="?", default=os.path.join(HERE, "data", "village.txt"))
    ap.add_argument("--connect", metavar="URL", help="a goblin-node's client URL (default: embedded grid)")
    ap.add_argument("--fingerprint", help="the node's certificate fingerprint (tls+tcp://)")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--workers", type=int, help="embedded grid: worker threads")
    ap.add_argument("--memory", help="embedded grid: memory per worker, e.g. 64M")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with open(args.text, encoding="utf-8", errors="replace") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], dtype=np.int64)
    split = int(len(data) * 0.9)
    train, held = data[:split], data[split:]
    t = args.context
    if len(held) < t + 2 or len(train) < t + 2:
        sys.exit(f"{args.text}: too short for a context of {t}")

    # unigram baseline: cross-entropy of the training set's character frequencies on the held-out text
    counts = np.bincount(train, minlength=len(chars)).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    baseline = float(-logp[held].mean())

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = CharGPT(len(chars), t)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{os.path.basename(args.text)}: {len(text)} characters, vocabulary {len(chars)}, "
          f"model {n_params} parameters, context {t}")

    grid = goblin.connect(args.connect, fingerprint=args.fingerprint) if args.connect else \
        goblin.connect(workers=args.workers, memory=args.memory)
    print(f"grid: {grid!r}")
    opt = goblin.optim.AdamW(lr=args.lr, weight_decay=0.01)
    sched = goblin.optim.CosineWarmup(total_steps=args.rounds, warmup_steps=min(10, args.rounds - 1),
                                      warmup_start_factor=0.1, eta_min=args.lr / 10)
    t0 = time.time()
    with grid, grid.train(model, lm_loss, optimizer=opt, schedule=sched, clip_norm=1.0,
                          batch_size=args.batch, micro_batch_size=args.micro_batch) as trainer:
        for r in range(args.rounds):
            x, y = windows(train, rng.integers(0, len(train) - t - 1, size=args.batch), t)
            info = trainer.step(x, y)
            if r == 0:
                print(trainer.plan(args.batch))
            print(f"round {info['round']:4d}  loss {info['loss']:.4f}  lr {info['lr']:.2e}  "
                  f"tasks {info['tasks']}  {info['seconds']:.2f} s (verify {info['verify_seconds'] * 1e3:.2f} ms)")
        trainer.copy_to(model)
        st = grid.stats()
    print(f"{args.rounds} rounds in {time.time() - t0:.1f} s; node: {st.get('results_accepted', 0)} results "
          f"accepted, {st.get('results_rejected', 0)} rejected, {st.get('replicas_agreed', 0)} replica pairs agreed")

    # held-out loss with the trained weights (torch, on every held-out window start)
    model.eval()
    with torch.no_grad():
        starts = np.arange(0, len(held) - t - 1, t // 2)
        losses = []
        for s in range(0, len(starts), 256):
            x, y = windows(held, starts[s:s + 256], t)
            losses.append(float(lm_loss(model(x), y)) * len(x))
        held_loss = sum(losses) / len(starts)
        # a sample from a prompt of the held-out text (temperature 0.7, seeded)
        gen = torch.Generator().manual_seed(args.seed)
        ctx = list(held[:t])
        for _ in range(200):
            logits = model(torch.tensor([ctx[-t:]]))[0, -1]
            ctx.append(int(torch.multinomial(torch.softmax(logits / 0.7, -1), 1, generator=gen)))
    ln2 = math.log(2)
    print(f"unigram baseline: {baseline:.4f} nats/char ({baseline / ln2:.3f} bits)")
    print(f"held-out loss:    {held_loss:.4f} nats/char ({held_loss / ln2:.3f} bits), "
          f"{held_loss / baseline:.2f} of the baseline")
    print("sample: " + repr("".join(chars[i] for i in ctx)))
    if not held_loss < 0.8 * baseline:
        print("FAIL: the held-out loss is not clearly below the unigram baseline")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
