"""grid.train against PyTorch, 20 rounds (issue 20): a TransformerEncoderLayer classifier,
a 2-layer LSTM language model and a GRU classifier trained on a 2-worker embedded grid in
micro-batches (12 samples in micro-batches of 4: every round is three tasks the grid spreads
over its workers) follow a torch SGD loop with the same initial weights (copy.deepcopy) and
the same batches, with the trainer's semantics (loss_c * rows_c / B per micro-batch, as
gradient accumulation in torch; docs/training.md "One round").

Tolerances (docs/training.md "Parity with PyTorch"):
- the loss of every round within 1e-10 relative (f64) / 1e-5 relative (f32) of torch's;
- the final weights: f64 within 1e-10 of the tensor's largest entry, f32 within 1e-5
  (f32 rounding differences of the kernels, ~6e-8 per op, amplified by 20 rounds;
  measured worst 4e-7);
- f32 only: goblin's f32 trajectory is no farther from the exact (f64) trajectory than
  torch's own f32 run is, up to a factor of 10 (+ 1e-7): the f32 differences are rounding,
  not a different computation (measured: goblin 3e-8..6e-8, torch 7e-8..9e-8 from f64).
"""
import copy

import numpy as np
import pytest

goblin = pytest.importorskip("goblin")
torch = pytest.importorskip("torch")
if not hasattr(goblin, "connect"):
    pytest.skip("this goblin package has no grid", allow_module_level=True)

nn = torch.nn
F = torch.nn.functional
DT = {"f64": torch.float64, "f32": torch.float32}
ROUNDS, B, MB = 20, 12, 4
LOSS_TOL = {"f64": 1e-10, "f32": 1e-5}
WEIGHT_TOL = {"f64": 1e-10, "f32": 1e-5}


@pytest.fixture(scope="module")
def grid():
    g = goblin.connect(workers=2, threads=1)
    yield g
    g.close()


class Encoder(nn.Module):
    """[batch, seq, 16] -> a TransformerEncoderLayer (batch_first either way; a seq-first
    layer gets the data transposed) -> mean over the sequence -> Linear to 3 classes."""

    def __init__(self, batch_first, dropout=0.0):
        super().__init__()
        self.bf = batch_first
        self.layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=dropout, batch_first=batch_first)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        h = self.layer(x) if self.bf else self.layer(x.transpose(0, 1)).transpose(0, 1)
        return self.head(h.mean(1))


class LSTMLM(nn.Module):
    """Tokens [batch, seq] -> Embedding -> 2-layer batch_first LSTM -> Linear to the vocabulary."""

    def __init__(self, v=13, e=8, h=12, dropout=0.0):
        super().__init__()
        self.emb = nn.Embedding(v, e)
        self.rnn = nn.LSTM(e, h, num_layers=2, batch_first=True, dropout=dropout)
        self.out = nn.Linear(h, v)

    def forward(self, tok):
        return self.out(self.rnn(self.emb(tok))[0])


def next_token_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


class GRUClassifier(nn.Module):
    """[seq, batch, 5] (seq-first) -> a 2-layer GRU -> its last hidden state -> Linear to 4 classes."""

    def __init__(self, dropout=0.0):
        super().__init__()
        self.rnn = nn.GRU(5, 10, num_layers=2, dropout=dropout)
        self.head = nn.Linear(10, 4)

    def forward(self, x):
        return self.head(self.rnn(x)[1][-1])


def _case(name, dt, dropout=0.0):
    """(model, loss_fn, batch dims of the data, the data for ROUNDS batches, optimizer).
    The data can be learned (so the 20 rounds move the weights far from the start): the
    class is the largest of the first features' sums; the tokens mostly follow a rule."""
    tdt = DT[dt]
    torch.manual_seed(11)
    gen = torch.Generator().manual_seed(12)
    n = B * ROUNDS
    if name.startswith("encoder"):
        x = torch.randn(n, 6, 16, generator=gen).to(tdt)
        y = x.sum(1)[:, :3].argmax(1)
        return (Encoder(name.endswith("batch_first"), dropout).to(tdt), F.cross_entropy, (0, 0), (x, y),
                goblin.optim.SGD(lr=0.05, momentum=0.9))
    if name == "lstm lm":  # next-token prediction over sequences of 7 tokens: t' = 3 t + 1 mod 13, 1 in 8 random
        tok = torch.empty(n, 7, dtype=torch.int64)
        tok[:, 0] = torch.randint(0, 13, (n,), generator=gen)
        for t in range(1, 7):
            noise = torch.randint(0, 13, (n,), generator=gen)
            keep = torch.randint(0, 8, (n,), generator=gen) > 0
            tok[:, t] = torch.where(keep, (3 * tok[:, t - 1] + 1) % 13, noise)
        return (LSTMLM(dropout=dropout).to(tdt), next_token_loss, (0, 0), (tok[:, :-1].contiguous(), tok[:, 1:].contiguous()),
                goblin.optim.SGD(lr=3.0))
    assert name == "gru"
    x = torch.randn(5, n, 5, generator=gen).to(tdt)
    y = x.sum(0)[:, :4].argmax(1)
    return (GRUClassifier(dropout).to(tdt), F.cross_entropy, (1, 0), (x, y),
            goblin.optim.SGD(lr=0.2, momentum=0.9, nesterov=True, weight_decay=1e-3))


def _batches(data, dims):
    return [tuple(t.narrow(d, r * B, B) for t, d in zip(data, dims)) for r in range(ROUNDS)]


def _torch_sgd(model, loss_fn, batches, dims, opt):
    """torch's SGD loop with the trainer's semantics: (loss_c * rows_c / B).backward() per
    micro-batch, one step per round."""
    ref = copy.deepcopy(model)
    topt = opt.torch(ref.parameters())
    ref.train()
    losses = []
    for batch in batches:
        topt.zero_grad()
        total = 0.0
        for s in range(0, B, MB):
            part = [t.narrow(d, s, MB) for t, d in zip(batch, dims)]
            loss = loss_fn(ref(part[0]), *part[1:])
            (loss * (MB / B)).backward()
            total += float(loss.detach()) * MB / B
        topt.step()
        losses.append(total)
    return ref, np.array(losses)


def _rel(got, want):
    """max |got - want| over the largest |want|."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-300))


CASES = ["encoder batch_first", "encoder seq-first", "lstm lm", "gru"]


@pytest.mark.parametrize("dt", ["f64", "f32"])
@pytest.mark.parametrize("name", CASES)
def test_20_rounds_match_torch(grid, name, dt):
    model, loss_fn, dims, data, opt = _case(name, dt)
    batches = _batches(data, dims)
    ref, want = _torch_sgd(model, loss_fn, batches, dims, opt)
    with grid.train(model, loss_fn, optimizer=opt, batch_size=B, micro_batch_size=MB, progress=False) as tr:
        infos = [tr.step(*[t.numpy() for t in batch]) for batch in batches]
        assert tr.capture.batch_dims == dims
        assert tr.plan(B)["micro_batches"] == B // MB
        sd = tr.state_dict()
    got = np.array([i["loss"] for i in infos])
    assert len(got) == ROUNDS and want[-5:].mean() < 0.98 * want[:5].mean(), (name, want)  # it learns
    rel = np.abs(got - want) / np.abs(want)
    assert rel.max() <= LOSS_TOL[dt], (name, dt, int(rel.argmax()), got[rel.argmax()], want[rel.argmax()])
    ref_sd = {k: p.detach() for k, p in ref.named_parameters()}
    assert set(sd) == set(ref_sd)
    init = {k: p.detach() for k, p in model.named_parameters()}
    moved = (sum(float((p - init[k]).double().square().sum()) for k, p in ref_sd.items()) /
             sum(float(p.double().square().sum()) for p in init.values())) ** 0.5
    assert moved > 0.05, (name, moved)  # far enough from the start for the comparison to mean something
    for k, p in ref_sd.items():
        assert sd[k].dtype == p.dtype, k
        err = _rel(sd[k].numpy(), p.numpy())
        assert err <= WEIGHT_TOL[dt], (name, dt, k, err)
    if dt == "f32":
        # the exact trajectory: torch in f64 from the same (f32) initial weights and data
        d64 = tuple(t.double() if t.is_floating_point() else t for t in data)
        _, exact = _torch_sgd(copy.deepcopy(model).double(), loss_fn, _batches(d64, dims), dims, opt)
        ours = np.abs(got - exact) / exact
        theirs = np.abs(want - exact) / exact
        assert ours.max() <= 10 * theirs.max() + 1e-7, (name, ours.max(), theirs.max())


# ---- dropout inside the attention and between recurrent layers --------------------------------
#
# goblin's dropout masks are not torch's random stream (docs/training.md "Dropout"): node k
# of the capture (in program order) draws with seed mix64((SEED + k) ^ mix64(round)), the
# element's counter its row-major index in the whole batch's value. The references below
# are the same models written out in torch with those masks multiplied in (the mask
# function is test_pkg_train_dropout's independent Philox), each checked against the
# torch module itself with all-ones masks.

import test_pkg_train_dropout as drop  # noqa: E402  (tests/python is on sys.path)

P, SEED = 0.25, 7


def _masks(shapes, rnd, rows):
    """The trainer's masks of round rnd for dropout nodes of these batch-first shapes (the
    whole batch: rows), as float tensors scaled by 1 / (1 - P)."""
    out = []
    for k, shp in enumerate(shapes):
        shp = (rows,) + tuple(shp)
        keep = drop.keep_mask(drop.round_seed(SEED + k, rnd), 0, int(np.prod(shp)), P).reshape(shp)
        out.append(torch.from_numpy(keep.astype(np.float64)) * (1.0 / (1.0 - P)))
    return out


def _encoder_ref(m, x, masks):
    """Encoder(batch_first=True) with the masks of its four dropouts: the attention weights
    [B, heads, L, L], the self-attention block's output, the feed-forward's hidden, its output."""
    ly, (b, t, e), h = m.layer, x.shape, m.layer.self_attn.num_heads
    ma, m1, mf, m2 = (mk.to(x.dtype) for mk in masks)
    q, k, v = F.linear(x, ly.self_attn.in_proj_weight, ly.self_attn.in_proj_bias).chunk(3, -1)
    q, k, v = (z.reshape(b, t, h, e // h).transpose(1, 2) for z in (q, k, v))
    a = torch.softmax(q @ k.transpose(-1, -2) / (e // h) ** 0.5, -1) * ma
    o = ly.self_attn.out_proj((a @ v).transpose(1, 2).reshape(b, t, e))
    z = ly.norm1(x + o * m1)
    z = ly.norm2(z + ly.linear2(F.relu(ly.linear1(z)) * mf) * m2)
    return m.head(z.mean(1))


def _layers(rnn):
    """The layers of a 2-layer nn.LSTM / nn.GRU as two 1-layer modules sharing its weights."""
    mods = []
    for layer in range(2):
        one = type(rnn)(rnn.input_size if layer == 0 else rnn.hidden_size, rnn.hidden_size,
                        batch_first=rnn.batch_first).to(rnn.weight_hh_l0.dtype)
        for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            setattr(one, n + "_l0", getattr(rnn, f"{n}_l{layer}"))
        mods.append(one)
    return mods


def _lstm_ref(m, tok, masks):
    """LSTMLM with the mask of the dropout between its layers ([B, T, hidden])."""
    l0, l1 = _layers(m.rnn)
    return m.out(l1(l0(m.emb(tok))[0] * masks[0].to(m.out.weight.dtype))[0])


def _gru_ref(m, x, masks):
    """GRUClassifier (seq-first) with the mask between its layers, drawn batch-first
    [B, T, hidden] (the capture drops the batch-first view) and applied as [T, B, hidden]."""
    l0, l1 = _layers(m.rnn)
    return m.head(l1(l0(x)[0] * masks[0].transpose(0, 1).to(x.dtype))[1][-1])


DROP = {  # name -> (reference forward, the dropout values' shapes without the batch, its dim in each)
    "encoder batch_first": (_encoder_ref, [(2, 6, 6), (6, 16), (6, 32), (6, 16)], [0, 0, 0, 0]),
    # seq-first: the layer's three nn.Dropouts act on [T, B, E]; goblin draws their masks as
    # if the batch led (the op's axis), so element (t, b, e) keeps the batch-first draw of
    # (b, t, e) and the batch-first reference with the same masks is the same computation
    "encoder seq-first": (_encoder_ref, [(2, 6, 6), (6, 16), (6, 32), (6, 16)], [0, 1, 1, 1]),
    "lstm lm": (_lstm_ref, [(6, 12)], [0]),
    "gru": (_gru_ref, [(5, 10)], [0]),
}


@pytest.mark.parametrize("name", list(DROP))
def test_references_with_all_ones_masks_are_the_modules(name):
    ref_fwd, shapes, _ = DROP[name]
    model, _, dims, data, _ = _case(name, "f64", P)
    x = data[0].narrow(dims[0], 0, 4)
    ones = [torch.ones((4,) + s, dtype=torch.float64) for s in shapes]
    model.eval()
    with torch.no_grad():
        np.testing.assert_allclose(ref_fwd(model, x, ones).numpy(), model(x).numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dt", ["f64", "f32"])
@pytest.mark.parametrize("name", list(DROP))
def test_dropout_rounds_match_torch_with_the_same_masks(grid, name, dt):
    """TransformerEncoderLayer(dropout=0.25) (SDPA's dropout_p and three nn.Dropout), a
    2-layer LSTM and a 2-layer GRU with dropout=0.25 between the layers: 10 rounds on the
    grid in micro-batches of 4 against the torch references with the trainer's masks,
    within the tolerances of the dropout-free runs."""
    ref_fwd, shapes, axes = DROP[name]
    model, loss_fn, dims, data, opt = _case(name, dt, P)
    batches = _batches(data, dims)[:10]  # 10 rounds: the masks change every round
    ref = copy.deepcopy(model)
    topt = opt.torch(ref.parameters())
    want = []
    for rnd, batch in enumerate(batches):
        masks = _masks(shapes, rnd, B)
        topt.zero_grad()
        total = 0.0
        for s in range(0, B, MB):
            part = [t.narrow(d, s, MB) for t, d in zip(batch, dims)]
            loss = loss_fn(ref_fwd(ref, part[0], [mk[s:s + MB] for mk in masks]), *part[1:])
            (loss * (MB / B)).backward()
            total += float(loss.detach()) * MB / B
        topt.step()
        want.append(total)
    want = np.array(want)
    with grid.train(model, loss_fn, optimizer=opt, batch_size=B, micro_batch_size=MB, seed=SEED,
                    progress=False) as tr:
        got = np.array([tr.step(*[t.numpy() for t in batch])["loss"] for batch in batches])
        ops = [tr.capture.graph.node(i) for i in range(len(tr.capture.graph))]
        drops = [n.shape for n in ops if n.op == "dropout"]
        assert [tuple(sh[:a]) + tuple(sh[a + 1:]) for sh, a in zip(drops, axes)] == [tuple(s) for s in shapes]
        assert len(drops) == len(shapes)
        sd = tr.state_dict()
    rel = np.abs(got - want) / np.abs(want)
    assert rel.max() <= LOSS_TOL[dt], (name, dt, int(rel.argmax()), got[rel.argmax()], want[rel.argmax()])
    for k, p in ref.named_parameters():
        err = _rel(sd[k].numpy(), p.detach().numpy())
        assert err <= WEIGHT_TOL[dt], (name, dt, k, err)
