"""CapturedGraph: a graph captured from PyTorch, with where the batch sits in its inputs.

goblin graphs have static shapes: a CapturedGraph called with another batch size is
captured again for it (once; cached). `batch_dims` (per input: its batch dim, or None)
comes from goblin.capture (given or inferred, _capture.py); grids cut the inputs along
it. A grid takes the batch in dim 0 of its inputs most readily (the trainer only
there), so for a batch elsewhere the grid gets the grid form: the same exported program
lowered again with those inputs batch-first and a permute back to the program's layout
inside the graph (no second export); grid.run moves the arrays to match.
"""
import numpy as np

from . import _goblin
from ._graph import Graph


class CapturedGraph(Graph):
    """A goblin.Graph captured from PyTorch, callable on NumPy arrays (or torch tensors).

    batch_dims: per input, the dim that holds the batch (None: not batched), or None
    when capture could not tell (grids then trace it, dim 0 first). Calling the graph
    with inputs whose batch size differs from the example's captures the program again
    for that batch size (once; cached)."""

    def __init__(self):
        super().__init__()
        self._source = None
        self._ep = None
        self._by_batch = {}
        self._grid_forms = {}
        self.batch_dims = None
        self.batch_dims_given = False
        self._dims_why = None

    def _dims(self, n):
        if self.batch_dims is not None:
            return list(self.batch_dims)
        return [0] * n

    def for_inputs(self, shapes):
        """The graph for inputs of these shapes (this one, or a cached re-capture)."""
        mine = tuple(t.shape for t in self.inputs)
        if tuple(tuple(s) for s in shapes) == mine:
            return self
        if len(shapes) != len(mine):
            raise _goblin.InvalidArgumentError(f"the graph takes {len(mine)} input(s) (shapes {mine}), got "
                                               f"{len(shapes)}: pass one array per example input of capture()")
        if self._source is None:
            raise _goblin.ShapeError(f"the graph takes inputs of shapes {mine}, got {tuple(shapes)}")
        dims = self._dims(len(mine))
        batch, ok = set(), True
        for s, m, d in zip(shapes, mine, dims):
            s = tuple(s)
            if len(s) != len(m):
                ok = False
            elif d is None:
                ok &= s == m
            else:
                batch.add(s[d])
                ok &= s[:d] + s[d + 1:] == m[:d] + m[d + 1:]
        if not ok or len(batch) != 1:
            got = f"the graph takes {mine}, got {tuple(tuple(s) for s in shapes)}"
            if self.batch_dims is None:
                raise _goblin.ShapeError(f"only dim 0 (the batch) may change: {got}; if the batch is another dim, "
                                         "capture with goblin.capture(..., batch_dims=(dim per input))")
            where = ", ".join(f"input {i}: {'no dim (unbatched)' if d is None else f'dim {d}'}"
                              for i, d in enumerate(dims))
            raise _goblin.ShapeError(f"only the batch may change ({where}): {got}")
        n = batch.pop()
        g = self._by_batch.get(n)
        if g is None:
            from ._capture import _torch, capture
            torch = _torch()
            ex = []
            for e, d in zip(self._source[1], dims):
                if isinstance(e, torch.Tensor) and d is not None and e.shape[d] > 0:
                    ex.append(e.index_select(d, torch.arange(n) % e.shape[d]).clone())
                else:
                    ex.append(e)
            g = capture(self._source[0], *ex, batch_dims=self.batch_dims)
            g.batch_dims_given = self.batch_dims_given
            self._by_batch[n] = g
        return g

    def grid_form(self, arrays, split, batch_dims=None):
        """(graph, arrays, split) for a grid: the graph with every batched input batch-first
        when a batch dim is not 0 (the arrays moved to match), and the split from the
        batch dims unless given. `batch_dims` overrides the capture's."""
        dims = self.batch_dims if batch_dims is None else tuple(batch_dims)
        if dims is None:
            return self, arrays, split
        if len(dims) != len(arrays):
            raise _goblin.InvalidArgumentError(f"batch_dims: expected {len(arrays)} entries (one per input, None "
                                               f"for an unbatched one), got {len(dims)}")
        for i, (d, a) in enumerate(zip(dims, arrays)):
            if d is not None and not (isinstance(d, (int, np.integer)) and 0 <= d < a.ndim):
                raise _goblin.InvalidArgumentError(f"batch_dims: input {i} of shape {a.shape} has no dim {d!r}")
        if split is None:
            split = ["batch" if d is not None else "broadcast" for d in dims]
        if all(not d for d in dims):
            return self, arrays, split
        key = tuple(dims)
        g = self._grid_forms.get(key)
        if g is None:
            if self._ep is None:
                raise _goblin.InvalidArgumentError("batch_dims other than 0 need the graph as goblin.capture made it")
            from ._capture import lower_batch_first
            g = lower_batch_first(self._ep, dims)
            self._grid_forms[key] = g
        moved = [np.ascontiguousarray(np.moveaxis(a, d, 0)) if d else a for a, d in zip(arrays, dims)]
        return g, moved, split

    def __call__(self, *inputs, backend=None, threads=0):
        from ._capture import _to_numpy
        arrs = []
        for x in inputs:
            if hasattr(x, "detach") and hasattr(x, "numpy"):
                x = _to_numpy(x)[0]
            arrs.append(x)
        shapes = [np.shape(a) for a in arrs]
        outs = self.for_inputs(shapes).evaluate(*arrs, backend=backend, threads=threads)
        return outs[0] if len(outs) == 1 else outs
