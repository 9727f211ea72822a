# %% [markdown]
# # Inference of a captured PyTorch model on a goblin grid
#
# `goblin.capture` turns a PyTorch module into a goblin graph (catalogue ops and
# constants, no names); `grid.run` evaluates it on a grid: the node cuts the batch
# into chunks, one task per chunk, checks results by replication on two workers
# (or recomputation), and concatenates the outputs in order.
#
# Run as a script or cell by cell. Set `GOBLIN_NODE_URL` (and
# `GOBLIN_NODE_FINGERPRINT` for tls+tcp://) to use a running goblin-node instead of the
# embedded grid.

# %%
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import goblin

# %% [markdown]
# A small transformer encoder block, in eval mode.

# %%
class EncoderBlock(nn.Module):
    def __init__(self, d=64, heads=4):
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
model = EncoderBlock().eval()
x = torch.randn(256, 32, 64)

# %% [markdown]
# Capture once for this batch shape (torch.export under the hood).

# %%
g = goblin.capture(model, x)
print(g)
print(sorted({g.node(i).op for i in range(len(g))}))

# %%
url = os.environ.get("GOBLIN_NODE_URL")
grid = goblin.connect(url, fingerprint=os.environ.get("GOBLIN_NODE_FINGERPRINT")) if url else goblin.connect()
print(grid)

# %% [markdown]
# Run it: 16 rows per task here (by default the node picks as many rows as fit a
# worker's memory, then cuts finer so every worker gets work).

# %%
t0 = time.perf_counter()
y = grid.run(g, x.numpy(), chunk_rows=16)
print(f"grid.run: {time.perf_counter() - t0:.3f} s, output {y.shape} {y.dtype}")

with torch.no_grad():
    ref = model(x).numpy()
rel = float(np.abs(y - ref).max() / np.abs(ref).max())
print(f"max relative difference from torch: {rel:.2g}")
assert rel < 1e-4

# %% [markdown]
# What the verification did: replicas issued and agreed, tasks the node recomputed itself,
# results rejected (none, with honest workers).

# %%
s = grid.stats()
print({k: s[k] for k in ("tasks_completed", "replicas_issued", "replicas_agreed", "node_recomputed",
                         "results_rejected", "workers_quarantined")})

# %% [markdown]
# The same run with spot-checks: instead of a second worker computing each task, the node
# recomputes a few secretly chosen rows of each result (and every row holding a NaN or an
# inf) and compares them, for a few per cent of the work. It fits inference over a batch,
# where every output row depends on its input row only (docs/verification.md).

# %%
t0 = time.perf_counter()
y2 = grid.run(g, x.numpy(), chunk_rows=16, verify="spot")
print(f"grid.run(verify='spot'): {time.perf_counter() - t0:.3f} s")
assert np.array_equal(y2, y)
s = grid.stats()
print({k: s[k] for k in ("spot_checks", "spot_rows_checked", "results_escalated", "results_rejected")})

# %% [markdown]
# Several outputs come back as a tuple; partial reductions are combined on the node
# (here: a sum and a max over the batch, computed per chunk and combined in order).

# %%
def summary(h):
    return h.sum(dim=0), h.amax(dim=0)


hs = torch.randn(1000, 64, dtype=torch.float64)
total, peak = grid.run(goblin.capture(summary, hs), hs.numpy(), chunk_rows=100)
assert np.allclose(total, hs.sum(0).numpy()) and np.array_equal(peak, hs.amax(0).numpy())

# %%
grid.close()
