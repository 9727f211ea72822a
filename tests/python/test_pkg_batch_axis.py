"""The batch axis traced through a graph (docs/graph-format.md, "The batch axis").

PyTorch's own attention modules keep the batch in dim 1 (nn.MultiheadAttention and
nn.TransformerEncoderLayer with batch_first=False: [seq, batch, embed]) or move it there
inside (batch_first=True: the module transposes to seq-first and reshapes to
[seq, batch * heads, head_dim]). grid.run cuts such captured graphs into chunks of the
batch wherever it sits, and the outputs equal torch's: f64 within 1e-10 relative (max
error over the largest entry), f32 within the matmul contract of test_pkg_capture.
grid.train of a TransformerEncoderLayer model in three micro-batches follows a torch SGD
loop with the same initial weights and batches (docs/training.md; dropout 0.0).
A graph whose output is not per-sample is refused with a message naming the node.
"""
import copy

import numpy as np
import pytest

goblin = pytest.importorskip("goblin")
torch = pytest.importorskip("torch")
if not hasattr(goblin, "connect"):
    pytest.skip("this goblin package has no grid", allow_module_level=True)
import test_pkg_capture as models  # noqa: E402  (tests/python is on sys.path)

nn = torch.nn
F = torch.nn.functional
DT = {"f64": torch.float64, "f32": torch.float32}


@pytest.fixture(scope="module")
def grid():
    g = goblin.connect(workers=2, threads=1)
    yield g
    g.close()


class MHA(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.att = nn.MultiheadAttention(24, 4, batch_first=batch_first)

    def forward(self, x):
        return self.att(x, x, x)  # (output, head-averaged weights [batch, seq, seq])


class SeqFirst(nn.Module):
    """A hand-written seq-first model: [seq, batch, d] through permutes, transposes and
    reshapes that merge the batch with other dims and split it out again."""

    def __init__(self, d=8, t=5, h=12):
        super().__init__()
        self.t, self.d, self.h = t, d, h
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(t * d, h)

    def forward(self, x):
        t, n, d = x.shape
        z = torch.tanh(self.a(x))                      # [t, n, d]
        z = z.permute(1, 2, 0).reshape(n, d * t)       # batch first, merged features
        z = self.b(z)                                  # [n, h]
        z = z.view(n, 3, self.h // 3).transpose(0, 1)  # [3, n, h/3]
        w = torch.softmax(z, dim=-1)
        y = (x.transpose(0, 1).reshape(n * t, d) * 2.0).view(n, t, d).transpose(0, 1)  # [t, n, d]
        return w, y + x


def _cases(dt):
    torch.manual_seed(3)
    n = 11  # cut into chunks of 4: 4, 4, 3
    yield "mha seq-first", MHA(False), torch.randn(6, n, 24)
    yield "mha batch_first", MHA(True), torch.randn(n, 6, 24)
    for bf in (False, True):
        layer = nn.TransformerEncoderLayer(24, 4, dim_feedforward=40, dropout=0.0, batch_first=bf)
        x = torch.randn(n, 6, 24) if bf else torch.randn(6, n, 24)
        yield f"encoder layer batch_first={bf}", layer, x
    yield "seq-first transposes", SeqFirst(), torch.randn(5, n, 8)


def _rel(got, want):
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / max(float(np.abs(want).max()), 1e-300))


@pytest.mark.parametrize("dt", ["f64", "f32"])
def test_seq_first_models_cut_by_batch_match_torch(grid, dt):
    for name, m, x in _cases(dt):
        m = m.to(DT[dt]).eval()
        x = x.to(DT[dt])
        with torch.no_grad():
            ref = m(x)
        ref = ref if isinstance(ref, tuple) else (ref,)
        cg = goblin.capture(m, x)
        seen = []
        got = grid.run(cg, x.numpy(), chunk_rows=4, progress=lambda d, t: seen.append((d, t)))
        got = got if isinstance(got, tuple) else (got,)
        assert seen[-1] == (3, 3), (name, seen)  # 11 samples in chunks of 4, 4, 3
        assert len(got) == len(ref), name
        for o, (a, r) in enumerate(zip(got, ref)):
            assert a.shape == tuple(r.shape), (name, o)
            if dt == "f64":
                assert _rel(a, r.numpy()) <= 1e-10, (name, o, _rel(a, r.numpy()))
            else:
                models.assert_close(a, r, depth=8, kmax=64)


def test_batch_in_dim_one_is_found_not_the_sequence(grid):
    """Cutting [seq, batch, embed] along dim 0 would split the attention's sequence: the
    chunks then differ from torch; cut by the batch they agree (checked above). Here: a
    sequence of 12 and a batch of 3, cut into chunks of 1 sample."""
    torch.manual_seed(5)
    m = MHA(False).double().eval()
    x = torch.randn(12, 3, 24, dtype=torch.float64)
    with torch.no_grad():
        ref, w = m(x)
    out, wg = grid.run(goblin.capture(m, x), x.numpy(), chunk_rows=1, progress=False)
    assert _rel(out, ref.numpy()) <= 1e-10 and _rel(wg, w.numpy()) <= 1e-10


def test_padding_mask_batched_in_dim_0_beside_seq_first_input(grid):
    """key_padding_mask [batch, seq] beside x [seq, batch, embed]: with split='batch' for
    both, each is cut along its own batch dim (x: 1, mask: 0)."""
    torch.manual_seed(6)
    att = nn.MultiheadAttention(24, 4).double().eval()

    def f(x, mask):
        return att(x, x, x, key_padding_mask=mask, need_weights=False)[0]

    x = torch.randn(6, 11, 24, dtype=torch.float64)
    mask = torch.zeros(11, 6, dtype=torch.bool)
    mask[:, -1] = True
    mask[3, -3:] = True
    with torch.no_grad():
        ref = f(x, mask)
    got = grid.run(goblin.capture(f, x, mask), x.numpy(), mask.numpy(), split="batch", chunk_rows=4,
                   progress=False)
    assert _rel(got, ref.numpy()) <= 1e-10


def test_output_not_per_sample_is_refused_naming_the_node(grid):
    x = torch.randn(8, 3, dtype=torch.float64)
    cg = goblin.capture(lambda t: t / t.sum(), x)
    with pytest.raises(goblin.GoblinError) as ei:
        grid.run(cg, x.numpy(), chunk_rows=2, progress=False)
    msg = str(ei.value)
    assert "not per-sample" in msg and "(sum) reduces over the batch" in msg, msg
    # one chunk is the graph as it is
    got = grid.run(cg, x.numpy(), chunk_rows=8, progress=False)
    np.testing.assert_allclose(got, (x / x.sum()).numpy(), rtol=1e-12)


# ---- training ---------------------------------------------------------------------------

class EncoderModel(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.bf = batch_first
        self.layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=batch_first)
        self.head = nn.Linear(16, 3)

    def forward(self, x):  # data [batch, seq, 16]
        h = self.layer(x) if self.bf else self.layer(x.transpose(0, 1)).transpose(0, 1)
        return self.head(h.mean(1))


@pytest.mark.parametrize("bf", [True, False])
def test_train_encoder_layer_matches_torch_sgd(grid, bf):
    rounds, b, mb = 3, 12, 4
    torch.manual_seed(7)
    model = EncoderModel(bf).double()
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(b * rounds, 5, 16, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (b * rounds,), generator=gen)
    batches = [(x[i * b:(i + 1) * b], y[i * b:(i + 1) * b]) for i in range(rounds)]
    ref = copy.deepcopy(model)
    opt = goblin.optim.SGD(lr=0.05, momentum=0.9)
    topt = opt.torch(ref.parameters())
    ref.train()
    ref_losses = []
    for xb, yb in batches:  # the trainer's semantics: loss_c * rows_c / B per micro-batch
        topt.zero_grad()
        total = 0.0
        for s in range(0, b, mb):
            loss = F.cross_entropy(ref(xb[s:s + mb]), yb[s:s + mb])
            (loss * (mb / b)).backward()
            total += float(loss.detach()) * mb / b
        topt.step()
        ref_losses.append(total)
    with grid.train(model, F.cross_entropy, optimizer=opt, batch_size=b, micro_batch_size=mb,
                    progress=False) as tr:
        infos = [tr.step(xb, yb) for xb, yb in batches]
        assert tr.plan(b)["micro_batches"] == b // mb
        for r, (i, want) in enumerate(zip(infos, ref_losses)):
            assert abs(i["loss"] - want) <= 1e-10 * abs(want), (r, i["loss"], want)
        sd = tr.state_dict()
        for k, p in ref.named_parameters():
            assert _rel(sd[k].numpy(), p.detach().numpy()) <= 1e-10, k
