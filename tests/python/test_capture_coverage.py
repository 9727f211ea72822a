"""docs/pytorch.md is the output of scripts/capture_coverage.py over the capture's op
table, and the table names real ATen ops and exactly what the lowering accepts."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "capture_coverage.py")


def _table():
    spec = importlib.util.spec_from_file_location("_capture_table",
                                                  os.path.join(ROOT, "pygoblin", "goblin", "_capture_table.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_doc_matches_the_script(tmp_path):
    r = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # and --check does fail on a stale file
    stale = tmp_path / "pytorch.md"
    stale.write_text("# old\n")
    r = subprocess.run([sys.executable, SCRIPT, "--check", "--output", str(stale)], capture_output=True, text=True)
    assert r.returncode == 1 and "out of date" in r.stderr


def test_table_rows_name_real_aten_ops_once():
    torch = pytest.importorskip("torch")
    t = _table()
    seen = set()
    for names, how, limits, mode in t.ROWS:
        assert mode in ("both", "inference", "training") and how
        for n in names.split():
            assert n not in seen, f"{n} in two rows"
            seen.add(n)
            assert hasattr(torch.ops.aten, n), f"aten.{n} does not exist"
    for k in t.KEEP + t.TRAIN_KEEP:
        packet, overload = k.split(".")
        assert hasattr(getattr(torch.ops.aten, packet), overload), k


def test_the_lowering_accepts_what_the_table_says():
    goblin = pytest.importorskip("goblin")
    if not hasattr(goblin, "capture"):
        pytest.skip("an unrelated module named goblin shadows the package")
    from goblin import _capture, _capture_table
    t = _table()
    assert _capture._KNOWN == t.INFERENCE == _capture_table.INFERENCE
    # every name the table lists is handled by the lowering's code (a name that reached
    # the table but not _Lowering.lower would fail as 'these arguments have no mapping')
    here = os.path.dirname(_capture.__file__)
    src = "".join(open(os.path.join(here, f)).read() for f in ("_capture.py", "_capture_train.py",
                                                                  "_capture_decomp.py", "_capture_rnn.py"))
    for n in t.INFERENCE | t.TRAINING:
        assert f'"{n}"' in src, f"{n} is in the table but not in the lowering"
