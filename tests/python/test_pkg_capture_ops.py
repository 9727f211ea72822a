"""goblin.capture of the torch ops people write that map onto catalogue ops: F.pad
(constant, reflect, replicate), advanced indexing x[:, [0, 2]], F.cross_entropy with
reduction="none", x.std()/x.var() (dim, keepdim, correction), F.rms_norm, cumsum,
scatter_add, F.conv1d.

Each op is checked against PyTorch in f64 (and integer programs exactly):
 - forward, locally (g(x)) and on an embedded grid (grid.run, the batch cut into chunks);
 - backward where the catalogue has a rule: the op in a training capture
   (goblin.capture_training, the parameter W multiplies the batch), its gradient from
   goblin_graph_backward against torch.autograd, locally and on the grid (W broadcast to
   every task, the loss and gradient summed over the tasks).
Tolerance 1e-10 relative to the largest entry: f64 sums of a few dozen terms, the
reference in f64 too, so only the summation order differs.
"""
import numpy as np
import pytest

goblin = pytest.importorskip(
    "goblin", reason="the goblin package is not installed (python3 -m pip install --no-build-isolation .)")
torch = pytest.importorskip("torch", reason="capture needs torch: pip install '.[torch]'")
F = torch.nn.functional
if not hasattr(goblin, "capture"):
    pytest.skip("an unrelated module named goblin shadows the package", allow_module_level=True)

from torch_cases import (D, Scaled as _Scaled, check_backward, check_forward_locally,  # noqa: E402
                         check_forward_on_grid, grid, close, gen as _gen, randn as _x,
                         scatter_index as _scatter_index, targets as _targets)



# name -> (program, example inputs); every input is batched on dim 0 (the grid cuts it)
FORWARD = {
    "pad_constant": (lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), (_x(12, 5, 6),)),
    "pad_reflect": (lambda x: F.pad(x, (2, 1), mode="reflect"), (_x(12, 5, 6),)),
    "pad_reflect_2d": (lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"), (_x(12, 3, 5, 6),)),
    "pad_replicate": (lambda x: F.pad(x, (3, 1), mode="replicate"), (_x(12, 5, 6),)),
    "index_list": (lambda x: x[:, [0, 2]], (_x(12, 5, 6),)),
    "index_last_dim": (lambda x: x[..., [5, 0, 0, -1]], (_x(12, 5, 6),)),
    "index_tensor_2d": (lambda x: x[:, torch.tensor([[1, 2], [4, 0]])], (_x(12, 5, 6),)),
    "cross_entropy_none": (lambda x, t: F.cross_entropy(x, t, reduction="none"), (_x(12, 7), _targets(12, 7))),
    "cross_entropy_none_3d": (lambda x, t: F.cross_entropy(x, t, reduction="none"),
                              (_x(12, 7, 4), torch.randint(0, 7, (12, 4), generator=_gen()))),
    "std_dim": (lambda x: x.std(dim=1), (_x(12, 5, 6),)),
    "std_keepdim_c0": (lambda x: x.std(dim=(1, 2), keepdim=True, correction=0), (_x(12, 5, 6),)),
    "var_dim_c2": (lambda x: x.var(dim=-1, correction=2), (_x(12, 5, 6),)),
    "var_unbiased_false": (lambda x: torch.var(x, 1, unbiased=False), (_x(12, 5, 6),)),
    "var_mean": (lambda x: torch.var_mean(x, dim=2), (_x(12, 5, 6),)),
    "rms_norm": (lambda x: F.rms_norm(x, (6,), eps=1e-5), (_x(12, 5, 6),)),
    "rms_norm_default_eps": (lambda x: F.rms_norm(x, (5, 6)), (_x(12, 5, 6),)),
    "rms_norm_weight": (lambda x: F.rms_norm(x, (6,), torch.linspace(0.5, 2, 6, dtype=D)), (_x(12, 5, 6),)),
    "cumsum": (lambda x: x.cumsum(1), (_x(12, 5, 6),)),
    "cumsum_int": (lambda x: torch.cumsum(x, -1), (torch.randint(-9, 9, (12, 7), generator=_gen()),)),
    "cumsum_int32_to_i64": (lambda x: x.cumsum(1), (torch.randint(-9, 9, (12, 7), generator=_gen(),
                                                                  dtype=torch.int32),)),
    "scatter_add": (lambda x, i, s: x.scatter_add(1, i, s), (_x(12, 5), _scatter_index(12), _x(12, 3))),
    "gather": (lambda x, i: torch.gather(x, 1, i), (_x(12, 5), _scatter_index(12))),
    "conv1d": (lambda x: F.conv1d(x, torch.linspace(-1, 1, 4 * 3 * 3, dtype=D).reshape(4, 3, 3),
                                  torch.tensor([0.1, 0.2, -0.3, 0.0], dtype=D), stride=2, padding=1),
               (_x(12, 3, 9),)),
    "conv1d_groups_dilation": (lambda x: F.conv1d(x, torch.linspace(-1, 1, 4 * 2 * 2, dtype=D).reshape(4, 2, 2),
                                                  dilation=2, groups=2), (_x(12, 4, 9),)),
}


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_forward_locally_matches_torch(name):
    check_forward_locally(name, *FORWARD[name])


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_forward_on_the_grid_matches_torch(grid, name):
    check_forward_on_grid(grid, name, *FORWARD[name])


# name -> (op applied to h = x * W, x's shape, extra batch inputs); W [x.shape[1:]] is the parameter
BACKWARD = {
    "pad_constant": (lambda h: F.pad(h, (1, 2, 0, 1), value=0.5), (8, 5, 6), ()),
    "pad_reflect": (lambda h: F.pad(h, (2, 1), mode="reflect"), (8, 5, 6), ()),
    "pad_replicate": (lambda h: F.pad(h, (3, 1), mode="replicate"), (8, 5, 6), ()),
    "index_list": (lambda h: h[:, [0, 2, 2]], (8, 5, 6), ()),
    "cross_entropy_none": (lambda h, t: F.cross_entropy(h, t, reduction="none"), (8, 7), (_targets(8, 7),)),
    "rms_norm": (lambda h: F.rms_norm(h, (6,), eps=1e-5), (8, 5, 6), ()),
    "gather": (lambda h, i: torch.gather(h, 1, i), (8, 5), (_scatter_index(8),)),
    "conv1d": (lambda h: F.conv1d(h, torch.linspace(-1, 1, 4 * 3 * 3, dtype=D).reshape(4, 3, 3), stride=2,
                                  padding=1), (8, 3, 9), ()),
}


@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_backward_matches_autograd(grid, name):
    check_backward(grid, name, *BACKWARD[name])


@pytest.mark.parametrize("op", ["var", "cumsum", "scatter_add"])
def test_ops_without_a_backward_rule_are_named(op):
    """var, cumsum and scatter_add have forward kernels but no backward rule (yet): training
    through them fails with an error naming the op, not with a wrong gradient."""
    fn = {"var": lambda h: h.var(dim=1), "cumsum": lambda h: h.cumsum(1),
          "scatter_add": lambda h: torch.zeros(4, 3, dtype=D).scatter_add(1, torch.tensor([[0, 1, 1, 2, 0]] * 4), h)}[op]
    model = _Scaled(fn, (5,))
    cap = goblin.capture_training(model, lambda y: y.sum(), _x(4, 5))
    g = cap.graph
    with pytest.raises(goblin.NotSupportedError, match=f"{op}\\): no backward rule"):
        g._g.backward(g.outputs[0].id, [g.inputs[0].id])
