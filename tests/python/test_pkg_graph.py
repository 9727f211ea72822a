"""The installed `goblin` package: graph builder, tensor operators, catalogue
queries, local evaluation and bad input, compared with NumPy.

Needs the package installed first (scripts/test.sh does it):
    python3 -m pip install --no-build-isolation .
"""
import numpy as np
import pytest

goblin = pytest.importorskip(
    "goblin", reason="the goblin package is not installed (python3 -m pip install --no-build-isolation .)")
if not hasattr(goblin, "Graph"):
    pytest.skip("an unrelated module named goblin shadows the package", allow_module_level=True)

BACKENDS = [b for b in ("ref", "blis") if b in goblin.backends()]
rng = np.random.default_rng(1234)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_operators_match_numpy(backend):
    g = goblin.Graph()
    x = g.input((3, 4), "f32")
    y = g.input((4,), "f32")
    g.output(x * 2 + y, x - y / 4, 1.5 - x, -x, abs(x), x ** 2, x @ x.T, (x > y), (x == x), x.T,
             x.sum(1), x.mean(), x.max(0, keepdim=True), goblin.ops.exp(x), x.relu())
    xa, ya = f32(3, 4), f32(4)
    outs = g.evaluate(xa, ya, backend=backend)
    refs = [xa * 2 + ya, xa - ya / 4, 1.5 - xa, -xa, np.abs(xa), xa ** 2, xa @ xa.T, xa > ya,
            np.ones((3, 4), bool), xa.T, xa.sum(1), xa.mean(), xa.max(0, keepdims=True), np.exp(xa),
            np.maximum(xa, 0)]
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert o.dtype == np.asarray(r).dtype
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_operators_python_semantics(backend):
    g = goblin.Graph()
    a = g.input((40,), "i32")
    b = g.input((40,), "i32")
    g.output(a // b, a % b, a // -3, a % -3, a & b, a | 0xF0, a ^ b, ~a, a << 2, a >> 1, a * 3 - 7)
    aa = rng.integers(-1000, 1000, 40, dtype=np.int32)
    bb = rng.integers(-9, 10, 40, dtype=np.int32)
    bb[bb == 0] = 5
    outs = g.evaluate(aa, bb, backend=backend)
    refs = [aa // bb, aa % bb, aa // -3, aa % -3, aa & bb, aa | 0xF0, aa ^ bb, ~aa, aa << 2, aa >> 1, aa * 3 - 7]
    for o, r in zip(outs, refs):
        np.testing.assert_array_equal(o, r)


def test_scalar_constants_take_the_tensor_dtype():
    g = goblin.Graph()
    x = g.input((5,), "i64")
    y = x * 2
    assert y.dtype == "i64"
    z = g.input((5,), "f64")
    assert (z + 1).dtype == "f64"
    with pytest.raises(goblin.DTypeError, match="not representable"):
        x * 0.5
    with pytest.raises(goblin.RangeError):
        g.input((2,), "i8") + 300


def test_indexing_matches_numpy():
    g = goblin.Graph()
    x = g.input((4, 5, 6), "f64")
    keys = [1, -1, (slice(1, 3),), (Ellipsis, 2), (None, 1, slice(None, None, 2)), (slice(None), None, 3),
            (2, slice(1, 5, 3), -2), (slice(10, 20),)]
    for k in keys:
        g.output(x[k])
    xa = rng.standard_normal((4, 5, 6))
    for k, o in zip(keys, g.evaluate(xa)):
        np.testing.assert_array_equal(o, xa[k])
    with pytest.raises(IndexError):
        x[4]
    with pytest.raises(IndexError):
        x[:, ::-1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_noncontiguous_and_negative_strides(backend):
    g = goblin.Graph()
    x = g.input((4, 3), "f32")
    g.output(x * 3 + 1)
    base = f32(8, 6)
    for view in (base[::2, ::2], base[::-2, 1::2], np.asfortranarray(base[:4, :3]), base[:3, :4].T):
        (o,) = g.evaluate(view, backend=backend)
        np.testing.assert_allclose(o, view * 3 + 1, rtol=1e-6)
    swapped = base[:4, :3].astype(">f4")  # big-endian: converted, not misread
    (o,) = g.evaluate(swapped, backend=backend)
    np.testing.assert_allclose(o, base[:4, :3] * 3 + 1, rtol=1e-6)


def test_empty_and_scalar_tensors():
    g = goblin.Graph()
    x = g.input((0, 3), "f32")
    s = g.input((), "f32")
    g.output(x + s, x.sum(0), s * 2)
    a, b, c = g.evaluate(np.zeros((0, 3), np.float32), np.float32(2.5) * np.ones((), np.float32))
    assert a.shape == (0, 3) and b.shape == (3,) and c.shape == ()
    np.testing.assert_array_equal(b, np.zeros(3, np.float32))
    assert c == 5.0


def test_bf16_takes_and_returns_float32():
    g = goblin.Graph()
    x = g.input((6,), "bf16")
    g.output(x * 2)
    xa = np.array([1.0, 1.00390625, 3.14159, -2.5e-3, np.inf, np.nan], np.float32)
    (o,) = g.evaluate(xa)
    assert o.dtype == np.float32
    bits = xa.view(np.uint32)
    rounded = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    rounded = np.where(np.isnan(xa), np.nan, rounded)
    np.testing.assert_array_equal(o, rounded * 2)


def test_ops_module_covers_the_catalogue():
    names = goblin.ops.catalog()
    assert len(names) >= 45 and "matmul" in names and "formula" in names
    for n in names:
        fn = getattr(goblin.ops, n)
        assert callable(fn) and fn.__doc__
    info = goblin.ops.info("softmax")
    assert ("axis", "int") in [tuple(a) for a in info["attrs"]]
    rel, ab = goblin.ops.contract("matmul", "f32", 1024)
    assert 0 < rel < 1e-3
    assert goblin.ops.contract("add", "i32") == (0.0, 0.0)


def test_ops_with_attributes_and_creation():
    g = goblin.Graph()
    x = g.input((2, 3, 4), "f32")
    g.output(goblin.ops.softmax(x, axis=2), goblin.ops.sum(x, axes=[0, 2], keepdim=1),
             goblin.ops.permute(x, perm=[2, 0, 1]), goblin.ops.full(graph=g, shape=[2, 2], dtype="i32", value=7),
             goblin.ops.arange(graph=g, shape=[5], dtype="f32", start=1.0, step=0.5),
             goblin.ops.cast(x, dtype="i32"), x.exp().sum(axis=[1]))
    xa = f32(2, 3, 4) * 3
    sm, s, p, full, ar, c, es = g.evaluate(xa)
    e = np.exp(xa - xa.max(2, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(2, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(s, xa.sum((0, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(p, xa.transpose(2, 0, 1))
    np.testing.assert_array_equal(full, np.full((2, 2), 7, np.int32))
    np.testing.assert_allclose(ar, 1 + 0.5 * np.arange(5))
    np.testing.assert_array_equal(c, np.trunc(xa).astype(np.int32))
    np.testing.assert_allclose(es, np.exp(xa).sum(1), rtol=1e-5)


def test_serialize_roundtrip_and_node_info():
    g = goblin.Graph()
    x = g.input((3,), "f32")
    c = g.constant(np.array([1.0, 2.0, 3.0], np.float32))
    g.output(x * c)
    data = g.serialize()
    h = goblin.Graph.deserialize(data)
    assert len(h) == len(g) == 3
    n = h.node(2)
    assert (n.op, n.dtype, n.shape, n.inputs) == ("mul", "f32", (3,), (0, 1))
    xa = f32(3)
    np.testing.assert_array_equal(h.evaluate(xa)[0], xa * np.array([1, 2, 3], np.float32))
    with pytest.raises(goblin.GoblinError):
        goblin.Graph.deserialize(data[: len(data) // 2])
    with pytest.raises(goblin.GoblinError):
        goblin.Graph.deserialize(b"not a graph at all")


def test_bad_input_gives_clear_exceptions():
    g = goblin.Graph()
    x = g.input((2, 3), "f32")
    g.output(x + 1)
    with pytest.raises(goblin.DTypeError, match="input 0.*f32.*float64"):
        g.evaluate(np.zeros((2, 3)))
    with pytest.raises(TypeError):  # DTypeError is a TypeError too
        g.evaluate(np.zeros((2, 3), np.int32))
    with pytest.raises(goblin.ShapeError, match=r"\(2, 3\).*\(3, 2\)"):
        g.evaluate(np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match="numpy.ndarray.*list"):
        g.evaluate([[0.0] * 3] * 2)
    with pytest.raises(goblin.InvalidArgumentError, match="1 input"):
        g.evaluate()
    with pytest.raises(ValueError, match="backend"):
        g.evaluate(np.zeros((2, 3), np.float32), backend="quantum")
    with pytest.raises(goblin.InvalidArgumentError, match="frobnicate"):
        g.op("frobnicate", x)
    with pytest.raises(goblin.InvalidArgumentError, match="bogus"):
        goblin.ops.softmax(x, bogus=1)
    with pytest.raises(goblin.GoblinError, match="softmax"):
        goblin.ops.softmax(x, axis=7)
    with pytest.raises(goblin.DTypeError, match="cast"):
        x + g.input((2, 3), "i32")
    with pytest.raises(goblin.ShapeError, match="broadcast"):
        x + g.input((4,), "f32")
    with pytest.raises(TypeError):
        goblin.ops.sum(x, axes="not ints")
    with pytest.raises(ValueError, match="different graphs"):
        x + goblin.Graph().input((2, 3), "f32")
    with pytest.raises(TypeError):
        g.input((2,), "complex128")
    with pytest.raises(TypeError):
        g.constant(np.array([object()]))
    with pytest.raises(TypeError, match="truth value"):
        bool(x)
    e = pytest.raises(goblin.GoblinError, g.op, "matmul", x, x).value
    assert e.err_name == "GOBLIN_ESHAPE" and e.code == 3


def test_graph_without_outputs_and_error_families():
    g = goblin.Graph()
    g.input((1,), "f32")
    with pytest.raises(goblin.InvalidArgumentError, match="no outputs"):
        g.evaluate(np.zeros(1, np.float32))
    assert issubclass(goblin.ShapeError, goblin.GoblinError) and issubclass(goblin.ShapeError, ValueError)
    assert issubclass(goblin.GoblinIndexError, IndexError)


def test_data_dependent_error_is_raised_not_crashed():
    g = goblin.Graph()
    w = g.constant(np.eye(4, dtype=np.float32))
    i = g.input((3,), "i64")
    g.output(goblin.ops.embedding(w, i))
    with pytest.raises(goblin.GoblinIndexError):
        g.evaluate(np.array([0, 9, 1], np.int64))
    np.testing.assert_array_equal(g.evaluate(np.array([3, 0, 1], np.int64))[0], np.eye(4, dtype=np.float32)[[3, 0, 1]])


def test_evaluate_releases_the_gil_and_blocks_mutation():
    import threading
    g = goblin.Graph()
    x = g.input((128, 128), "f64")
    y = x
    for _ in range(20):
        y = goblin.ops.matmul(y, x) * 1e-3
    g.output(y)
    xa = rng.standard_normal((128, 128))
    results = []
    ts = [threading.Thread(target=lambda: results.append(g.evaluate(xa, backend="ref")[0])) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(results) == 2 and np.array_equal(results[0], results[1])
