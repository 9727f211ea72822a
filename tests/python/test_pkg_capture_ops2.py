"""goblin.capture of the common torch ops that capture decomposes into catalogue ops
(_capture_decomp.py): the activations elu / selu / leaky_relu / hardtanh / relu6 (and the
ones torch decomposes itself: celu, softplus, mish, hardswish, ...), flip, roll, repeat,
one_hot, vector_norm (F.normalize, F.cosine_similarity), group_norm, instance_norm, max / min with dim
(values and indices), topk, sort / argsort, bucketize / searchsorted, cdist, interpolate
(nearest, nearest-exact, bilinear, linear), adaptive_max_pool2d and
conv3d, conv_transpose1d / conv_transpose2d, fold and embedding_bag (bags of one size);
and the errors for what stays unsupported.

As in test_pkg_capture_ops.py, each op is checked against PyTorch in f64 (integer
outputs exactly): forward locally and on an embedded grid (the batch cut into chunks),
backward (a training capture, goblin_graph_backward against torch.autograd) locally and
on the grid. Tolerance 1e-10 relative to the largest entry: f64 with a few dozen terms
per result, the reference in f64 too, so only the order of the arithmetic differs.
"""
import numpy as np
import pytest

goblin = pytest.importorskip(
    "goblin", reason="the goblin package is not installed (python3 -m pip install --no-build-isolation .)")
torch = pytest.importorskip("torch", reason="capture needs torch: pip install '.[torch]'")
F = torch.nn.functional
if not hasattr(goblin, "capture"):
    pytest.skip("an unrelated module named goblin shadows the package", allow_module_level=True)

from torch_cases import (D, check_backward, check_forward_locally, check_forward_on_grid, grid,  # noqa: E402
                         close, gen as _gen, randn as _x, targets as _targets)




def _w(*shape):
    return torch.linspace(-1, 1, int(np.prod(shape)), dtype=D).reshape(shape)


def _distinct(*shape):
    """Values without ties (sort and topk orders are then unique), shuffled."""
    n = int(np.prod(shape))
    p = torch.randperm(n, generator=_gen())
    return (p.to(D) / n - 0.5 + 0.001 * _x(n)).reshape(shape)


def _bags(b, n):
    return torch.randint(0, 9, (b, n), generator=_gen())


EMB = _w(9, 5) * 3
GN_W, GN_B = torch.linspace(0.5, 1.5, 6, dtype=D), torch.linspace(-0.3, 0.3, 6, dtype=D)
BOUNDS = torch.tensor([-1.0, -0.25, 0.0, 0.5, 1.0], dtype=D)

# name -> (program, example inputs); every input is batched on dim 0 (the grid cuts it)
FORWARD = {
    "elu": (lambda x: F.elu(x, alpha=0.7), (_x(12, 5, 6) * 3,)),
    "selu": (F.selu, (_x(12, 5, 6) * 3,)),
    "celu": (lambda x: F.celu(x, 0.6), (_x(12, 5, 6),)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), (_x(12, 5, 6),)),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 0.7), (_x(12, 5, 6),)),
    "relu6": (lambda x: F.relu6(x), (_x(12, 5, 6) * 5,)),
    "softplus": (lambda x: F.softplus(x, beta=2.0, threshold=3.0), (_x(12, 5, 6) * 3,)),
    "mish_hardswish": (lambda x: F.mish(x) + F.hardswish(x) + F.hardsigmoid(x), (_x(12, 5, 6) * 3,)),
    "flip": (lambda x: x.flip(1), (_x(12, 5, 6),)),
    "flip_2dims": (lambda x: torch.flip(x, (1, -1)), (_x(12, 5, 6),)),
    "roll": (lambda x: x.roll(2, 1), (_x(12, 5, 6),)),
    "roll_2dims": (lambda x: torch.roll(x, (-1, 3), (1, 2)), (_x(12, 5, 6),)),
    "repeat": (lambda x: x.repeat(1, 2, 3), (_x(12, 5, 6),)),
    "repeat_new_dims": (lambda x: x.repeat(1, 2, 1, 3)[:, :, :, :4], (_x(12, 5, 6),)),
    "tile": (lambda x: torch.tile(x, (2, 2)), (_x(12, 5, 6),)),
    "one_hot": (lambda t: F.one_hot(t, 7), (_targets(12, 7),)),
    "one_hot_2d": (lambda t: F.one_hot(t, 5), (torch.randint(0, 5, (12, 3), generator=_gen()),)),
    "normalize": (lambda x: F.normalize(x, dim=-1), (_x(12, 5, 6),)),
    "normalize_p1": (lambda x: F.normalize(x, p=1.0, dim=1), (_x(12, 5, 6),)),
    "cosine_similarity": (lambda a, b: F.cosine_similarity(a, b, dim=-1), (_x(12, 5, 6), _x(12, 5, 6).flip(0))),
    "vector_norm_p3": (lambda x: torch.linalg.vector_norm(x, 3, dim=(1, 2)), (_x(12, 5, 6),)),
    "vector_norm_inf": (lambda x: torch.linalg.vector_norm(x, float("inf"), dim=-1, keepdim=True),
                        (_x(12, 5, 6),)),
    "norm_method": (lambda x: x.norm(dim=1) + x.norm(p=1, dim=1), (_x(12, 5, 6),)),
    "group_norm": (lambda x: F.group_norm(x, 3, GN_W, GN_B, eps=1e-4), (_x(12, 6, 4, 5),)),
    "group_norm_module": (torch.nn.GroupNorm(2, 6).double(), (_x(12, 6, 7),)),
    "instance_norm": (lambda x: F.instance_norm(x, eps=1e-4), (_x(12, 3, 4, 5),)),
    "instance_norm_affine": (torch.nn.InstanceNorm2d(3, affine=True).double(), (_x(12, 3, 4, 5),)),
    "instance_norm_1d": (lambda x: F.instance_norm(x, weight=GN_W, bias=GN_B), (_x(12, 6, 7),)),
    "max_dim": (lambda x: x.max(dim=1), (_x(12, 5, 6),)),
    "min_dim_keepdim": (lambda x: torch.min(x, -1, keepdim=True), (_x(12, 5, 6),)),
    "max_int": (lambda x: x.max(2), (torch.randint(-9, 9, (12, 5, 6), generator=_gen()),)),
    "max_binary": (lambda x: torch.max(x[:, 1:], x[:, :-1]) + torch.min(x[:, 1:], x[:, :-1]), (_x(12, 5, 6),)),
    "max_whole": (lambda x: x.max() - x.min(), (_x(12, 5, 6),)),
    "topk": (lambda x: x.topk(3, dim=-1), (_distinct(12, 5, 6),)),
    "topk_smallest_dim1": (lambda x: torch.topk(x, 2, dim=1, largest=False), (_distinct(12, 5, 6),)),
    "sort": (lambda x: x.sort(dim=1), (_distinct(12, 5, 6),)),
    "sort_descending": (lambda x: torch.sort(x, dim=-1, descending=True), (_distinct(12, 5, 6),)),
    "sort_stable_ties": (lambda x: torch.sort(x, dim=-1, stable=True), (torch.randint(0, 3, (12, 9), generator=_gen()),)),
    "sort_nan": (lambda x: torch.sort(x, dim=-1, stable=True, descending=True),
                 (torch.where(_x(12, 7) > 1, torch.nan, _x(12, 7)),)),
    "argsort": (lambda x: x.argsort(dim=-1, descending=True), (_distinct(12, 5, 6),)),
    "bucketize": (lambda x: torch.bucketize(x, BOUNDS), (torch.cat([_x(12, 5), BOUNDS.expand(12, 5)], 1),)),
    "bucketize_right_i32": (lambda x: torch.bucketize(x, BOUNDS, right=True, out_int32=True),
                            (torch.cat([_x(12, 5), BOUNDS.expand(12, 5)], 1),)),
    "bucketize_nan": (lambda x: torch.bucketize(x, BOUNDS), (torch.where(_x(12, 7) > 1, torch.nan, _x(12, 7)),)),
    "searchsorted": (lambda x: torch.searchsorted(BOUNDS, x, side="right"), (_x(12, 5),)),
    "searchsorted_rows": (lambda s, x: torch.searchsorted(s, x), (_x(12, 6).sort(-1).values, _x(12, 4))),
    "cdist": (lambda a: torch.cdist(a, _w(4, 6) * 2), (_x(12, 5, 6),)),
    "cdist_p1": (lambda a, b: torch.cdist(a, b, p=1), (_x(12, 5, 6), _x(12, 3, 6) + 1)),
    "interpolate_nearest": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (_x(12, 3, 4, 5),)),
    "interpolate_nearest_size": (lambda x: F.interpolate(x, size=(7, 3), mode="nearest"), (_x(12, 3, 4, 5),)),
    "interpolate_nearest_exact": (lambda x: F.interpolate(x, size=(7, 8), mode="nearest-exact"), (_x(12, 3, 4, 5),)),
    "interpolate_nearest_1d": (lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"), (_x(12, 3, 6),)),
    "interpolate_bilinear": (lambda x: F.interpolate(x, size=(7, 9), mode="bilinear"), (_x(12, 3, 4, 5),)),
    "interpolate_bilinear_scale": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (_x(12, 3, 4, 5),)),
    "interpolate_bilinear_align": (lambda x: F.interpolate(x, size=(7, 3), mode="bilinear", align_corners=True),
                                   (_x(12, 3, 4, 5),)),
    "interpolate_linear": (lambda x: F.interpolate(x, size=11, mode="linear"), (_x(12, 3, 6),)),
    "upsample_module": (torch.nn.Upsample(scale_factor=2), (_x(12, 3, 4, 5),)),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (2, 3)), (_x(12, 3, 4, 6),)),
    "adaptive_max_pool2d_uneven": (lambda x: F.adaptive_max_pool2d(x, (3, 4)), (_x(12, 3, 5, 7),)),
    "adaptive_max_pool2d_module": (torch.nn.AdaptiveMaxPool2d((None, 2)), (_x(12, 3, 5, 7),)),
    "conv_transpose2d": (lambda x: F.conv_transpose2d(x, _w(4, 3, 3, 3), _w(3), stride=2, padding=1),
                         (_x(12, 4, 5, 6),)),
    "conv_transpose2d_all": (lambda x: F.conv_transpose2d(x, _w(4, 3, 3, 2), stride=(2, 3), padding=(1, 0),
                                                          output_padding=(1, 2), groups=2, dilation=(1, 2)),
                             (_x(12, 4, 5, 6),)),
    "conv_transpose2d_big_padding": (lambda x: F.conv_transpose2d(x, _w(4, 2, 2, 2), padding=2),
                                     (_x(12, 4, 6, 7),)),
    "unfold": (lambda x: F.unfold(x, (2, 3), padding=1, stride=(1, 2)), (_x(12, 3, 5, 6),)),
    "index_two_tensors": (lambda x: x[:, torch.tensor([[0, 4], [1, 1]]), torch.tensor([5, -1])], (_x(12, 5, 6),)),
    "index_separated": (lambda x: x[:, torch.tensor([0, 4, 2]), :, torch.tensor([1, 0, 3])], (_x(12, 5, 3, 4),)),
    "conv3d": (lambda x: F.conv3d(x, _w(4, 3, 2, 3, 2), _w(4)), (_x(12, 3, 4, 5, 6),)),
    "conv3d_all": (lambda x: F.conv3d(x, _w(4, 1, 3, 2, 2), stride=(2, 1, 2), padding=(1, 1, 0), dilation=(1, 2, 1),
                                      groups=2), (_x(12, 2, 5, 5, 6),)),
    "conv3d_module": (torch.nn.Conv3d(2, 3, 3, padding=1).double(), (_x(12, 2, 4, 4, 4),)),
    "fold": (lambda x: F.fold(x, (4, 5), 2), (_x(12, 3 * 4, 12),)),
    "fold_all": (lambda x: F.fold(x, (6, 7), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), (_x(12, 2 * 6, 20),)),
    "fold_of_unfold": (lambda x: F.fold(F.unfold(x, 3, padding=1), (5, 6), 3, padding=1), (_x(12, 2, 5, 6),)),
    "embedding_bag_mean": (lambda i: F.embedding_bag(i, EMB), (_bags(12, 4),)),
    "embedding_bag_sum_weighted": (lambda i, p: F.embedding_bag(i, EMB, mode="sum", per_sample_weights=p),
                                   (_bags(12, 4), _x(12, 4))),
    "embedding_bag_max": (lambda i: F.embedding_bag(i, EMB, mode="max"), (_bags(12, 3),)),
    "embedding_bag_module": (torch.nn.EmbeddingBag(9, 5, mode="sum").double(), (_bags(12, 3),)),
    "conv_transpose1d": (lambda x: F.conv_transpose1d(x, _w(4, 2, 3), stride=2), (_x(12, 4, 9),)),
}
# programs whose result is not a row-wise function of the batch: checked locally only
LOCAL_ONLY = {"max_whole",  # a reduction over the batch
              "index_separated",  # torch puts the index dims first, the batch second
              "repeat_new_dims"}  # a new leading dim: the batch is dim 1 of the result


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_forward_locally_matches_torch(name):
    check_forward_locally(name, *FORWARD[name])


@pytest.mark.parametrize("name", sorted(set(FORWARD) - LOCAL_ONLY))
def test_forward_on_the_grid_matches_torch(grid, name):
    check_forward_on_grid(grid, name, *FORWARD[name])


# name -> (op applied to h = x * W, x's shape, extra batch inputs); W [x.shape[1:]] is the parameter
BACKWARD = {
    "elu": (lambda h: F.elu(h * 3, alpha=0.7), (8, 5, 6), ()),
    "selu": (lambda h: F.selu(h * 3), (8, 5, 6), ()),
    "leaky_relu": (lambda h: F.leaky_relu(h, 0.2), (8, 5, 6), ()),
    "hardtanh": (lambda h: F.hardtanh(h, -0.5, 0.7), (8, 5, 6), ()),
    "relu6": (lambda h: F.relu6(h * 5), (8, 5, 6), ()),
    "flip": (lambda h: h.flip(1, 2), (8, 5, 6), ()),
    "roll": (lambda h: h.roll(2, 2), (8, 5, 6), ()),
    "repeat": (lambda h: h.repeat(1, 2, 3), (8, 5, 6), ()),
    "normalize": (lambda h: F.normalize(h, dim=-1), (8, 5, 6), ()),
    "cosine_similarity": (lambda h, b: F.cosine_similarity(h, b, dim=-1), (8, 5, 6), (_x(8, 5, 6).flip(0),)),
    "vector_norm_p3": (lambda h: torch.linalg.vector_norm(h, 3, dim=2), (8, 5, 6), ()),
    "group_norm": (lambda h: F.group_norm(h, 3, GN_W, GN_B), (8, 6, 4, 5), ()),
    "instance_norm": (lambda h: F.instance_norm(h, weight=GN_W, bias=GN_B), (8, 6, 4, 5), ()),
    "max_dim": (lambda h: h.max(dim=1).values, (8, 5, 6), ()),
    "topk": (lambda h: h.topk(3, dim=-1).values, (8, 5, 6), ()),
    "sort": (lambda h: h.sort(dim=1).values, (8, 5, 6), ()),
    "cdist": (lambda h: torch.cdist(h, _w(4, 6) * 2), (8, 5, 6), ()),
    "interpolate_nearest": (lambda h: F.interpolate(h, scale_factor=2, mode="nearest"), (8, 3, 4, 5), ()),
    "interpolate_bilinear": (lambda h: F.interpolate(h, size=(7, 9), mode="bilinear"), (8, 3, 4, 5), ()),
    "adaptive_max_pool2d": (lambda h: F.adaptive_max_pool2d(h, (2, 3)), (8, 3, 4, 6), ()),
    "adaptive_max_pool2d_uneven": (lambda h: F.adaptive_max_pool2d(h, (3, 4)), (8, 3, 5, 7), ()),
    "unfold": (lambda h: F.unfold(h, 2, stride=2), (8, 3, 4, 6), ()),
    "index_two_tensors": (lambda h: h[:, torch.tensor([[0, 4], [1, 1]]), torch.tensor([5, -1])], (8, 5, 6), ()),
    "conv3d": (lambda h: F.conv3d(h, _w(4, 3, 2, 3, 2), stride=(2, 1, 1), padding=(1, 0, 1)), (8, 3, 4, 5, 6), ()),
    "fold": (lambda h: F.fold(h, (6, 7), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), (8, 2 * 6, 20), ()),
    "embedding_bag_weighted": (lambda h, i: F.embedding_bag(i, EMB, mode="sum", per_sample_weights=h), (8, 4),
                               (_bags(8, 4),)),
    "conv_transpose2d": (lambda h: F.conv_transpose2d(h, _w(4, 3, 3, 3), _w(3), stride=2, padding=1,
                                                      output_padding=1), (8, 4, 5, 6), ()),
}


@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_backward_matches_autograd(grid, name):
    check_backward(grid, name, *BACKWARD[name])




def _refused(fn, *ex):
    with pytest.raises(goblin.NotSupportedError) as e:
        goblin.capture(fn, *ex)
    return str(e.value)


def test_boolean_mask_selection_is_refused_with_advice():
    """x[x > 0] has a shape that depends on the data: refused before lowering, naming the op
    and saying how to keep the shape static."""
    msg = _refused(lambda x: x[x > 0].sum(), _x(4, 5))
    assert "aten.index.Tensor" in msg and "depends on the data" in msg and "torch.where(mask, x, 0)" in msg, msg
    msg = _refused(lambda x: torch.nonzero(x > 0), _x(4, 5))
    assert "aten.nonzero" in msg and "static shapes" in msg, msg


def test_unsupported_variants_name_the_op_and_the_alternative():
    msg = _refused(lambda x: F.adaptive_max_pool2d(x, 3), _x(3, 5, 5))
    assert "aten.adaptive_max_pool2d" in msg and "4-D input" in msg, msg
    msg = _refused(lambda i, o: F.embedding_bag(i, EMB, o), torch.tensor([1, 2, 4, 5, 3]), torch.tensor([0, 2]))
    assert "embedding_bag" in msg and "2-D input" in msg, msg
    msg = _refused(lambda x: F.conv_transpose3d(x, _w(3, 2, 1, 2, 2)), _x(2, 3, 4, 5, 5))
    assert "F.conv_transpose3d" in msg and "F.conv3d" in msg, msg
