"""grid.train(): train a PyTorch model on a grid, every task verified.

    grid = goblin.connect()
    trainer = grid.train(model, F.cross_entropy, optimizer=goblin.optim.AdamW(lr=3e-4),
                         batch_size=64, micro_batch_size=16)
    trainer.fit((images, labels), rounds=100)     # arrays: batches of batch_size in order
    info = trainer.step(x, y)                     # one round on one batch: loss, grad_norm, ...
    print(trainer.plan(64))                       # micro-batches, pipeline stages, tiles, memory
    model.load_state_dict(trainer.state_dict())
    trainer.save("ckpt.goblin"); trainer.load("ckpt.goblin")

The model and loss are captured once (goblin._capture_train: parameters as graph
inputs, batch-norm with batch statistics (running statistics updated as torch does), dropout
in training mode: goblin's counter-based
dropout, its masks keyed by (seed, round, index in the batch); `seed=`) on
the first batch (or `example=`); the trainer (libgoblin, goblin/train.h) holds the
parameters and optimizer state in this process and runs each round as verified graph
jobs on the grid: micro-batches (gradient accumulation, summed in a fixed order),
pipeline stages and tiles when a task would not fit a worker's memory budget.
Parameter names stay here: the grid sees shapes and values, never names.
"""
import os
import sys
import time
import weakref

import numpy as np

from . import _goblin
from . import _dtypes
from . import optim as _optim
from ._capture_train import capture_training

_VERIFY = {"checked": "checked", "replicate": "replicate", "recompute": "recompute", "none": "unsafe-none",
           "unsafe-none": "unsafe-none"}

# The live trainers of each native grid: a trainer holds its grid busy (the library's
# trainer borrows the grid's node or client), so Grid.close() closes them first.
# Keyed by id() of the native grid: a live trainer keeps its grid alive, so the id of a
# grid with live trainers is never reused.
_LIVE = {}


def close_trainers(grid):
    """Close every trainer of `grid` (a goblin.Grid or its native handle), so that the
    grid can be closed. Called by Grid.close()."""
    try:
        native = _native_grid(grid)
    except TypeError:
        return
    for t in list(_LIVE.pop(id(native), ())):
        t.close()


def _native_grid(grid):
    if isinstance(grid, _goblin.Grid):
        return grid
    native = getattr(grid, "_native", None)
    if isinstance(native, _goblin.Grid):
        return native
    raise TypeError(f"expected a grid from goblin.connect(), got {type(grid).__name__}")


def _bytes(v, what):
    if v is None:
        return 0
    from ._grid import _bytes as grid_bytes
    return grid_bytes(v, what)


def _as_array(x, what):
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        from ._capture import _to_numpy
        return _to_numpy(x)[0]
    if isinstance(x, (np.generic, int, float)):
        raise TypeError(f"{what}: a batch input must be an array batched on dim 0, got a scalar")
    raise TypeError(f"{what}: expected a numpy.ndarray or torch.Tensor, got {type(x).__name__}")


class TrainPlan(dict):
    """The trainer's plan for one batch size: a dict (batch, micro_batch, micro_batches,
    n_stages, stages [first_node, last_node, n_params, tiles, forward_task_bytes,
    backward_task_bytes, flops_per_row], budget_bytes, tasks_per_round) whose str() is
    the library's text form."""

    def __init__(self, info, text):
        super().__init__(info)
        self.text = text

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k) from None

    @property
    def tiled(self):
        """True when some stage's layer is cut into tiles."""
        return any(s["tiles"] > 1 for s in self["stages"])

    def __str__(self):
        return self.text

    def __repr__(self):
        return (f"<goblin.TrainPlan batch={self['batch']} micro_batch={self['micro_batch']} "
                f"x{self['micro_batches']} stages={self['n_stages']} tiled={self.tiled}>")


class _Bar:
    """Rounds progress: tqdm with the loss as postfix when installed, else a stderr line."""

    def __init__(self, enabled, total):
        self.bar = None
        self.enabled = bool(enabled)
        self.total = total
        self.tty = getattr(sys.stderr, "isatty", lambda: False)()
        self.t0 = time.monotonic()
        self.rounds = 0
        self.loss = None
        if not self.enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            self.bar = tqdm(total=total, desc="goblin train", unit="round")

    def tasks(self, done, total):
        if self.bar is not None:
            self.bar.set_description(f"goblin train ({done}/{total} tasks)", refresh=False)

    def round(self, info):
        if not self.enabled:
            return
        self.rounds += 1
        self.loss = info["loss"]
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{info['loss']:.4f}", refresh=False)
            self.bar.update(1)
            return
        n = info["round"] + 1
        line = f"goblin train: round {n}" + (f"/{self.total}" if self.total else "") + \
            f" loss {info['loss']:.4f} ({info['seconds']:.2f} s)"
        sys.stderr.write("\r" + line if self.tty else line + "\n")
        sys.stderr.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()  # tqdm leaves the bar, with its elapsed time
        elif self.enabled and self.rounds:
            from ._progress import format_seconds
            line = (f"goblin train: {self.rounds} round(s) in {format_seconds(time.monotonic() - self.t0)}, "
                    f"last loss {self.loss:.4f}")
            sys.stderr.write(("\r" + line.ljust(60)) if self.tty else line)
            sys.stderr.write("\n")
            sys.stderr.flush()


class Trainer:
    """Training of one torch module on a grid (made by grid.train(); see the module doc).

    step(*batch) runs one round; fit(data, rounds=N) runs N rounds; history holds every
    round's info (round, loss, grad_norm, lr, tasks, seconds, verify_seconds, rechecked,
    recheck_changed)."""

    def __init__(self, grid, model, loss_fn=None, optimizer=None, batch_size=None, micro_batch_size=None,
                 schedule=None, clip_norm=None, task_memory=None, max_stages=None, verify="checked",
                 min_replication=None, example=None, n_inputs=1, progress=True, capture=None, batch_dims=None,
                 checked_max_share=None, seed=None):
        self._grid = grid
        self._native_grid = _native_grid(grid)
        if self._native_grid.closed:
            raise _goblin.ClosedError("the grid is closed")
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer if optimizer is not None else _optim.AdamW()
        if not isinstance(self.optimizer, _optim.Optimizer):
            raise TypeError("optimizer must be goblin.optim.SGD(...) or goblin.optim.AdamW(...) "
                            "(the trainer applies the step itself)")
        self.schedule = schedule if schedule is not None else _optim.Constant()
        if not isinstance(self.schedule, _optim.Schedule):
            raise TypeError("schedule must be goblin.optim.Constant() or goblin.optim.CosineWarmup(...)")
        if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size < 1):
            raise _goblin.InvalidArgumentError(f"batch_size must be a positive int, got {batch_size!r}")
        if micro_batch_size is not None and (not isinstance(micro_batch_size, (int, np.integer)) or
                                             micro_batch_size < 0):
            raise _goblin.InvalidArgumentError(f"micro_batch_size must be an int >= 0 (0: the largest that "
                                               f"fits), got {micro_batch_size!r}")
        if verify not in _VERIFY:
            raise _goblin.InvalidArgumentError("verify must be 'checked', 'replicate' or 'recompute' ('none' for "
                                               "benchmarks only)")
        self.batch_size = None if batch_size is None else int(batch_size)
        self.micro_batch_size = int(micro_batch_size or 0)
        self._options = dict(self.optimizer.options())
        self._options.update(self.schedule.options())
        self._options.update({
            "clip_norm": float(clip_norm or 0.0), "micro_batch": self.micro_batch_size,
            "task_memory": _bytes(task_memory, "task_memory"), "max_stages": int(max_stages or 0),
            "verify": _VERIFY[verify]})
        if min_replication is not None:
            self._options["min_replication"] = float(min_replication)
        if checked_max_share is not None:
            self._options["checked_max_share"] = float(checked_max_share)
        self.n_inputs = int(n_inputs)
        self.seed = seed  # the dropout masks' seed (None: torch.initial_seed() at capture)
        self.batch_dims = batch_dims  # given, else the capture's (inferred on the first batch)
        self.progress = progress
        self.history = []
        self.capture = None
        self._t = None
        self._bar = None
        if capture is not None:
            from ._capture_train import TrainingCapture
            if not isinstance(capture, TrainingCapture):
                raise TypeError("capture must come from goblin.capture_training(model, loss_fn, *batch)")
            self._start(None, capture)
        elif example is not None:
            self._start(tuple(example))

    # -- setup -------------------------------------------------------------------
    def _start(self, batch, cap=None):
        if cap is None:
            import torch
            ex = [torch.from_numpy(np.ascontiguousarray(b)) if isinstance(b, np.ndarray) else b for b in batch]
            cap = capture_training(self.model, self.loss_fn, *ex, n_inputs=self.n_inputs,
                                   batch_dims=self.batch_dims, seed=self.seed)
        me = weakref.ref(self)

        def on_task(done, total):
            t = me()
            if t is not None and t._bar is not None:
                t._bar.tasks(done, total)

        self._t = _goblin.Trainer(self._native_grid, cap.graph._g, cap.n_params, cap.init, self._options,
                                  on_task)
        live = _LIVE.setdefault(id(self._native_grid), weakref.WeakSet())
        live.add(self)
        for k in [k for k, v in _LIVE.items() if not v]:
            del _LIVE[k]
        self.capture = cap
        self.batch_dims = cap.batch_dims
        if cap.batch_norms:  # the trainer tracks a batch-norm on batch data with the rows leading
            seen = {node for node, _, _, _ in self._t.batch_norm_stats()}
            lost = {p for node, (p, _) in cap.batch_norms.items() if node not in seen}
            for node in [n for n in cap.batch_norms if n not in seen]:
                del cap.batch_norms[node]
            if lost:
                import warnings
                from ._capture_train import BN_STATS
                warnings.warn(BN_STATS.format(n=len(lost)), UserWarning, stacklevel=3)
        self._np_dtypes = [_dtypes.to_numpy(d) for d in cap.data_dtypes]

    def _ready(self, what):
        if self._t is None:
            raise _goblin.StateError(f"{what}: the model is captured on the first batch: call step() or fit() "
                                     "first, or pass example=(inputs..., targets...) to grid.train()")
        return self._t

    def _batch(self, batch):
        arrs = []
        for i, b in enumerate(batch):
            a = _as_array(b, f"batch input {i}")
            if self._t is not None and i < len(self._np_dtypes):
                want = self._np_dtypes[i]
                if a.dtype != want:
                    if not np.can_cast(a.dtype, want, "same_kind"):
                        raise _goblin.DTypeError(f"batch input {i}: the model was captured with {want}, got "
                                                 f"{a.dtype}")
                    a = a.astype(want)
            arrs.append(a)
        if self._t is not None and len(arrs) == len(self.capture.batch_dims):  # else the library says so
            for i, (a, d) in enumerate(zip(arrs, self.capture.batch_dims)):
                if a.ndim <= d:
                    raise _goblin.ShapeError(f"batch input {i}: shape {a.shape} has no batch dim {d}")
            arrs = self.capture.batch_first(arrs)
        return arrs

    # -- rounds ------------------------------------------------------------------
    def step(self, *batch):
        """One round on one batch (the model's inputs, then the loss's targets): returns the
        round's info dict (round, loss, grad_norm, lr, tasks, seconds, verify_seconds,
        rechecked, recheck_changed)."""
        if not batch:
            raise TypeError("step() needs the batch: step(inputs, targets)")
        if self._t is None:
            self._start(batch)
        arrs = self._batch(batch)
        info = self._t.round(*arrs)
        if self.capture.batch_norms:
            self.capture.update_running_stats(self._t.batch_norm_stats())
        self.history.append(info)
        return info

    def _dims_for(self, data):
        """The batch dims of fit()'s arrays: given or captured; else captured here on a first
        batch (cut along dim 0, and again along the dims that capture finds, e.g. dim 1 for
        a seq-first nn.LSTM's input)."""
        if self.batch_dims is not None:
            d = self.batch_dims
            return tuple(d) if not isinstance(d, (int, np.integer)) else (int(d),) * len(data)
        n = int(data[0].shape[0])
        bs = min(self.batch_size or n, n)
        probe = [_as_array(x[:bs], "fit()") for x in data]
        import torch
        from ._capture_train import capture_training as cap_train
        cap = cap_train(self.model, self.loss_fn, *[torch.from_numpy(np.ascontiguousarray(b)) for b in probe],
                        n_inputs=self.n_inputs, seed=self.seed)
        dims = cap.batch_dims
        if not any(dims):
            self._start(None, cap)
        else:
            self.batch_dims = dims  # the first step captures again on a batch cut along them
        return dims

    @staticmethod
    def _arrays(data):
        return isinstance(data, (tuple, list)) and data and all(hasattr(x, "shape") for x in data)

    def _batches(self, data, dims=None):
        """Endless batches from arrays (in order, drop the incomplete last) or an iterable."""
        if self._arrays(data):
            data = [_as_array(x, f"fit(): array {i}") for i, x in enumerate(data)]
            dims = self._dims_for(data) if dims is None else dims
            if len(dims) != len(data) or any(x.ndim <= d for x, d in zip(data, dims)):
                raise _goblin.ShapeError(f"fit(): arrays of shapes {[tuple(x.shape) for x in data]} with batch dims "
                                         f"{tuple(dims)}")
            n = int(data[0].shape[dims[0]])
            if any(int(x.shape[d]) != n for x, d in zip(data, dims)):
                raise _goblin.ShapeError(f"fit(): the arrays must share the batch size along their batch dims "
                                         f"{tuple(dims)}")
            bs = self.batch_size or n
            if bs > n:
                raise _goblin.InvalidArgumentError(f"fit(): batch_size {bs} is larger than the data ({n} rows)")
            while True:
                for s in range(0, n - bs + 1, bs):
                    yield tuple(np.take(x, np.arange(s, s + bs), axis=d) if d else x[s:s + bs]
                                for x, d in zip(data, dims))
        else:
            while True:
                empty = True
                for b in data:
                    empty = False
                    yield tuple(b) if isinstance(b, (tuple, list)) else (b,)
                if empty:
                    raise _goblin.InvalidArgumentError("fit(): the data yielded no batch")

    def fit(self, data, rounds=None, progress=None):
        """Run `rounds` rounds (default: one pass over the data) on batches of `data`: a
        tuple of arrays/tensors sharing dim 0 (cut into batches of batch_size, in order,
        cycling; an incomplete last batch is skipped) or an iterable of batches (a torch
        DataLoader; restarted when exhausted). Shows a progress bar with the loss (tqdm when
        installed). Returns the rounds' info dicts."""
        dims = None
        if self._arrays(data):
            dims = self._dims_for([_as_array(x, f"fit(): array {i}") for i, x in enumerate(data)])
        if rounds is None:
            if dims is not None:
                n = int(data[0].shape[dims[0]])
                rounds = max(1, n // (self.batch_size or n))
            elif hasattr(data, "__len__"):
                rounds = len(data)
            else:
                raise _goblin.InvalidArgumentError("fit(): give rounds= for an iterable without a length")
        rounds = int(rounds)
        show = self.progress if progress is None else progress
        out = []
        self._bar = _Bar(show, rounds)
        try:
            it = self._batches(data, dims)
            for _ in range(rounds):
                info = self.step(*next(it))
                self._bar.round(info)
                out.append(info)
        finally:
            self._bar.close()
            self._bar = None
        return out

    # -- plan --------------------------------------------------------------------
    def plan(self, batch_size=None):
        """The plan for a batch of `batch_size` rows (default: the trainer's batch_size):
        micro-batches, pipeline stages (graph node ranges), tiles, memory per task."""
        t = self._ready("plan()")
        b = batch_size or self.batch_size or self.capture.batch_size
        return TrainPlan(t.plan(int(b)), t.plan_text(int(b)))

    # -- parameters ----------------------------------------------------------------
    @property
    def rounds(self):
        return 0 if self._t is None else self._t.rounds

    def parameters(self):
        """The current parameter values (NumPy copies) in the model's named_parameters() order."""
        t = self._ready("parameters()")
        return [t.get_param(i) for i in range(self.capture.n_params)]

    def state_dict(self):
        """The module's state_dict with the trained parameters (torch tensors): pass it to
        module.load_state_dict(). Batch-norm running statistics are the ones the rounds
        updated (torch's rule over each round's whole batch); other buffers as captured.
        A checkpoint (save/load) does not hold them: keep state_dict() with it."""
        import torch
        return self.capture.state_dict(self.parameters(), torch) if self._t is not None else \
            self.model.state_dict()

    def load_state_dict(self, sd):
        """Replace the parameters, and the batch-norm running statistics the trainer
        updates, from a state_dict (optimizer state is kept)."""
        t = self._ready("load_state_dict()")
        for i, v in enumerate(self.capture.params_from_state_dict(sd)):
            t.set_param(i, v)
        self._set_bn_buffers(sd)

    def _bn_keys(self):
        return [p + k for p, _ in self.capture.batch_norms.values()
                for k in ("running_mean", "running_var", "num_batches_tracked") if p + k in self.capture.buffers]

    def _set_bn_buffers(self, sd):
        for k in self._bn_keys():
            if k in sd:
                v = sd[k]
                v = v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
                self.capture.buffers[k] = np.array(v, dtype=np.asarray(self.capture.buffers[k]).dtype, copy=True)

    def copy_to(self, module=None):
        """Load the trained parameters into `module` (default: the model given to train())."""
        (module if module is not None else self.model).load_state_dict(self.state_dict())

    def save(self, path):
        """Checkpoint: parameters, optimizer state, round counter (CRC-sealed, atomic); the
        batch-norm running statistics the rounds updated go next to it, in
        `path + ".batchnorm.npz"`."""
        t = self._ready("save()")
        t.save(os.fspath(path))
        keys = self._bn_keys()
        if keys:
            side = os.fspath(path) + ".batchnorm.npz"
            tmp = side + f".tmp{os.getpid()}.npz"
            np.savez(tmp, **{k: self.capture.buffers[k] for k in keys})
            os.replace(tmp, side)

    def load(self, path):
        """Resume from a checkpoint of the same model and optimizer (and its batch-norm
        running statistics, when saved next to it)."""
        t = self._ready("load()")
        t.load(os.fspath(path))
        side = os.fspath(path) + ".batchnorm.npz"
        if self._bn_keys() and os.path.exists(side):
            with np.load(side) as z:
                self._set_bn_buffers({k: z[k] for k in z.files})

    # -- lifetime ----------------------------------------------------------------
    def close(self):
        """Free the trainer (the grid can then be closed)."""
        if self._t is not None:
            self._t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        n = "uncaptured" if self.capture is None else f"{self.capture.n_params} parameters"
        return f"<goblin.Trainer {type(self.model).__name__}: {n}, {self.rounds} rounds, {self.optimizer!r}>"


def train(grid, model, loss_fn=None, **kw):
    """grid.train(model, loss_fn, optimizer=..., batch_size=..., micro_batch_size=...):
    see Trainer."""
    return Trainer(grid, model, loss_fn, **kw)
