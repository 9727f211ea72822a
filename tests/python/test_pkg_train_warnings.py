"""Training capture says where grid.train computes something else than torch would
(pygoblin/goblin/_capture_train.py): modules left in eval mode whose train mode computes something else (dropout, batch-norm)
are trained in train mode. Dropout in training mode (goblin's dropout op) and batch-norm running
statistics (updated by grid.train) run without a word, and so does a plain model."""
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


def test_training_mode_dropout_says_nothing():
    assert _capture(nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.3), nn.Linear(5, 3))) == []


def test_eval_mode_dropout_warns_that_it_is_trained_in_train_mode():
    m = nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.3), nn.Linear(5, 3)).eval()
    said = _capture(m)
    assert len(said) == 1, said
    assert "eval mode" in said[0] and "(1)" in said[0] and "dropout drops" in said[0], said
    assert "model.train()" in said[0], said
    # p = 0 and a module already in train mode: nothing to say
    m0 = nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.0), nn.Linear(5, 3)).eval()
    assert _capture(m0) == []
    m.train()
    assert _capture(m) == []


def test_eval_mode_batch_norm_warns_too():
    m = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5, track_running_stats=False), nn.Linear(5, 3)).eval()
    said = _capture(m)
    assert len(said) == 1 and "batch's statistics" in said[0] and "(1)" in said[0], said


def test_batch_norm_running_statistics_are_tracked_without_a_word():
    assert _capture(nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 3))) == []


def test_plain_model_and_zero_dropout_say_nothing():
    assert _capture(nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.0), nn.ReLU(), nn.Linear(5, 3))) == []
    assert _capture(nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5, track_running_stats=False),
                                  nn.Linear(5, 3))) == []
