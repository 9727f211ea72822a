"""Progress displays of grid jobs (goblin/_progress.py) on captured streams, and the
'progress' extra's metadata. No assertion depends on timing: a job's start time is
moved back instead of waiting."""
import importlib.metadata
import io
import os
import sys

import pytest

goblin = pytest.importorskip(
    "goblin", reason="the goblin package is not installed (python3 -m pip install --no-build-isolation .)")
if not hasattr(goblin, "connect"):
    pytest.skip("this goblin package has no grid (goblin.connect)", allow_module_level=True)
from goblin import _progress  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def no_tqdm(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # the import fails: the plain line


def _finished(p):
    p.close()
    if p._thread is not None:
        p._thread.join(60)
        assert not p._thread.is_alive(), "the ticker thread outlived close()"


def test_plain_final_line_stays_with_the_elapsed_time(no_tqdm):
    out = io.StringIO()  # a log file: whole lines
    p = _progress.Progress(True, "goblin run", stream=out)
    assert p.bar is None and p.callback is not None
    p.t0 -= 75  # as if the job had been running for 75 s
    p.callback(3, 12)
    p.callback(12, 12)
    _finished(p)
    lines = out.getvalue().splitlines(keepends=True)
    assert lines[0].startswith("goblin run: 3/12 tasks (25%), 1 min 15 s")
    assert lines[-1].startswith("goblin run: 12/12 tasks (100%) in 1 min 1") and lines[-1].endswith(" s\n")
    assert "\r" not in out.getvalue()


def test_plain_terminal_line_is_rewritten_then_left_on_screen(no_tqdm):
    out = _Tty()
    p = _progress.Progress(True, "goblin matmul", stream=out)
    p.t0 -= 3
    p.callback(100, 1000)
    p.last_print -= 1  # the next update is due
    p.callback(1000, 1000)
    _finished(p)
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1  # one line, kept (not erased)
    final = text.rsplit("\r", 1)[-1]
    assert final.startswith("goblin matmul: 1000/1000 tasks (100%) in 3.") and final.rstrip().endswith(" s")
    assert text.startswith("goblin matmul: 100/1000 tasks (10%), 3.")


def test_stopped_job_says_so(no_tqdm):
    out = io.StringIO()
    p = _progress.Progress(True, "goblin run", stream=out)
    p.t0 -= 20
    p.callback(5, 8)
    _finished(p)
    assert out.getvalue().splitlines()[-1].startswith("goblin run: 5/8 tasks (62%), stopped after 20.")


def test_short_job_shows_nothing_and_off_shows_nothing(no_tqdm):
    out = io.StringIO()
    p = _progress.Progress(True, "goblin run", stream=out)
    p.t0 += 3600  # started "now" for the next hour: under the display delay
    p.callback(1, 1)
    _finished(p)
    assert out.getvalue() == ""
    assert _progress.Progress(False, "x").callback is None
    seen = []
    q = _progress.Progress(lambda d, t: seen.append((d, t)), "x")
    q.callback(2, 4)
    q.close()
    assert seen == [(2, 4)] and q._thread is None  # a user callable gets the counts, no ticker


def test_tqdm_bar_is_left_with_its_elapsed_time():
    pytest.importorskip("tqdm")
    out = io.StringIO()
    p = _progress.Progress(True, "goblin run", stream=out)
    assert p.bar is not None
    p.bar.start_t -= 5  # past tqdm's display delay
    p.bar.last_print_t -= 5
    p.t0 -= 5
    p.callback(6, 12)
    p.callback(12, 12)
    _finished(p)
    text = out.getvalue()
    final = text.rstrip("\n").rsplit("\r", 1)[-1]
    assert text.endswith("\n"), repr(text)  # leave=True: the bar is not erased
    assert "goblin run" in final and "12/12" in final and "00:0" in final, repr(final)


def test_format_seconds():
    assert _progress.format_seconds(0.44) == "0.4 s"
    assert _progress.format_seconds(59.94) == "59.9 s"
    assert _progress.format_seconds(125) == "2 min 05 s"
    assert _progress.format_seconds(3720) == "1 h 02 min"


def test_progress_extra_brings_notebook_widgets():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        meta = tomllib.load(f)
    extra = meta["project"]["optional-dependencies"]["progress"]
    names = {r.split(">")[0].split("=")[0].split("<")[0].strip() for r in extra}
    assert {"tqdm", "ipywidgets"} <= names, extra


def test_installed_metadata_declares_the_progress_extra():
    try:
        dist = importlib.metadata.distribution("goblin")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("goblin is importable but not pip-installed (no metadata)")
    assert "progress" in (dist.metadata.get_all("Provides-Extra") or [])
    reqs = [r.replace(" ", "") for r in dist.requires or []]
    for name in ("tqdm", "ipywidgets"):
        assert any(r.startswith(name) and 'extra=="progress"' in r for r in reqs), reqs


def test_training_plain_progress_ends_with_a_summary_line(no_tqdm, capsys):
    from goblin import _train
    bar = _train._Bar(True, 3)
    bar.t0 -= 12
    for r, loss in enumerate((2.0, 1.5, 1.25)):
        bar.round({"round": r, "loss": loss, "seconds": 4.0})
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "goblin train: round 1/3 loss 2.0000 (4.00 s)"
    assert lines[-1].startswith("goblin train: 3 round(s) in 12.") and lines[-1].endswith("last loss 1.2500")
