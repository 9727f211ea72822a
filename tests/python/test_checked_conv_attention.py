"""Checked execution of convolutions and attention (docs/verification.md, "Checked execution").

grid.train(verify='checked', checked_max_share=1) on the embedded grid, against PyTorch
from the same weights on the same batches (one task a round, SGD): a CNN whose
convolutions have stride, padding, dilation, groups and a bias, and a causal
self-attention model (scaled_dot_product_attention), each in f32 and f64. Every task is
checked (the convolutions by Freivalds over patches, the attention on a secret sample),
none is rejected, escalated or recomputed by the node, and the losses and parameters
equal torch's within 1e-4 (f32) / 1e-10 (f64) relative.
"""
import copy

import numpy as np
import pytest

goblin = pytest.importorskip("goblin")
torch = pytest.importorskip("torch")
if not hasattr(goblin, "connect") or not hasattr(goblin._goblin, "Trainer"):
    pytest.skip("this goblin build has no grid trainer", allow_module_level=True)

nn = torch.nn
F = torch.nn.functional
TOL = {"f32": 1e-4, "f64": 1e-10}
TDT = {"f32": torch.float32, "f64": torch.float64}


class GroupedCNN(nn.Module):
    def __init__(self):
        super().__init__()
        # wide enough that each convolution is worth checking (docs/verification.md)
        self.c1 = nn.Conv2d(4, 64, 3, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2, bias=True)
        self.c2 = nn.Conv2d(64, 64, 3, padding=1, groups=2, bias=False)
        self.fc = nn.Linear(64, 5)

    def forward(self, x):
        h = F.relu(self.c1(x))
        h = F.relu(self.c2(h))
        return self.fc(h.mean(dim=(2, 3)))


class Attn(nn.Module):
    def __init__(self, vocab=11, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, vocab)

    def forward(self, x):
        h = self.emb(x)
        b, t, d = h.shape
        q, k, v = self.qkv(h).split(d, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, t, d)
        return self.out(h + a)


def lm_loss(logits, y):
    return F.cross_entropy(logits.transpose(1, 2), y)


def case(name, dt, rounds, b):
    torch.manual_seed(3)
    rng = np.random.default_rng(4)
    if name == "cnn":
        model = GroupedCNN().to(TDT[dt])
        batches = [(torch.from_numpy(rng.standard_normal((b, 4, 12, 12))).to(TDT[dt]),
                    torch.from_numpy(rng.integers(0, 5, b))) for _ in range(rounds)]
        return model, F.cross_entropy, batches
    model = Attn().to(TDT[dt])
    batches = []
    for _ in range(rounds):
        x = torch.from_numpy(rng.integers(0, 11, (b, 16)))
        batches.append((x, torch.roll(x, -1, dims=1)))
    return model, lm_loss, batches


@pytest.fixture(scope="module")
def grid():
    g = goblin.connect(workers=2, threads=1)
    yield g
    g.close()


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("name", ["cnn", "attn"])
def test_checked_training_equals_torch(grid, name, dt):
    rounds, b = 3, 16
    model, loss_fn, batches = case(name, dt, rounds, b)
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    ref_losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = loss_fn(ref(x), y)
        loss.backward()
        opt.step()
        ref_losses.append(float(loss.detach()))
    st0 = grid.stats()
    with grid.train(model, loss_fn, optimizer=goblin.optim.SGD(lr=0.05), batch_size=b, micro_batch_size=b,
                    progress=False, verify="checked", checked_max_share=1.0) as tr:
        infos = [tr.step(x, y) for x, y in batches]
        sd = tr.state_dict()
    st1 = grid.stats()
    d = {k: st1[k] - st0.get(k, 0) for k in st1 if isinstance(st1[k], int)}
    for r, (a, e) in enumerate(zip([i["loss"] for i in infos], ref_losses)):
        assert abs(a - e) <= TOL[dt] * abs(e), f"{name} {dt}: round {r} loss {a!r} vs torch {e!r}"
    for k, p in ref.named_parameters():
        got, want = sd[k].numpy().astype(np.float64), p.detach().numpy().astype(np.float64)
        err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
        assert err <= TOL[dt], f"{name} {dt}: {k} differs by {err:.3g}"
    assert d["tasks_checked"] >= rounds, d
    # the convolutions / attention are among the checked heavy nodes: more than the
    # model's matmuls alone (cnn: 1 linear forward + 2 backward; attn: 2 + 4)
    assert d["products_checked"] > rounds * (3 if name == "cnn" else 6), d
    assert d["results_rejected"] == 0 and d["results_escalated"] == 0, d
    assert d["node_recomputed"] == 0, d
