"""Shared checks of captured PyTorch ops against torch (tests/python/test_pkg_capture_ops*.py):
the program locally at two batch sizes, on an embedded grid cut into chunks, and its gradient
against torch.autograd locally and on the grid. Imported after the test module has checked
that goblin and torch are there."""
import numpy as np
import pytest
import torch

import goblin

TOL = 1e-10
D = torch.float64


def close(got, want, what):
    """got == torch's want: integers exactly, floats within TOL of the largest |entry| (NaN at
    the same places)."""
    want = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, torch {want.shape}"
    if want.dtype.kind in "iub":
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, torch {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaN at other places than torch's"
    got, want = np.where(nan, 0, got), np.where(nan, 0, want)
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1e-3)
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) if want.size else 0.0
    assert err <= TOL * scale, f"{what}: max error {err:g} (scale {scale:g})"


@pytest.fixture(scope="module")
def grid():
    """An embedded grid of 2 workers, one per test module (import it there)."""
    g = goblin.connect(workers=2, threads=1)
    yield g
    g.close()


def gen():
    return torch.Generator().manual_seed(20)


def randn(*shape):
    return torch.randn(*shape, dtype=D, generator=gen())


def targets(n, c):
    return torch.randint(0, c, (n,), generator=gen())


def scatter_index(n):
    return torch.randint(0, 5, (n, 3), generator=gen())


def outs(v):
    return v if isinstance(v, tuple) else (v,)


def check_forward_locally(name, fn, ex):
    g = goblin.capture(fn, *ex)
    with torch.no_grad():
        want = outs(fn(*ex))
    got = outs(g(*ex))
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        close(a, b, f"{name} output {i}")
    # another batch size: captured again (the op's attributes follow the new shapes)
    ex5 = tuple(e[:5] for e in ex)
    with torch.no_grad():
        want5 = outs(fn(*ex5))
    for i, (a, b) in enumerate(zip(outs(g(*ex5)), want5)):
        close(a, b, f"{name} (batch 5) output {i}")


def check_forward_on_grid(grid, name, fn, ex):
    g = goblin.capture(fn, *ex)
    with torch.no_grad():
        want = outs(fn(*ex))
    seen = []
    got = outs(grid.run(g, *[e.numpy() for e in ex], chunk_rows=4, progress=lambda d, t: seen.append((d, t))))
    assert seen[-1] == (3, 3), seen  # 12 rows in chunks of 4
    for i, (a, b) in enumerate(zip(got, want)):
        close(a, b, f"{name} on the grid, output {i}")


class Scaled(torch.nn.Module):
    """h = x * W, then the op: W (x's shape without the batch) is the one parameter."""

    def __init__(self, op, shape):
        super().__init__()
        self.op = op
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, int(np.prod(shape)), dtype=D).reshape(shape))

    def forward(self, x, *extra):
        return self.op(x * self.w, *extra)


def backward_case(op, shape, extra):
    """The training capture of sum(op(x * W) * cot) and torch's loss and dW."""
    model = Scaled(op, shape[1:])
    x = randn(*shape)
    with torch.no_grad():
        out = op(x * model.w, *extra)
    cot = torch.randn(out.shape, dtype=D, generator=torch.Generator().manual_seed(3))

    def loss_fn(y, cot):  # a sum over the batch: the grid's tasks add up to it
        return (y * cot).sum()

    class WithExtra(torch.nn.Module):  # (x, *extra, cot) -> loss
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, *batch):
            return loss_fn(self.m(*batch[:-1]), batch[-1])

    step = WithExtra()
    batch = (x, *extra, cot)
    cap = goblin.capture_training(step, None, *batch)
    g = cap.graph
    grads = g._g.backward(g.outputs[0].id, [t.id for t in g.inputs[:cap.n_params]])
    for gid in grads:
        g._g.output(gid)
    tl = step(*batch)
    tl.backward()
    return cap, batch, tl, model.w.grad


def check_backward(grid, name, op, shape, extra):
    cap, batch, tl, want = backward_case(op, shape, extra)
    assert cap.n_params == 1
    arrays = [b.numpy() for b in batch]
    loss, grad = cap.graph.evaluate(*cap.init, *arrays)
    close(loss, tl, f"{name}: loss")
    close(grad, want, f"{name}: gradient")
    # the same graph on the grid: W to every task, the batch in chunks, loss and gradient summed
    loss, grad = grid.run(cap.graph, *cap.init, *arrays, chunk_rows=3, progress=False,
                          split=["broadcast"] + ["batch"] * len(arrays), combine="sum")
    close(loss, tl, f"{name} on the grid: loss")
    close(grad, want, f"{name} on the grid: gradient")
