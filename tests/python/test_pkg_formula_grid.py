"""grid.run(goblin.formula(...), a=..., x=...): formulas on the grid by variable name, with
Python numbers broadcast, against NumPy (f64: 1e-14 relative plus the formula contract's
32u absolute; integer formulas exactly)."""
import numpy as np
import pytest

goblin = pytest.importorskip(
    "goblin", reason="the goblin package is not installed (python3 -m pip install --no-build-isolation .)")
if not hasattr(goblin, "connect"):
    pytest.skip("this goblin package has no grid (goblin.connect)", allow_module_level=True)

rng = np.random.default_rng(11)


@pytest.fixture(scope="module")
def grid():
    g = goblin.connect(workers=2, threads=1)
    yield g
    g.close()


def test_formula_by_name_with_scalars_and_arrays(grid):
    f = goblin.formula("a * exp(-b * x) + c")
    x = rng.standard_normal(1000)
    b = rng.uniform(0.1, 2.0, 1000)
    c = rng.standard_normal(1000)
    seen = []
    got = grid.run(f, a=1.5, b=b, x=x, c=c, chunk_rows=100, progress=lambda d, t: seen.append((d, t)))
    want = 1.5 * np.exp(-b * x) + c
    assert got.shape == (1000,) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=32 * 2.0 ** -53)
    assert seen[-1] == (10, 10)  # cut into tasks like any graph
    # positionally (variables in order of first appearance: a, b, x, c), and mixed
    np.testing.assert_allclose(grid.run(f, 1.5, b, x, c, progress=False), want, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(grid.run(f, 1.5, b, c=c, x=x, progress=False), want, rtol=1e-14, atol=1e-15)


def test_broadcast_array_rows_and_numpy_scalars(grid):
    f = goblin.formula("w * x + bias")
    x = rng.standard_normal((64, 5)).astype(np.float32)
    w = rng.standard_normal(5).astype(np.float32)  # one row: sent to every task
    got = grid.run(f, x=x, w=w, bias=np.float32(0.25), chunk_rows=16, progress=False)
    want = w * x + np.float32(0.25)
    assert got.dtype == np.float32 and got.shape == (64, 5)
    np.testing.assert_allclose(got, want, rtol=4 * 2.0 ** -24, atol=2.0 ** -24)


def test_integer_formula_on_the_grid(grid):
    f = goblin.formula("(x // k) * 2 + x % -4")
    x = np.arange(-500, 500, dtype=np.int64)
    got = grid.run(f, x=x, k=3, chunk_rows=128, progress=False)
    np.testing.assert_array_equal(got, (x // 3) * 2 + x % -4)
    with pytest.raises(goblin.DTypeError, match="float 2.5 in an integer"):
        grid.run(f, x=x, k=2.5, progress=False)


def test_a_formula_runs_locally_and_on_the_grid_alike(grid):
    f = goblin.formula("sqrt(x * x + y * y)")
    x, y = rng.standard_normal(300), rng.standard_normal(300)
    want = np.hypot(x, y)
    np.testing.assert_allclose(f(x=x, y=y), want, rtol=1e-15)
    np.testing.assert_allclose(grid.run(f, x=x, y=y, progress=False), want, rtol=1e-15)


def test_formula_argument_errors_on_the_grid(grid):
    f = goblin.formula("a * x")
    x = np.ones(10)
    with pytest.raises(TypeError, match="no variable 'z'"):
        grid.run(f, a=1.0, x=x, z=2.0, progress=False)
    with pytest.raises(TypeError, match="missing a value for a"):
        grid.run(f, x=x, progress=False)
    with pytest.raises(goblin.InvalidArgumentError, match="at least one array"):
        grid.run(f, a=1.0, x=2.0, progress=False)
    with pytest.raises(goblin.DTypeError, match="share one dtype"):
        grid.run(f, a=np.ones(10, np.float32), x=x, progress=False)
    g = goblin.Graph()
    g.output(g.input((10,), "f64") * 2)
    with pytest.raises(TypeError, match="inputs by name are for a goblin.formula"):
        grid.run(g, x, a=1.0, progress=False)
