"""nn.LSTM, nn.GRU and nn.RNN captured by bounded unrolling (pygoblin/goblin/_capture_rnn.py,
docs/pytorch.md "Recurrent layers"), against PyTorch: the outputs locally and on a 2-worker
grid cut into chunks of the batch (which a seq-first module keeps in dim 1: capture infers
it, g.batch_dims), the gradients of every weight against torch.autograd, and 20 rounds of grid.train of a
2-layer LSTM language model (seq-first tokens and targets, batch dims inferred) and of a
bidirectional GRU classifier against a torch SGD loop with the same initial weights and
batches: f64 within 1e-10 of the largest entry (torch_cases.close), f32 losses within
1e-5 relative."""
import copy
import warnings

import numpy as np
import pytest

goblin = pytest.importorskip("goblin")
torch = pytest.importorskip("torch")
if not hasattr(goblin, "connect"):
    pytest.skip("this goblin package has no grid", allow_module_level=True)
from torch_cases import close, grid, D  # noqa: E402,F401  (grid: the module's embedded grid)

nn = torch.nn
F = torch.nn.functional

# (name, module, seq-first input shape [T, B, F] or batch_first [B, T, F], hx given)
CASES = [
    ("lstm 2 layers bidirectional", lambda: nn.LSTM(4, 5, num_layers=2, bidirectional=True), False, False),
    ("lstm batch_first with hx", lambda: nn.LSTM(4, 5, batch_first=True), True, True),
    ("gru 2 layers bidirectional batch_first", lambda: nn.GRU(4, 5, num_layers=2, bidirectional=True,
                                                            batch_first=True), True, False),
    ("gru with hx", lambda: nn.GRU(4, 5), False, True),
    ("rnn relu 2 layers bidirectional", lambda: nn.RNN(4, 5, num_layers=2, bidirectional=True,
                                                      nonlinearity="relu"), False, False),
    ("rnn tanh batch_first, no bias", lambda: nn.RNN(4, 5, batch_first=True, bias=False), True, False),
]
T, B = 4, 10  # 10 samples in chunks of 4: 4, 4, 2


def _inputs(m, bf, with_hx):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn((B, T, 4) if bf else (T, B, 4), dtype=D, generator=gen)
    if not with_hx:
        return (x,)
    n = m.num_layers * (2 if m.bidirectional else 1)
    h = torch.randn(n, B, m.hidden_size, dtype=D, generator=gen)
    return (x, (h, torch.randn_like(h))) if isinstance(m, nn.LSTM) else (x, h)


def _flat(out):
    y, h = out
    return (y,) + (tuple(h) if isinstance(h, tuple) else (h,))


class Flat(nn.Module):
    """(x, h0[, c0]) -> (output, h_n[, c_n]) as plain tensors."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x, *hx):
        if not hx:
            return _flat(self.m(x))
        return _flat(self.m(x, hx if len(hx) > 1 else hx[0]))


@pytest.mark.parametrize("name,make,bf,with_hx", CASES, ids=[c[0] for c in CASES])
def test_rnn_forward_locally_and_on_the_grid(grid, name, make, bf, with_hx):
    torch.manual_seed(1)
    m = make().double().eval()
    ins = _inputs(m, bf, with_hx)
    ex = (ins[0],) + ((tuple(ins[1]) if isinstance(ins[1], tuple) else (ins[1],)) if with_hx else ())
    f = Flat(m)
    with torch.no_grad():
        want = f(*ex)
    g = goblin.capture(f, *ex)
    # the batch: dim 0 of a batch_first input, else dim 1; hx [layers * dirs, batch, hidden]: dim 1
    assert g.batch_dims == (0 if bf else 1,) + (1,) * (len(ex) - 1), g.batch_dims
    for i, (a, b) in enumerate(zip(g(*ex), want)):
        close(a, b, f"{name} output {i}")
    seen = []
    got = grid.run(g, *[e.numpy() for e in ex], chunk_rows=4, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (3, 3), seen
    for i, (a, b) in enumerate(zip(got, want)):
        close(a, b, f"{name} on the grid, output {i}")
    # another batch size: captured again along the batch dim
    ex3 = tuple(e.narrow(0 if (bf and k == 0) else 1, 0, 3) for k, e in enumerate(ex))
    with torch.no_grad():
        want3 = f(*ex3)
    for i, (a, b) in enumerate(zip(g(*ex3), want3)):
        close(a, b, f"{name} (batch 3) output {i}")


def test_unbatched_input_matches_torch():
    """A 2-d input [T, F] (no batch dim): output [T, D*H], h_n [layers * D, H]."""
    torch.manual_seed(8)
    for m in (nn.LSTM(3, 4, num_layers=2, bidirectional=True), nn.GRU(3, 4)):
        m = m.double().eval()
        x = torch.randn(T, 3, dtype=D, generator=torch.Generator().manual_seed(9))
        with torch.no_grad():
            want = _flat(m(x))
        g = goblin.capture(m, x)
        assert g.batch_dims is None
        for i, (a, b) in enumerate(zip(g(x.numpy()), want)):
            close(a, b, f"{type(m).__name__} unbatched output {i}")


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
def test_rnn_gradients_match_autograd(grid, kind):
    """d/dW of mean over the batch of sum(output * cot), every weight of a 2-layer
    bidirectional module: the training capture's backward locally, and on the grid as
    one SGD round of lr 1 in three micro-batches (the update is minus the gradient)."""
    torch.manual_seed(2)
    m = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind](3, 4, num_layers=2, bidirectional=True).double()
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(T, 6, 3, dtype=D, generator=gen)
    cot = torch.randn(T, 6, 8, dtype=D, generator=gen)

    def loss_fn(y, c):
        return (y[0] * c).sum((0, 2)).mean()

    cap = goblin.capture_training(m, loss_fn, x, cot)
    assert cap.batch_dims == (1, 1)
    gg = cap.graph
    grads = gg._g.backward(gg.outputs[0].id, [t.id for t in gg.inputs[:cap.n_params]])
    for gid in grads:
        gg._g.output(gid)
    ref = loss_fn(m(x), cot)
    ref.backward()
    local = gg.evaluate(*cap.init, *cap.batch_first([x.numpy(), cot.numpy()]))
    close(local[0], ref, f"{kind} loss")
    want = dict(m.named_parameters())
    for name, a in zip(cap.names, local[1:]):
        close(a, want[name].grad, f"{kind} d/d{name}")
    with grid.train(m, loss_fn, optimizer=goblin.optim.SGD(lr=1.0), batch_size=6, micro_batch_size=2,
                    progress=False) as tr:
        info = tr.step(x, cot)
        close(info["loss"], ref, f"{kind} loss on the grid")
        sd = tr.state_dict()
    for name, w0 in zip(cap.names, cap.init):
        close(w0 - sd[name].numpy(), want[name].grad, f"{kind} d/d{name} on the grid")


def test_rnn_backward_graph_cut_on_the_grid(grid):
    """The differentiated graph of a sum loss over a seq-first 2-layer bidirectional LSTM
    run by grid.run in chunks of the batch (its gradient seed is expanded over [seq, batch,
    ...]: the batch in dim 1), the chunks' loss and gradients summed, against autograd."""
    torch.manual_seed(2)
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True).double()
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(T, 6, 3, dtype=D, generator=gen)
    cot = torch.randn(T, 6, 8, dtype=D, generator=gen)

    def loss_fn(y, c):
        return (y[0] * c).sum()

    cap = goblin.capture_training(m, loss_fn, x, cot)
    gg = cap.graph
    for gid in gg._g.backward(gg.outputs[0].id, [t.id for t in gg.inputs[:cap.n_params]]):
        gg._g.output(gid)
    ref = loss_fn(m(x), cot)
    ref.backward()
    got = grid.run(gg, *cap.init, *cap.batch_first([x.numpy(), cot.numpy()]), chunk_rows=2, progress=False,
                   split=["broadcast"] * cap.n_params + ["batch", "batch"], combine="sum")
    close(got[0], ref, "loss on the grid")
    want = dict(m.named_parameters())
    for name, a in zip(cap.names, got[1:]):
        close(a, want[name].grad, f"d/d{name} on the grid")


class LM(nn.Module):
    """Embedding, a 2-layer seq-first LSTM, a linear head: tokens [T, B] -> logits [T, B, V]."""

    def __init__(self, v=11, e=6, h=8):
        super().__init__()
        self.emb = nn.Embedding(v, e)
        self.rnn = nn.LSTM(e, h, num_layers=2)
        self.out = nn.Linear(h, v)

    def forward(self, tok):
        return self.out(self.rnn(self.emb(tok))[0])


def lm_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


class GRUClassifier(nn.Module):
    """A batch_first bidirectional GRU, its last step through a linear head: [B, T, 4] -> [B, 3]."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 5, batch_first=True, bidirectional=True)
        self.head = nn.Linear(10, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


def _torch_sgd(model, loss_fn, batches, dims, mb, opt):
    """torch's SGD loop with the trainer's semantics: loss_c * rows_c / B per micro-batch."""
    ref = copy.deepcopy(model)
    topt = opt.torch(ref.parameters())
    losses = []
    for batch in batches:
        b = batch[0].shape[dims[0]]
        topt.zero_grad()
        total = 0.0
        for s in range(0, b, mb):
            part = [t.narrow(d, s, mb) for t, d in zip(batch, dims)]
            loss = loss_fn(ref(part[0]), *part[1:])
            (loss * (mb / b)).backward()
            total += float(loss.detach()) * mb / b
        topt.step()
        losses.append(total)
    return ref, losses


@pytest.mark.parametrize("dt", ["f64", "f32"])
@pytest.mark.parametrize("kind", ["lstm language model", "gru classifier"])
def test_train_rnn_models_20_rounds_match_torch_sgd(grid, kind, dt):
    """20 SGD rounds (momentum 0.9) of 6 samples in micro-batches of 2 on the grid: the losses
    within 1e-10 (f64) / 1e-5 (f32) relative of torch's, the f64 weights within 1e-10."""
    rounds, b, mb = 20, 6, 2
    tdt = {"f64": torch.float64, "f32": torch.float32}[dt]
    torch.manual_seed(3)
    gen = torch.Generator().manual_seed(6)
    if kind == "lstm language model":  # seq-first tokens and targets [T, B]: batch dims (1, 1) inferred
        model, loss_fn, dims = LM().to(tdt), lm_loss, (1, 1)
        data = (torch.randint(0, 11, (T + 1, b * rounds), generator=gen),
                torch.randint(0, 11, (T + 1, b * rounds), generator=gen))
    else:
        model, loss_fn, dims = GRUClassifier().to(tdt), F.cross_entropy, (0, 0)
        data = (torch.randn(b * rounds, T, 4, generator=gen).to(tdt), torch.randint(0, 3, (b * rounds,), generator=gen))
    batches = [tuple(t.narrow(d, r * b, b) for t, d in zip(data, dims)) for r in range(rounds)]
    opt = goblin.optim.SGD(lr=0.1, momentum=0.9)
    ref, ref_losses = _torch_sgd(model, loss_fn, batches, dims, mb, opt)
    with grid.train(model, loss_fn, optimizer=opt, batch_size=b, micro_batch_size=mb, progress=False) as tr:
        infos = tr.fit(tuple(t.numpy() for t in data), rounds=rounds)
        assert tr.capture.batch_dims == dims
        assert tr.plan(b)["micro_batches"] == b // mb
        tol = 1e-10 if dt == "f64" else 1e-5
        for r, (i, want) in enumerate(zip(infos, ref_losses)):
            assert abs(i["loss"] - want) <= tol * abs(want), (r, i["loss"], want)
        if dt == "f64":
            sd = tr.state_dict()
            for k, p in ref.named_parameters():
                close(sd[k], p, k)


# ---- limits and errors ---------------------------------------------------------------------

def test_sequence_past_the_unroll_limit_is_refused_with_advice(monkeypatch):
    from goblin import _capture_rnn
    monkeypatch.setattr(_capture_rnn, "MAX_CELL_STEPS", 8)
    m = nn.LSTM(3, 4, num_layers=2).eval()
    with pytest.raises(goblin.RangeError) as ei:
        goblin.capture(m, torch.randn(5, 2, 3))
    msg = str(ei.value)
    assert "5 steps x 2 layer(s) x 1 direction(s) = 10 cell steps" in msg and "more than the 8" in msg, msg
    assert "windows of at most 4 steps" in msg and "hx" in msg, msg


def test_training_mode_inter_layer_dropout():
    m = nn.GRU(3, 4, num_layers=2, dropout=0.5).train()
    x = torch.randn(4, 2, 3)
    with pytest.raises(goblin.UnsupportedOpError) as ei:
        goblin.capture(m, x)
    assert "aten.gru.input" in str(ei.value) and "eval mode" in str(ei.value), str(ei.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # training capture drops between the layers, silently
        g = goblin.capture_training(m, lambda out: out[0].square().mean(), x).graph
    assert [g.node(i).op for i in range(len(g))].count("dropout") == 1


def test_explicit_batch_dims_and_errors_that_name_them(grid):
    w = torch.linspace(-1, 1, 12, dtype=D).reshape(3, 4)

    def f(x):  # [T, B, 3] -> per-sample mean over time: [B, 4]
        return torch.tanh(x @ w).mean(0)

    x = torch.randn(5, 7, 3, dtype=D, generator=torch.Generator().manual_seed(7))
    g = goblin.capture(f, x, batch_dims=1)
    assert g.batch_dims == (1,)
    close(grid.run(g, x.numpy(), chunk_rows=3, progress=False), f(x), "batch_dims=1 on the grid")
    x2 = x[:, :4]
    close(g(x2.numpy()), f(x2), "batch_dims=1 at batch 4")
    with pytest.raises(goblin.ShapeError, match=r"only the batch may change \(input 0: dim 1\)"):
        g(x[:3].numpy())
    # without batch_dims, another size of dim 1 is refused with what to pass
    g0 = goblin.capture(f, x)
    with pytest.raises(goblin.ShapeError, match="batch_dims="):
        g0(x2.numpy())
    with pytest.raises(goblin.InvalidArgumentError, match="input 0 of shape .* has no dim 3"):
        goblin.capture(f, x, batch_dims=3)
    with pytest.raises(goblin.InvalidArgumentError, match="batch_dims other than 0 need a graph from"):
        grid.run(goblin.Graph(), x.numpy(), batch_dims=[1])
