"""goblin.ops: one function per catalogue op, generated from the library's
catalogue when the package is imported (so it always matches the library).

    y = goblin.ops.matmul(x, w, trans_b=1)
    z = goblin.ops.sum(y, axes=[1], keepdim=1)

Inputs are goblin.Tensor handles of one graph (numbers become constants of
the first tensor's dtype); attributes go by name (goblin.ops.info(name) lists
them; `dtype` attributes take names like "f32"). Ops without tensor inputs
(full, arange, rand_*) take `graph=`. Each function's docstring is the op's
summary, semantics and numeric contract.
"""
import builtins as _b

from . import _goblin

_FUNCS = {}


def catalog():
    """Every op name of the catalogue, in numeric order."""
    return _goblin.op_names()


def info(name):
    """The catalogue's description of op `name` (dict)."""
    return _goblin.op_info(name)


def contract(name, dtype, k=1):
    """The numeric contract of `name` in `dtype`: (rel_tol, abs_tol) for reduction length k."""
    return _goblin.op_contract(name, dtype, k)


def _graph_of(args, graph):
    from ._graph import Tensor
    for a in args:
        if isinstance(a, Tensor):
            if graph is not None and a.graph is not graph:
                raise ValueError("tensors from different graphs cannot be combined")
            return a.graph
    if graph is None:
        raise TypeError("no goblin.Tensor among the inputs: pass graph=")
    return graph


def _make(name, meta):
    if name == "input":
        def fn(shape, dtype="f32", *, graph):
            return graph.input(shape, dtype)
    elif name == "constant":
        def fn(value, dtype=None, *, graph):
            return graph.constant(value, dtype)
    elif name == "formula":
        def fn(formula, *inputs, graph=None):
            return _graph_of(inputs, graph).formula(formula, *inputs)
    else:
        def fn(*inputs, graph=None, **attrs):
            return _graph_of(inputs, graph).op(name, *inputs, **attrs)
    attrs = ", ".join(f"{a} ({k})" for a, k in meta["attrs"]) or "-"
    hi = "any number of" if meta["max_inputs"] < 0 else str(meta["max_inputs"])
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"{meta['summary']}\n\nInputs: {meta['min_inputs']} to {hi}; dtypes: "
                  f"{' '.join(meta['dtypes'])}; attributes: {attrs}.\n\nSemantics: "
                  f"{meta['semantics'] or '-'}\n\nContract: {meta['contract'] or 'exact'}\n")
    return fn


for _name in _goblin.op_names():
    _FUNCS[_name] = _make(_name, _goblin.op_info(_name))
globals().update(_FUNCS)
__all__ = ["catalog", "info", "contract"] + _b.list(_FUNCS)
