"""Element types: goblin's short names and their NumPy counterparts.

bf16 has no NumPy dtype: arrays for bf16 graph inputs and constants are
float32 (rounded to bf16 on the way in) and bf16 results come back as float32.
"""
import numpy as np

from . import _goblin

# The library's dtype table (goblin/dtype.h and the extension's NumPy mapping), read at import.
_TABLE = _goblin.dtype_table()
DTYPES = tuple(row["name"] for row in _TABLE)
FLOAT = frozenset(row["name"] for row in _TABLE if row["float"])
INT = frozenset(row["name"] for row in _TABLE if row["int"])

_TO_NP = {row["name"]: row["numpy"] for row in _TABLE}
_FROM_NP = {np.dtype(v): k for k, v in _TO_NP.items() if k != "bf16"}


def to_numpy(dt):
    """NumPy dtype used to exchange values of goblin dtype `dt`."""
    return np.dtype(_TO_NP[dt])


def normalize(dt):
    """A goblin dtype name from a name ("f32"), a NumPy dtype or a torch dtype."""
    if isinstance(dt, str) and dt in _TO_NP:
        return dt
    name = str(dt)
    if name.startswith("torch."):
        table = {"torch.float32": "f32", "torch.float64": "f64", "torch.float16": "f16",
                 "torch.bfloat16": "bf16", "torch.int8": "i8", "torch.int16": "i16",
                 "torch.int32": "i32", "torch.int64": "i64", "torch.uint8": "u8", "torch.bool": "bool"}
        if name in table:
            return table[name]
        raise TypeError(f"torch dtype {name} has no goblin equivalent")
    try:
        npdt = np.dtype(dt)
    except TypeError:
        raise TypeError(f"unknown dtype {dt!r} (expected one of {' '.join(DTYPES)})") from None
    if npdt in _FROM_NP:
        return _FROM_NP[npdt]
    raise TypeError(f"dtype {npdt} has no goblin equivalent (expected one of {' '.join(DTYPES)})")


def from_array(a):
    return normalize(a.dtype)
