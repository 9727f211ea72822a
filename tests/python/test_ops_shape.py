"""Shape/movement and indexing ops (libgoblin/ops_shape.c, backends/ref/ref_shape.c)
compared with NumPy and PyTorch: every op, several dtypes (bool and f16 included),
non-contiguous and empty inputs, bad attributes and out-of-range indices."""
import numpy as np
import pytest

from goblin_ct import GoblinError, Graph, backend_available, contract, run_op

torch = pytest.importorskip("torch")
F = torch.nn.functional

ALL = ["f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "u8", "bool"]
SOME = ["f32", "f16", "bf16", "i64", "u8", "bool"]
NPT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32,
       "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
       "bool": np.bool_}
BACKENDS = ["ref"] + (["blis"] if backend_available("blis") else [])


def data(shape, dt, rng):
    """Values exactly representable in dt (bf16 arrays are float32 holding bf16 values)."""
    if dt == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dt in ("f32", "f64", "f16", "bf16"):
        a = (rng.integers(-64, 64, size=shape) / 4.0).astype(NPT[dt])
        if a.size and dt != "bf16":
            a.flat[0] = np.nan  # NaN moves like any other value
        return a
    info = np.iinfo(NPT[dt])
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=NPT[dt])


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        np.testing.assert_array_equal(a.astype(np.float64), b.astype(np.float64))
    else:
        np.testing.assert_array_equal(a, b)


def tt(a, dt):
    """NumPy -> torch in the goblin dtype."""
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.to(torch.bfloat16) if dt == "bf16" else t


def tn(t):
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def noncontig(a):
    """The same values as a, viewed through a transposed, strided buffer."""
    if a.ndim == 0:
        return a
    big = np.zeros(a.shape[::-1] + (2,), dtype=a.dtype)
    big[..., 0] = a.T
    v = big[..., 0].T
    assert a.size <= 1 or not v.flags.c_contiguous
    return v


def err(code, fn, *args, **kw):
    with pytest.raises(GoblinError) as ei:
        fn(*args, **kw)
    assert ei.value.name == code, str(ei.value)
    return str(ei.value)


# ---- movement --------------------------------------------------------------------------

@pytest.mark.parametrize("dt", ALL)
def test_reshape_permute_copy_all_dtypes(dt):
    rng = np.random.default_rng(1)
    x = data((2, 3, 4), dt, rng)
    for src in (x, noncontig(x)):
        same(run_op("reshape", [src], dtype=dt, shape=[4, -1]), x.reshape(4, -1))
        same(run_op("permute", [src], dtype=dt, perm=[2, 0, -2]), x.transpose(2, 0, 1))
        same(run_op("copy", [src], dtype=dt), x)


def test_reshape_cases():
    rng = np.random.default_rng(2)
    x = data((3, 4), "i32", rng)
    same(run_op("reshape", [x[::-1, ::2]], shape=[-1]), x[::-1, ::2].reshape(-1))
    same(run_op("reshape", [np.float32(5)], shape=[1, 1]), np.full((1, 1), 5, np.float32))
    same(run_op("reshape", [np.ones((1, 1), np.float32)], shape=[]), np.float32(1))
    same(run_op("reshape", [np.zeros((0, 3), np.int8)], shape=[-1, 3, 1]), np.zeros((0, 3, 1)))
    same(run_op("reshape", [np.zeros((0, 3), np.int8)], shape=[3, 0, 5]), np.zeros((3, 0, 5)))
    err("GOBLIN_ESHAPE", run_op, "reshape", [x], shape=[5, -1])
    err("GOBLIN_ESHAPE", run_op, "reshape", [x], shape=[13])
    err("GOBLIN_EINVAL", run_op, "reshape", [x], shape=[-1, -1])
    err("GOBLIN_ESHAPE", run_op, "reshape", [np.zeros((0, 3))], shape=[-1, 0])
    err("GOBLIN_ERANGE", run_op, "reshape", [x], shape=[-2, -6])
    err("GOBLIN_ELIMIT", run_op, "reshape", [x], shape=[12] + [1] * 8)
    err("GOBLIN_EINVAL", run_op, "reshape", [x])  # SHAPE is required


def test_permute_errors():
    x = np.zeros((2, 3, 4), np.float32)
    err("GOBLIN_EINVAL", run_op, "permute", [x], perm=[0, 1])
    err("GOBLIN_EINVAL", run_op, "permute", [x], perm=[0, 1, -3])
    err("GOBLIN_ERANGE", run_op, "permute", [x], perm=[0, 1, 3])
    same(run_op("permute", [np.float64(2)], perm=[]), np.float64(2))
    same(run_op("permute", [np.zeros((0, 2, 1), np.bool_)], perm=[1, 2, 0]), np.zeros((2, 1, 0)))


@pytest.mark.parametrize("dt", SOME)
def test_expand(dt):
    rng = np.random.default_rng(3)
    x = data((3, 1), dt, rng)
    for shape in ([2, 3, 4], [-1, 5], [3, 1], [1, 1, 3, 0], [3, -1]):
        want = tn(tt(x, dt).expand(*shape))
        same(run_op("expand", [noncontig(x) if dt != "bf16" else x], dtype=dt, shape=shape), want)
    same(run_op("expand", [np.float16(2.5)], shape=[2, 2]), np.full((2, 2), 2.5, np.float16))
    err("GOBLIN_ESHAPE", run_op, "expand", [x], dtype=dt, shape=[4, 4])
    err("GOBLIN_ESHAPE", run_op, "expand", [x], dtype=dt, shape=[-1, 3, 4])
    err("GOBLIN_ESHAPE", run_op, "expand", [x], dtype=dt, shape=[4])


def test_slice_random_vs_numpy():
    rng = np.random.default_rng(4)
    for case in range(300):
        rank = int(rng.integers(1, 4))
        shape = tuple(int(s) for s in rng.integers(0, 6, size=rank))
        dt = ALL[case % len(ALL)]
        x = data(shape, dt, rng)
        axes = [int(a) for a in rng.permutation(rank)[: int(rng.integers(1, rank + 1))]]
        starts = [int(v) for v in rng.integers(-9, 9, size=len(axes))]
        stops = [int(v) for v in rng.integers(-9, 9, size=len(axes))]
        steps = [int(v) for v in rng.integers(1, 4, size=len(axes))]
        sl = [slice(None)] * rank
        for a, b, e, s in zip(axes, starts, stops, steps):
            sl[a] = slice(b, e, s)
        neg_axes = [a - rank if case % 2 else a for a in axes]
        src = noncontig(x) if dt != "bf16" else x
        got = run_op("slice", [src], dtype=dt, axes=neg_axes, starts=starts, stops=stops,
                     steps=steps)
        same(got, x[tuple(sl)])


def test_slice_defaults_and_errors():
    x = np.arange(20, dtype=np.int16).reshape(4, 5)
    same(run_op("slice", [x], starts=[1, -2], stops=[3, 2**62]), x[1:3, -2:])
    same(run_op("slice", [x], axes=[1], starts=[0], stops=[5], steps=[2**62]), x[:, ::2**62])
    same(run_op("slice", [x], axes=[0], starts=[-2**63], stops=[2**63 - 1]), x)
    same(run_op("slice", [x], axes=[0], starts=[3], stops=[1]), x[3:1])
    err("GOBLIN_ERANGE", run_op, "slice", [x], axes=[0], starts=[0], stops=[2], steps=[0])
    err("GOBLIN_ERANGE", run_op, "slice", [x], axes=[0], starts=[0], stops=[2], steps=[-1])
    err("GOBLIN_EINVAL", run_op, "slice", [x], axes=[0, 1], starts=[0], stops=[2])
    err("GOBLIN_EINVAL", run_op, "slice", [x], axes=[0, -2], starts=[0, 0], stops=[2, 2])
    err("GOBLIN_ERANGE", run_op, "slice", [x], axes=[2], starts=[0], stops=[2])
    err("GOBLIN_ESHAPE", run_op, "slice", [np.float32(1)], axes=[0], starts=[0], stops=[1])


@pytest.mark.parametrize("dt", SOME)
def test_select(dt):
    rng = np.random.default_rng(5)
    x = data((3, 4, 2), dt, rng)
    src = noncontig(x) if dt != "bf16" else x
    for axis in range(-3, 3):
        n = x.shape[axis]
        for idx in range(-n, n):
            same(run_op("select", [src], dtype=dt, axis=axis, index=idx),
                 tn(tt(x, dt).select(axis, idx)))
    m = err("GOBLIN_ERANGE", run_op, "select", [x], dtype=dt, axis=1, index=4)
    assert "index 4" in m
    err("GOBLIN_ERANGE", run_op, "select", [x], dtype=dt, axis=1, index=-5)
    err("GOBLIN_ERANGE", run_op, "select", [x], dtype=dt, axis=3, index=0)
    err("GOBLIN_ESHAPE", run_op, "select", [np.float32(1)], axis=0, index=0)
    err("GOBLIN_ERANGE", run_op, "select", [np.zeros((0, 2))], axis=0, index=0)


def test_split_matches_torch_chunk():
    rng = np.random.default_rng(6)
    for n in range(0, 9):
        x = data((2, n), "f64", rng)
        for chunks in range(1, 6):
            want = torch.from_numpy(x).chunk(chunks, 1)
            for i in range(-len(want), len(want)):
                same(run_op("split", [noncontig(x)], axis=-1, chunks=chunks, index=i),
                     want[i].numpy())
            err("GOBLIN_ERANGE", run_op, "split", [x], axis=1, chunks=chunks, index=len(want))
            err("GOBLIN_ERANGE", run_op, "split", [x], axis=1, chunks=chunks,
                index=-len(want) - 1)
    err("GOBLIN_ERANGE", run_op, "split", [np.zeros(3)], chunks=0, index=0)
    err("GOBLIN_ESHAPE", run_op, "split", [np.float32(1)], chunks=1, index=0)
    err("GOBLIN_EINVAL", run_op, "split", [np.zeros(3)], index=0)  # CHUNKS required


def multi(name, arrays, dt, **attrs):
    g = Graph()
    ids = [g.input(dt, a.shape) for a in arrays]
    g.output(g.op(name, *ids, **attrs))
    return g.run(list(arrays))[0]


@pytest.mark.parametrize("dt", ALL)
def test_concat_stack(dt):
    rng = np.random.default_rng(7)
    a, b, c = data((2, 3), dt, rng), data((2, 0), dt, rng), data((2, 4), dt, rng)
    srcs = [noncontig(a), b, c[:, ::-1]]  # bf16 goes through a contiguous copy
    want = tn(torch.cat([tt(a, dt), tt(b, dt), tt(c[:, ::-1].copy(), dt)], -1))
    same(multi("concat", srcs, dt, axis=-1), want)
    same(multi("concat", [a], dt, axis=0), a)
    same(multi("concat", [a, a[::-1]], dt), np.concatenate([a, a[::-1]], 0))
    for axis in range(-3, 3):
        want = tn(torch.stack([tt(a, dt), tt(a[::-1].copy(), dt)], axis))
        same(multi("stack", [a, a[::-1]], dt, axis=axis), want)
    same(multi("stack", [np.asarray(a[0, 0])] * 3, dt), np.stack([a[0, 0]] * 3))
    same(multi("stack", [b, b], dt, axis=1), np.zeros((2, 2, 0)))


def test_concat_stack_errors():
    f, d = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float64)
    g = Graph()
    x, y = g.input("f32", (2, 3)), g.input("f64", (2, 3))
    with pytest.raises(GoblinError) as ei:
        g.op("concat", x, y)
    assert ei.value.name == "GOBLIN_EDTYPE"
    with pytest.raises(GoblinError) as ei:
        g.op("stack", x, y)
    assert ei.value.name == "GOBLIN_EDTYPE"
    err("GOBLIN_ESHAPE", multi, "concat", [f, np.zeros((3, 3), np.float32)], "f32", axis=1)
    err("GOBLIN_ESHAPE", multi, "concat", [f, np.zeros((2, 3, 1), np.float32)], "f32")
    err("GOBLIN_ESHAPE", multi, "concat", [np.float32(1), np.float32(2)], "f32")
    err("GOBLIN_ERANGE", multi, "concat", [f, f], "f32", axis=2)
    err("GOBLIN_ESHAPE", multi, "stack", [f, np.zeros((3, 2), np.float32)], "f32")
    err("GOBLIN_ERANGE", multi, "stack", [f, f], "f32", axis=3)
    err("GOBLIN_ELIMIT", multi, "stack", [np.zeros((1,) * 8, np.float32)] * 2, "f32")
    err("GOBLIN_EINVAL", multi, "concat", [], "f32")
    del d


@pytest.mark.parametrize("dt", ALL)
def test_pad_vs_torch(dt):
    rng = np.random.default_rng(8)
    value = {"bool": 1.0, "u8": 7.9, "i8": -3.5}.get(dt, -2.25 if dt[0] in "fb" else 11)
    for case in range(25):
        shape = tuple(int(s) for s in rng.integers(0, 5, size=3))
        x = data(shape, dt, rng)
        npairs = int(rng.integers(0, 4))
        pads = [int(p) for p in rng.integers(-2, 3, size=2 * npairs)]
        try:
            want = tn(F.pad(tt(x, dt), tuple(pads), value=value))
        except RuntimeError:
            err("GOBLIN_ESHAPE", run_op, "pad", [x], dtype=dt, pads=pads, value=value)
            continue
        src = noncontig(x) if dt != "bf16" else x
        same(run_op("pad", [src], dtype=dt, pads=pads, value=value), want)


def test_pad_values_and_errors():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = run_op("pad", [x], pads=[1, 0], value=np.nan)
    assert np.isnan(out[:, 0]).all() and (out[:, 1:] == x).all()
    same(run_op("pad", [x], pads=[0, 0, 2, 0]), np.pad(x, ((2, 0), (0, 0))))
    same(run_op("pad", [np.float32(3)], pads=[]), np.float32(3))
    i8 = np.zeros(3, np.int8)
    same(run_op("pad", [i8], pads=[1, 1], value=-128), [-128, 0, 0, 0, -128])
    err("GOBLIN_ERANGE", run_op, "pad", [i8], pads=[1, 1], value=300)
    err("GOBLIN_ERANGE", run_op, "pad", [i8], pads=[1, 1], value=-129)
    err("GOBLIN_ERANGE", run_op, "pad", [np.zeros(3, np.int32)], pads=[1, 1], value=np.nan)
    err("GOBLIN_ERANGE", run_op, "pad", [np.zeros(3, np.uint8)], pads=[1, 1], value=-1)
    err("GOBLIN_EINVAL", run_op, "pad", [x], pads=[1, 1, 1])
    err("GOBLIN_EINVAL", run_op, "pad", [x], pads=[1] * 6)
    err("GOBLIN_ESHAPE", run_op, "pad", [x], pads=[-2, -2])


# ---- indexing --------------------------------------------------------------------------

def idx_arr(shape, hi, rng, it):
    return rng.integers(0, max(hi, 1), size=shape).astype(np.int64 if it == "i64" else np.int32)


@pytest.mark.parametrize("dt", SOME)
@pytest.mark.parametrize("it", ["i64", "i32"])
def test_gather_vs_torch(dt, it):
    rng = np.random.default_rng(9)
    x = data((4, 5, 3), dt, rng)
    for axis in range(-3, 3):
        ishape = [2, 3, 2]
        ishape[axis] = 6
        idx = idx_arr(ishape, x.shape[axis], rng, it)
        want = tn(torch.gather(tt(x, dt), axis, torch.from_numpy(idx).long()))
        src = noncontig(x) if dt != "bf16" else x
        same(run_op("gather", [(src, dt), (noncontig(idx), it)], axis=axis), want)
    e = np.zeros((0, 5, 3), np.int64)
    same(run_op("gather", [(x, dt), (e, "i64")], axis=0), np.zeros((0, 5, 3)))
    same(run_op("gather", [(np.float32(4), "f32"), (np.int64(0), "i64")]), np.float32(4))
    same(run_op("gather", [(np.arange(3.0), "f64"), (np.int64(2), "i64")]), np.float64(2))


def test_gather_errors():
    x = np.zeros((3, 4), np.float32)
    bad = np.array([[0, 1], [2, 4]], np.int64)
    m = err("GOBLIN_EINDEX", run_op, "gather", [(x, "f32"), (bad, "i64")], axis=1)
    assert "index 4" in m and "[1, 1]" in m and "size 4" in m, m
    m = err("GOBLIN_EINDEX", run_op, "gather", [(x, "f32"), (-bad, "i64")], axis=1)
    assert "index -1" in m and "[0, 1]" in m, m
    err("GOBLIN_EDTYPE", run_op, "gather", [(x, "f32"), (bad.astype(np.float32), "f32")])
    err("GOBLIN_EDTYPE", run_op, "gather", [(x, "f32"), (bad.astype(np.int16), "i16")])
    err("GOBLIN_ESHAPE", run_op, "gather", [(x, "f32"), (np.zeros(2, np.int64), "i64")])
    err("GOBLIN_ESHAPE", run_op, "gather", [(x, "f32"), (np.zeros((4, 1), np.int64), "i64")],
        axis=1)
    err("GOBLIN_ERANGE", run_op, "gather", [(x, "f32"), (bad, "i64")], axis=2)
    # data-dependent: an empty index never looks at sizes or values
    same(run_op("gather", [(x, "f32"), (np.zeros((9, 0), np.int64), "i64")]), np.zeros((9, 0)))
    same(run_op("gather", [(x, "f32"), (np.zeros(0, np.int64), "i64")]), np.zeros(0))
    same(run_op("scatter", [(x, "f32"), (np.zeros(0, np.int64), "i64"), (np.zeros(2, np.float32),
                                                                       "f32")]), x)


def scatter_ref(x, axis, idx, src, add):
    """Row-major scatter: the last write wins (or all add)."""
    out = x.copy()
    for p in np.ndindex(*idx.shape):
        q = list(p)
        q[axis] = idx[p]
        if add:
            out[tuple(q)] = out[tuple(q)] + src[p]
        else:
            out[tuple(q)] = src[p]
    return out


@pytest.mark.parametrize("dt", SOME)
def test_scatter_unique_vs_torch_and_collisions(dt):
    rng = np.random.default_rng(10)
    x = data((4, 5), dt, rng)
    src = data((5, 6), dt, rng)
    for axis in (0, 1, -1):
        n = x.shape[axis]
        # unique indices per column/row: torch is deterministic there
        if axis == 0:
            idx = np.stack([rng.permutation(n)[:3] for _ in range(5)], 1)
        else:
            idx = np.stack([rng.permutation(n)[:3] for _ in range(4)], 0)
        want = tn(torch.scatter(tt(x, dt), axis, torch.from_numpy(idx), tt(src, dt)))
        s = noncontig(src) if dt != "bf16" else src
        same(run_op("scatter", [(x, dt), (idx, "i64"), (s, dt)], axis=axis), want)
    idx = np.zeros((3, 5), np.int64)  # every write collides on row 0
    same(run_op("scatter", [(x, dt), (idx, "i64"), (src, dt)], axis=0),
         scatter_ref(x, 0, idx, src, False))
    same(run_op("scatter", [(x, dt), (np.zeros((0, 7), np.int64), "i64"), (src, dt)], axis=0), x)


def test_scatter_add_exact_dtypes_vs_torch():
    rng = np.random.default_rng(11)
    for dt in ("f64", "i8", "i32", "i64", "u8", "bool"):
        x = data((3, 4), dt, rng)
        src = data((6, 4), dt, rng)
        if dt == "f64":  # NaN would hide the sums
            x, src = np.nan_to_num(x), np.nan_to_num(src)
        idx = rng.integers(0, 3, size=(6, 4))
        want = torch.scatter_add(tt(x, dt), 0, torch.from_numpy(idx), tt(src, dt)).numpy()
        got = run_op("scatter_add", [(x, dt), (noncontig(idx), "i64"), (src, dt)], axis=0)
        same(got, want)  # integers wrap like torch; bool is logical or


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_scatter_add_float_contract(dt):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 50)).astype(np.float32)
    src = rng.standard_normal((40, 50)).astype(np.float32)
    if dt == "f16":
        x, src = x.astype(np.float16), src.astype(np.float16)
    elif dt == "bf16":  # inputs representable in bf16
        x = torch.from_numpy(x).bfloat16().float().numpy()
        src = torch.from_numpy(src).bfloat16().float().numpy()
    idx = rng.integers(0, 3, size=(40, 50))
    got = run_op("scatter_add", [(x, dt), (idx, "i64"), (src, dt)], axis=0).astype(np.float64)
    exact = scatter_ref(x.astype(np.float64), 0, idx, src.astype(np.float64), True)
    scale = scatter_ref(np.abs(x.astype(np.float64)), 0, idx, np.abs(src.astype(np.float64)), True)
    k = max(np.bincount(idx[:, j], minlength=3).max() for j in range(50))
    rel, ab = contract("scatter_add", dt, int(k))
    assert 0 < rel < 1 and ab == 0
    assert np.all(np.abs(got - exact) <= rel * scale + ab)
    # f16 accumulates in f32 and rounds once: exactly the rounded f32 sum
    if dt == "f16":
        acc = scatter_ref(x.astype(np.float32), 0, idx, src.astype(np.float32), True)
        same(got, acc.astype(np.float16))


def test_scatter_errors():
    x = np.zeros((3, 4), np.float32)
    src = np.ones((3, 4), np.float32)
    idx = np.array([[0, 1, 2, 3]], np.int64)
    for op in ("scatter", "scatter_add"):
        m = err("GOBLIN_EINDEX", run_op, op, [(x, "f32"), (idx, "i64"), (src, "f32")], axis=0)
        assert "index 3" in m and "[0, 3]" in m, m
        err("GOBLIN_EINDEX", run_op, op, [(x, "f32"), (-idx, "i64"), (src, "f32")], axis=1)
        err("GOBLIN_EDTYPE", run_op, op, [(x, "f32"), (idx, "i64"), (src.astype(np.float64),
                                                                       "f64")])
        err("GOBLIN_ESHAPE", run_op, op, [(x, "f32"), (np.zeros((4, 4), np.int64), "i64"),
                                          (src, "f32")], axis=1)
        err("GOBLIN_ESHAPE", run_op, op, [(x, "f32"), (np.zeros((1, 4), np.int64), "i64"),
                                          (np.ones((1, 3), np.float32), "f32")])
        err("GOBLIN_ESHAPE", run_op, op, [(x, "f32"), (np.zeros(4, np.int64), "i64"),
                                          (src, "f32")])
    # the output is the whole input when nothing is written: x is copied, even non-contiguous
    xs = np.arange(12, dtype=np.int16).reshape(3, 4)
    same(run_op("scatter_add", [(noncontig(xs), "i16"), (np.zeros((0, 4), np.int64), "i64"),
                                (xs, "i16")]), xs)


@pytest.mark.parametrize("dt", SOME)
@pytest.mark.parametrize("it", ["i64", "i32"])
def test_index_select_embedding(dt, it):
    rng = np.random.default_rng(13)
    x = data((4, 3, 5), dt, rng)
    src = noncontig(x) if dt != "bf16" else x
    for axis in range(-3, 3):
        idx = idx_arr((7,), x.shape[axis], rng, it)
        want = tn(torch.index_select(tt(x, dt), axis, torch.from_numpy(idx)))
        same(run_op("index_select", [(src, dt), (idx[::-1], it)], axis=axis),
             want[(slice(None),) * (axis % 3) + (slice(None, None, -1),)])
    same(run_op("index_select", [(x, dt), (np.int64(2), "i64")], axis=1), x[:, 2:3])
    same(run_op("index_select", [(x, dt), (np.zeros(0, np.int64), "i64")], axis=2), x[:, :, :0])
    same(run_op("index_select", [(np.float32(9), "f32"), (np.zeros(1, np.int64), "i64")]),
         np.float32(9))
    w = data((6, 4), dt, rng)
    ws = noncontig(w) if dt != "bf16" else w
    for shape in ((), (5,), (2, 3), (2, 0, 3)):
        ind = idx_arr(shape, 6, rng, it)
        want = tn(F.embedding(torch.from_numpy(np.asarray(ind)), tt(w, dt)))
        same(run_op("embedding", [(ws, dt), (ind, it)]), want)
    same(run_op("embedding", [(np.zeros((3, 0), np.float32), "f32"),
                              (np.array([1, 2]), "i64")]), np.zeros((2, 0)))


def test_index_select_embedding_errors():
    x = np.zeros((3, 4), np.float32)
    bad = np.array([0, 2, 3, 1], np.int64)
    m = err("GOBLIN_EINDEX", run_op, "index_select", [(x, "f32"), (bad, "i64")])
    assert "index 3" in m and "[2]" in m, m
    err("GOBLIN_EINDEX", run_op, "index_select", [(x, "f32"), (np.array([-1]), "i64")], axis=1)
    err("GOBLIN_ESHAPE", run_op, "index_select", [(x, "f32"), (np.zeros((1, 1), np.int64), "i64")])
    err("GOBLIN_EDTYPE", run_op, "index_select", [(x, "f32"), (np.zeros(1, np.uint8), "u8")])
    # data-dependent checks run even when the output is empty
    err("GOBLIN_EINDEX", run_op, "index_select", [(np.zeros((3, 0)), "f64"), (bad, "i64")])
    m = err("GOBLIN_EINDEX", run_op, "embedding", [(x, "f32"), (np.array([[0, 1], [5, 0]]), "i64")])
    assert "index 5" in m and "[1, 0]" in m, m
    err("GOBLIN_EINDEX", run_op, "embedding", [(x, "f32"), (np.array([-2], np.int32), "i32")])
    err("GOBLIN_ESHAPE", run_op, "embedding", [(np.zeros(3), "f64"), (np.array([0]), "i64")])
    err("GOBLIN_EDTYPE", run_op, "embedding", [(x, "f32"), (np.array([0.0]), "f64")])


@pytest.mark.parametrize("dt", SOME + ["i8"])
def test_index_put_vs_torch(dt):
    rng = np.random.default_rng(14)
    x = data((5, 3, 2), dt, rng)
    if dt in ("f32", "f16"):
        x = np.nan_to_num(x)
    for vshape in ((4, 3, 2), (3, 2), (4, 1, 2), (1,), ()):
        v = data(vshape, dt, rng)
        if dt in ("f32", "f16"):
            v = np.nan_to_num(v)
        uniq = np.array([4, -5, 2, -2])          # distinct rows after wrapping
        dup = np.array([1, -4, 3, 1])            # rows 1 and 3 twice
        xt = tt(x, dt)
        want = tn(xt.index_put((torch.from_numpy(uniq),), tt(v, dt)))
        same(run_op("index_put", [(x, dt), (uniq, "i64"), (v, dt)]), want)
        want = tn(xt.index_put((torch.from_numpy(dup),), tt(v, dt), accumulate=True))
        got = run_op("index_put", [(x, dt), (dup.astype(np.int32), "i32"), (v, dt)], accumulate=1)
        if dt in ("f32", "f16", "bf16"):  # two terms, one rounding each way
            rel, _ = contract("index_put", dt, 2)
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rel,
                                       atol=1e-6)
        else:
            same(got, want)
        # duplicates without accumulate: the last write wins (documented)
        vb = np.broadcast_to(v, (4, 3, 2))
        ref = x.copy()
        for i, r in enumerate(dup):
            ref[r] = vb[i]
        same(run_op("index_put", [(x, dt), (dup, "i64"), (v, dt)]), ref)
    same(run_op("index_put", [(x, dt), (np.int64(-1), "i64"), (x[0], dt)]),
         np.concatenate([x[:4], x[:1]]))


def test_index_put_errors_and_edges():
    x = np.zeros((3, 2), np.float32)
    v = np.ones(2, np.float32)
    m = err("GOBLIN_EINDEX", run_op, "index_put", [(x, "f32"), (np.array([0, 3]), "i64"),
                                                   (v, "f32")])
    assert "index 3" in m and "[1]" in m, m
    err("GOBLIN_EINDEX", run_op, "index_put", [(x, "f32"), (np.array([-4]), "i64"), (v, "f32")])
    err("GOBLIN_ESHAPE", run_op, "index_put", [(x, "f32"), (np.array([0, 1]), "i64"),
                                               (np.ones(3, np.float32), "f32")])
    err("GOBLIN_ESHAPE", run_op, "index_put", [(x, "f32"), (np.array([0]), "i64"),
                                               (np.ones((2, 1, 2), np.float32), "f32")])
    err("GOBLIN_ESHAPE", run_op, "index_put", [(np.float32(1), "f32"), (np.int64(0), "i64"),
                                               (np.float32(1), "f32")])
    err("GOBLIN_EDTYPE", run_op, "index_put", [(x, "f32"), (np.array([0]), "i64"),
                                               (np.ones(2, np.float64), "f64")])
    err("GOBLIN_ERANGE", run_op, "index_put", [(x, "f32"), (np.array([0]), "i64"), (v, "f32")],
        accumulate=2)
    same(run_op("index_put", [(x, "f32"), (np.zeros(0, np.int64), "i64"), (v, "f32")]), x)
    i8 = np.array([120, 0], np.int8)
    same(run_op("index_put", [(i8, "i8"), (np.array([0, 0]), "i64"), (np.int8(100), "i8")],
                accumulate=1), np.array([120 + 200 - 256, 0], np.int8))


# ---- contracts and backends ----------------------------------------------------------

def test_contracts():
    for op in ("reshape", "permute", "expand", "slice", "select", "split", "concat", "stack",
               "pad", "copy", "gather", "scatter", "index_select", "embedding"):
        assert contract(op, "f32", 100) == (0.0, 0.0)
    u = 2.0 ** -24
    rel, ab = contract("scatter_add", "f32", 10)
    assert rel == pytest.approx(10 * u / (1 - 10 * u), rel=1e-12) and ab == 0
    assert contract("scatter_add", "i32", 10) == (0.0, 0.0)
    assert contract("index_put", "bf16", 1)[0] == pytest.approx(2.0**-8 / (1 - 2.0**-8))
    assert contract("scatter_add", "f16", 5000)[0] == float("inf")


@pytest.mark.skipif(len(BACKENDS) < 2, reason="BLIS backend not built")
def test_blis_matches_ref():
    rng = np.random.default_rng(15)
    x = data((4, 6, 3), "f32", rng)
    idx = rng.integers(0, 4, size=(5, 6, 3))
    cases = [("permute", [x], dict(perm=[1, 2, 0])), ("slice", [x], dict(starts=[1], stops=[4])),
             ("pad", [x], dict(pads=[1, 2, -1, 0])), ("expand", [x[:1]], dict(shape=[2, 4, 6, 3])),
             ("gather", [(x, "f32"), (idx, "i64")], {}),
             ("scatter_add", [(x, "f32"), (idx, "i64"), (data((5, 6, 3), "f32", rng), "f32")], {}),
             ("index_put", [(x, "f32"), (np.array([3, 3, 0]), "i64"), (x[:3], "f32")],
              dict(accumulate=1))]
    for name, arrays, attrs in cases:
        a = run_op(name, arrays, backend="ref", **attrs)
        b = run_op(name, arrays, backend="blis", threads=2, **attrs)
        assert a.tobytes() == b.tobytes(), name
