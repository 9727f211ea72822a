"""The ATen ops goblin.capture maps, how, and within which limits: the op table that
_capture.py (goblin.capture) and _capture_train.py (goblin.capture_training) accept,
and the source of docs/pytorch.md (scripts/capture_coverage.py writes it from here).

Plain data, no imports: the documentation script reads it without the extension.
Each row: (ATen names, catalogue ops it becomes, limits, mode), mode one of
  "both"      goblin.capture and goblin.capture_training
  "inference" goblin.capture only (training capture has its own rule, another row)
  "training"  goblin.capture_training only
"""

ROWS = [
    # -- elementwise (torch's type promotion becomes explicit casts) --
    ("add sub rsub", "add, sub (mul for alpha)", "", "both"),
    ("mul", "mul", "", "both"),
    ("div", "div, floor_div, trunc_div (by rounding_mode)", "", "both"),
    ("floor_divide", "floor_div", "", "both"),
    ("remainder", "rem_floor", "", "both"),
    ("fmod", "rem_trunc", "", "both"),
    ("pow", "pow", "", "both"),
    ("maximum minimum", "maximum, minimum", "", "both"),
    ("atan2", "atan2", "", "both"),
    ("bitwise_and bitwise_or bitwise_xor __and__ __or__ __xor__", "bitwise_and, bitwise_or, bitwise_xor", "",
     "both"),
    ("bitwise_left_shift __lshift__", "shl", "", "both"),
    ("bitwise_right_shift __rshift__", "shr_arith", "", "both"),
    ("bitwise_not", "bitwise_not", "", "both"),
    ("eq ne lt le gt ge", "eq, ne, lt, le, gt, ge", "", "both"),
    ("logical_and logical_or logical_xor logical_not", "logical_and, logical_or, logical_xor, logical_not", "",
     "both"),
    ("neg abs sign square floor ceil round trunc isnan", "the unary op of that name", "", "both"),
    ("exp log sqrt rsqrt reciprocal sin cos tanh erf log1p expm1",
     "the unary op of that name", "integer inputs are cast to torch's result dtype first", "both"),
    ("relu sigmoid silu", "relu, sigmoid, silu", "", "both"),
    ("elu", "where, minimum, expm1, mul (decomposed)",
     "F.elu, F.selu, nn.ELU, nn.SELU (F.celu, F.softplus, F.mish, F.hardswish, F.hardsigmoid, F.logsigmoid, "
     "F.softsign arrive already decomposed by torch)", "both"),
    ("leaky_relu", "where, gt, mul (decomposed)", "", "both"),
    ("hardtanh", "clamp", "F.hardtanh, F.relu6, nn.ReLU6", "both"),
    ("gelu", "gelu", "approximate 'none' or 'tanh'", "both"),
    ("clamp", "clamp; maximum / minimum for tensor bounds", "", "both"),
    ("where", "where", "", "both"),
    ("_to_copy to", "cast", "dtype changes only (the device is ignored)", "both"),
    ("clone alias detach lift_fresh_copy contiguous _assert_tensor_metadata", "nothing (the input itself)", "",
     "both"),
    # -- linear algebra and nn --
    ("linear", "matmul (trans_b, bias as the third input)", "", "both"),
    ("mm bmm matmul", "matmul", "", "both"),
    ("addmm", "matmul (alpha, beta)", "", "both"),
    ("t", "permute", "", "both"),
    ("convolution", "conv2d; conv1d as conv2d over [N, C, 1, L] (reshapes); transposed: conv2d over the "
     "zero-strided, padded input with the weight transposed per group and flipped; conv3d: conv2d per kernel "
     "depth offset, add (decomposed)",
     "F.conv1d / F.conv2d / F.conv3d / F.conv_transpose1d / F.conv_transpose2d with stride, padding, dilation, groups "
     "(and output_padding); a transposed convolution with stride s does s^2 times a direct kernel's work; "
     "F.conv3d as one conv2d per kernel depth offset (the output depths side by side in the channels, the "
     "weight slice repeated per depth, groups times the output depth), summed; not conv_transpose3d: refused "
     "with a message naming it", "both"),
    ("max_pool2d max_pool2d_with_indices", "max_pool2d", "the indices output is not available", "both"),
    ("adaptive_max_pool2d", "max_pool2d (kernel = stride = input / output); sizes that do not divide: "
     "max_pool2d over each of torch's windows, one dim at a time, and concat",
     "a batched 4-D input; the indices output is not available", "both"),
    ("upsample_nearest1d upsample_nearest2d upsample_nearest3d _upsample_nearest_exact1d "
     "_upsample_nearest_exact2d _upsample_nearest_exact3d", "index_select / gather with a constant index per dim",
     "F.interpolate(mode='nearest' or 'nearest-exact'), nn.Upsample", "both"),
    ("upsample_bilinear2d upsample_linear1d", "matmul with a constant interpolation matrix per spatial dim",
     "F.interpolate(mode='bilinear' or 'linear'), align_corners either way; not bicubic, not antialias", "both"),
    ("avg_pool2d", "avg_pool2d", "no divisor_override", "both"),
    ("adaptive_avg_pool2d _adaptive_avg_pool2d", "adaptive_avg_pool2d", "", "both"),
    ("_native_batch_norm_legit_no_training", "batch_norm (training=0: the running statistics)", "", "both"),
    ("batch_norm", "batch_norm", "goblin.capture: eval mode only (the running statistics; training mode is "
     "refused with 'call model.eval()'); goblin.capture_training: batch statistics", "both"),
    ("_native_batch_norm_legit_functional", "batch_norm (training=1)",
     "batch statistics; grid.train updates the running statistics from each round's whole batch, as torch",
     "training"),
    ("layer_norm native_layer_norm", "layer_norm", "", "both"),
    ("native_group_norm", "layer_norm over [N, G, C/G * spatial], then mul, add (decomposed)",
     "F.group_norm, nn.GroupNorm; the mean / rstd outputs are not available", "both"),
    ("_native_batch_norm_legit", "F.instance_norm: layer_norm over [N, C, spatial], then mul, add (as "
     "group_norm, one group per channel); otherwise batch_norm (training=1) in goblin.capture_training",
     "F.instance_norm, nn.InstanceNorm*d without running statistics (torch's view to [1, N*C, ...] is "
     "undone: the batch stays dim 0); any other batch norm in training mode: goblin.capture refuses it "
     "with the advice to call model.eval(), goblin.capture_training uses batch statistics", "both"),
    ("linalg_vector_norm", "sqrt(sum(x*x)); sum(abs); reduce_max(abs); pow(sum(pow(abs, p)), 1/p)",
     "torch.linalg.vector_norm, x.norm(p, dim), F.normalize, F.cosine_similarity; ord=inf/-inf "
     "(reduce_max/min) has no backward rule; the gradient of the 2-norm at an all-zero row is NaN "
     "(torch: 0)", "both"),
    ("_cdist_forward", "sub, then the vector norm of linalg_vector_norm over the last dim",
     "torch.cdist, any p; computed directly (never with torch's matmul form for p=2), memory "
     "B*P*R*M", "both"),
    ("rms_norm", "rms_norm", "eps=None becomes torch's default, the dtype's machine epsilon", "both"),
    ("softmax _softmax log_softmax _log_softmax", "softmax, log_softmax", "", "both"),
    ("scaled_dot_product_attention _scaled_dot_product_flash_attention_for_cpu",
     "scaled_dot_product_attention (causal, mask, scale); with dropout_p (training capture): matmul, softmax, "
     "dropout of the weights, matmul", "dropout_p: goblin.capture_training only (goblin's dropout, the weights' "
     "batch leading); no enable_gqa", "both"),
    ("embedding", "embedding", "", "both"),
    ("_embedding_bag _embedding_bag_forward_only", "embedding, then sum (mul by per_sample_weights) / mean / "
     "reduce_max over the bag (decomposed)",
     "F.embedding_bag / nn.EmbeddingBag over a 2-D input [B, L] (bags of one size): mode sum, mean or max "
     "(max has no backward rule); no offsets of ragged bags, no padding_idx, no scale_grad_by_freq, no "
     "include_last_offset", "both"),
    ("col2im", "conv_transpose2d's decomposition with a constant one-hot weight",
     "F.fold / nn.Fold (F.unfold is aten.index, above); an inf entry meets zero weights: NaN", "both"),
    ("dropout native_dropout", "nothing (the identity) in eval mode; dropout (training mode, "
     "goblin.capture_training)",
     "goblin.capture: eval mode only (training mode is refused with 'call model.eval()'); "
     "goblin.capture_training: goblin's counter-based dropout, keep probability 1 - p and scale "
     "1 / (1 - p) as torch, masks keyed by (seed, round, the element's index in the batch), not "
     "torch's random stream", "both"),
    ("nll_loss_forward nll_loss2d_forward", "nll_loss (reduction, ignore_index, weight)",
     "goblin.capture decomposes F.nll_loss / F.cross_entropy into log_softmax, gather and where instead",
     "training"),
    # -- shape and movement --
    ("view reshape _unsafe_view flatten unflatten squeeze unsqueeze view_copy", "reshape",
     "training capture: keep the batch as the leading dim (x.view(B, ...))", "both"),
    ("permute permute_copy transpose", "permute", "", "both"),
    ("expand expand_copy", "expand", "", "both"),
    ("slice", "slice", "", "both"),
    ("select", "select", "", "both"),
    ("cat concat", "concat", "", "both"),
    ("stack", "stack", "", "both"),
    ("split split_with_sizes", "slice (one per part)", "", "both"),
    ("flip", "index_select / gather with a reversed constant index per dim", "", "both"),
    ("index_select", "index_select (goblin.capture); gather over the expanded index (goblin.capture_training)",
     "also torch.roll, which torch lowers to arange, fmod and index_select", "both"),
    ("repeat", "reshape, expand, reshape", "x.repeat(...) (torch.tile too)", "both"),
    ("constant_pad_nd", "pad", "F.pad mode='constant'; reflect and replicate come as index (below)", "both"),
    ("index", "index_select (goblin.capture); gather over the expanded index (goblin.capture_training, "
     "which has a backward rule)",
     "x[..., idx] with integer index tensors (any rank; negative entries count from the end; several of them "
     "index the merged dims, broadcast dims first when they are not adjacent, as in torch), which also covers "
     "F.pad's reflect and replicate modes, F.unfold and interpolate(mode='nearest-exact'); not boolean masks "
     "(a data-dependent shape: refused with advice)", "both"),
    ("gather", "gather", "", "both"),
    ("scatter_add", "scatter_add", "no backward rule (forward and inference only)", "both"),
    # -- reductions --
    ("sum mean prod", "sum, mean, prod", "", "both"),
    ("amax amin", "reduce_max, reduce_min", "", "both"),
    ("argmax argmin", "argmax, argmin", "with dim (not over the whole tensor)", "both"),
    ("max min", "argmax / argmin, then gather (torch.max(x, dim): values and indices); reduce_max / "
     "reduce_min over all dims (torch.max(x)); maximum / minimum (torch.max(x, y))",
     "the first index of the extreme, NaN propagating, as torch", "both"),
    ("any all", "ne, reduce_max / reduce_min over bool", "", "both"),
    ("sort topk", "gt, eq, sum (ranks), eq, argmax, gather (decomposed)",
     "x.sort, torch.argsort, x.topk (largest, sorted): stable, NaN as the largest value as in torch; "
     "O(n^2) compares and memory per row (n the sorted dim's length); topk(sorted=False) returns them "
     "sorted too", "both"),
    ("bucketize searchsorted", "lt / le against the boundaries, sum (decomposed)",
     "right / side, out_int32; NaN goes past the last boundary as in torch; searchsorted needs a tensor of "
     "values and no sorter", "both"),
    ("var var_mean", "var (and mean)", "x.var / x.std (std is var then sqrt) / torch.var_mean with dim, "
     "keepdim and an integer correction; no backward rule", "both"),
    ("cumsum", "cumsum (then cast)", "integer inputs sum into i64 as in torch; no backward rule", "both"),
    # -- recurrent layers (bounded unrolling: _capture_rnn.py, "Recurrent layers" below) --
    ("lstm gru rnn_tanh rnn_relu", "per cell step: select, matmul, slice, sigmoid / tanh / relu, mul, add; "
     "stack over time, concat of the directions (unrolled)",
     "nn.LSTM, nn.GRU, nn.RNN (tanh or relu): any layers, bidirectional, batch_first either way, with or "
     "without biases, hx given or zeros, unbatched 2-d input; at most 4096 cell steps (sequence length x "
     "layers x directions; past it: RangeError with advice); not PackedSequence, not proj_size; inter-layer "
     "dropout: refused by goblin.capture in training mode (call model.eval()); goblin's dropout on each "
     "layer's output but the last in goblin.capture_training (drawn batch-first)", "both"),
    # -- creation --
    ("arange", "arange", "", "both"),
    ("_assert_async", "nothing (the check is not run)", "the range check of F.one_hot (which becomes arange, "
     "eq and a cast; give num_classes)", "both"),
    ("full zeros ones scalar_tensor full_like zeros_like ones_like", "full", "", "both"),
]

# Kept whole by run_decompositions because the catalogue has a kernel for them
# (aten name.overload); everything else is lowered by torch's default table first.
KEEP = ("linear.default", "layer_norm.default", "gelu.default", "silu.default",
        "scaled_dot_product_attention.default", "max_pool2d.default", "avg_pool2d.default",
        "adaptive_avg_pool2d.default", "softmax.int", "log_softmax.int", "matmul.default",
        "embedding.default", "floor_divide.default", "remainder.Tensor", "remainder.Scalar",
        "batch_norm.default", "dropout.default", "sigmoid.default", "erf.default", "rms_norm.default",
        "col2im.default", "lstm.input", "gru.input", "rnn_tanh.input", "rnn_relu.input")
TRAIN_KEEP = ("nll_loss_forward.default", "nll_loss2d_forward.default")

# docs/pytorch.md, "Recurrent layers" (the form of recurrence: _capture_rnn.py)
RECURRENCE = """\
## Recurrent layers and the batch dim

`nn.LSTM`, `nn.GRU` and `nn.RNN` reach the mapping whole (`aten.lstm.input`, ...) and are
**unrolled at capture** over the example's sequence length: one matmul of the input with
`W_ih` for all steps, then per step `h @ W_hh^T`, the gates (slice), sigmoid / tanh / relu,
mul and add as in torch's cells, the outputs stacked over time (bidirectional: both
directions concatenated). A zero initial state is not materialised. Unrolling rather than
a scan node over a body graph: every op it uses already has kernels on every backend, a
backward rule (grid.train differentiates it like any graph) and a batch-axis rule (each
step's state is `[batch, hidden]`); a scan node would need all three anew.

Limits: the sequence length is fixed by the example (a graph has static shapes; another
length is another capture). The graph grows by about 16 nodes per cell step (a 2-layer
bidirectional LSTM over 5 steps: 337 nodes), twice that with the backward, and a task
keeps every step's values; capture refuses more than 4096 cell steps (sequence length x
layers x directions) with a `RangeError` that says to capture windows of the sequence and
carry the state through the module's `hx` input.

Where the batch sits: `goblin.capture(model, *examples, batch_dims=...)` takes it per input
(an int for all, or one entry per input, None for an unbatched one); without it, capture
infers it where the program says so unambiguously: the input of a recurrent layer (dim 1,
or 0 with `batch_first=True`) traced back through embedding, linear, elementwise ops and
permutes to the graph input, the `[seq, batch, embed]` inputs of a seq-first
`nn.MultiheadAttention` / `nn.Transformer*` module captured itself, and any other input by
its one dim of that batch size (several: capture leaves the batch to the grid, whose
error then says to pass `batch_dims`; `goblin.capture_training` raises a `ShapeError`
saying so). `g.batch_dims` holds the choice; `grid.run` (also `batch_dims=`) cuts the
inputs along it, moving them batch-first for a graph that permutes them back, and a call
at another batch size captures again along it. `goblin.capture_training` and `grid.train`
(`batch_dims=`) do the same for the batch tensors (a seq-first language model's tokens and
targets `[T, B]`: dims (1, 1)); the trainer gets them batch-first.
"""
# docs/pytorch.md, "Training mode" (what goblin.capture_training / grid.train compute)
TRAINING_MODE = """\
## Training mode: dropout, batch-norm, eval-mode modules

`goblin.capture_training` (and so `grid.train`) captures the model in train mode.

- **Dropout** (`nn.Dropout*`, `F.dropout(training=True)`, `aten.native_dropout`) becomes
  goblin's counter-based `dropout` op (catalogue value 189, kernels on the reference, BLIS
  and CUDA backends; its backward is a dropout of the gradient with the same mask). An
  element is kept with probability 1 - p and scaled by 1 / (1 - p), as torch; the mask is
  not torch's random stream. Each dropout node gets its own seed (`seed=` of
  `capture_training` / `grid.train` plus the node's ordinal; default
  `torch.initial_seed()`), and in round r the trainer keys the node's draw by
  `mix64(seed ^ mix64(r))` (SplitMix64's finalizer) with the counter at the element's
  row-major index in the **whole batch**: a micro-batch from row r0 adds r0 times the
  elements per row to the op's offset. So the masks depend only on the seed, the round and
  the element, never on the micro-batches, pipeline stages or tiles (tested: gradients
  equal torch.autograd's with that mask for one micro-batch, three, and a staged plan).
  A dropout on batch data must have the batch rows as one dim of its value: the leading
  one, or another (a seq-first `nn.TransformerEncoderLayer`'s `[T, B, E]`): the op's
  `axis` then draws as if that dim led, so element (t, b, e) keeps the batch-first draw
  of (b, t, e) (tested against torch with those masks, 10 rounds, f64 and f32). One behind
  a reshape that folds the batch into another dim is refused, naming the node.
  `dropout_p` of `F.scaled_dot_product_attention` (an attention module's dropout) is
  composed as torch's math path: `softmax(q k^T scale + mask)`, goblin's dropout of the
  weights `[batch, heads, L, S]`, `@ v` (goblin.capture refuses it). The inter-layer
  dropout of `nn.LSTM` / `nn.GRU` / `nn.RNN` is goblin's dropout on every layer's output
  but the last, drawn on the batch-first view (seq-first: permuted around it). Tested
  against torch with the same masks over 10 rounds (tests/python/test_pkg_train_parity.py).
- **Batch-norm** normalizes each micro-batch with its own statistics (torch normalizes a
  batch with the whole batch's; with one micro-batch they are the same, as with torch's
  gradient accumulation). Its **running statistics** are torch's: every task of the stage
  holding a batch-norm also returns its micro-batch's per-channel mean and biased
  variance, the trainer combines them into the whole batch's (mean = sum w_c m_c,
  var = sum w_c (v_c + (m_c - mean)^2), w_c = rows_c / B, in double;
  `goblin_trainer_batch_norm_stats`), and grid.train applies torch's update
  (`num_batches_tracked += 1`; momentum, or 1 / num_batches_tracked for momentum=None;
  running_var from the unbiased variance, times n / (n - 1) with n = rows x spatial
  size); `state_dict()` returns them. Tested against torch's BatchNorm2d / BatchNorm1d
  (f64 1e-10, f32 1e-5) over rounds with three micro-batches and a staged plan. Not
  tracked (a UserWarning): a batch-norm whose input does not lead with the batch rows. A
  checkpoint (`save` / `load`) does not hold them: keep `state_dict()` with it.
- **Modules in eval mode** whose train mode computes something else (dropout with p > 0,
  batch-norm) are trained in train mode, as torch after `model.train()`; a UserWarning
  names them.
"""
BN_HINT = ("batch-norm in training mode (nn.BatchNorm*d after model.train(), or F.batch_norm(training=True)): "
           "call model.eval() before goblin.capture (inference uses the running statistics), or train on a "
           "grid with grid.train / goblin.capture_training, which normalizes with batch statistics")
DROPOUT_HINT = ("dropout in training mode (nn.Dropout after model.train(), or F.dropout(training=True)): call "
                "model.eval() before goblin.capture (dropout is then the identity); grid.train / "
                "goblin.capture_training run it in training mode (goblin's dropout op)")
SLICE_SCATTER_HINT = ("F.pad(mode='circular') and slice assignment (x[:, :2] = y) arrive as "
                      "aten.slice_scatter, which has no mapping: F.pad supports modes 'constant', 'reflect' "
                      "and 'replicate'; build the tensor with torch.cat instead of assigning into it")
DYNAMIC_HINT = ("a result whose shape depends on the data (boolean-mask selection x[mask], torch.nonzero, "
                "masked_select, unique, .item() into a shape): goblin graphs have static shapes; keep the shape with "
                "torch.where(mask, x, 0) or x * mask and reduce afterwards, or select outside the captured program")
# ATen ops refused with advice (most appear only when a module is in training mode)
NAME_HINTS = {"_native_batch_norm_legit_functional": BN_HINT, "_native_batch_norm_legit": BN_HINT,
              "native_batch_norm": BN_HINT, "bernoulli": DROPOUT_HINT, "slice_scatter": SLICE_SCATTER_HINT,
              "nonzero": DYNAMIC_HINT, "masked_select": DYNAMIC_HINT, "_unique2": DYNAMIC_HINT,
              "unique_dim": DYNAMIC_HINT, "unique_consecutive": DYNAMIC_HINT, "_local_scalar_dense": DYNAMIC_HINT}


def names(modes):
    """Every ATen op name of the rows whose mode is in `modes`."""
    return frozenset(n for ns, _, _, mode in ROWS if mode in modes for n in ns.split())


INFERENCE = names(("both", "inference"))
TRAINING = names(("both", "training"))
