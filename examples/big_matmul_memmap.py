# %% [markdown]
# # A big matrix product over memory-mapped files, on a goblin grid
#
# `grid.matmul` takes NumPy arrays and `np.memmap`s. On the embedded grid
# (`goblin.connect()`: a node and worker threads in this process) the node reads
# only the panels of A and B each task needs and writes C's tiles straight into
# the output memmap, so none of the three has to fit in RAM at once. Every tile
# is verified (Freivalds' check) before it is written.
#
# Run it as a script (`python3 examples/big_matmul_memmap.py`) or cell by cell in
# an editor that knows `# %%` cells. `GOBLIN_EXAMPLE_N` sets the size (default
# 3000; 40000 makes three 6 GiB f32 files), `GOBLIN_EXAMPLE_DIR` where the files go
# (default: a temporary directory, removed at the end).

# %%
import os
import shutil
import tempfile
import time

import numpy as np

import goblin

N = int(os.environ.get("GOBLIN_EXAMPLE_N", "3000"))
DIR = os.environ.get("GOBLIN_EXAMPLE_DIR") or tempfile.mkdtemp(prefix="goblin-memmap-")
os.makedirs(DIR, exist_ok=True)
paths = {x: os.path.join(DIR, f"{x}.npy") for x in "abc"}
print(f"n = {N}: A, B and C are {N * N * 4 / 2**30:.2f} GiB each (f32), in {DIR}")

# %% [markdown]
# Write A and B block by block, as a real pipeline would, without holding them in memory.

# %%
rng = np.random.default_rng(0)
for x in "ab":
    m = np.lib.format.open_memmap(paths[x], mode="w+", dtype=np.float32, shape=(N, N))
    for r in range(0, N, 1024):
        m[r:r + 1024] = rng.standard_normal((min(1024, N - r), N), dtype=np.float32)
    m.flush()
    del m
A = np.load(paths["a"], mmap_mode="r")
B = np.load(paths["b"], mmap_mode="r")

# %% [markdown]
# Connect. With no URL this is the embedded grid; `goblin.connect("tls+tcp://node:7700",
# fingerprint="...")` talks to a running goblin-node instead (there the tensors are sent,
# or, for files the node can see, `grid.matmul_files(a_path, b_path, c_path)`).

# %%
grid = goblin.connect()
print(grid)

# %%
C = np.lib.format.open_memmap(paths["c"], mode="w+", dtype=np.float32, shape=(N, N))
t0 = time.perf_counter()
grid.matmul(A, B, out=C)          # a progress bar while it runs; Ctrl-C cancels the job
C.flush()
dt = time.perf_counter() - t0
print(f"{2 * N**3 / dt / 1e9:.1f} GFLOP/s ({dt:.2f} s)")

# %% [markdown]
# Check a few rows against NumPy, under the matmul contract |C - AB| <= gamma_k |A||B|.

# %%
rows = rng.choice(N, size=min(8, N), replace=False)
a_rows = np.asarray(A[rows], np.float64)
ref = a_rows @ np.asarray(B, np.float64)
u = np.finfo(np.float32).eps / 2
gamma = N * u / (1 - N * u)
bound = gamma * (np.abs(a_rows) @ np.abs(np.asarray(B, np.float64)))
err = np.abs(np.asarray(C[rows], np.float64) - ref)
print(f"max error {err.max():.3g}, {float((err / bound).max()):.3f} of the contract bound")
assert np.all(err <= bound)

# %%
s = grid.stats()
print({k: s[k] for k in ("tasks_issued", "tasks_accepted", "results_rejected", "tasks_reissued",
                         "workers_quarantined")})
for w in s["workers"]:
    print(f"worker {w['session_id']}: {w['accepted']} tiles accepted, {w['rejected']} rejected")

# %%
grid.close()
del A, B, C
if not os.environ.get("GOBLIN_EXAMPLE_DIR"):
    shutil.rmtree(DIR)
