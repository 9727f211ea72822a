"""Training capture says where grid.train computes something else than torch in train
mode (pygoblin/goblin/_capture_train.py): dropout is off on the grid, batch-norm running
statistics are not updated. A model without either captures without a word."""
import warnings

import pytest

goblin = pytest.importorskip("goblin")
torch = pytest.importorskip("torch")

nn = torch.nn
F = torch.nn.functional


def _ours(record):
    return [str(w.message) for w in record if "goblin.capture_training" in str(w.message)]


def _capture(model):
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        goblin.capture_training(model, F.cross_entropy, x, y)
    return _ours(rec)


def test_training_mode_dropout_warns_that_it_is_off():
    said = _capture(nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.3), nn.Linear(5, 3)))
    assert len(said) == 1, said
    assert "p=0.3" in said[0] and "off on the grid" in said[0] and ".eval()" in said[0], said


def test_batch_norm_running_statistics_warn_that_they_are_not_updated():
    said = _capture(nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 3)))
    assert len(said) == 1, said
    assert "1 batch-norm module(s)" in said[0] and "running_mean" in said[0], said


def test_plain_model_and_zero_dropout_say_nothing():
    assert _capture(nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.0), nn.ReLU(), nn.Linear(5, 3))) == []
    assert _capture(nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5, track_running_stats=False),
                                  nn.Linear(5, 3))) == []
