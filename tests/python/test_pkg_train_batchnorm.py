"""Batch-norm running statistics on the grid (issue 20): grid.train updates running_mean,
running_var and num_batches_tracked as torch's BatchNorm in train mode does (momentum,
the unbiased variance for running_var), from the whole batch's statistics, which the
trainer combines from its micro-batches' per-channel means and variances (Chan's rule),
and state_dict() returns them.

References: torch's own nn.BatchNorm2d / BatchNorm1d in train mode, run on the same
batches. Where the batch-norm reads the data directly its input does not depend on the
parameters, so several micro-batches must give torch's statistics exactly (to rounding:
1e-10 in f64, 1e-5 in f32); after a conv, one micro-batch gives torch's whole trajectory,
so the statistics again agree.
"""
import warnings

import numpy as np
import pytest

goblin = pytest.importorskip("goblin")
torch = pytest.importorskip("torch")
if not hasattr(goblin, "connect") or not hasattr(goblin._goblin, "Trainer"):
    pytest.skip("this goblin build has no grid trainer", allow_module_level=True)

nn = torch.nn
F = torch.nn.functional
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


@pytest.fixture(scope="module")
def grid():
    g = goblin.connect(workers=2, threads=1)
    yield g
    g.close()


class DataBN(nn.Module):
    """BatchNorm2d straight on the images, then conv, pool, linear."""

    def __init__(self, momentum=0.1):
        super().__init__()
        self.bn = nn.BatchNorm2d(3, momentum=momentum)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 2 * 2, 3)

    def forward(self, x):
        return self.fc(F.max_pool2d(F.relu(self.conv(self.bn(x))), 2).flatten(1))


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 6)
        self.bn1 = nn.BatchNorm1d(6)
        self.out = nn.Linear(6, 3)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x))).flatten(1)
        return self.out(F.relu(self.bn1(self.fc(h))))


def batches(dtype, n, B=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = (torch.randn(B, 3, 4, 4, generator=gen) * 2.0 + 0.7).to(dtype)
        out.append((x, torch.randint(0, 3, (B,), generator=gen)))
    return out


def torch_reference(model, data, lr):
    m = model
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        opt.step()
    return m.state_dict()


def check_stats(sd, want, dtype, keys):
    for k in keys:
        got, ref = sd[k].numpy(), want[k].numpy()
        if k.endswith("num_batches_tracked"):
            assert int(got) == int(ref), (k, got, ref)
            continue
        assert got.dtype == ref.dtype, k
        err = np.abs(got.astype(np.float64) - ref.astype(np.float64)).max() / (1 + np.abs(ref).max())
        assert err <= TOL[dtype], (k, err)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_data_batch_norm_matches_torch_over_micro_batches(grid, dtype, momentum):
    torch.manual_seed(1)
    model = DataBN(momentum).to(dtype)
    ref_model = DataBN(momentum).to(dtype)
    ref_model.load_state_dict(model.state_dict())
    data = batches(dtype, 4)
    want = torch_reference(ref_model, data, lr=0.05)
    t = grid.train(model, F.cross_entropy, optimizer=goblin.optim.SGD(lr=0.05), micro_batch_size=4,
                   progress=False)
    try:
        for x, y in data:
            t.step(x, y)
        assert t.plan(10).micro_batches == 3  # 4, 4, 2 rows
        sd = t.state_dict()
    finally:
        t.close()
    check_stats(sd, want, dtype, ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"])
    # the statistics moved away from the initial (0, 1): the test would see an update missing
    assert np.abs(sd["bn.running_mean"].numpy()).max() > 0.1


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_conv_batch_norm_trajectory_and_statistics_match_torch(grid, dtype):
    torch.manual_seed(2)
    model = ConvBN().to(dtype)
    ref_model = ConvBN().to(dtype)
    ref_model.load_state_dict(model.state_dict())
    data = batches(dtype, 3, seed=3)
    want = torch_reference(ref_model, data, lr=0.1)
    t = grid.train(model, F.cross_entropy, optimizer=goblin.optim.SGD(lr=0.1), progress=False)
    try:
        for x, y in data:
            t.step(x, y)
        sd = t.state_dict()
    finally:
        t.close()
    keys = [k for k in want if k.startswith("bn") and ("running" in k or "tracked" in k)]
    assert len(keys) == 6
    check_stats(sd, want, dtype, keys)
    tol = 1e-9 if dtype == torch.float64 else 1e-4
    for k in ("conv.weight", "fc.weight", "out.weight"):
        err = (sd[k] - want[k]).abs().max().item() / (1 + want[k].abs().max().item())
        assert err <= tol, (k, err)


def test_the_statistics_of_a_staged_plan_are_the_whole_batch(grid):
    """Cut into pipeline stages under a small task budget: the batch-norm's statistics come
    from whichever stage holds it, combined over the micro-batches."""
    torch.manual_seed(4)
    model = DataBN().double()
    ref_model = DataBN().double()
    ref_model.load_state_dict(model.state_dict())
    data = batches(torch.float64, 2, seed=5)
    want = torch_reference(ref_model, data, lr=0.05)
    t = grid.train(model, F.cross_entropy, optimizer=goblin.optim.SGD(lr=0.05), micro_batch_size=3,
                   task_memory=12000, progress=False)
    try:
        for x, y in data:
            t.step(x, y)
        assert t.plan(10).n_stages >= 2, str(t.plan(10))
        sd = t.state_dict()
    finally:
        t.close()
    check_stats(sd, want, torch.float64, ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"])


def test_tracked_batch_norm_says_nothing():
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cap = goblin.capture_training(nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 3)),
                                      F.cross_entropy, x, y)
    assert [p for p, _ in cap.batch_norms.values()] == ["1."]
