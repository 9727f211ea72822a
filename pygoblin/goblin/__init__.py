"""GPU Goblin for Python.

    import goblin
    g = goblin.Graph(); x = g.input((3, 4), "f32"); g.output(goblin.ops.exp(x) * 2)
    (y,) = g.evaluate(xa)                       # locally, on the CPU
    f = goblin.formula("a * exp(-b * x) + c"); f(a=1.0, b=0.5, x=xa, c=0.0)
    cg = goblin.capture(model, example)         # a PyTorch program as a goblin.Graph

Errors are goblin.GoblinError subclasses carrying the library's message.
The grid (goblin.connect, grid.matmul, grid.run) builds on these pieces.
"""
from . import _goblin
from ._goblin import (  # noqa: F401  (the exception hierarchy)
    GoblinError, InvalidArgumentError, OutOfMemoryError, ShapeError, DTypeError, RangeError,
    FormatError, VersionError, NotSupportedError, DeviceError, FormulaSyntaxError, GoblinIOError,
    LimitError, StateError, GoblinTimeoutError, ClosedError, GoblinConnectionError, AuthError,
    CryptoError, VerificationError, CanceledError, BusyError, NotFoundError, ProtocolError,
    GoblinIndexError, InternalError,
)
from ._dtypes import DTYPES as dtypes  # noqa: F401
from ._graph import Graph, Tensor, NodeInfo  # noqa: F401
from ._formula import Formula, formula  # noqa: F401
from . import ops  # noqa: F401
from ._capture import capture, CapturedGraph, UnsupportedOpError  # noqa: F401
from ._grid import connect, Grid  # noqa: F401
from . import optim  # noqa: F401
from ._train import Trainer, TrainPlan  # noqa: F401
from ._capture_train import capture_training, TrainingCapture  # noqa: F401

__version__ = _goblin.library_version
catalog = ops.catalog


def backends():
    """Names of the backends that can run here ('ref' always; 'blis', 'cuda' when built and usable)."""
    return tuple(b for b in ("ref", "blis", "cuda") if _goblin.backend_available(b))


def attr_names():
    """Every attribute name the catalogue knows, with its kind ('int', 'float', 'ints')."""
    return _goblin.attr_names()
