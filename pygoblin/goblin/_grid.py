"""goblin.connect(): a grid, embedded in this process or a running goblin-node.

    with goblin.connect() as grid:                    # a node + worker threads in this process
        c = grid.matmul(a, b)                          # NumPy arrays or np.memmap, f32/f64
        y = grid.run(captured_model, x)                # a goblin.Graph, batch split into tasks
        grid.stats()["results_rejected"]

    grid = goblin.connect("tls+tcp://node.lab:7701", fingerprint="3f9a...")  # a running node

Both kinds run the same planner, scheduler and verification (the embedded grid talks to
its workers over inproc://). The extension (goblin._goblin.Grid) does the waiting: in
short slices with the GIL released, reporting progress between slices; Ctrl-C cancels
the job on the node and the grid stays usable.
"""
import os

import numpy as np

from . import _goblin
from . import _dtypes
from ._progress import Progress as _Progress

# The library's enums, by name (goblin/graph.h, node.h, verify.h). Graph jobs take these
# verification policies; "none" is short for "unsafe-none".
_SPLIT = _goblin.enum_values("split")
_COMBINE = _goblin.enum_values("combine")
_VERIFY = {k: v for k, v in _goblin.enum_values("verify").items() if k in ("checked", "replicate", "recompute",
                                                                           "spot", "unsafe-none")}
_VERIFY["none"] = _VERIFY["unsafe-none"]


def _count(v, what):
    """A task count: None (the default) or an int >= 1."""
    if v is None:
        return 0
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1:
        return int(v)
    raise _goblin.InvalidArgumentError(f"{what} must be a positive int (or None for the default), got {v!r}")


def _bytes(v, what):
    """An int of bytes, or a string like '512M', '2G', '1.5g', '4096' (goblin_size_parse)."""
    if v is None:
        return 0
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        if v <= 0:
            raise _goblin.InvalidArgumentError(f"{what} must be positive, got {v}")
        return int(v)
    if isinstance(v, str):
        try:
            n = _goblin.size_parse(v)
        except _goblin.GoblinError:
            n = 0
        if n >= 1:
            return n
    raise _goblin.InvalidArgumentError(f"{what}: expected a positive number of bytes or a size like "
                                       f"'512M', got {v!r}")


def _default_layout():
    """(workers, threads per worker): at least 2 workers, so that replication has two."""
    n = os.cpu_count() or 2
    if n <= 4:
        return max(2, n), 1
    return 4, n // 4


def _array(x, what):
    """NumPy arrays (memmaps included) as they are; NumPy scalars as 0-d arrays; torch
    tensors through .numpy() (no copy on the CPU). Anything else is refused."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, np.generic):
        return np.asarray(x)
    if hasattr(x, "detach") and hasattr(x, "numpy") and hasattr(x, "dtype"):
        from ._capture import _to_numpy
        return _to_numpy(x)[0]
    raise TypeError(f"{what}: expected a numpy.ndarray or np.memmap, got {type(x).__name__} "
                    "(convert it with numpy.asarray first)")


def _per(spec, table, n, what, unit):
    """None, one name for all, or a sequence of names (one per input/output) -> ints."""
    if spec is None:
        return None
    names = [spec] * n if isinstance(spec, str) else list(spec)
    if len(names) != n:
        raise _goblin.InvalidArgumentError(f"{what}: expected {n} entries (one per {unit}), got {len(names)}")
    out = []
    for s in names:
        key = s.lower() if isinstance(s, str) else None
        if key not in table:
            raise _goblin.InvalidArgumentError(f"{what}: unknown rule {s!r} (expected one of "
                                               f"{', '.join(sorted(set(table)))})")
        out.append(table[key])
    return out


class Grid:
    """A connection to a grid (see goblin.connect). Use as a context manager or call close().

    kind: 'embedded' or 'remote'; url: the node's URL; closed: True after close().
    """

    def __init__(self, native, workers=None):
        self._native = native
        self._workers = workers

    # -- state -------------------------------------------------------------------------
    @property
    def kind(self):
        return self._native.kind

    @property
    def url(self):
        return self._native.url

    @property
    def closed(self):
        return self._native.closed

    @property
    def workers(self):
        """Embedded: the workers started. Remote: the workers connected to the node now."""
        if self.kind == "embedded":
            return self._native.n_workers
        if self.closed:
            return None
        return self.stats()["workers_connected"]

    def __repr__(self):
        state = "closed" if self.closed else "open"
        if self.kind == "embedded":
            workers = f"{self._native.n_workers} x {self._workers} thread(s)" if self._workers else \
                str(self._native.n_workers)
        else:
            try:
                workers = str(self.workers) if not self.closed else "-"
            except _goblin.GoblinError:
                workers = "?"
        return f"<goblin.Grid {self.kind} url={self.url} workers={workers} {state}>"

    def close(self):
        """Stop the embedded grid (its node and worker threads) or disconnect. Idempotent.
        Trainers made by grid.train() are closed first."""
        from ._train import close_trainers

        close_trainers(self)
        self._native.close()

    def _check_open(self):
        if self.closed:
            raise _goblin.ClosedError("the grid is closed (goblin.connect() opens a new one)")

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def stats(self):
        """The node's counters: tasks_issued, tasks_accepted (= results_accepted),
        results_rejected, tasks_reissued, workers_quarantined, every other counter of the
        node, rejected_by_reason, jobs_* (this connection's jobs) and `workers`, one dict
        per worker that ever connected."""
        return self._native.stats()

    # -- matmul ---------------------------------------------------------------------------
    def matmul(self, a, b, out=None, progress=True, min_tasks=None, task_memory=None):
        """C = A @ B on the grid. A [m, k] and B [k, n]: NumPy arrays or np.memmap, both
        float32 or both float64, any strides. out: an array or np.memmap [m, n] of the same
        dtype to write into (embedded: the node writes into it directly; remote: the result
        is copied into it). Returns out (or a new array). progress: True (a bar), False, or
        a callable progress(done_tasks, total_tasks). Ctrl-C cancels the job."""
        self._check_open()
        a = _array(a, "matmul: A")
        b = _array(b, "matmul: B")
        if out is not None:
            out = _array(out, "matmul: out")
            if np.may_share_memory(out, a) or np.may_share_memory(out, b):
                raise _goblin.InvalidArgumentError("matmul: out must not overlap A or B")
        if a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0] and \
                a.dtype == b.dtype and a.dtype in (np.float32, np.float64) and 0 in (*a.shape, b.shape[1]):
            # An empty product has no tasks: C is all zeros (or empty).
            if out is None:
                return np.zeros((a.shape[0], b.shape[1]), a.dtype)
            if out.shape == (a.shape[0], b.shape[1]) and out.dtype == a.dtype:
                out[...] = 0
                return out
        p = _Progress(progress, "goblin matmul")
        try:
            return self._native.matmul(a, b, out, p.callback, _count(min_tasks, "min_tasks"),
                                       _bytes(task_memory, "task_memory"))
        finally:
            p.close()

    def matmul_files(self, a_path, b_path, c_path, progress=True, min_tasks=None, task_memory=None):
        """C = A @ B over .npy files. Remote: the files lie on the NODE's disk (paths as the
        node sees them); A and B are memory-mapped there and C created there; only tiles
        travel to workers, never the paths. Embedded: the same, on this machine.
        min_tasks, task_memory: as for matmul (sent to a remote node with the job)."""
        self._check_open()
        mt, tm = _count(min_tasks, "min_tasks"), _bytes(task_memory, "task_memory")
        p = _Progress(progress, "goblin matmul")
        try:
            self._native.matmul_files(os.fspath(a_path), os.fspath(b_path), os.fspath(c_path), p.callback,
                                      mt, tm)
            return None
        finally:
            p.close()

    # -- graphs -----------------------------------------------------------------------------
    def run(self, graph, *inputs, split=None, combine=None, chunk_rows=None, verify="checked",
            progress=True, min_tasks=None, task_memory=None, min_replication=None, trust_halflife=None,
            spot_rows=None, batch_dims=None, **variables):
        """Evaluate a goblin.Graph (or a captured PyTorch program) on the grid.

        Inputs are NumPy arrays (memmaps included; torch tensors are taken through .numpy())
        whose dtypes and shapes match the graph's inputs; a captured graph is re-captured
        for another batch size. The node cuts batched inputs along their batch dim into
        chunks of chunk_rows samples (None: as many as fit a worker's memory), one task per
        chunk: the batch dim is found by tracing the graph (dim 0 first; [seq, batch, ...]
        layouts such as nn.MultiheadAttention's default are cut along dim 1; see
        docs/graph-format.md, "The batch axis"). split: per input 'batch' or 'broadcast'
        (None: batch for every input whose batch dim equals input 0's). combine: per output 'auto', 'concat', 'sum', 'mean', 'max',
        'min'. verify: 'checked' (default: the worker returns the graph's matmul products,
        the node checks them by Freivalds' algorithm and evaluates the rest itself; where the
        graph has no product or too much other work, 'replicate'), 'replicate' (adaptive
        replication), 'spot' (the node
        recomputes spot_rows secret rows of each checked task, and every row holding a NaN
        or inf, and compares: a few per cent of the work; for graphs whose outputs are all
        'concat', i.e. computed row by row), 'recompute' (every task recomputed by the node)
        or 'none' (benchmarks only). min_replication / trust_halflife: the adaptive trust of
        'replicate' and 'spot' (the least share of a trusted worker's tasks checked; the
        agreements that halve that share). Returns one NumPy array, or a tuple of them when
        the graph has several outputs.

        graph may be a goblin.formula: its variables are given by position or by name
        (grid.run(f, a=1.5, x=xs)); numbers become constants, arrays are split as above
        (default: 'batch' for arrays of the result's rank and longest dim 0).

        batch_dims: per input, the dim holding the batch (None: unbatched); default: the
        captured graph's g.batch_dims (goblin.capture(..., batch_dims=...), or inferred
        there, e.g. dim 1 for a seq-first nn.LSTM). Inputs whose batch is not dim 0 are
        moved batch-first (a copy) for a graph that permutes them back."""
        from ._graph import Graph
        from ._formula import Formula
        self._check_open()
        if isinstance(graph, Formula):
            graph, inputs, split = graph._for_grid(inputs, variables, split)
        elif variables:
            raise TypeError(f"run() got unexpected keyword argument(s) {', '.join(sorted(variables))} "
                            "(inputs by name are for a goblin.formula)")
        if not isinstance(graph, Graph):
            raise TypeError(f"run: expected a goblin.Graph (or goblin.capture(...)), got {type(graph).__name__}")
        arrays = [_array(x, f"run: input {i}") for i, x in enumerate(inputs)]
        captured = hasattr(graph, "grid_form")
        if captured:
            graph = graph.for_inputs([a.shape for a in arrays])
            graph, arrays, split = graph.grid_form(arrays, split, batch_dims)
        elif batch_dims is not None:
            if any(d not in (0, None) for d in batch_dims):
                raise _goblin.InvalidArgumentError("run: batch_dims other than 0 need a graph from goblin.capture; "
                                                   "for a goblin.Graph, take the input batch-first and permute it "
                                                   "inside the graph")
            if split is None:
                split = ["batch" if d is not None else "broadcast" for d in batch_dims]
        want = graph.inputs
        if len(arrays) != len(want):
            raise _goblin.InvalidArgumentError(f"run: the graph takes {len(want)} input(s), got {len(arrays)}")
        for i, (a, t) in enumerate(zip(arrays, want)):
            npdt = np.dtype(_dtypes.to_numpy(t.dtype))
            if a.dtype != npdt:
                raise _goblin.DTypeError(f"run: input {i}: the graph takes {t.dtype}"
                                         f"{' (passed as float32)' if t.dtype == 'bf16' else ''}, got a "
                                         f"{a.dtype} array (insert a cast, e.g. arr.astype(...))")
            if tuple(a.shape) != tuple(t.shape):
                raise _goblin.ShapeError(f"run: input {i}: the graph takes shape {tuple(t.shape)}, got "
                                         f"{tuple(a.shape)}")
        if verify not in _VERIFY:
            raise _goblin.InvalidArgumentError(f"run: verify must be 'checked', 'replicate', 'spot', 'recompute' or "
                                               f"'none', got {verify!r}")
        if spot_rows is not None and (not isinstance(spot_rows, (int, np.integer)) or not 1 <= spot_rows <= 65535):
            raise _goblin.InvalidArgumentError(f"run: spot_rows must be an int in 1..65535, got {spot_rows!r}")
        if chunk_rows is not None and (not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1):
            raise _goblin.InvalidArgumentError(f"run: chunk_rows must be a positive int, got {chunk_rows!r}")
        n_out = len(graph.outputs)
        p = _Progress(progress, "goblin run")
        try:
            outs = self._native.run(
                graph._g, arrays, _per(split, _SPLIT, len(arrays), "split", "input"),
                _per(combine, _COMBINE, n_out, "combine", "output"), int(chunk_rows or 0), _VERIFY[verify],
                p.callback, _count(min_tasks, "min_tasks"), _bytes(task_memory, "task_memory"),
                -1.0 if min_replication is None else float(min_replication),
                -1.0 if trust_halflife is None else float(trust_halflife), int(spot_rows or 0))
        except _goblin.ShapeError as e:
            if captured and getattr(graph, "batch_dims", None) is None and "batch" in str(e):
                why = getattr(graph, "_dims_why", None)
                raise _goblin.ShapeError(f"{e}\n  (where the batch sits in each input: pass batch_dims=(dim per "
                                         f"input, None for an unbatched one) to goblin.capture or grid.run"
                                         f"{'; ' + why if why else ''})") from None
            raise
        finally:
            p.close()
        return outs[0] if len(outs) == 1 else outs

    def train(self, model, loss_fn=None, **kw):
        """Train a torch module on this grid: goblin._train.Trainer (optimizer=, batch_size=, ...)."""
        from . import _train
        return _train.train(self, model, loss_fn, **kw)


def connect(url=None, *, ca=None, fingerprint=None, credential=None, server_name=None, workers=None,
            threads=None, memory=None, verify="freivalds", backend=None, connect_timeout=10.0,
            timeout=120.0):
    """Open a grid.

    goblin.connect() starts an embedded grid: a node and `workers` worker threads in this
    process (default: at least 2 workers, os.cpu_count() threads in all), each with
    `threads` kernel threads and a `memory` budget per worker (bytes or '512M'); every
    result is verified as on a real grid (verify: 'freivalds' for matmul tiles, or
    'recompute').

    goblin.connect("tls+tcp://host:port", fingerprint=... or ca=...) (or "tcp://..." on
    loopback) connects to the client gateway of a running goblin-node; a node that does
    not answer within connect_timeout seconds raises GoblinConnectionError or
    GoblinTimeoutError, a certificate that does not match raises AuthError. credential= is the
    researcher credential the node's operator made for you (`goblin-node researcher add
    EMAIL`, a string "gbr1_..."); without one, the environment variable GOBLIN_CREDENTIAL is
    used if set. A wrong, revoked or missing one raises AuthError at connect (only a node
    started with --open, on loopback, takes clients without one). Jobs belong to you: no
    other researcher can see, cancel or fetch them.
    """
    if url is None:
        if any(v is not None for v in (ca, fingerprint, credential, server_name)):
            raise _goblin.InvalidArgumentError("ca/fingerprint/credential/server_name are for a node URL; "
                                               "goblin.connect() without a URL starts an embedded grid")
        dw, dt = _default_layout()
        w = dw if workers is None else workers
        t = (dt if workers is None else 1) if threads is None else threads
        if not isinstance(w, (int, np.integer)) or isinstance(w, bool) or not 1 <= w <= 256:
            raise _goblin.InvalidArgumentError(f"workers must be an int between 1 and 256, got {w!r}")
        if not isinstance(t, (int, np.integer)) or isinstance(t, bool) or t < 0:
            raise _goblin.InvalidArgumentError(f"threads must be an int >= 0, got {t!r}")
        if verify not in ("freivalds", "recompute", "unsafe-none"):
            raise _goblin.InvalidArgumentError("verify must be 'freivalds' or 'recompute' "
                                               "('unsafe-none' for benchmarks only)")
        native = _goblin.Grid.local(int(w), int(t), _bytes(memory, "memory"), verify, backend)
        return Grid(native, workers=int(t) or None)
    if not isinstance(url, str):
        raise TypeError(f"url must be a string like 'tls+tcp://host:port', got {type(url).__name__}")
    if any(v is not None for v in (workers, threads, memory, backend)):
        raise _goblin.InvalidArgumentError("workers/threads/memory/backend are for the embedded grid; a "
                                           "node's workers are its own")
    if not url.startswith(("tcp://", "tls+tcp://", "ipc://", "inproc://")):
        raise _goblin.InvalidArgumentError(f"unsupported URL {url!r} (tls+tcp://host:port, or tcp:// on "
                                           "loopback)")
    if credential is None:
        credential = os.environ.get("GOBLIN_CREDENTIAL") or None
    if credential is not None:
        if not isinstance(credential, str):
            raise TypeError(f"credential must be a str, got {type(credential).__name__}")
        credential = credential.strip()
        if not 1 <= len(credential) <= 256:
            raise _goblin.InvalidArgumentError("a credential must have 1 to 256 characters")
    ca = os.fspath(ca) if ca is not None else None
    native = _goblin.Grid.remote(url, ca, fingerprint, server_name, float(connect_timeout), float(timeout),
                                 credential)
    return Grid(native)
