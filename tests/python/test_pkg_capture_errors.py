"""goblin.capture's errors say what the user wrote and what to do instead: one test per
message, asserting its content (the op as the user wrote it, what is supported, the
fix), not only the exception type."""
import numpy as np
import pytest

goblin = pytest.importorskip(
    "goblin", reason="the goblin package is not installed (python3 -m pip install --no-build-isolation .)")
torch = pytest.importorskip("torch", reason="capture needs torch: pip install '.[torch]'")
nn = torch.nn
F = torch.nn.functional
if not hasattr(goblin, "capture"):
    pytest.skip("an unrelated module named goblin shadows the package", allow_module_level=True)


def _message(fn, *ex):
    with pytest.raises(goblin.UnsupportedOpError) as ei:
        goblin.capture(fn, *ex)
    return ei.value, str(ei.value)


def test_conv_transpose3d_names_the_op_and_what_is_supported():
    # (conv3d and conv_transpose1d / 2d are captured: test_pkg_capture_ops2.py)
    e, msg = _message(nn.ConvTranspose3d(2, 3, 2), torch.randn(1, 2, 4, 4, 4))
    assert "F.conv_transpose3d" in msg and "nn.ConvTranspose3d" in msg
    assert "F.conv_transpose2d" in msg and "not a transposed 3-d convolution" in msg
    assert "with these arguments" not in msg
    assert e.ops == ["aten.convolution.default"] and len(e.hints) == 1


def test_conv1d_is_captured_rather_than_refused():
    conv = nn.Conv1d(3, 4, 3, padding=1).double().eval()
    x = torch.randn(2, 3, 10, dtype=torch.float64)
    got = goblin.capture(conv, x)(x)
    with torch.no_grad():
        want = conv(x).numpy()
    assert np.abs(got - want).max() <= 1e-12 * max(1.0, np.abs(want).max())


def test_training_mode_batch_norm_suggests_eval():
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5)).train()
    e, msg = _message(model, torch.randn(8, 4))
    assert "batch-norm in training mode" in msg
    assert "model.eval()" in msg and "grid.train" in msg
    model.eval()
    goblin.capture(model, torch.randn(8, 4))  # the fix the message names works


def test_training_mode_dropout_suggests_eval():
    model = nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.2)).train()
    _, msg = _message(model, torch.randn(8, 4))
    assert "dropout in training mode" in msg and "model.eval()" in msg
    model.eval()
    goblin.capture(model, torch.randn(8, 4))


def test_functional_dropout_in_training_suggests_eval():
    _, msg = _message(lambda x: F.dropout(x, 0.3, training=True), torch.randn(4, 5))
    assert "F.dropout(training=True)" in msg and "model.eval()" in msg


def test_boolean_mask_index_says_how_to_keep_the_shape():
    # several integer index tensors (x[[0, 1], [1, 2]]) are captured: test_pkg_capture_ops2.py
    _, msg = _message(lambda x, m: x[m], torch.randn(4, 5), torch.rand(4, 5) > 0.5)
    assert "aten.index.Tensor" in msg and "static shapes" in msg
    assert "torch.where(mask, x, 0)" in msg


def test_wrong_number_of_inputs_says_expected_and_got():
    g = goblin.capture(lambda x, y: x * y, torch.randn(4, 3), torch.randn(4, 3))
    with pytest.raises(goblin.InvalidArgumentError) as ei:
        g(np.zeros((4, 3), np.float32))
    msg = str(ei.value)
    assert "takes 2 input(s)" in msg and "got 1" in msg and "dim 0" not in msg
    with pytest.raises(goblin.InvalidArgumentError, match=r"takes 2 input\(s\).*got 3"):
        g(*[np.zeros((4, 3), np.float32)] * 3)
    # a shape change other than the batch still says so
    with pytest.raises(goblin.ShapeError, match="only dim 0"):
        g(np.zeros((4, 2), np.float32), np.zeros((4, 2), np.float32))


def test_wrong_number_of_inputs_on_the_grid():
    g = goblin.capture(lambda x, y: x * y, torch.randn(4, 3), torch.randn(4, 3))
    with goblin.connect(workers=1, threads=1) as grid:
        with pytest.raises(goblin.InvalidArgumentError, match=r"takes 2 input\(s\).*got 1"):
            grid.run(g, np.zeros((4, 3), np.float32), progress=False)


def test_circular_pad_and_slice_assignment_say_what_works():
    _, msg = _message(lambda x: F.pad(x, (2, 1), mode="circular"), torch.randn(2, 3, 6))
    assert "aten.slice_scatter" in msg and "F.pad(mode='circular')" in msg
    assert "'constant', 'reflect' and 'replicate'" in msg

    def assign(x):
        y = x.clone()
        y[:, :2] = 0.0
        return y
    _, msg = _message(assign, torch.randn(4, 5))
    assert "slice assignment" in msg and "torch.cat" in msg
