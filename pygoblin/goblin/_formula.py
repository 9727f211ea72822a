"""goblin.formula: user expressions as one fused catalogue op.

    f = goblin.formula("a * exp(-b * x) + c")
    y = f(a=2.0, b=0.5, x=xs, c=1.0)        # on arrays: evaluated here (CPU)
    t = f(a, b, x, c)                       # on goblin.Tensor handles: a FORMULA node

The text is parsed by the library into a typed expression tree (data, not
code); a syntax error raises goblin.FormulaSyntaxError whose `position` is the
byte offset of the problem. See the grammar in docs/python.md.
"""
import numpy as np

from . import _goblin
from . import _dtypes


def _numpy_if_torch(v):
    if hasattr(v, "detach") and hasattr(v, "numpy") and hasattr(v, "dtype"):
        from ._capture import _to_numpy
        return _to_numpy(v)[0]
    return v


class Formula:
    """A parsed formula; call it on arrays or on goblin.Tensor handles."""

    def __init__(self, text):
        self._native = _goblin.Formula(text)
        self._graphs = {}

    @property
    def text(self):
        return self._native.text

    @property
    def variables(self):
        """Variable names in order of first appearance (the positional order)."""
        return self._native.variables

    def __repr__(self):
        return f"goblin.formula({self.text!r})"

    def _bind(self, args, kwargs):
        names = self.variables
        if len(args) > len(names):
            raise TypeError(f"{self!r} takes {len(names)} values ({', '.join(names)}), got {len(args)}")
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{self!r} has no variable {k!r} (variables: {', '.join(names)})")
            if k in bound:
                raise TypeError(f"variable {k!r} given twice")
            bound[k] = v
        missing = [n for n in names if n not in bound]
        if missing:
            raise TypeError(f"{self!r} is missing a value for {', '.join(missing)}")
        return [bound[n] for n in names]

    def __call__(self, *args, backend=None, **kwargs):
        from ._graph import Tensor
        values = [_numpy_if_torch(v) for v in self._bind(args, kwargs)]
        tensors = [v for v in values if isinstance(v, Tensor)]
        if tensors:
            return tensors[0].graph.formula(self, *values)
        arrays = [v for v in values if isinstance(v, np.ndarray)]
        dts = {_dtypes.from_array(a) for a in arrays}
        if len(dts) > 1:
            raise _goblin.DTypeError(f"{self!r}: all arrays must share one dtype, got "
                                     f"{', '.join(sorted(dts))} (insert a cast)")
        if dts:
            dt = dts.pop()
        else:
            dt = "f64" if any(isinstance(v, float) for v in values) else "i64"
        npdt = _dtypes.to_numpy(dt)
        conv = []
        for n, v in zip(self.variables, values):
            if isinstance(v, np.ndarray):
                conv.append(v)
            elif isinstance(v, (int, float, bool, np.generic)):
                if isinstance(v, float) and dt in _dtypes.INT:
                    raise _goblin.DTypeError(f"variable {n!r}: float {v!r} in an integer ({dt}) formula")
                conv.append(np.asarray(v).astype(npdt))
            else:
                raise TypeError(f"variable {n!r}: expected a numpy.ndarray or a number, "
                                f"got {type(v).__name__}")
        key = (dt, tuple(a.shape for a in conv))
        g = self._graphs.get(key)
        if g is None:
            from ._graph import Graph
            g = Graph()
            ins = [g.input(a.shape, dt) for a in conv]
            g.output(g.formula(self, *ins))
            self._graphs[key] = g
        if backend is None:
            backend = "blis" if _goblin.backend_available("blis") else "ref"
        return g.evaluate(*conv, backend=backend)[0]


    def _for_grid(self, args, kwargs, split):
        """(graph, arrays, split) for grid.run(formula, ...): the array values become the graph's
        inputs, numbers become constants of the arrays' dtype (broadcast); split defaults to
        'batch' for arrays of the result's rank whose dim 0 is the longest, 'broadcast' else."""
        from ._graph import Graph
        values = self._bind(args, kwargs)
        arrays = {}
        for n, v in zip(self.variables, values):
            v = _numpy_if_torch(v)
            if isinstance(v, np.ndarray) and v.ndim > 0:
                arrays[n] = v
            elif not isinstance(v, (int, float, bool, np.generic, np.ndarray)):
                raise TypeError(f"variable {n!r}: expected a numpy.ndarray or a number, got {type(v).__name__}")
        if not arrays:
            raise _goblin.InvalidArgumentError(f"run: {self!r} got only numbers; give at least one array to "
                                               "split into tasks (or call the formula locally)")
        dts = {_dtypes.from_array(a) for a in arrays.values()}
        if len(dts) > 1:
            raise _goblin.DTypeError(f"{self!r}: all arrays must share one dtype, got "
                                     f"{', '.join(sorted(dts))} (insert a cast)")
        dt = dts.pop()
        g = Graph()
        ins = {n: g.input(a.shape, dt) for n, a in arrays.items()}
        terms = []
        for n, v in zip(self.variables, values):
            if n in ins:
                terms.append(ins[n])
                continue
            v = np.asarray(v).item() if isinstance(v, (np.generic, np.ndarray)) else v
            if isinstance(v, float) and dt in _dtypes.INT:
                raise _goblin.DTypeError(f"variable {n!r}: float {v!r} in an integer ({dt}) formula")
            terms.append(g.constant(np.asarray(v, _dtypes.to_numpy(dt)), dtype=dt))
        g.output(g.formula(self, *terms))
        if split is None:
            rank = max(a.ndim for a in arrays.values())
            rows = max(a.shape[0] for a in arrays.values() if a.ndim == rank)
            split = ["batch" if a.ndim == rank and a.shape[0] == rows else "broadcast" for a in arrays.values()]
        return g, list(arrays.values()), split


def formula(text):
    """Parse `text` into a Formula (raises goblin.FormulaSyntaxError with the position)."""
    return Formula(text)
