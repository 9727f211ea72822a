"""goblin.Graph: the graph builder over the catalogue, with tensor handles.

A Graph owns a native graph (goblin._goblin.Graph); every node is checked by
the library when it is added (shape, dtype, attributes), so mistakes surface
at the line that makes them. Tensor handles support Python operators:
`x * 2 + y` adds constants of x's dtype and elementwise nodes.
"""
import builtins
import collections
import numbers

import numpy as np

from . import _goblin
from . import _dtypes

NodeInfo = collections.namedtuple("NodeInfo", "op dtype shape inputs")


def _scalar_constant(graph, value, dtype):
    """A rank-0 constant of `dtype` holding `value`, refused if it would change the value."""
    key = (type(value), value, dtype)
    cached = graph._scalars.get(key)
    if cached is not None:
        return cached
    npdt = _dtypes.to_numpy(dtype)
    with np.errstate(all="ignore"):
        arr = np.asarray(value).astype(npdt)
    if isinstance(value, float) and dtype in _dtypes.INT and (value != value or float(arr) != value):
        raise _goblin.DTypeError(f"the scalar {value!r} is not representable in {dtype}: insert a cast")
    if isinstance(value, int) and not isinstance(value, bool) and dtype in _dtypes.INT and int(arr) != value:
        raise _goblin.RangeError(f"the scalar {value!r} is out of range for {dtype}")
    t = graph.constant(arr, dtype=dtype)
    graph._scalars[key] = t
    return t


def _is_scalar(v):
    return isinstance(v, (numbers.Number, np.generic)) and not isinstance(v, Tensor)


class Tensor:
    """A handle on one node of a Graph: its id, shape and dtype.

    Operators add nodes to the same graph: + - * / // % ** @ & | ^ ~ << >>,
    unary -, abs(), comparisons (== != < <= > >= give bool tensors) and
    indexing with ints, slices (positive steps), None and Ellipsis. Every
    catalogue op is also a method: `x.exp()`, `x.sum(axes=[1])`.
    """

    __slots__ = ("graph", "id", "shape", "dtype")
    __hash__ = object.__hash__

    def __init__(self, graph, node_id):
        info = graph._g.node(node_id)
        self.graph = graph
        self.id = node_id
        self.dtype = info[1]
        self.shape = info[2]

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def op(self):
        return self.graph._g.node(self.id)[0]

    def __repr__(self):
        return f"<goblin.Tensor %{self.id} {self.op} {self.dtype}{list(self.shape)}>"

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __bool__(self):
        raise TypeError("a goblin.Tensor has no truth value before evaluation "
                        "(use logical ops, or evaluate the graph)")

    def __array__(self, *a, **k):
        raise TypeError("a goblin.Tensor is a node of a graph, not data: evaluate the graph "
                        "(g.evaluate(...)) to get arrays")

    # -- operators -------------------------------------------------------
    def _bin(self, op, other, reverse=False):
        other = self.graph._coerce(other, self.dtype)
        a, b = (other, self) if reverse else (self, other)
        return self.graph.op(op, a, b)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __floordiv__(self, o): return self._bin("floor_div", o)
    def __rfloordiv__(self, o): return self._bin("floor_div", o, True)
    def __mod__(self, o): return self._bin("rem_floor", o)
    def __rmod__(self, o): return self._bin("rem_floor", o, True)
    def __pow__(self, o): return self._bin("pow", o)
    def __rpow__(self, o): return self._bin("pow", o, True)
    def __matmul__(self, o): return self._bin("matmul", o)
    def __rmatmul__(self, o): return self._bin("matmul", o, True)
    def __and__(self, o): return self._bin("bitwise_and", o)
    def __rand__(self, o): return self._bin("bitwise_and", o, True)
    def __or__(self, o): return self._bin("bitwise_or", o)
    def __ror__(self, o): return self._bin("bitwise_or", o, True)
    def __xor__(self, o): return self._bin("bitwise_xor", o)
    def __rxor__(self, o): return self._bin("bitwise_xor", o, True)
    def __lshift__(self, o): return self._bin("shl", o)
    def __rlshift__(self, o): return self._bin("shl", o, True)
    def __rshift__(self, o): return self._bin("shr_arith", o)
    def __rrshift__(self, o): return self._bin("shr_arith", o, True)
    def __eq__(self, o): return self._bin("eq", o)
    def __ne__(self, o): return self._bin("ne", o)
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("le", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("ge", o)
    def __neg__(self): return self.graph.op("neg", self)
    def __pos__(self): return self
    def __abs__(self): return self.graph.op("abs", self)
    def __invert__(self): return self.graph.op("bitwise_not", self)

    # -- shape helpers ---------------------------------------------------
    def reshape(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = tuple(shape[0])
        return self.graph.op("reshape", self, shape=list(shape))

    def permute(self, *perm):
        if len(perm) == 1 and not isinstance(perm[0], numbers.Integral):
            perm = tuple(perm[0])
        return self.graph.op("permute", self, perm=list(perm))

    def transpose(self, a, b):
        perm = list(range(self.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(perm)

    @property
    def T(self):
        return self.permute(list(reversed(range(self.ndim))))

    def astype(self, dtype):
        dt = _dtypes.normalize(dtype)
        return self if dt == self.dtype else self.graph.op("cast", self, dtype=dt)

    def _reduce(self, op, axis, keepdim):
        if axis is None:
            axis = list(range(self.ndim))
        elif isinstance(axis, numbers.Integral):
            axis = [int(axis)]
        return self.graph.op(op, self, axes=list(axis), keepdim=int(keepdim))

    def sum(self, axis=None, keepdim=False): return self._reduce("sum", axis, keepdim)
    def mean(self, axis=None, keepdim=False): return self._reduce("mean", axis, keepdim)
    def max(self, axis=None, keepdim=False): return self._reduce("reduce_max", axis, keepdim)
    def min(self, axis=None, keepdim=False): return self._reduce("reduce_min", axis, keepdim)

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        n_real = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
        if builtins.sum(1 for k in key if k is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis")
        items = []
        for k in key:
            if k is Ellipsis:
                items.extend([builtins.slice(None)] * (self.ndim - n_real))
            else:
                items.append(k)
        if n_real > self.ndim:
            raise IndexError(f"too many indices: tensor has {self.ndim} dims, got {n_real}")
        if Ellipsis not in key:
            items.extend([builtins.slice(None)] * (self.ndim - n_real))
        axes, starts, stops, steps, selects, out_shape = [], [], [], [], [], []
        d = 0
        for k in items:
            if k is None:
                out_shape.append(("new",))
                continue
            if isinstance(k, builtins.slice):
                start, stop, step = k.indices(self.shape[d])
                if step <= 0:
                    raise IndexError("only positive slice steps are supported")
                if (start, stop, step) != (0, self.shape[d], 1):
                    axes.append(d); starts.append(start); stops.append(stop); steps.append(step)
                out_shape.append(("dim", d))
            elif isinstance(k, (numbers.Integral, np.integer)):
                i = int(k)
                if not -self.shape[d] <= i < self.shape[d]:
                    raise IndexError(f"index {i} is out of range for dim {d} of size {self.shape[d]}")
                selects.append((d, i % self.shape[d]))
            else:
                raise TypeError(f"unsupported index {k!r} (use ints, slices, None, ...; "
                                "gather/index_select for tensors of indices)")
            d += 1
        t = self
        if axes:
            t = self.graph.op("slice", t, axes=axes, starts=starts, stops=stops, steps=steps)
        for ax, i in sorted(selects, reverse=True):
            t = self.graph.op("select", t, axis=ax, index=i)
        if any(s[0] == "new" for s in out_shape):
            kept = iter(t.shape)
            shape = [1 if s[0] == "new" else next(kept) for s in out_shape]
            t = self.graph.op("reshape", t, shape=shape)
        return t

    def __getattr__(self, name):
        from . import ops
        fn = ops._FUNCS.get(name)
        if fn is None or name in ("input", "constant"):
            raise AttributeError(f"'goblin.Tensor' has no attribute {name!r}")
        return lambda *args, **attrs: fn(self, *args, **attrs)


class Graph:
    """A graph of catalogue ops built from Python.

        g = goblin.Graph()
        x = g.input((3, 4), "f32"); y = g.input((4,), "f32")
        g.output(goblin.ops.relu(x * 2 + y))
        (out,) = g.evaluate(xa, ya)           # locally; grids take the same graph

    The graph carries no names: only ops, dtypes, shapes, attributes and
    constant values (see serialize()).
    """

    def __init__(self):
        self._g = _goblin.Graph()
        self._scalars = {}

    @classmethod
    def _wrap(cls, native):
        self = cls.__new__(cls)
        self._g = native
        self._scalars = {}
        return self

    # -- building ----------------------------------------------------------
    def input(self, shape, dtype="f32"):
        """Add the next graph input (evaluation takes inputs in this order)."""
        return Tensor(self, self._g.input(tuple(shape) if not isinstance(shape, int) else (shape,),
                                          _dtypes.normalize(dtype)))

    def constant(self, value, dtype=None):
        """Copy `value` (an array or a scalar) into the graph. Without `dtype`, arrays keep
        theirs and Python scalars become f32 (float) or i64 (int). bf16: pass float32 values."""
        if dtype is None:
            arr = np.asarray(value)
            if arr.dtype == np.float64 and not isinstance(value, np.ndarray):
                arr = arr.astype(np.float32)
            if arr.dtype == np.dtype(int) and not isinstance(value, np.ndarray):
                arr = arr.astype(np.int64)
            return Tensor(self, self._g.constant(arr))
        return Tensor(self, self._g.constant(value, _dtypes.normalize(dtype)))

    def _coerce(self, v, like_dtype):
        if isinstance(v, Tensor):
            if v.graph is not self:
                raise ValueError("tensors from different graphs cannot be combined")
            return v
        if _is_scalar(v):
            return _scalar_constant(self, v.item() if isinstance(v, np.generic) else v, like_dtype)
        if isinstance(v, np.ndarray):
            return self.constant(v)
        raise TypeError(f"expected a goblin.Tensor, a number or a numpy.ndarray, got {type(v).__name__}")

    def op(self, name, *inputs, **attrs):
        """Apply catalogue op `name` to `inputs` with attributes by name; returns a Tensor.
        Numbers among the inputs become constants of the first tensor's dtype."""
        tensors = [t for t in inputs if isinstance(t, Tensor)]
        like = None
        if tensors:
            cand = [t for t in inputs[1:] if isinstance(t, Tensor)] if name == "where" else tensors
            like = (cand or tensors)[0].dtype
        ids = []
        for v in inputs:
            if like is None and not isinstance(v, Tensor):
                v = self.constant(v)
            ids.append(self._coerce(v, like).id)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        return Tensor(self, self._g.add(name, ids, attrs))

    def formula(self, f, *inputs):
        """Add a FORMULA node: `f` is a goblin.formula (or its text); variables bind in order."""
        from ._formula import Formula
        if not isinstance(f, Formula):
            f = Formula(f)
        tensors = [t for t in inputs if isinstance(t, Tensor)]
        like = tensors[0].dtype if tensors else None
        ids = [self._coerce(v, like).id if like else self.constant(v).id for v in inputs]
        return Tensor(self, self._g.add_formula(f._native, ids))

    def output(self, *tensors):
        """Mark tensors as the next graph outputs (in order)."""
        for t in tensors:
            if not isinstance(t, Tensor) or t.graph is not self:
                raise TypeError("output() takes tensors of this graph")
            self._g.output(t.id)

    # -- inspection --------------------------------------------------------
    @property
    def inputs(self):
        return tuple(Tensor(self, i) for i in self._g.input_ids)

    @property
    def outputs(self):
        return tuple(Tensor(self, i) for i in self._g.output_ids)

    def node(self, node_id):
        """(op, dtype, shape, inputs) of a node."""
        return NodeInfo(*self._g.node(node_id))

    def __len__(self):
        return self._g.node_count

    def __repr__(self):
        ins = ", ".join(f"{t.dtype}{list(t.shape)}" for t in self.inputs)
        outs = ", ".join(f"{t.dtype}{list(t.shape)}" for t in self.outputs)
        return f"<goblin.Graph {len(self)} nodes; inputs ({ins}) -> outputs ({outs})>"

    def summary(self):
        """One line per node: id, op, dtype, shape, inputs."""
        lines = []
        for i in range(len(self)):
            n = self.node(i)
            lines.append(f"%{i} = {n.op}({', '.join('%' + str(j) for j in n.inputs)}) "
                         f": {n.dtype}{list(n.shape)}")
        return "\n".join(lines)

    # -- format ------------------------------------------------------------
    def serialize(self):
        """The graph in goblin's binary graph format (what a grid sends; no names)."""
        return self._g.serialize()

    @classmethod
    def deserialize(cls, data):
        """Decode (and re-validate) a serialized graph."""
        return cls._wrap(_goblin.Graph.deserialize(data))

    # -- local evaluation -----------------------------------------------------
    def evaluate(self, *inputs, backend=None, threads=0):
        """Evaluate here, on this machine: NumPy arrays in (in input order; any strides,
        zero-copy), a tuple of NumPy arrays out (one per output). backend: 'ref' (the
        reference oracle), 'blis' (CPU, default when built) or 'cuda'. NumPy scalars
        count as 0-d arrays; other objects (lists, torch tensors) are refused: convert them
        with numpy.asarray first, so that no copy or dtype change happens behind your back."""
        arrays = [np.asarray(v) if isinstance(v, np.generic) else v for v in inputs]
        return tuple(_goblin.evaluate(self._g, arrays, backend, threads))
