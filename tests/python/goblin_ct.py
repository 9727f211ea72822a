"""A small ctypes harness over libgoblin for the tests (tests/python).

It lets pytest build graphs and evaluate them through the C API so that every
op can be compared with NumPy and PyTorch. It is test tooling, not the Python
package (that is pygoblin/ with its C extension).

The library is found through $GOBLIN_LIB, else build/libgoblin/libgoblin.so in
the repository.
"""
import ctypes as C
import glob
import os

import numpy as np

MAX_RANK = 8
MAX_ATTR_INTS = 16


class Tensor(C.Structure):
    _fields_ = [("dtype", C.c_int), ("rank", C.c_int32),
                ("shape", C.c_int64 * MAX_RANK), ("strides", C.c_int64 * MAX_RANK),
                ("data", C.c_void_p)]


class _AttrV(C.Union):
    _fields_ = [("i", C.c_int64), ("f", C.c_double), ("ints", C.c_int64 * MAX_ATTR_INTS)]


class Attr(C.Structure):
    _fields_ = [("key", C.c_int), ("count", C.c_int32), ("v", _AttrV)]


class ErrBuf(C.Structure):  # goblin_errbuf
    _fields_ = [("position", C.c_int32), ("message", C.c_char * 512)]


class ExecParams(C.Structure):
    # the whole goblin_exec_params (goblin_exec_params_default writes all of it)
    _fields_ = [("backend", C.c_int), ("threads", C.c_int32), ("device", C.c_int32),
                ("shapes_like", C.c_void_p), ("given_ids", C.c_void_p), ("given", C.c_void_p),
                ("n_given", C.c_int32)]


def _find_lib():
    env = os.environ.get("GOBLIN_LIB")
    if env:
        return env
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cands = [os.path.join(root, "build", "libgoblin", "libgoblin.so")]
    cands += sorted(glob.glob("/tmp/build-*/libgoblin/libgoblin.so"), key=os.path.getmtime,
                    reverse=True)
    for c in cands:
        if os.path.exists(c):
            return c
    raise RuntimeError("libgoblin.so not found: build it or set GOBLIN_LIB")


lib = C.CDLL(_find_lib())


def _sig(name, res, *args):
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


_sig("goblin_strerror", C.c_char_p, C.c_int)
_sig("goblin_err_name", C.c_char_p, C.c_int)
_sig("goblin_graph_new", C.c_int, C.POINTER(C.c_void_p))
_sig("goblin_graph_free", None, C.c_void_p)
_sig("goblin_graph_error", C.c_char_p, C.c_void_p)
_sig("goblin_graph_input", C.c_int, C.c_void_p, C.c_int, C.c_int32, C.POINTER(C.c_int64),
     C.POINTER(C.c_int32))
_sig("goblin_graph_constant", C.c_int, C.c_void_p, C.POINTER(Tensor), C.POINTER(C.c_int32))
_sig("goblin_graph_add", C.c_int, C.c_void_p, C.c_int, C.POINTER(C.c_int32), C.c_int32,
     C.POINTER(Attr), C.c_int32, C.POINTER(C.c_int32))
_sig("goblin_graph_add_formula", C.c_int, C.c_void_p, C.c_void_p, C.POINTER(C.c_int32), C.c_int32,
     C.POINTER(C.c_int32))
_sig("goblin_graph_output", C.c_int, C.c_void_p, C.c_int32)
_sig("goblin_graph_node", C.c_int, C.c_void_p, C.c_int32, C.POINTER(C.c_int), C.POINTER(Tensor),
     C.POINTER(C.c_int32), C.c_void_p)
_sig("goblin_graph_serialize", C.c_int, C.c_void_p, C.POINTER(C.c_void_p), C.POINTER(C.c_size_t))
_sig("goblin_graph_deserialize", C.c_int, C.c_char_p, C.c_size_t, C.c_void_p, C.POINTER(C.c_void_p),
     C.POINTER(ErrBuf))
_sig("goblin_buffer_free", None, C.c_void_p)
_sig("goblin_exec_params_default", None, C.POINTER(ExecParams))
_sig("goblin_exec_new", C.c_int, C.POINTER(C.c_void_p), C.c_void_p, C.POINTER(ExecParams))
_sig("goblin_exec_free", None, C.c_void_p)
_sig("goblin_exec_run", C.c_int, C.c_void_p, C.POINTER(Tensor), C.c_int32, C.POINTER(Tensor),
     C.c_int32)
_sig("goblin_exec_error", C.c_char_p, C.c_void_p)
_sig("goblin_backend_available", C.c_int, C.c_int)
_sig("goblin_op_from_name", C.c_int, C.c_char_p, C.POINTER(C.c_int))
_sig("goblin_op_name", C.c_char_p, C.c_int)
_sig("goblin_op_next", C.c_int, C.c_int)
_sig("goblin_op_contract", C.c_int, C.c_int, C.c_int, C.c_int64, C.POINTER(C.c_double),
     C.POINTER(C.c_double))
_sig("goblin_attr_name", C.c_char_p, C.c_int)
_sig("goblin_attr_key_kind", C.c_int, C.c_int)
_sig("goblin_formula_parse", C.c_int, C.c_char_p, C.POINTER(C.c_void_p), C.POINTER(ErrBuf))
_sig("goblin_formula_free", None, C.c_void_p)
_sig("goblin_formula_var_count", C.c_int32, C.c_void_p)
_sig("goblin_formula_var_name", C.c_char_p, C.c_void_p, C.c_int32)

DTYPES = ["f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "u8", "bool"]
DT = {n: i for i, n in enumerate(DTYPES)}
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16, "i8": np.int8,
      "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "bool": np.bool_}
BACKENDS = {"ref": 0, "blis": 1, "cuda": 2}
ATTRS = {}
for _k in range(128):
    _n = lib.goblin_attr_name(_k)
    if _n:
        ATTRS[_n.decode()] = (_k, lib.goblin_attr_key_kind(_k))


class GoblinError(Exception):
    def __init__(self, code, message):
        self.code = code
        self.name = lib.goblin_err_name(code).decode()
        super().__init__(f"{self.name}: {message}")


def err_name(code):
    return lib.goblin_err_name(code).decode()


def op_names():
    out, o = [], lib.goblin_op_next(-1)
    while o >= 0:
        out.append(lib.goblin_op_name(o).decode())
        o = lib.goblin_op_next(o)
    return out


def contract(op, dtype, k=1):
    rel, ab = C.c_double(), C.c_double()
    code = C.c_int()
    if lib.goblin_op_from_name(op.encode(), C.byref(code)):
        raise KeyError(op)
    e = lib.goblin_op_contract(code.value, DT[dtype], k, C.byref(rel), C.byref(ab))
    if e:
        raise GoblinError(e, "contract")
    return rel.value, ab.value


def backend_available(name):
    return lib.goblin_backend_available(BACKENDS[name]) == 0


def f32_to_bf16(a):
    """Round float32 values to bf16 bit patterns (uint16), nearest even."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = ((b[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_to_f32(a):
    return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_tensor(arr, dtype):
    """Describe a NumPy array (any strides) as a goblin_tensor. bf16 arrays are uint16 bits."""
    t = Tensor()
    t.dtype = DT[dtype]
    t.rank = arr.ndim
    for d in range(arr.ndim):
        t.shape[d] = arr.shape[d]
        if arr.strides[d] % arr.itemsize:
            raise ValueError("strides must be multiples of the item size")
        t.strides[d] = arr.strides[d] // arr.itemsize
    t.data = arr.ctypes.data if arr.size else None
    return t


def _attrs(kw):
    n = len(kw)
    arr = (Attr * max(n, 1))()
    for i, (name, val) in enumerate(kw.items()):
        key, kind = ATTRS[name]
        arr[i].key = key
        if kind == 2:  # INTS
            vals = list(val)
            arr[i].count = len(vals) if len(vals) <= MAX_ATTR_INTS else -1
            for j, v in enumerate(vals[:MAX_ATTR_INTS]):
                arr[i].v.ints[j] = int(v)
        elif kind == 1:
            arr[i].count = 1
            arr[i].v.f = float(val)
        else:
            arr[i].count = 1
            if isinstance(val, str):
                val = DT[val]
            arr[i].v.i = int(val)
    return arr, n


class Graph:
    def __init__(self):
        self.h = C.c_void_p()
        e = lib.goblin_graph_new(C.byref(self.h))
        if e:
            raise GoblinError(e, "graph_new")
        self.input_dtypes = []
        self._keep = []

    def __del__(self):
        if getattr(self, "h", None):
            lib.goblin_graph_free(self.h)
            self.h = None

    def _check(self, e):
        if e:
            raise GoblinError(e, lib.goblin_graph_error(self.h).decode())

    def input(self, dtype, shape):
        shape = tuple(shape)
        sh = (C.c_int64 * max(len(shape), 1))(*shape)
        out = C.c_int32()
        self._check(lib.goblin_graph_input(self.h, DT[dtype], len(shape), sh, C.byref(out)))
        self.input_dtypes.append(dtype)
        return out.value

    def constant(self, arr, dtype=None):
        arr = np.asarray(arr)
        dtype = dtype or _np_to_dt(arr.dtype)
        t = to_tensor(arr, dtype)
        out = C.c_int32()
        self._check(lib.goblin_graph_constant(self.h, C.byref(t), C.byref(out)))
        return out.value

    def op(self, name, *inputs, **attrs):
        code = C.c_int()
        if lib.goblin_op_from_name(name.encode(), C.byref(code)):
            raise KeyError(f"unknown op {name}")
        ins = (C.c_int32 * max(len(inputs), 1))(*inputs)
        at, n = _attrs(attrs)
        out = C.c_int32()
        self._check(lib.goblin_graph_add(self.h, code.value, ins, len(inputs), at, n, C.byref(out)))
        return out.value

    def formula(self, text, **bindings):
        f = C.c_void_p()
        fe = ErrBuf()
        e = lib.goblin_formula_parse(text.encode(), C.byref(f), C.byref(fe))
        if e:
            raise GoblinError(e, f"at {fe.position}: {fe.message.decode()}")
        try:
            n = lib.goblin_formula_var_count(f)
            names = [lib.goblin_formula_var_name(f, i).decode() for i in range(n)]
            ins = (C.c_int32 * max(n, 1))(*[bindings[nm] for nm in names])
            out = C.c_int32()
            self._check(lib.goblin_graph_add_formula(self.h, f, ins, n, C.byref(out)))
            return out.value
        finally:
            lib.goblin_formula_free(f)

    def output(self, *ids):
        for i in ids:
            self._check(lib.goblin_graph_output(self.h, i))

    def node(self, nid):
        op = C.c_int()
        t = Tensor()
        self._check(lib.goblin_graph_node(self.h, nid, C.byref(op), C.byref(t), None, None))
        return lib.goblin_op_name(op.value).decode(), DTYPES[t.dtype], tuple(t.shape[:t.rank])

    def serialize(self):
        buf, n = C.c_void_p(), C.c_size_t()
        self._check(lib.goblin_graph_serialize(self.h, C.byref(buf), C.byref(n)))
        try:
            return C.string_at(buf, n.value)
        finally:
            lib.goblin_buffer_free(buf)

    def run(self, inputs, backend="ref", threads=0, outputs=None):
        """Evaluate; inputs are NumPy arrays (bf16 as float32, converted here). Returns arrays
        (bf16 outputs come back as float32)."""
        p = ExecParams()
        lib.goblin_exec_params_default(C.byref(p))
        p.backend = BACKENDS[backend]
        p.threads = threads
        ex = C.c_void_p()
        e = lib.goblin_exec_new(C.byref(ex), self.h, C.byref(p))
        if e:
            raise GoblinError(e, "exec_new")
        try:
            keep = []
            tins = (Tensor * max(len(inputs), 1))()
            for i, a in enumerate(inputs):
                dt = self.input_dtypes[i]
                if dt == "bf16":
                    a = f32_to_bf16(np.asarray(a, dtype=np.float32)).reshape(np.shape(a))
                elif not isinstance(a, np.ndarray) or a.dtype != NP[dt]:
                    a = np.asarray(a, dtype=NP[dt])
                keep.append(a)
                tins[i] = to_tensor(a, dt)
            nout = _out_count(self)
            touts = (Tensor * max(nout, 1))()
            e = lib.goblin_exec_run(ex, tins, len(inputs), touts, nout)
            if e:
                raise GoblinError(e, lib.goblin_exec_error(ex).decode())
            res = []
            for i in range(nout):
                t = touts[i]
                dt = DTYPES[t.dtype]
                shape = tuple(t.shape[:t.rank])
                n = int(np.prod(shape)) if shape else 1
                if n and t.data:
                    a = np.ctypeslib.as_array(C.cast(t.data, C.POINTER(C.c_uint8)),
                                              shape=(n * np.dtype(NP[dt]).itemsize,))
                    a = a.view(NP[dt]).reshape(shape).copy()
                else:
                    a = np.zeros(shape, dtype=NP[dt])
                if t.data:
                    lib.goblin_buffer_free(t.data)
                res.append(bf16_to_f32(a).reshape(shape) if dt == "bf16" else a)
            return res
        finally:
            lib.goblin_exec_free(ex)


_sig("goblin_graph_output_count", C.c_int32, C.c_void_p)


def _out_count(g):
    return lib.goblin_graph_output_count(g.h)


def _np_to_dt(npdt):
    npdt = np.dtype(npdt)
    for k, v in NP.items():
        if k != "bf16" and np.dtype(v) == npdt:
            return k
    raise TypeError(f"no goblin dtype for {npdt}")


def run_op(name, arrays, dtype=None, backend="ref", threads=0, **attrs):
    """Build a one-node graph over arrays (same dtype unless given per array) and run it."""
    g = Graph()
    ids = []
    for a in arrays:
        if isinstance(a, tuple):  # (array, dtype)
            a, dt = a
        else:
            dt = dtype or _np_to_dt(np.asarray(a).dtype)
        ids.append((g.input(dt, np.shape(a)), a))
    out = g.op(name, *[i for i, _ in ids], **attrs)
    g.output(out)
    return g.run([a for _, a in ids], backend=backend, threads=threads)[0]


# ---- autodiff (libgoblin/autodiff.c); absent in libraries built before it ----
try:
    _sig("goblin_graph_backward", C.c_int, C.c_void_p, C.c_int32, C.POINTER(C.c_int32), C.c_int32,
         C.POINTER(C.c_int32))
except AttributeError:
    pass


def backward(g, loss, wrt):
    """Append d(loss)/d(wrt[i]) to graph g; returns the gradient node ids."""
    wrt = list(wrt)
    ins = (C.c_int32 * max(len(wrt), 1))(*wrt)
    outs = (C.c_int32 * max(len(wrt), 1))()
    g._check(lib.goblin_graph_backward(g.h, loss, ins, len(wrt), outs))
    return list(outs[:len(wrt)])
