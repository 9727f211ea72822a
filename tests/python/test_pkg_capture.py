"""goblin.capture: PyTorch programs captured as goblin graphs and evaluated
locally must match torch within the numeric contract.

Needs the package installed first (python3 -m pip install --no-build-isolation .)
and torch (pip install '.[torch]'); each is skipped with the reason if missing.

Tolerance: a captured network is a chain of dot products, each within the
matmul contract gamma_K(u) relative to sum |a||b| (goblin.ops.contract("matmul",
"f32", K)), plus the normalizations' gamma_(2k+16). We allow
depth * gamma_Kmax(f32) * 8 relative to max(1, |reference|): 8 covers the
amplification of layer-norm/softmax and the reference's own error.
"""
import numpy as np
import pytest

goblin = pytest.importorskip(
    "goblin", reason="the goblin package is not installed (python3 -m pip install --no-build-isolation .)")
torch = pytest.importorskip("torch", reason="capture needs torch: pip install '.[torch]'")
nn = torch.nn
F = torch.nn.functional
if not hasattr(goblin, "capture"):
    pytest.skip("an unrelated module named goblin shadows the package", allow_module_level=True)

BACKENDS = [b for b in ("ref", "blis") if b in goblin.backends()]


def contract_tol(depth, kmax):
    rel, _ = goblin.ops.contract("matmul", "f32", kmax)
    return 8 * depth * rel


def assert_close(got, want, depth, kmax):
    want = want.detach().numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = contract_tol(depth, kmax) * max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= tol, f"max error {err:.3g} > contract tolerance {tol:.3g}"


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 32)
        self.out = nn.Linear(32, 5)

    def forward(self, x):
        return self.out(F.silu(self.fc2(F.relu(self.fc1(x)))))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.c1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.c2(x))), 2, ceil_mode=True)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.log_softmax(self.head(x), dim=1)


class EncoderBlock(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, 4 * d)
        self.ff2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class GPTBlock(nn.Module):
    def __init__(self, vocab=64, ctx=16, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, 4 * d)
        self.ff2 = nn.Linear(4 * d, d)
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        b, t = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        d = x.shape[-1]
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).contiguous().view(b, t, d))
        x = x + self.ff2(F.gelu(self.ff1(self.ln2(x)), approximate="tanh"))
        return self.head(self.lnf(x))


def int_hash(x):
    h = x * 1103515245 + 12345            # wraps in int64, as torch does
    h = h ^ (h >> 7)
    h = (h << 3) ^ (h & 0xFFFF)
    q = torch.floor_divide(h, 97)
    r = torch.remainder(h, -13)
    return (q - r) % 1000003, h // -7, torch.bitwise_not(h) | 5, torch.fmod(h, 11)


def _randomize_bn(m):
    g = torch.Generator().manual_seed(3)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.rand(mod.num_features, generator=g) * 2 - 1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.bias.data.copy_(torch.rand(mod.num_features, generator=g) - 0.5)
    return m


def test_mlp():
    torch.manual_seed(0)
    m = MLP().eval()
    x = torch.randn(8, 16)
    g = goblin.capture(m, x)
    assert isinstance(g, goblin.Graph)
    for backend in BACKENDS:
        (y,) = g.evaluate(x.numpy(), backend=backend)
        assert_close(y, m(x), depth=3, kmax=64)


def test_cnn_batchnorm_pooling():
    torch.manual_seed(1)
    m = _randomize_bn(SmallCNN()).eval()
    x = torch.randn(4, 3, 16, 16)
    g = goblin.capture(m, x)
    ops = {g.node(i).op for i in range(len(g))}
    assert {"conv2d", "batch_norm", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"} <= ops
    for backend in BACKENDS:
        (y,) = g.evaluate(x.numpy(), backend=backend)
        assert_close(y, m(x), depth=4, kmax=72)


def test_transformer_encoder_block():
    torch.manual_seed(2)
    m = EncoderBlock().eval()
    x = torch.randn(3, 10, 32)
    g = goblin.capture(m, x)
    ops = {g.node(i).op for i in range(len(g))}
    assert {"layer_norm", "gelu", "scaled_dot_product_attention", "matmul"} <= ops
    for backend in BACKENDS:
        (y,) = g.evaluate(x.numpy(), backend=backend)
        assert_close(y, m(x), depth=6, kmax=128)


class HeadLayouts(nn.Module):
    """Attention on heads taken from one fused qkv product in several spellings, odd sizes:
    the executor hands the heads to the attention kernel as strided views of the product."""

    def __init__(self, d=15, heads=3, style=0, causal=False):
        super().__init__()
        self.heads, self.style, self.causal = heads, style, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        h, e = self.heads, d // self.heads
        y = self.qkv(x)
        if self.style == 0:
            q, k, v = (z.view(b, t, h, e).transpose(1, 2) for z in y.split(d, dim=-1))
        elif self.style == 1:
            y = y.reshape(b, t, 3, h, e).permute(2, 0, 3, 1, 4)
            q, k, v = y[0], y[1], y[2]
        else:  # q from every other column of the first 2d, k from the rest of them
            q = y[..., 0:2 * d:2].reshape(b, t, h, e).transpose(1, 2)
            k = y[..., 1:2 * d:2].reshape(b, t, h, e).transpose(1, 2)
            v = y[..., 2 * d:].reshape(b, t, h, e).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return x + self.proj(a.transpose(1, 2).reshape(b, t, d))


@pytest.mark.parametrize("style,causal", [(0, False), (0, True), (1, False), (2, True)])
def test_attention_on_heads_of_a_fused_product(style, causal):
    torch.manual_seed(10 + style)
    m = HeadLayouts(style=style, causal=causal).eval()
    x = torch.randn(3, 7, 15)
    g = goblin.capture(m, x)
    want = m(x)
    for backend in BACKENDS:
        (y,) = g.evaluate(x.numpy(), backend=backend)
        assert_close(y, want, depth=4, kmax=64)


def test_gpt_block_causal_on_tokens():
    torch.manual_seed(3)
    m = GPTBlock().eval()
    idx = torch.randint(0, 64, (2, 16))
    g = goblin.capture(m, idx)
    assert g.inputs[0].dtype == "i64"
    idx2 = idx.clone()
    idx2[:, -1] = (idx2[:, -1] + 1) % 64
    for backend in BACKENDS:
        (y,) = g.evaluate(idx.numpy(), backend=backend)
        assert_close(y, m(idx), depth=8, kmax=128)
        # causality: changing the last token changes nothing before it
        (y2,) = g.evaluate(idx2.numpy(), backend=backend)
        np.testing.assert_array_equal(y2[:, :-1], y[:, :-1])


def test_integer_hashing_program_is_exact():
    x = torch.randint(-2 ** 40, 2 ** 40, (257,), dtype=torch.int64)
    x[:4] = torch.tensor([0, -1, 2 ** 62, -2 ** 62])
    g = goblin.capture(int_hash, x)
    refs = int_hash(x)
    for backend in BACKENDS:
        outs = g.evaluate(x.numpy(), backend=backend)
        assert len(outs) == len(refs)
        for o, r in zip(outs, refs):
            np.testing.assert_array_equal(o, r.numpy())


def test_dynamic_batch_recaptures_and_caches():
    torch.manual_seed(4)
    m = MLP().eval()
    g = goblin.capture(m, torch.randn(4, 16))
    for n in (4, 7, 7):
        x = torch.randn(n, 16)
        assert_close(g(x.numpy()), m(x), depth=3, kmax=64)
    assert set(g._by_batch) == {7}
    assert g(torch.randn(7, 16)).shape == (7, 5)  # torch tensors are accepted by __call__
    with pytest.raises(goblin.ShapeError, match="dim 0"):
        g(np.zeros((4, 15), np.float32))


def test_unsupported_ops_are_all_named_at_once():
    def prog(x):
        s, _ = torch.kthvalue(x, 2, dim=-1)
        v, _ = torch.median(x, dim=-1)
        return s.cumprod(-1).sum() + v.sum()

    with pytest.raises(goblin.UnsupportedOpError) as ei:
        goblin.capture(prog, torch.randn(3, 5))
    e = ei.value
    assert isinstance(e, goblin.GoblinError)
    names = " ".join(e.ops)
    for op in ("kthvalue", "median", "cumprod"):
        assert op in names and op in str(e)


def test_serialized_capture_carries_no_user_names():
    class ConfidentialPatientModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.diagnosis_layer_alpha = nn.Linear(8, 8)
            self.register_buffer("secret_scaling_buffer", torch.full((8,), 2.0))
            self.register_parameter("private_offset_param", nn.Parameter(torch.randn(8)))

        def forward(self, patient_records_tensor):
            hidden_state_omega = self.diagnosis_layer_alpha(patient_records_tensor)
            return hidden_state_omega * self.secret_scaling_buffer + self.private_offset_param

    m = ConfidentialPatientModel().eval()
    patient_records_tensor = torch.randn(2, 8)
    g = goblin.capture(m, patient_records_tensor)
    data = g.serialize()
    for name in ("ConfidentialPatientModel", "diagnosis_layer_alpha", "diagnosis", "secret_scaling_buffer",
                 "secret", "private_offset_param", "private", "patient_records_tensor", "patient",
                 "hidden_state_omega", "weight", "bias", "forward"):
        assert name.encode() not in data, name
        assert name.encode("utf-16-le") not in data, name
    # the serialized graph alone reproduces the model
    h = goblin.Graph.deserialize(data)
    (y,) = h.evaluate(patient_records_tensor.numpy())
    assert_close(y, m(patient_records_tensor), depth=2, kmax=8)
