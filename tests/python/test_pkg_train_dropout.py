"""Dropout in training mode on the grid (issue 20): goblin's counter-based DROPOUT op as
grid.train runs it, against independent references.

- the op (ref and BLIS backends, f32 and f64): the kept fraction is 1 - p within a
  binomial bound computed here, kept values are exactly x * (1 / (1 - p)) in the dtype,
  dropped ones 0, and the mask is the one an independent NumPy Philox4x32-10 gives
  (the mapping documented in libgoblin/kernels/random.h); BLIS gives the reference's bits
  at any thread count;
- the trainer: the gradient of a round equals torch.autograd's for the same model with
  the mask the documented key gives (seed mix64(seed ^ mix64(round)), counter = the
  element's index in the whole batch), for one micro-batch, three micro-batches and a
  plan cut into pipeline stages (so the split does not change the mask), and rounds draw
  different masks;
- training a small model with dropout on the grid reaches the loss torch's training with
  dropout reaches (a statistical comparison over seeds, not bitwise), and clearly not the
  loss of training without dropout.
"""
import copy
import math
import warnings

import numpy as np
import pytest

goblin = pytest.importorskip("goblin")
torch = pytest.importorskip("torch")
if not hasattr(goblin, "connect") or not hasattr(goblin._goblin, "Trainer"):
    pytest.skip("this goblin build has no grid trainer", allow_module_level=True)

nn = torch.nn
F = torch.nn.functional

M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1
DROPOUT_STREAM = 189  # the op's catalogue value (random.h: stream = op)


# ---- independent references ----------------------------------------------------------------

def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 (Salmon et al. SC'11), vectorized over uint64 arrays of 32-bit words."""
    c0, c1, c2, c3 = (np.asarray(v, dtype=np.uint64) for v in (c0, c1, c2, c3))
    k0, k1 = np.uint64(k0), np.uint64(k1)
    m32 = np.uint64(M32)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & m32,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & m32)
        k0 = (k0 + np.uint64(0x9E3779B9)) & m32
        k1 = (k1 + np.uint64(0xBB67AE85)) & m32
    return c0, c1, c2, c3


def test_philox_known_answer():
    got = philox([0], [0], [0], [0], 0, 0)
    assert tuple(int(w[0]) for w in got) == (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)


def keep_mask(seed, offset, n, p):
    """Element i is kept when (x0 >> 8) * 2^-24 >= p, x0 the first word at counter offset + i."""
    s = seed & M64
    ctr = np.arange(n, dtype=np.uint64) + np.uint64(offset)
    x0 = philox(ctr & np.uint64(M32), ctr >> np.uint64(32), np.full(n, DROPOUT_STREAM), np.zeros(n),
                s & M32, s >> 32)[0]
    return (x0 >> np.uint64(8)).astype(np.float64) * 2.0 ** -24 >= p


def mix64(z):
    """SplitMix64's finalizer with its increment (goblin/train.h: the round's dropout key)."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def round_seed(seed, rnd):
    return mix64((seed & M64) ^ mix64(rnd))


def binomial_ok(kept, n, q, z=5.0):
    """|kept - n q| within z standard deviations of Binomial(n, q) (z = 5: a false alarm
    about once in 1.7 million runs)."""
    return abs(kept - n * q) <= z * math.sqrt(n * q * (1 - q))


# ---- the op --------------------------------------------------------------------------------

def run_dropout(x, p, seed, offset=0, backend="ref", threads=0, axis=None):
    g = goblin.Graph()
    xi = g.input(x.shape, "f64" if x.dtype == np.float64 else "f32")
    kw = {} if axis is None else {"axis": axis}
    g.output(g.op("dropout", xi, seed=seed, offset=offset, p=p, **kw))
    return g.evaluate(x, backend=backend, threads=threads)[0]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_op_distribution_values_and_mask(dt, p):
    n = 60000
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((300, 200)) + 3.0).astype(dt)  # no zeros: kept <=> nonzero
    want_keep = keep_mask(1234, 99, n, p).reshape(x.shape)
    scale = dt(1.0 / (1.0 - p))
    ref = run_dropout(x, p, 1234, 99, "ref")
    kept = ref != 0
    assert binomial_ok(int(kept.sum()), n, 1 - p), (int(kept.sum()), n, p)
    np.testing.assert_array_equal(kept, want_keep)
    assert ref.dtype == dt
    np.testing.assert_array_equal(ref[kept], x[kept] * scale)  # x / (1 - p), the scale in the dtype
    assert (ref[~kept] == 0).all()
    for threads in (1, 2, 5):
        blis = run_dropout(x, p, 1234, 99, "blis", threads)
        assert blis.tobytes() == ref.tobytes(), threads


def test_op_offset_shifts_the_counter():
    """Element k of a draw with offset 0 is element 0 of the draw with offset k: how a
    micro-batch from row r0 keeps its rows' masks."""
    x = np.ones((8, 5))
    whole = run_dropout(x, 0.5, 77, 0)
    for r0 in (1, 3, 6):
        part = run_dropout(x[r0:], 0.5, 77, r0 * 5)
        np.testing.assert_array_equal(part, whole[r0:])


@pytest.mark.parametrize("shape,axis", [((5, 7, 3), 1), ((4, 3, 6, 2), 2), ((6, 9), 1), ((3, 4, 5), 2),
                                        ((1, 6, 4), 1), ((2, 1, 3), 1)])
def test_op_axis_draws_as_if_that_dim_led(shape, axis):
    """With axis a, element i draws the counter of its index in the value with dim a moved
    first (NumPy: the batch-first mask, moved back), on ref and BLIS (1, 2, 5 threads)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) + 3.0)
    moved = np.moveaxis(x, axis, 0).shape
    want = np.moveaxis(keep_mask(42, 11, x.size, 0.5).reshape(moved), 0, axis)
    ref = run_dropout(x, 0.5, 42, 11, "ref", axis=axis)
    np.testing.assert_array_equal(ref != 0, want)
    np.testing.assert_array_equal(ref[want], x[want] * 2.0)
    for threads in (1, 2, 5):
        blis = run_dropout(x, 0.5, 42, 11, "blis", threads, axis=axis)
        assert blis.tobytes() == ref.tobytes(), threads
    assert run_dropout(x, 0.5, 42, 11, "ref", axis=0).tobytes() == run_dropout(x, 0.5, 42, 11, "ref").tobytes()


def test_op_axis_cut_along_it_keeps_the_whole_draw():
    """A seq-first [T, B, E] value cut along B: the slice from sample r0 with offset
    r0 * T * E draws what the same samples draw in the whole (how a micro-batch of seq-first
    data keeps its samples' masks)."""
    x = np.ones((4, 10, 3))
    whole = run_dropout(x, 0.5, 9, 0, axis=1)
    for r0 in (1, 4, 7):
        part = run_dropout(np.ascontiguousarray(x[:, r0:]), 0.5, 9, r0 * 4 * 3, axis=1)
        np.testing.assert_array_equal(part, whole[:, r0:])


@pytest.mark.parametrize("axis", [3, 7, -1])
def test_op_axis_outside_the_value_is_refused(axis):
    g = goblin.Graph()
    xi = g.input((2, 3, 4), "f64")
    with pytest.raises((goblin.GoblinError, ValueError)) as ei:
        g.output(g.op("dropout", xi, seed=1, p=0.5, axis=axis))
        g.evaluate(np.ones((2, 3, 4)))
    assert "axis" in str(ei.value), str(ei.value)


# ---- the trainer against torch.autograd with the same mask --------------------------------------

P = 0.4
SEED = 5


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(P), nn.Linear(16, 3)).double()


def torch_grads(model, x, y, keep):
    """torch.autograd of the same forward with the given mask (x * mask * 1/(1-p))."""
    lin1, lin2 = model[0], model[3]
    for q in model.parameters():
        q.grad = None
    h = F.relu(lin1(x))
    h = h * torch.from_numpy(keep.astype(np.float64)) * (1.0 / (1.0 - P))
    loss = F.cross_entropy(lin2(h), y)
    loss.backward()
    return loss.item(), [q.grad.numpy().copy() for q in model.parameters()]


@pytest.fixture(scope="module")
def grid():
    g = goblin.connect(workers=2, threads=1)
    yield g
    g.close()


@pytest.mark.parametrize("split", ["whole", "micro", "stages"])
def test_round_gradients_are_torchs_with_the_documented_mask(grid, split):
    model = make_model()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(12, 4, dtype=torch.float64, generator=gen)
    y = torch.randint(0, 3, (12,), generator=gen)
    kw = {"micro_batch_size": 5} if split == "micro" else {}
    if split == "stages":
        kw = {"micro_batch_size": 4, "task_memory": 2600}
    t = grid.train(model, F.cross_entropy, optimizer=goblin.optim.SGD(lr=1.0), seed=SEED, progress=False,
                   example=(x, y), **kw)
    try:
        plan = t.plan(12)
        if split == "micro":
            assert plan.micro_batches == 3
        if split == "stages":
            assert plan.n_stages >= 2, str(plan)
        masks = []
        for rnd in range(3):
            before = t.parameters()
            info = t.step(x.numpy(), y.numpy())
            got = [b - a for b, a in zip(before, t.parameters())]  # SGD lr 1: p -= g
            keep = keep_mask(round_seed(SEED, rnd), 0, 12 * 16, P).reshape(12, 16)
            masks.append(keep)
            with torch.no_grad():
                for q, v in zip(model.parameters(), before):
                    q.copy_(torch.from_numpy(v))
            loss, want = torch_grads(model, x, y, keep)
            assert abs(info["loss"] - loss) <= 1e-12 * (1 + abs(loss)), (rnd, info["loss"], loss)
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-12 * (1 + np.abs(b).max()))
        # rounds draw different masks (each about Binomial(192, 0.48) elements differ)
        assert (masks[0] != masks[1]).mean() > 0.2 and (masks[1] != masks[2]).mean() > 0.2
    finally:
        t.close()


def test_other_seed_other_masks_and_same_seed_same_trajectory(grid):
    x = torch.randn(12, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    y = torch.randint(0, 3, (12,), generator=torch.Generator().manual_seed(3))

    def run(seed, **kw):
        t = grid.train(make_model(), F.cross_entropy, optimizer=goblin.optim.SGD(lr=0.5), seed=seed,
                       progress=False, **kw)
        try:
            for _ in range(3):
                t.step(x.numpy(), y.numpy())
            return t.parameters()
        finally:
            t.close()

    a, b, c = run(11), run(11, micro_batch_size=1), run(12)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-12)
    assert max(np.abs(u - w).max() for u, w in zip(a, c)) > 1e-3


def test_capture_lowers_dropout_to_the_op_with_a_seed_per_node():
    m = nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.3), nn.Linear(5, 5), nn.Dropout(0.2), nn.Linear(5, 3))
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # dropout in training mode says nothing now
        cap = goblin.capture_training(m, F.cross_entropy, x, y, seed=40)
    ops = [cap.graph.node(i).op for i in range(len(cap.graph))]
    assert ops.count("dropout") == 2, ops
    # F.dropout(training=False) and p = 0 stay the identity
    m2 = nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.0), nn.Linear(5, 3))
    g2 = goblin.capture_training(m2, F.cross_entropy, x, y).graph
    assert "dropout" not in [g2.node(i).op for i in range(len(g2))]


# ---- training with dropout: a statistical comparison with torch -------------------------------

def test_training_with_dropout_reaches_torchs_loss(grid):
    """Same init, same batches, SGD: torch with its dropout (K seeds) and the grid with
    goblin's (K seeds). The eval-mode loss after training is a random variable of the
    masks; the two means agree within 4 standard errors, and both differ clearly from
    the loss of training without dropout."""
    K, rounds, B = 4, 60, 32
    gen = torch.Generator().manual_seed(5)
    X = torch.randn(B, 6, dtype=torch.float64, generator=gen)
    Y = (X[:, :1] * X[:, 1:2] + torch.sin(2 * X[:, 2:3])).double()
    torch.manual_seed(3)
    base = nn.Sequential(nn.Linear(6, 48), nn.Tanh(), nn.Dropout(0.5), nn.Linear(48, 1)).double()
    init = {k: v.clone() for k, v in base.state_dict().items()}

    def eval_loss(sd):
        m = nn.Sequential(nn.Linear(6, 48), nn.Tanh(), nn.Dropout(0.5), nn.Linear(48, 1)).double()
        m.load_state_dict(sd)
        m.eval()
        with torch.no_grad():
            return F.mse_loss(m(X), Y).item()

    def torch_run(seed, p=0.5):
        m = nn.Sequential(nn.Linear(6, 48), nn.Tanh(), nn.Dropout(p), nn.Linear(48, 1)).double()
        m.load_state_dict(init)
        m.train()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        torch.manual_seed(seed)
        for _ in range(rounds):
            opt.zero_grad()
            F.mse_loss(m(X), Y).backward()
            opt.step()
        return eval_loss(m.state_dict())

    def grid_run(seed):
        m = nn.Sequential(nn.Linear(6, 48), nn.Tanh(), nn.Dropout(0.5), nn.Linear(48, 1)).double()
        m.load_state_dict(init)
        t = grid.train(m, F.mse_loss, optimizer=goblin.optim.SGD(lr=0.1), seed=seed, progress=False,
                       micro_batch_size=16)
        try:
            for _ in range(rounds):
                t.step(X.numpy(), Y.numpy())
            return eval_loss(t.state_dict())
        finally:
            t.close()

    ours = np.array([grid_run(100 + s) for s in range(K)])
    theirs = np.array([torch_run(200 + s) for s in range(K)])
    plain = torch_run(0, p=0.0)
    se = math.sqrt(ours.var(ddof=1) / K + theirs.var(ddof=1) / K)
    assert abs(ours.mean() - theirs.mean()) <= 4 * se + 1e-3 * theirs.mean(), (ours, theirs)
    # dropout is on: the runs are not the no-dropout trajectory
    assert abs(ours.mean() - plain) > 4 * ours.std(ddof=1) / math.sqrt(K), (ours, plain)


class _SeqFirstDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):  # [B, T, 4] -> dropout on [T, B, 3] -> [B, 3]
        return self.drop(self.lin(x).transpose(0, 1)).transpose(0, 1).mean(1)


def test_dropout_where_the_batch_is_dim_1_follows_each_sample(grid):
    """Dropout on seq-first [T, B, 3]: goblin draws its masks as if the batch led, so the
    torch reference applies the batch-first mask of each round, transposed; 6 rounds in
    micro-batches of 2 (three cuts of the batch) match torch.autograd in f64."""
    torch.manual_seed(1)
    model = _SeqFirstDropout().double()
    ref = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(2)
    data = [(torch.randn(6, 5, 4, generator=gen, dtype=torch.float64), torch.randint(0, 3, (6,), generator=gen))
            for _ in range(6)]
    topt = torch.optim.SGD(ref.parameters(), lr=0.1)
    want = []
    for rnd, (x, y) in enumerate(data):
        keep = keep_mask(round_seed(SEED, rnd), 0, 6 * 5 * 3, 0.5).reshape(6, 5, 3)  # [B, T, 3]
        mask = torch.from_numpy(keep.astype(np.float64) * 2.0)
        topt.zero_grad()
        total = 0.0
        for s in range(0, 6, 2):
            h = ref.lin(x[s:s + 2]).transpose(0, 1) * mask[s:s + 2].transpose(0, 1)  # [T, b, 3]
            loss = F.cross_entropy(h.transpose(0, 1).mean(1), y[s:s + 2])
            (loss * (2 / 6)).backward()
            total += float(loss.detach()) * 2 / 6
        topt.step()
        want.append(total)
    with grid.train(model, F.cross_entropy, optimizer=goblin.optim.SGD(lr=0.1), seed=SEED, micro_batch_size=2,
                    progress=False, example=data[0]) as tr:
        got = [tr.step(x.numpy(), y.numpy())["loss"] for x, y in data]
        sd = tr.state_dict()
    np.testing.assert_allclose(got, want, rtol=1e-10)
    for k, p in ref.named_parameters():
        np.testing.assert_allclose(sd[k].numpy(), p.detach().numpy(), rtol=0, atol=1e-10)


class _MergedBatchDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):  # [B, T, 4] -> dropout on [T, B * 3] (the batch merged into a dim) -> [B, 3]
        t, b = x.shape[1], x.shape[0]
        h = self.lin(x).transpose(0, 1).reshape(t, b * 3)
        return self.drop(h).reshape(t, b, 3).mean(0)


def test_dropout_where_the_batch_is_merged_into_a_dim_is_refused_naming_the_node(grid):
    x, y = torch.randn(6, 5, 4), torch.randint(0, 3, (6,))
    with pytest.raises(goblin.GoblinError) as ei:
        t = grid.train(_MergedBatchDropout(), F.cross_entropy, optimizer=goblin.optim.SGD(lr=0.1),
                       progress=False, example=(x, y))
        t.close()
    msg = str(ei.value)
    assert "(dropout)" in msg and "not one dim" in msg and "[5, 18]" in msg, msg


def test_attention_dropout_p_is_refused_with_advice():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            q = self.lin(x).view(2, 3, 2, 4)
            return F.scaled_dot_product_attention(q, q, q, dropout_p=0.1).sum()

    with pytest.raises(goblin.UnsupportedOpError, match=r"dropout_p=0.1.*nn.Dropout"):
        goblin.capture(M().train(), torch.randn(2, 3, 8))
    # training capture maps it: softmax, goblin's dropout of the weights, matmul
    g = goblin.capture_training(M(), None, torch.randn(2, 3, 8)).graph
    assert [g.node(i).op for i in range(len(g))].count("dropout") == 1


def test_checkpoint_resume_draws_the_same_masks(grid, tmp_path):
    """The masks are keyed by the round counter, which a checkpoint keeps: 2 rounds + save
    + a new trainer + load + 2 rounds is bit-identical to 4 rounds straight."""
    x = torch.randn(12, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    y = torch.randint(0, 3, (12,), generator=torch.Generator().manual_seed(5))

    def new():
        return grid.train(make_model(), F.cross_entropy, optimizer=goblin.optim.SGD(lr=0.5, momentum=0.9),
                          seed=9, progress=False, micro_batch_size=5, example=(x, y))

    a = new()
    for _ in range(4):
        a.step(x.numpy(), y.numpy())
    straight = a.parameters()
    a.close()
    b = new()
    for _ in range(2):
        b.step(x.numpy(), y.numpy())
    b.save(tmp_path / "ck")
    b.close()
    c = new()
    c.load(tmp_path / "ck")
    for _ in range(2):
        c.step(x.numpy(), y.numpy())
    resumed = c.parameters()
    c.close()
    for u, v in zip(straight, resumed):
        assert u.tobytes() == v.tobytes()
