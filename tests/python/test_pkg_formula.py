"""goblin.formula: parsing, syntax errors with positions, use on arrays and in graphs.

Needs the package installed first: python3 -m pip install --no-build-isolation .
"""
import numpy as np
import pytest

goblin = pytest.importorskip(
    "goblin", reason="the goblin package is not installed (python3 -m pip install --no-build-isolation .)")
if not hasattr(goblin, "formula"):
    pytest.skip("an unrelated module named goblin shadows the package", allow_module_level=True)

rng = np.random.default_rng(7)


def test_formula_on_arrays_matches_numpy():
    f = goblin.formula("a * exp(-b * x) + c")
    assert f.variables == ("a", "b", "x", "c")
    x = rng.standard_normal((5, 7)).astype(np.float32)
    a = rng.standard_normal((7,)).astype(np.float32)
    got = f(a=a, b=0.5, x=x, c=1.25)
    want = a * np.exp(np.float32(-0.5) * x) + np.float32(1.25)
    assert got.dtype == np.float32 and got.shape == (5, 7)
    rel, ab = goblin.ops.contract("formula", "f32")
    np.testing.assert_allclose(got, want, rtol=max(rel, 4e-7) * 4, atol=1e-6)
    # positional binding follows first appearance; f64 computes in f64
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(f(2.0, 0.25, x64, -1.0), 2 * np.exp(-0.25 * x64) - 1, rtol=1e-14)


def test_integer_formula_python_semantics():
    f = goblin.formula("(x // 3) * 2 + x % -4 - (x >> 1) ^ 5")
    x = np.arange(-20, 20, dtype=np.int64)
    np.testing.assert_array_equal(f(x=x), (x // 3) * 2 + x % -4 - (x >> 1) ^ 5)


def test_formula_in_a_graph():
    f = goblin.formula("where(x > 0, x, alpha * expm1(x))")
    g = goblin.Graph()
    x = g.input((10,), "f64")
    y = f(x=x, alpha=1.5)
    assert isinstance(y, goblin.Tensor) and y.op == "formula"
    g.output(y, goblin.ops.formula("x * x + 1", x))
    xa = rng.standard_normal(10)
    o1, o2 = g.evaluate(xa)
    np.testing.assert_allclose(o1, np.where(xa > 0, xa, 1.5 * np.expm1(xa)), rtol=1e-14)
    np.testing.assert_allclose(o2, xa * xa + 1, rtol=1e-15)


@pytest.mark.parametrize("text,pos", [("a * (b + ", 9), ("a + * b", 4), ("exp(a", 5), ("a < b < c", None),
                                      ("3 $ a", 2)])
def test_syntax_errors_carry_the_position(text, pos):
    with pytest.raises(goblin.FormulaSyntaxError) as ei:
        goblin.formula(text)
    e = ei.value
    assert e.text == text and isinstance(e.position, int) and e.err_name == "GOBLIN_ESYNTAX"
    if pos is not None:
        assert e.position == pos
    assert 0 <= e.position <= len(text)
    assert str(e)


def test_formula_bad_use():
    f = goblin.formula("a + b")
    with pytest.raises(TypeError, match="missing.*b"):
        f(a=np.ones(2))
    with pytest.raises(TypeError, match="no variable 'z'"):
        f(a=1.0, b=2.0, z=3.0)
    with pytest.raises(goblin.DTypeError, match="one dtype"):
        f(a=np.ones(2, np.float32), b=np.ones(2, np.float64))
    with pytest.raises(TypeError, match="list"):
        f(a=[1, 2], b=np.ones(2))
    with pytest.raises(goblin.ShapeError):
        f(a=np.ones(3), b=np.ones(4))
    with pytest.raises(goblin.GoblinError):
        goblin.formula("exp(k)")(k=np.arange(3))  # float-only function on integers
    with pytest.raises(goblin.GoblinError):
        goblin.formula("1 + 2")  # no variable
