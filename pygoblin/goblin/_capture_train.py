"""Training capture: a PyTorch model + loss as the forward graph a goblin trainer runs.

capture_training(model, loss_fn, *example_batch) exports the function

    (params..., *batch) -> loss_fn(model(*batch[:n_inputs]), *batch[n_inputs:])

with torch.export and lowers it with goblin.capture's op translation (_capture.py),
except that the model's trainable parameters stay graph INPUTS (0 .. n_params - 1,
in model.named_parameters() order) instead of becoming constants; the batch tensors
follow as inputs n_params.. (all batched on dim 0); output 0 is the scalar loss
(goblin/train.h's contract: the MEAN over the batch of the per-example losses).

Training semantics of the captured forward:
 - batch-norm runs in TRAIN mode: it normalizes with the (micro-)batch's own
   statistics; the trainer combines the micro-batches' per-channel means and
   variances into the whole batch's, and grid.train updates running_mean /
   running_var / num_batches_tracked from them as torch does (momentum, unbiased
   variance), returned by state_dict();
 - dropout runs in TRAIN mode as goblin's counter-based DROPOUT op: each dropout
   node gets its own seed (derived from `seed=`, default torch.initial_seed()), and
   the trainer keys every round's masks by (seed, round, the element's index in the
   whole batch), so they do not depend on the micro-batches, stages or tiles; the
   distribution is torch's (keep with probability 1 - p, scale 1 / (1 - p)), the
   random stream is not (torch's masks cannot be reproduced);
 - parameters with requires_grad=False become constants (not trained).

Parameter names are kept here, in Python, only to map state_dict keys to input
positions: they never enter the graph (which has no names) nor reach a grid.
Reshapes should keep the batch as their leading dimension (x.view(B, T, H, D),
x.flatten(1)): the trainer re-instantiates the graph for micro-batch sizes and
rescales a reshape whose leading dim is the batch; one that folds the batch into
another dim (x.view(B * T, V)) cannot be rescaled (use cross_entropy on
[B, V, T] logits instead of flattening).
"""
import copy
import warnings

import numpy as np

from . import _goblin
from . import _capture
from . import _capture_rnn as _rnn
from ._capture import _torch, _gdtype, _to_numpy, UnsupportedOpError  # noqa: F401




def _train_decomp_table(torch):
    table = _capture._decomp_table(torch)
    for name in _capture._table.TRAIN_KEEP:
        packet, overload = name.split(".")
        p = getattr(torch.ops.aten, packet, None)
        o = getattr(p, overload, None) if p is not None else None
        if o is not None and o in table:
            del table[o]
    return table




BN_STATS = ("goblin.capture_training: {n} batch-norm module(s) keep running statistics that grid.train cannot "
            "update (their input is not batch data with the batch as dim 0): state_dict() returns their "
            "running_mean / running_var as they were")


MODE = ("goblin.capture_training: {n} module(s) in eval mode compute something else in train mode ({names}), "
        "and grid.train trains in train mode, as torch would after model.train(): {what}; call model.train() "
        "before training to silence this (or build them without dropout)")


def _mode_dependent(torch, model):
    """The submodules in eval mode whose train mode computes something else: dropout with
    p > 0 (nn.Dropout*, an RNN's or an attention's own dropout) and batch-norm."""
    out = []
    for name, mod in model.named_modules():
        if mod.training:
            continue
        if isinstance(mod, torch.nn.modules.dropout._DropoutNd) and mod.p > 0:
            out.append((name or type(mod).__name__, "dropout drops"))
        elif isinstance(mod, (torch.nn.RNNBase, torch.nn.MultiheadAttention)) and getattr(mod, "dropout", 0):
            out.append((name or type(mod).__name__, "dropout drops"))
        elif isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            out.append((name or type(mod).__name__, "batch-norm normalizes with the batch's statistics"))
    return out


class _TrainLowering(_capture._Lowering):
    """goblin.capture's lowering with training-mode batch-norm, dropout and nll_loss."""

    def _known(self, node):
        return self._name(node) in _capture._table.TRAINING

    def rnn_dropout(self, name, p, x, batch_dim):
        """The inter-layer dropout of a multi-layer RNN: goblin's dropout op on the layer's
        output sequence, with the batch moved to the leading dim for the draw (the trainer
        keys the mask by the element's index in the whole batch, so the batch must lead),
        then moved back. torch drops every element of the output independently, so this
        is its distribution (not its random stream)."""
        if x is None:
            return True  # the check before unrolling: dropped here
        if batch_dim == 0:
            return self.dropout(x, p)
        perm = list(range(x.ndim))
        perm[0], perm[batch_dim] = batch_dim, 0
        return self.dropout(x.permute(perm), p).permute(perm)

    def attention(self, q, k, v, mask, dp, causal, scale):
        """F.scaled_dot_product_attention(dropout_p > 0) in training mode, composed as torch's
        math reference computes it: softmax(q k^T scale + mask) then dropout of the weights
        (goblin's dropout op, keep 1 - p, scale 1 / (1 - p)), then @ v. The weights'
        leading dim is q's: the batch of an attention module's [batch, heads, L, S]."""
        g = self.g
        sc = 1.0 / float(np.sqrt(q.shape[-1])) if scale is None else float(scale)
        s = g.op("matmul", q, k, trans_b=1, alpha=sc)
        lq, lk = q.shape[-2], k.shape[-2]
        if causal:
            keep = np.tril(np.ones((lq, lk), dtype=bool))
            s = s + g.constant(np.where(keep, 0.0, -np.inf), dtype=s.dtype)
        if mask is not None:
            if mask.dtype == "bool":
                ninf = g.constant(np.full((1,) * s.ndim, -np.inf), dtype=s.dtype)
                s = g.op("where", mask, s, ninf)
            else:
                s = s + self.cast(mask, s.dtype)
        w = self.dropout(g.op("softmax", s, axis=s.ndim - 1), float(dp))
        return g.op("matmul", w, v)

    def dropout(self, x, p):
        """A DROPOUT node with this capture's next seed (distinct per node)."""
        k = getattr(self, "_n_drop", 0)
        self._n_drop = k + 1
        seed = (int(getattr(self, "drop_seed", 0)) + k) % (1 << 63)
        return self.g.op("dropout", x, seed=seed, p=p)

    def take(self, x, d, ix, out_shape):
        """As goblin.capture's, through gather (index_select has no backward rule): the index
        is laid out along axis d and expanded over x's other dims."""
        g = self.g
        n = int(np.prod(ix.shape, dtype=np.int64))
        lay = [1] * x.ndim
        lay[d] = n
        full = list(x.shape)
        full[d] = n
        ix = g.op("expand", g.op("reshape", ix, shape=lay), shape=full)
        y = g.op("gather", x, ix, axis=d)
        return y if tuple(y.shape) == tuple(out_shape) else g.op("reshape", y, shape=out_shape)

    def _stats(self, x):
        c = x.shape[1]
        return (self.g.constant(np.zeros(c), dtype=x.dtype), self.g.constant(np.ones(c), dtype=x.dtype))

    def _bn(self, x, w, b, eps):
        c = x.shape[1]
        w = w if w is not None else self.g.constant(np.ones(c), dtype=x.dtype)
        b = b if b is not None else self.g.constant(np.zeros(c), dtype=x.dtype)
        rm, rv = self._stats(x)
        y = self.g.op("batch_norm", x, w, b, rm, rv, training=1, eps=float(eps))
        # which module it is (torch.export's nn_module_stack: the innermost module's path
        # under the _Step wrapper "m."), for the running statistics
        stack = (getattr(self, "_node", None) and self._node.meta.get("nn_module_stack")) or {}
        path = list(stack.values())[-1][0] if stack else None
        if isinstance(path, str) and path.startswith("m."):
            path = path[2:]
        getattr(self, "bn_nodes", None) is None and setattr(self, "bn_nodes", [])
        self.bn_nodes.append((y.id, path))
        return y

    def lower(self, node, name, args, kw):
        self._node = node
        if name in ("dropout", "native_dropout"):
            # training mode: goblin's dropout op, one seed per node (the trainer derives each
            # round's and each micro-batch's key from it: goblin/train.h)
            p = args[1] if len(args) > 1 else kw.get("p", 0.5)
            train = args[2] if len(args) > 2 else kw.get("train", True)
            x = args[0]
            if train is False or not p:
                return x if name == "dropout" else (x, None)
            y = self.dropout(x, float(p))
            return y if name == "dropout" else (y, None)
        if name == "scaled_dot_product_attention":
            dp = args[4] if len(args) > 4 else kw.get("dropout_p", 0.0)
            if dp and not kw.get("enable_gqa"):
                mask = args[3] if len(args) > 3 else kw.get("attn_mask")
                causal = args[5] if len(args) > 5 else kw.get("is_causal", False)
                return self.attention(args[0], args[1], args[2], mask, dp, causal, kw.get("scale"))
        if name == "_native_batch_norm_legit" and isinstance(args[0], _capture._decomp.Unviewed):
            return super().lower(node, name, args, kw)  # F.instance_norm: a group norm per channel
        if name == "_native_batch_norm_legit":
            # no_stats overload: (x, w, b, training, momentum, eps); with stats: (x, w, b, rm, rv, training, ...)
            if len(args) >= 8:
                x, w, b, _rm, _rv, training, _mom, eps = args[:8]
            else:
                x, w, b, training, _mom, eps = args[:6]
            if not training:
                return None
            return (self._bn(x, w, b, eps), None, None)
        if name == "_native_batch_norm_legit_functional":
            x, w, b, _rm, _rv, training, _mom, eps = args[:8]
            if not training:
                return None
            return (self._bn(x, w, b, eps), None, None, None, None)
        if name == "batch_norm":
            x, w, b, rm, rv, training, _mom, eps = args[:8]
            if training:
                return self._bn(x, w, b, eps)
            return super().lower(node, name, args, kw)
        if name in ("nll_loss_forward", "nll_loss2d_forward"):
            x, t, w, red, ign = args[:5]
            ins = [x, t] + ([w] if w is not None else [])
            y = self.g.op("nll_loss", *ins, reduction=int(red), ignore_index=int(ign))
            return (y, None)
        return super().lower(node, name, args, kw)


class TrainingCapture:
    """The forward graph of a training step and how it maps to the torch module.

    graph: goblin.Graph, inputs 0 .. n_params - 1 the parameters, then the batch;
    output 0 the loss. names: the trainable parameters' state_dict keys in input
    order; init: their values (NumPy, copied at capture); aliases: every state_dict
    key holding a trained parameter -> its input index (tied weights share one);
    buffers: the other state_dict entries (NumPy copies, returned unchanged);
    data_shapes / data_dtypes: the batch inputs of the example batch."""

    def __init__(self, graph, names, init, aliases, buffers, data_shapes, data_dtypes, key_order,
                 batch_dims=None, batch_norms=None):
        self.graph = graph
        # graph node id -> (state_dict prefix, momentum) of each batch-norm whose running
        # statistics the trainer's rounds update (update_running_stats)
        self.batch_norms = dict(batch_norms or {})
        # per batch input: its batch dim in the arrays given to the trainer; the graph takes
        # the inputs batch-first (moved by the trainer), as goblin/train.h wants
        self.batch_dims = tuple(batch_dims) if batch_dims is not None else (0,) * len(data_shapes)
        self.names = tuple(names)
        self.init = list(init)
        self.aliases = dict(aliases)
        self.buffers = dict(buffers)
        self.data_shapes = tuple(data_shapes)
        self.data_dtypes = tuple(data_dtypes)
        self.key_order = tuple(key_order)

    @property
    def n_params(self):
        return len(self.names)

    @property
    def batch_size(self):
        """The example batch's size."""
        return self.data_shapes[0][self.batch_dims[0]]

    def batch_first(self, arrays):
        """The batch arrays as the graph takes them: each batch dim moved to dim 0."""
        return [np.ascontiguousarray(np.moveaxis(a, d, 0)) if d else a for a, d in zip(arrays, self.batch_dims)]

    def state_dict(self, params, torch=None):
        """A state_dict (OrderedDict of torch tensors, or NumPy arrays without torch)
        from parameter values in input order, for module.load_state_dict."""
        import collections
        out = collections.OrderedDict()
        for k in self.key_order:
            if k in self.aliases:
                v = params[self.aliases[k]]
            else:
                v = self.buffers[k]
            out[k] = torch.from_numpy(np.array(v, copy=True)) if torch is not None else np.array(v, copy=True)
        return out

    def update_running_stats(self, stats):
        """Apply one round's whole-batch statistics [(node, count, mean, biased var)] to the
        running statistics in `buffers`, as torch's batch-norm in train mode does:
        num_batches_tracked += 1; m = momentum (None: 1 / num_batches_tracked);
        running_mean = (1 - m) running_mean + m mean; running_var = (1 - m) running_var +
        m var count / (count - 1) (the unbiased variance)."""
        for node, count, mean, var in stats:
            if node not in self.batch_norms or count < 1:
                continue
            prefix, momentum = self.batch_norms[node]
            nbt = prefix + "num_batches_tracked"
            if nbt in self.buffers:
                self.buffers[nbt] = np.array(self.buffers[nbt] + 1, dtype=np.asarray(self.buffers[nbt]).dtype)
                n_tracked = int(self.buffers[nbt])
            else:
                n_tracked = 1
            m = momentum if momentum is not None else 1.0 / n_tracked
            rm, rv = self.buffers[prefix + "running_mean"], self.buffers[prefix + "running_var"]
            unbiased = var * (count / (count - 1)) if count > 1 else var
            dt = rm.dtype
            self.buffers[prefix + "running_mean"] = ((1 - m) * rm.astype(np.float64) + m * mean).astype(dt)
            self.buffers[prefix + "running_var"] = ((1 - m) * rv.astype(np.float64) + m * unbiased).astype(dt)

    def params_from_state_dict(self, sd):
        """Parameter arrays in input order from a state_dict (torch tensors or arrays)."""
        vals = []
        for i, n in enumerate(self.names):
            if n not in sd:
                raise KeyError(f"state_dict has no entry '{n}'")
            v = sd[n]
            if hasattr(v, "detach"):
                v = _to_numpy(v)[0]
            v = np.asarray(v)
            want = self.init[i]
            if v.shape != want.shape:
                raise _goblin.ShapeError(f"state_dict '{n}': shape {v.shape}, the model has {want.shape}")
            vals.append(np.ascontiguousarray(v, dtype=want.dtype))
        return vals


def _train_copy(torch, model):
    """A deep copy in training mode with running statistics removed (batch stats only)."""
    m = copy.deepcopy(model)
    m.train()
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.track_running_stats = False
            mod.running_mean = None
            mod.running_var = None
            mod.num_batches_tracked = None
    return m


def capture_training(model, loss_fn, *example_batch, n_inputs=1, batch_dims=None, seed=None):
    """Capture `loss_fn(model(*batch[:n_inputs]), *batch[n_inputs:])` for training
    (`loss_fn` None: the model returns the loss itself from the whole batch).

    example_batch: torch tensors (or NumPy arrays) of one batch. batch_dims: the dim of
    each that holds the batch (an int for all, or one per tensor); default: inferred
    as goblin.capture does (a seq-first nn.LSTM's input: dim 1, the targets by the one
    dim of the batch size), else dim 0. The graph takes them batch-first
    (TrainingCapture.batch_first moves arrays to match). seed: the dropout masks' seed
    (an int; default torch.initial_seed(), so torch.manual_seed makes them reproducible).
    Returns a TrainingCapture. Raises UnsupportedOpError naming every op without a
    mapping, ShapeError/DTypeError for a loss that is not one float element."""
    torch = _torch()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"capture_training(): model must be a torch.nn.Module, got {type(model).__name__}")
    if not example_batch:
        raise ValueError("capture_training(): give an example batch (e.g. images, labels)")
    ex = tuple(torch.as_tensor(e) if isinstance(e, np.ndarray) else e for e in example_batch)
    for e in ex:
        if not isinstance(e, torch.Tensor) or e.dim() == 0:
            raise TypeError("capture_training(): every batch input must be a tensor with a batch dim")
    given = None if batch_dims is None else _capture._given_dims(batch_dims, ex, torch)
    if given is not None and None in given:
        raise _goblin.InvalidArgumentError("capture_training(): batch_dims: every batch input has a batch dim "
                                           f"(got {given})")
    if given is not None:
        _same_batch(ex, given)
    n_in = len(ex) if loss_fn is None else int(n_inputs)
    if not 1 <= n_in <= len(ex):
        raise ValueError(f"capture_training(): n_inputs={n_inputs} with {len(ex)} batch tensors")

    # names of the original module: trainable parameters (deduplicated: tied weights once)
    params = []
    for n, p in model.named_parameters():
        if p.requires_grad:
            params.append((n, p))
    if not params:
        raise ValueError("capture_training(): the model has no trainable parameters")
    ids = {id(p): i for i, (_, p) in enumerate(params)}
    sd = model.state_dict(keep_vars=True)
    aliases, buffers = {}, {}
    for k, v in sd.items():
        if id(v) in ids:
            aliases[k] = ids[id(v)]
        else:
            buffers[k] = _to_numpy(v)[0].copy() if hasattr(v, "detach") else v
    init = [_to_numpy(p)[0].copy() for _, p in params]
    dts = [_gdtype(p.dtype) for _, p in params]

    moded = _mode_dependent(torch, model)
    if moded:
        names = ", ".join(n for n, _ in moded[:4]) + (", ..." if len(moded) > 4 else "")
        what = "; ".join(sorted({w for _, w in moded}))
        warnings.warn(MODE.format(n=len(moded), names=names, what=what), UserWarning, stacklevel=2)
    mcopy = _train_copy(torch, model)

    class _Step(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *batch):
            if loss_fn is None:
                return self.m(*batch)
            return loss_fn(self.m(*batch[:n_in]), *batch[n_in:])

    step = _Step(mcopy).train()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        # nn.LSTM/GRU/RNN re-assign their _flat_weights while traced: torch warns, harmlessly
        warnings.filterwarnings("ignore", message=".*were assigned during export.*", category=UserWarning)
        ep = torch.export.export(step, ex)
        ep = ep.run_decompositions(_train_decomp_table(torch))
    # the copy's parameters under the export's names ("m." + the module's key)
    copy_params = dict(mcopy.named_parameters())
    for n, _ in params:
        if n not in copy_params:
            raise _goblin.InternalError(f"capture_training(): parameter '{n}' missing from the copy")

    base_seed = (int(torch.initial_seed()) if seed is None else int(seed)) % (1 << 63)

    def lower(batch_first):
        low = _TrainLowering(torch, ep, param_inputs={}, batch_first=batch_first)
        low.drop_seed = base_seed
        g = low.g
        for (n, p), dt in zip(params, dts):
            t = g.input(tuple(p.shape), dt)
            low.param_inputs["m." + n] = t
        # tied weights: every name of the same tensor maps to its input
        for k, i in aliases.items():
            low.param_inputs.setdefault("m." + k, low.param_inputs["m." + params[i][0]])
        # frozen parameters (requires_grad False) are not in param_inputs: constants
        return low, low.run()

    low, g = lower(given)
    dims = given
    if dims is None:
        try:
            dims = _rnn.infer_dims([tuple(e.shape) for e in ex], low.batch_hints, "capture_training()")
        except ValueError as e:
            raise _goblin.ShapeError(str(e)) from None
        if dims is None:
            dims = (0,) * len(ex)
        if None in dims:
            i = dims.index(None)
            raise _goblin.ShapeError(f"capture_training(): batch input {i} of shape {tuple(ex[i].shape)} has no dim "
                                     f"of the batch size {ex[0].shape[dims[0]]}: pass batch_dims=(one dim per batch "
                                     "input)")
        _same_batch(ex, dims)
        if any(dims):
            low, g = lower(dims)
    outs = g.outputs
    if len(outs) != 1:
        raise _goblin.ShapeError(f"capture_training(): the loss must be one tensor, the program returns {len(outs)}")
    loss = outs[0]
    if loss.dtype not in ("f32", "f64", "f16", "bf16") or int(np.prod(loss.shape, dtype=np.int64)) != 1:
        raise _goblin.ShapeError(f"capture_training(): the loss must be one float element, got "
                                 f"{loss.dtype}{list(loss.shape)} (reduce it with .mean())")
    n_graph_inputs = len(g.inputs)
    if n_graph_inputs != len(params) + len(ex):
        raise _goblin.InternalError(f"capture_training(): graph has {n_graph_inputs} inputs, expected "
                                    f"{len(params)} parameters + {len(ex)} batch inputs")
    g._source = None  # a training graph is not re-captured per batch size: the trainer rebatches
    mods = dict(model.named_modules())
    bns = {}
    for node_id, path in getattr(low, "bn_nodes", None) or []:
        mod = mods.get(path)
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) and mod.track_running_stats and \
                (path + ".running_mean") in buffers:
            bns[node_id] = (path + ".", mod.momentum)
    tracked = [n for n, mod in mods.items() if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm)
               and mod.track_running_stats]
    missing = len(set(tracked) - {p[:-1] for p, _ in bns.values()})
    if missing:
        warnings.warn(BN_STATS.format(n=missing), UserWarning, stacklevel=2)
    return TrainingCapture(g, [n for n, _ in params], init, aliases, buffers,
                           [tuple(e.shape) for e in ex], [_gdtype(e.dtype) for e in ex], list(sd.keys()),
                           batch_dims=dims, batch_norms=bns)


def _same_batch(ex, dims):
    if len({int(e.shape[d]) for e, d in zip(ex, dims)}) != 1:
        raise _goblin.ShapeError("capture_training(): the batch inputs must share the batch size (dims "
                                 f"{tuple(dims)}), got " + ", ".join(str(tuple(e.shape)) for e in ex) +
                                 " (pass batch_dims=(one dim per batch input) where the batch is not dim 0)")
