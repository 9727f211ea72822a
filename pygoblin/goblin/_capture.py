"""goblin.capture: a PyTorch program as a goblin.Graph (the PyTorch bridge).

torch.export.export() traces the program to ATen ops; run_decompositions()
then lowers it with the default table minus the ops the catalogue has kernels
for (linear, layer_norm, gelu, attention, pooling, ...), so those stay whole.
Each remaining ATen op maps to catalogue ops; parameters and buffers become
graph constants (their names are not kept: the graph format has no names).
An op without a mapping is reported together with every other one in a single
UnsupportedOpError. torch is imported only here, when capture is used.

Shapes are static: a graph is captured for the example inputs' shapes.
CapturedGraph (_captured.py) handles other batch sizes by capturing again for
each new batch size (dim 0 of every input, or its batch_dims: given to
capture() or inferred, e.g. from an nn.LSTM's input) on first use and caching
the result. nn.LSTM / GRU / RNN are unrolled by _capture_rnn.py.
"""
import operator
import warnings

import numpy as np

from . import _goblin
from . import _dtypes
from . import _capture_table as _table
from . import _capture_decomp as _decomp
from . import _capture_rnn as _rnn
from ._graph import Tensor
from ._captured import CapturedGraph


class UnsupportedOpError(_goblin.NotSupportedError):
    """The program uses ops goblin cannot map; `ops` lists every one of them."""

    def __init__(self, ops, hints=()):
        self.ops = sorted(ops)
        self.hints = tuple(hints)
        msg = "cannot capture: no goblin mapping for " + ", ".join(self.ops)
        if self.hints:
            msg += "\n  " + "\n  ".join(self.hints)
        super().__init__(msg + "\n(the catalogue: goblin.ops.catalog(); what capture maps: docs/pytorch.md)")


_BN_HINT, _DROPOUT_HINT, _NAME_HINTS = _table.BN_HINT, _table.DROPOUT_HINT, _table.NAME_HINTS


def _torch():
    try:
        import torch
        import torch.export  # noqa: F401
    except ImportError as e:
        raise ImportError("goblin.capture needs PyTorch: pip install 'goblin[torch]'") from e
    if not hasattr(torch, "export") or not hasattr(torch.export, "export"):
        raise ImportError("goblin.capture needs torch.export (PyTorch 2.1 or newer)")
    return torch


def _decomp_table(torch):
    keep = []
    for name in _table.KEEP:
        packet, overload = name.split(".")
        p = getattr(torch.ops.aten, packet, None)
        o = getattr(p, overload, None) if p is not None else None
        if o is not None:
            keep.append(o)
    if hasattr(torch.export, "default_decompositions"):
        table = torch.export.default_decompositions()
    else:
        from torch._decomp import core_aten_decompositions
        table = dict(core_aten_decompositions())
    for o in keep:
        if o in table:
            del table[o]
    return table


def _gdtype(tdt):
    return _dtypes.normalize(tdt)


def _to_numpy(t):
    t = t.detach().cpu().contiguous()
    if str(t.dtype) == "torch.bfloat16":
        return t.float().numpy(), "bf16"
    return t.numpy(), _gdtype(t.dtype)


class _Lowering:
    """Walks an exported FX graph, emitting goblin nodes."""

    def __init__(self, torch, ep, param_inputs=None, batch_first=None):
        self.torch = torch
        self.ep = ep
        self.g = CapturedGraph()
        self.env = {}
        # training capture (_capture_train.py): state_dict name -> graph input Tensor for
        # parameters that stay inputs instead of becoming constants
        self.param_inputs = param_inputs
        # per user input: None, or its batch dim, moved to dim 0 of the graph's input (the
        # grid form: a permute back to the program's layout follows the input)
        self.batch_first = batch_first
        self.batch_hints = {}  # user input index -> batch dim (from the RNN ops, _capture_rnn.py)

    def rnn_dropout(self, name, p, x, batch_dim):
        """An RNN's inter-layer dropout in training mode on layer output x (its batch in
        batch_dim): None refuses it (call model.eval()); the training lowering drops."""
        return None

    # -- helpers -----------------------------------------------------------
    def meta(self, node):
        v = node.meta.get("val")
        return v

    def cast(self, t, dt):
        return t if t.dtype == dt else self.g.op("cast", t, dtype=dt)

    def val(self, a):
        fx = self.torch.fx
        if isinstance(a, fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.val(x) for x in a)
        return a

    def scalar(self, v, dt):
        return self.g._coerce(v, dt)

    def binary(self, node, op, a, b, out_dt=None):
        """Elementwise binary op with torch's promotion made explicit as casts."""
        if out_dt is None:
            out_dt = _gdtype(self.meta(node).dtype)
        if isinstance(a, Tensor) and isinstance(b, Tensor):
            return self.g.op(op, self.cast(a, out_dt), self.cast(b, out_dt))
        if isinstance(a, Tensor):
            return self.g.op(op, self.cast(a, out_dt), self.scalar(b, out_dt))
        return self.g.op(op, self.scalar(a, out_dt), self.cast(b, out_dt))

    def compare(self, node, op, a, b):
        ta = self.meta(node.args[0]) if hasattr(node.args[0], "meta") else None
        tb = self.meta(node.args[1]) if hasattr(node.args[1], "meta") else None
        if ta is not None and tb is not None:
            dt = _gdtype(self.torch.promote_types(ta.dtype, tb.dtype))
        else:
            t = a if isinstance(a, Tensor) else b
            s = b if isinstance(a, Tensor) else a
            dt = t.dtype
            if isinstance(s, float) and dt not in _dtypes.FLOAT:
                dt = "f32"
        return self.binary(node, op, a, b, out_dt=dt)

    # -- op table ----------------------------------------------------------
    def lower(self, node, name, args, kw):
        g, T = self.g, self.torch
        out = self.meta(node)
        if name in ("add", "sub", "rsub"):
            a, b = args[0], args[1]
            alpha = kw.get("alpha", args[2] if len(args) > 2 else 1)
            if name == "rsub":
                a, b = b, a
            if alpha != 1:
                b = self.binary(node, "mul", b, alpha)
            return self.binary(node, "add" if name == "add" else "sub", a, b)
        simple_bin = {"mul": "mul", "maximum": "maximum", "minimum": "minimum", "pow": "pow",
                      "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or",
                      "bitwise_xor": "bitwise_xor", "__and__": "bitwise_and", "__or__": "bitwise_or",
                      "__xor__": "bitwise_xor", "bitwise_left_shift": "shl", "__lshift__": "shl",
                      "bitwise_right_shift": "shr_arith", "__rshift__": "shr_arith",
                      "floor_divide": "floor_div", "remainder": "rem_floor", "fmod": "rem_trunc",
                      "atan2": "atan2"}
        if name in simple_bin:
            return self.binary(node, simple_bin[name], args[0], args[1])
        if name == "div":
            mode = kw.get("rounding_mode", args[2] if len(args) > 2 else None)
            op = {None: "div", "floor": "floor_div", "trunc": "trunc_div"}[mode]
            return self.binary(node, op, args[0], args[1])
        cmp = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
        if name in cmp:
            return self.compare(node, cmp[name], args[0], args[1])
        if name in ("logical_and", "logical_or", "logical_xor"):
            return g.op(name, args[0], args[1])
        unary = {"neg": "neg", "abs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt",
                 "rsqrt": "rsqrt", "reciprocal": "reciprocal", "sin": "sin", "cos": "cos",
                 "tanh": "tanh", "erf": "erf", "floor": "floor", "ceil": "ceil", "round": "round",
                 "trunc": "trunc", "log1p": "log1p", "expm1": "expm1", "relu": "relu",
                 "sigmoid": "sigmoid", "silu": "silu", "bitwise_not": "bitwise_not",
                 "logical_not": "logical_not", "isnan": "isnan", "sign": "sign", "square": "square"}
        if name in unary:
            x = args[0]
            if name in ("exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid",
                        "reciprocal", "log1p", "expm1"):
                x = self.cast(x, _gdtype(out.dtype))
            return g.op(unary[name], x)
        if name == "gelu":
            approx = kw.get("approximate", args[1] if len(args) > 1 else "none")
            return g.op("gelu", args[0], approximate=1 if approx == "tanh" else 0)
        if name == "clamp":
            lo = args[1] if len(args) > 1 else kw.get("min")
            hi = args[2] if len(args) > 2 else kw.get("max")
            x = args[0]
            if isinstance(lo, Tensor):  # clamp.Tensor: tensor bounds are maximum / minimum
                x, lo = g.op("maximum", x, self.cast(lo, x.dtype)), None
            if isinstance(hi, Tensor):
                x, hi = g.op("minimum", x, self.cast(hi, x.dtype)), None
            return x if lo is None and hi is None else g.op("clamp", x, min=lo, max=hi)
        if name == "where":
            return g.op("where", self.cast(args[0], "bool") if isinstance(args[0], Tensor) else args[0],
                        *[self.cast(v, _gdtype(out.dtype)) if isinstance(v, Tensor) else v
                          for v in args[1:3]])
        if name in ("_to_copy", "to"):
            return self.cast(args[0], _gdtype(out.dtype))
        if name in ("clone", "alias", "detach", "lift_fresh_copy", "contiguous", "_assert_tensor_metadata"):
            return args[0] if isinstance(args[0], Tensor) else None
        if name in ("dropout", "native_dropout"):
            train = args[2] if len(args) > 2 else kw.get("train", False)
            if train:
                return None
            return args[0] if name == "dropout" else (args[0], None)
        # -- linear algebra --
        if name == "linear":
            x, w = args[0], args[1]
            b = args[2] if len(args) > 2 else None
            return g.op("matmul", x, w, b, trans_b=1) if b is not None else g.op("matmul", x, w, trans_b=1)
        if name in ("mm", "bmm", "matmul"):
            return g.op("matmul", args[0], args[1])
        if name == "addmm":
            beta = kw.get("beta", 1)
            alpha = kw.get("alpha", 1)
            return g.op("matmul", args[1], args[2], args[0], alpha=float(alpha), beta=float(beta))
        if name == "t":
            x = args[0]
            return x if x.ndim < 2 else x.permute(1, 0)
        if name == "convolution":
            x, w, b, stride, padding, dilation, transposed, out_pad, groups = args[:9]
            if len(w.shape) == 5 and not transposed:
                return _decomp.conv3d(g, x, w, b, list(stride), list(padding), list(dilation), int(groups))
            if len(w.shape) not in (3, 4):
                return None
            stride, padding, dilation, out_pad = list(stride), list(padding), list(dilation), list(out_pad)
            if len(w.shape) == 3:  # conv1d as conv2d over [N, C, 1, L]
                x = g.op("reshape", x, shape=[x.shape[0], x.shape[1], 1, x.shape[2]])
                w = g.op("reshape", w, shape=[w.shape[0], w.shape[1], 1, w.shape[2]])
                stride, padding, dilation = [1] + stride[-1:], [0] + padding[-1:], [1] + dilation[-1:]
                out_pad = [0] + out_pad[-1:]
            if transposed:
                y = _decomp.conv_transpose2d(self, x, w, b, stride, padding, dilation, out_pad, int(groups))
                return y if y.ndim == len(out.shape) else g.op("reshape", y, shape=list(out.shape))
            ins = [x, w] + ([b] if b is not None else [])
            y = g.op("conv2d", *ins, stride=stride, padding=padding, dilation=dilation, groups=int(groups))
            return y if y.ndim == len(out.shape) else g.op("reshape", y, shape=list(out.shape))
        if name in ("max_pool2d", "max_pool2d_with_indices"):
            x, k = args[0], list(args[1])
            stride = list(args[2]) if len(args) > 2 and args[2] else k
            pad = list(args[3]) if len(args) > 3 else [0]
            dil = list(args[4]) if len(args) > 4 else [1]
            ceil = int(args[5]) if len(args) > 5 else 0
            y = g.op("max_pool2d", x, kernel=k, stride=stride, padding=pad, dilation=dil, ceil_mode=ceil)
            return y if name == "max_pool2d" else (y, None)
        if name == "avg_pool2d":
            x, k = args[0], list(args[1])
            stride = list(args[2]) if len(args) > 2 and args[2] else k
            pad = list(args[3]) if len(args) > 3 else [0]
            ceil = int(args[4]) if len(args) > 4 else 0
            cip = int(args[5]) if len(args) > 5 else 1
            if len(args) > 6 and args[6] is not None:
                return None
            return g.op("avg_pool2d", x, kernel=k, stride=stride, padding=pad, ceil_mode=ceil,
                        count_include_pad=cip)
        if name in ("adaptive_avg_pool2d", "_adaptive_avg_pool2d"):
            return g.op("adaptive_avg_pool2d", args[0], output_size=list(args[1]))
        if name in ("_native_batch_norm_legit_no_training", "batch_norm"):
            if name == "batch_norm":
                x, w, b, rm, rv, training, mom, eps = args[:8]
                if training:
                    return None
            else:
                x, w, b, rm, rv, mom, eps = args[:7]
            c = x.shape[1]
            w = w if w is not None else g.constant(np.ones(c), dtype=x.dtype)
            b = b if b is not None else g.constant(np.zeros(c), dtype=x.dtype)
            y = g.op("batch_norm", x, w, b, rm, rv, training=0, eps=float(eps))
            return y if name == "batch_norm" else (y, None, None)
        if name in ("layer_norm", "native_layer_norm"):
            x, shape = args[0], list(args[1])
            w = args[2] if len(args) > 2 else kw.get("weight")
            b = args[3] if len(args) > 3 else kw.get("bias")
            eps = args[4] if len(args) > 4 else kw.get("eps", 1e-5)
            if w is None and b is not None:
                w = g.constant(np.ones(shape), dtype=x.dtype)
            ins = [x] + [v for v in (w, b) if v is not None]
            y = g.op("layer_norm", *ins, norm_ndim=len(shape), eps=float(eps))
            return y if name == "layer_norm" else (y, None, None)
        if name in ("softmax", "_softmax", "log_softmax", "_log_softmax"):
            op = "log_softmax" if "log" in name else "softmax"
            return g.op(op, self.cast(args[0], _gdtype(out.dtype)), axis=int(args[1]))
        if name in ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu"):
            q, k, v = args[:3]
            if name == "scaled_dot_product_attention":
                mask = args[3] if len(args) > 3 else kw.get("attn_mask")
                dp = args[4] if len(args) > 4 else kw.get("dropout_p", 0.0)
                causal = args[5] if len(args) > 5 else kw.get("is_causal", False)
            else:
                dp = args[3] if len(args) > 3 else kw.get("dropout_p", 0.0)
                causal = args[4] if len(args) > 4 else kw.get("is_causal", False)
                mask = kw.get("attn_mask")
            scale = kw.get("scale")
            if dp or kw.get("enable_gqa"):
                return None
            ins = [q, k, v] + ([mask] if mask is not None else [])
            y = g.op("scaled_dot_product_attention", *ins, causal=int(bool(causal)),
                     scale=None if scale is None else float(scale))
            return y if name == "scaled_dot_product_attention" else (y, None)
        if name == "embedding":
            return g.op("embedding", args[0], args[1])
        # -- shape and movement --
        if name in ("view", "reshape", "_unsafe_view", "flatten", "unflatten", "squeeze", "unsqueeze",
                    "view_copy"):
            if isinstance(args[0], _decomp.Unviewed):  # the view back after F.instance_norm
                return _decomp.reshape(g, args[0].t, out.shape)
            return g.op("reshape", args[0], shape=list(out.shape))
        if name in ("permute", "permute_copy"):
            return args[0].permute(list(args[1]))
        if name == "transpose":
            return args[0].transpose(int(args[1]) % args[0].ndim, int(args[2]) % args[0].ndim)
        if name in ("expand", "expand_copy"):
            return g.op("expand", args[0], shape=list(out.shape))
        if name == "slice":
            x = args[0]
            dim = int(args[1]) if len(args) > 1 else 0
            start = args[2] if len(args) > 2 and args[2] is not None else 0
            end = args[3] if len(args) > 3 and args[3] is not None else x.shape[dim]
            step = args[4] if len(args) > 4 else 1
            end = min(end, x.shape[dim]) if end >= 0 else end
            return g.op("slice", x, axes=[dim % x.ndim], starts=[start], stops=[end], steps=[step])
        if name == "select":
            x = args[0]
            return g.op("select", x, axis=int(args[1]) % x.ndim, index=int(args[2]) % x.shape[int(args[1])])
        if name in ("cat", "concat"):
            dim = args[1] if len(args) > 1 else kw.get("dim", 0)
            ts = [t for t in args[0] if t.shape != (0,)]
            return g.op("concat", *ts, axis=int(dim) % ts[0].ndim)
        if name == "stack":
            dim = args[1] if len(args) > 1 else 0
            return g.op("stack", *args[0], axis=int(dim))
        if name in ("split", "split_with_sizes"):
            x, sizes = args[0], args[1]
            dim = int(args[2] if len(args) > 2 else kw.get("dim", 0)) % x.ndim
            if isinstance(sizes, int):
                sizes = [min(sizes, x.shape[dim] - s) for s in range(0, x.shape[dim], sizes)]
            outs, s = [], 0
            for n in sizes:
                outs.append(g.op("slice", x, axes=[dim], starts=[s], stops=[s + n], steps=[1]))
                s += n
            return tuple(outs)
        # -- reductions --
        red = {"sum": "sum", "mean": "mean", "amax": "reduce_max", "amin": "reduce_min", "prod": "prod"}
        if name in red:
            x = args[0]
            dims = args[1] if len(args) > 1 else kw.get("dim")
            keep = args[2] if len(args) > 2 else kw.get("keepdim", False)
            if dims is None or dims == []:
                dims = list(range(x.ndim))
            elif isinstance(dims, int):
                dims = [dims]
            x = self.cast(x, _gdtype(out.dtype)) if name in ("sum", "mean", "prod") else x
            return g.op(red[name], x, axes=[d % max(x.ndim, 1) for d in dims], keepdim=int(bool(keep)))
        if name in ("argmax", "argmin"):
            x = args[0]
            dim = args[1] if len(args) > 1 else None
            if dim is None:
                return None
            return g.op(name, x, axis=int(dim), keepdim=int(bool(args[2] if len(args) > 2 else False)))
        # -- creation --
        if name in ("arange",):
            n = out.shape[0]
            start = float(args[0]) if len(args) > 1 else 0.0
            step = float(args[2]) if len(args) > 2 else 1.0
            return g.op("arange", shape=[n], dtype=_gdtype(out.dtype), start=start, step=step)
        if name in ("full", "zeros", "ones", "scalar_tensor", "full_like", "zeros_like", "ones_like"):
            value = {"zeros": 0.0, "ones": 1.0, "zeros_like": 0.0, "ones_like": 1.0}.get(name)
            if value is None:
                value = args[1] if name in ("full", "full_like") else args[0]
            return g.op("full", shape=list(out.shape), dtype=_gdtype(out.dtype), value=float(value))
        return self.lower_more(node, name, args, kw)

    def lower_more(self, node, name, args, kw):
        """Padding, indexing, variance, rms-norm, cumsum: torch ops onto catalogue ops."""
        g = self.g
        out = self.meta(node)
        if name == "constant_pad_nd":
            value = args[2] if len(args) > 2 else kw.get("value", 0)
            return g.op("pad", args[0], pads=[int(p) for p in args[1]], value=float(value))
        if name == "index":
            # x[..., idx, ...] with one integer index tensor (F.pad's reflect/replicate modes
            # come here too, as an index computed from arange)
            x, idx = args[0], list(args[1])
            pos = [i for i, t in enumerate(idx) if t is not None]
            if not pos or not all(isinstance(idx[i], Tensor) and idx[i].dtype in ("i32", "i64") for i in pos):
                return None
            if pos != list(range(pos[0], pos[0] + len(pos))):
                # separated index tensors: torch puts their broadcast dims first
                x = x.permute(pos + [i for i in range(x.ndim) if i not in pos])
                pos = list(range(len(pos)))
                idx = [t for t in idx if t is not None]
            else:
                idx = [idx[i] for i in pos]
            d = pos[0]
            ix = None
            for k, t in zip(pos, idx):
                size = x.shape[k]
                t = self.cast(t, "i64")
                t = g.op("where", g.op("lt", t, g._coerce(0, "i64")), g.op("add", t, g._coerce(size, "i64")),
                         t)  # negative indices count from the end, as in torch
                ix = t if ix is None else g.op("add", g.op("mul", ix, g._coerce(size, "i64")), t)
            if len(pos) > 1:  # several adjacent index tensors: one index into the merged dims
                merged = int(np.prod([x.shape[k] for k in pos], dtype=np.int64))
                x = g.op("reshape", x, shape=list(x.shape[:d]) + [merged] + list(x.shape[pos[-1] + 1:]))
            return self.take(x, d, ix, list(out.shape))
        if name == "gather":
            x, dim, ix = args[0], int(args[1]), args[2]
            return g.op("gather", x, ix, axis=dim % max(x.ndim, 1))
        if name == "scatter_add":
            x, dim, ix, src = args[0], int(args[1]), args[2], args[3]
            return g.op("scatter_add", x, ix, src, axis=dim % max(x.ndim, 1))
        if name in ("var", "var_mean"):
            x = args[0]
            dims = args[1] if len(args) > 1 else kw.get("dim")
            corr = kw.get("correction", 1)
            corr = 1 if corr is None else corr
            if "unbiased" in kw:
                corr = int(bool(kw["unbiased"]))
            if float(corr) != int(corr):
                return None
            if dims is None or dims == []:
                dims = list(range(x.ndim))
            elif isinstance(dims, int):
                dims = [dims]
            axes = [int(d) % max(x.ndim, 1) for d in dims]
            keep = int(bool(kw.get("keepdim", False)))
            v = g.op("var", x, axes=axes, keepdim=keep, correction=int(corr))
            if name == "var":
                return v
            return v, g.op("mean", x, axes=axes, keepdim=keep)
        if name == "rms_norm":
            x, shape = args[0], list(args[1])
            w = args[2] if len(args) > 2 else kw.get("weight")
            eps = args[3] if len(args) > 3 else kw.get("eps")
            if eps is None:  # torch's default: the dtype's machine epsilon
                eps = float(self.torch.finfo(self.meta(node.args[0]).dtype).eps)
            ins = [x] + ([w] if w is not None else [])
            return g.op("rms_norm", *ins, norm_ndim=len(shape), eps=float(eps))
        if name == "cumsum":
            x, dim = args[0], int(args[1] if len(args) > 1 else kw["dim"])
            odt = _gdtype(out.dtype)
            if odt in _dtypes.FLOAT:
                x = self.cast(x, odt)
            return self.cast(g.op("cumsum", x, axis=dim % max(x.ndim, 1)), odt)
        if name in _rnn.NAMES:
            return _rnn.lower(self, node, name, args)
        return _decomp.lower(self, node, name, args, kw)

    def take(self, x, d, ix, out_shape):
        """x's slices at positions ix (integer tensor, any rank) along axis d, shaped out_shape."""
        g = self.g
        if ix.ndim != 1:
            ix = g.op("reshape", ix, shape=[int(np.prod(ix.shape, dtype=np.int64))])
        y = g.op("index_select", x, ix, axis=d)
        return y if tuple(y.shape) == tuple(out_shape) else g.op("reshape", y, shape=out_shape)

    def _why(self, node, name, args, kw):
        """What the user wrote that has no mapping, and what is supported instead."""
        if name == "convolution":
            w, transposed = args[1], args[6]
            nd = len(w.shape) - 2
            what = f"F.conv_transpose{nd}d / nn.ConvTranspose{nd}d" if transposed else f"F.conv{nd}d / nn.Conv{nd}d"
            return (f"{what} (aten.convolution.default with a {nd + 2}-d weight): capture supports F.conv1d, "
                    "F.conv2d and F.conv3d and the transposed forms F.conv_transpose1d / F.conv_transpose2d "
                    "(stride, padding, dilation, groups), not a transposed 3-d convolution: use "
                    "F.interpolate(mode='nearest') then F.conv3d to upsample a volume")
        if name in ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu"):
            i = 4 if name == "scaled_dot_product_attention" else 3
            dp = args[i] if len(args) > i else kw.get("dropout_p", 0.0)
            if dp:
                return (f"F.scaled_dot_product_attention(dropout_p={dp}): dropout inside the attention has no "
                        "mapping (the weights' dropout is not an op of the catalogue); pass dropout_p=0 (e.g. "
                        "dropout_p=self.p if self.training else 0 in eval capture) and, for training, put "
                        "nn.Dropout on the attention's output or inputs, which grid.train runs")
        hint = _decomp.why(name, args) or _rnn.hint(name, args)
        if hint is not None:
            return hint
        if name in ("dropout", "native_dropout"):
            return _DROPOUT_HINT
        if name in ("batch_norm", "_native_batch_norm_legit"):
            return _BN_HINT
        if name == "index":
            return ("advanced indexing (aten.index.Tensor): capture supports integer index tensors, as in "
                    "x[:, [0, 2]], x[idx] or x[i, j]; not boolean masks (their result's shape depends on the "
                    "data: use torch.where(mask, x, 0) to keep the shape)")
        if name in ("var", "var_mean"):
            return f"{self._qual(node)} with a fractional correction: the catalogue's var takes an int correction"
        shown = ", ".join(_describe(a) for a in args)
        shown += "".join(f", {k}={_describe(v)}" for k, v in kw.items())
        return f"{self._qual(node)}({shown}): these arguments have no mapping"

    # -- driver ------------------------------------------------------------
    def run(self):
        T = self.torch
        ep = self.ep
        gm = ep.graph_module
        sig = ep.graph_signature
        kinds = {}
        for spec in sig.input_specs:
            kinds[spec.arg.name] = spec
        state = ep.state_dict
        consts = getattr(ep, "constants", {}) or {}
        # first pass: every op we cannot map, all at once
        unsupported, hints = set(), []
        dynamic = self._dynamic(gm)
        if dynamic:
            raise UnsupportedOpError(dynamic, [_table.DYNAMIC_HINT])
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is not operator.getitem:
                if not self._known(node):
                    unsupported.add(self._qual(node))
                    h = _NAME_HINTS.get(self._name(node))
                    if h is not None and h not in hints:
                        hints.append(h)
        if unsupported:
            raise UnsupportedOpError(unsupported, hints)
        lazy = _decomp.instance_norm_nodes(self, gm) | _decomp.embedding_bag_nodes(self, gm)
        zeros = _rnn.zero_state_nodes(gm)
        users = [n for n in gm.graph.nodes if n.op == "placeholder" and kinds[n.name].kind.name == "USER_INPUT"]
        user_index = {n: i for i, n in enumerate(users)}
        self.batch_hints = _rnn.batch_hints(self, gm, user_index)
        for node in gm.graph.nodes:
            if node in zeros:
                self.env[node] = _rnn.ZERO
                continue
            if node in lazy:
                a = node.args[0]
                self.env[node] = _decomp.Unviewed(self.env[a] if isinstance(a, self.torch.fx.Node) else None)
                continue
            if node.op == "placeholder":
                spec = kinds[node.name]
                kind = spec.kind.name
                if kind == "USER_INPUT":
                    v = self.meta(node)
                    d = self.batch_first[user_index[node]] if self.batch_first else None
                    if isinstance(v, T.Tensor) and d:
                        moved, back = _rnn.move_batch_first(tuple(v.shape), d)
                        self.env[node] = self.g.input(tuple(moved), _gdtype(v.dtype)).permute(back)
                    elif isinstance(v, T.Tensor):
                        self.env[node] = self.g.input(tuple(v.shape), _gdtype(v.dtype))
                    else:
                        self.env[node] = v
                elif self.param_inputs is not None and spec.target in self.param_inputs:
                    self.env[node] = self.param_inputs[spec.target]
                else:
                    t = state[spec.target] if spec.target in state else consts[spec.target]
                    arr, dt = _to_numpy(t)
                    self.env[node] = self.g.constant(arr, dtype=dt)
            elif node.op == "call_function":
                if node.target is operator.getitem:
                    self.env[node] = self.env[node.args[0]][node.args[1]]
                    continue
                args = self.val(node.args)
                kw = {k: self.val(v) for k, v in node.kwargs.items()}
                name = self._name(node)
                res = self.lower(node, name, args, kw)
                if res is None:
                    raise UnsupportedOpError({self._qual(node)}, [self._why(node, name, args, kw)])
                self._check(node, res)
                self.env[node] = res
            elif node.op == "output":
                outs = node.args[0]
                for o in outs:
                    t = self.env[o]
                    if not isinstance(t, Tensor):
                        t = self.g.constant(np.asarray(t))
                    self.g.output(t)
        return self.g

    def _dynamic(self, gm):
        """The ops whose result has a data-dependent (symbolic) shape."""
        T = self.torch
        found = set()
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            v = self.meta(node)
            vs = v if isinstance(v, (tuple, list)) else (v,)
            sym = any(isinstance(t, T.SymInt) or (isinstance(t, T.Tensor) and
                                                  any(not isinstance(d, int) for d in t.shape)) for t in vs)
            if sym and isinstance(node.target, T._ops.OpOverload):
                found.add(self._qual(node))
        return found

    def _check(self, node, res):
        v = self.meta(node)
        if isinstance(res, Tensor) and isinstance(v, self.torch.Tensor):
            if tuple(res.shape) != tuple(v.shape):
                raise _goblin.InternalError(f"capture: {self._qual(node)} gave shape {res.shape}, "
                                            f"torch says {tuple(v.shape)}")

    @staticmethod
    def _name(node):
        n = getattr(node.target, "__name__", str(node.target))
        return n.split(".")[0]

    def _qual(self, node):
        return "aten." + getattr(node.target, "__name__", str(node.target))

    def _known(self, node):
        name = self._name(node)
        return name in _KNOWN


def _describe(a):
    if isinstance(a, Tensor):
        return f"Tensor({a.dtype}{list(a.shape)})"
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(_describe(v) for v in a) + "]"
    return repr(a)


_KNOWN = _table.INFERENCE  # what the lowering maps, documented in _capture_table.py


def _module_hints(torch, mod, ex):
    """{input index: 1} for a seq-first PyTorch attention module captured itself
    (nn.MultiheadAttention, nn.Transformer*, batch_first=False): its [seq, batch, embed]
    inputs."""
    nn = torch.nn
    kinds = (nn.MultiheadAttention, nn.Transformer, nn.TransformerEncoder, nn.TransformerDecoder,
             nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
    if not isinstance(mod, kinds):
        return {}
    bf = getattr(mod, "batch_first", None)
    if bf is None:
        att = getattr(mod, "self_attn", None)
        if att is None and getattr(mod, "layers", None) is not None and len(mod.layers):
            att = getattr(mod.layers[0], "self_attn", None)
        bf = getattr(att, "batch_first", None)
    if bf is None or bf:
        return {}
    return {i: 1 for i, e in enumerate(ex) if isinstance(e, torch.Tensor) and e.dim() == 3}


def _given_dims(batch_dims, ex, torch):
    """batch_dims as given to capture(): an int for every tensor input, or one entry per
    input (an int, or None for an unbatched input)."""
    n = len(ex)
    if isinstance(batch_dims, (int, np.integer)) and not isinstance(batch_dims, bool):
        dims = [int(batch_dims) if isinstance(e, torch.Tensor) and e.dim() > 0 else None for e in ex]
    else:
        dims = list(batch_dims)
        if len(dims) != n:
            raise _goblin.InvalidArgumentError(f"batch_dims: expected {n} entries (one per example input, None "
                                               f"for an unbatched one), got {len(dims)}")
    out = []
    for i, (d, e) in enumerate(zip(dims, ex)):
        if d is None:
            out.append(None)
            continue
        rank = e.dim() if isinstance(e, torch.Tensor) else 0
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or not -rank <= int(d) < rank:
            raise _goblin.InvalidArgumentError(f"batch_dims: input {i} of shape {tuple(getattr(e, 'shape', ()))} "
                                               f"has no dim {d!r}")
        out.append(int(d) % rank)
    return tuple(out)


def export_program(torch, fn_or_module, ex):
    """torch.export of the program (a module, or a function wrapped in one), lowered by
    the decomposition table."""
    mod = fn_or_module
    if not isinstance(mod, torch.nn.Module):
        class _Fn(torch.nn.Module):
            def forward(self, *a):
                return fn_or_module(*a)
        mod = _Fn()
    with torch.no_grad(), warnings.catch_warnings():
        # torch.export's own pytree internals warn about their deprecated API.
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        # nn.LSTM/GRU/RNN re-assign their _flat_weights while traced: torch warns, harmlessly
        warnings.filterwarnings("ignore", message=".*were assigned during export.*", category=UserWarning)
        ep = torch.export.export(mod, ex)
        ep = ep.run_decompositions(_decomp_table(torch))
    return ep


def capture(fn_or_module, *example_inputs, batch_dims=None):
    """Capture a PyTorch module or function as a goblin graph (a CapturedGraph).

    `example_inputs` are torch tensors; the graph's inputs follow their order,
    shapes and dtypes. Put modules in eval() mode first (batch-norm and dropout
    are captured in inference form). Raises UnsupportedOpError naming every op
    without a mapping.

    batch_dims: where the batch sits in each input, for grids (grid.run cuts the
    inputs along it) and for calls at another batch size: an int for every tensor
    input, or one entry per input (None: not batched). Default: inferred from the
    program where that is unambiguous (the input of nn.LSTM / nn.GRU / nn.RNN: dim 1,
    or 0 with batch_first=True, traced back through embedding, linear, elementwise
    ops and permutes to the graph input; the [seq, batch, embed] inputs of a seq-first
    nn.MultiheadAttention / nn.Transformer* module captured itself; the other inputs
    by the one dim of the same size), else left to the grid (dim 0 first, see
    docs/graph-format.md "The batch axis"). `g.batch_dims` says what was chosen."""
    torch = _torch()
    ex = tuple(torch.as_tensor(e) if isinstance(e, np.ndarray) else e for e in example_inputs)
    given = None if batch_dims is None else _given_dims(batch_dims, ex, torch)
    ep = export_program(torch, fn_or_module, ex)
    low = _Lowering(torch, ep)
    g = low.run()
    g._source = (fn_or_module, ex)
    g._ep = ep
    if given is not None:
        g.batch_dims, g.batch_dims_given = given, True
    else:
        hints = dict(_module_hints(torch, fn_or_module, ex))
        hints.update(low.batch_hints)
        shapes = [tuple(e.shape) if isinstance(e, torch.Tensor) else () for e in ex]
        try:
            g.batch_dims = _rnn.infer_dims(shapes, hints, "goblin.capture")
        except ValueError as e:
            g.batch_dims, g._dims_why = None, str(e)
    return g


def lower_batch_first(ep, dims):
    """The exported program lowered again with the batch dims `dims` moved to dim 0 of
    the graph's inputs (the form a grid cuts; the outputs are the program's)."""
    return _Lowering(_torch(), ep, batch_first=list(dims)).run()
