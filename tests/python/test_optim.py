"""Optimizer math (include/goblin/optim.h) against torch.optim on the same numbers.

N steps of SGD (momentum, dampening, Nesterov, weight decay, maximize) and AdamW
(weight decay, amsgrad, maximize) with the same gradient sequence in goblin and in
PyTorch; gradient clipping by global norm against torch.nn.utils.clip_grad_norm_;
the warm-up + cosine schedule against torch's SequentialLR(LinearLR,
CosineAnnealingLR). Tolerances: 1e-6 relative in f32, 1e-12 in f64.
"""
import ctypes as C
import math
import warnings

import numpy as np
import pytest

from goblin_ct import DT, lib

torch = pytest.importorskip("torch")


class SgdOptions(C.Structure):
    _fields_ = [("lr", C.c_double), ("momentum", C.c_double), ("dampening", C.c_double),
                ("weight_decay", C.c_double), ("nesterov", C.c_bool), ("maximize", C.c_bool)]


class SgdState(C.Structure):
    _fields_ = [("momentum_buffer", C.c_void_p), ("initialized", C.c_bool)]


class AdamwOptions(C.Structure):
    _fields_ = [("lr", C.c_double), ("beta1", C.c_double), ("beta2", C.c_double),
                ("eps", C.c_double), ("weight_decay", C.c_double), ("amsgrad", C.c_bool),
                ("maximize", C.c_bool)]


class AdamwState(C.Structure):
    _fields_ = [("step", C.c_int64), ("exp_avg", C.c_void_p), ("exp_avg_sq", C.c_void_p),
                ("max_exp_avg_sq", C.c_void_p)]


class LrSchedule(C.Structure):
    _fields_ = [("kind", C.c_int), ("base_lr", C.c_double), ("eta_min", C.c_double),
                ("warmup_start_factor", C.c_double), ("warmup_steps", C.c_int64),
                ("total_steps", C.c_int64)]


def _sig(name, res, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)


_sig("goblin_sgd_params_default", None, C.POINTER(SgdOptions))
_sig("goblin_sgd_step", C.c_int, C.POINTER(SgdOptions), C.c_int, C.c_int64, C.c_void_p, C.c_void_p,
     C.POINTER(SgdState))
_sig("goblin_adamw_params_default", None, C.POINTER(AdamwOptions))
_sig("goblin_adamw_step", C.c_int, C.POINTER(AdamwOptions), C.c_int, C.c_int64, C.c_void_p,
     C.c_void_p, C.POINTER(AdamwState))
_sig("goblin_clip_grad_norm", C.c_int, C.c_int, C.c_int32, C.POINTER(C.c_void_p),
     C.POINTER(C.c_int64), C.c_double, C.c_double, C.POINTER(C.c_double))
_sig("goblin_lr_at", C.c_double, C.POINTER(LrSchedule), C.c_int64)

NP = {"f32": np.float32, "f64": np.float64}
TT = {"f32": torch.float32, "f64": torch.float64}
REL = {"f32": 1e-6, "f64": 1e-12}
STEPS = 25


def ptr(a):
    return a.ctypes.data_as(C.c_void_p)


def assert_close(got, want, dt, what):
    want = np.asarray(want, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    # relative per element, with the tensor's scale as the floor for entries near 0
    tol = REL[dt] * np.maximum(np.abs(want), np.max(np.abs(want)) * 1e-2)
    bad = np.abs(got - want) > tol
    assert not bad.any(), f"{what}: {got[bad][:4]} vs {want[bad][:4]}"


def grad_seq(dt, n, shape, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(NP[dt]) for _ in range(n)]


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=1e-2),
    dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=5e-3),
    dict(lr=0.01, momentum=0.5, maximize=True),
]


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("case", range(len(SGD_CASES)))
def test_sgd_matches_torch(dt, case):
    kw = SGD_CASES[case]
    rng = np.random.default_rng(10 + case)
    p0 = rng.standard_normal((7, 3)).astype(NP[dt])
    grads = grad_seq(dt, STEPS, p0.shape, 20 + case)
    o = SgdOptions()
    lib.goblin_sgd_params_default(C.byref(o))
    for k, v in kw.items():
        setattr(o, k, v)
    p = p0.copy()
    buf = np.zeros_like(p)
    st = SgdState(ptr(buf), False)
    tp = torch.nn.Parameter(torch.tensor(p0, dtype=TT[dt]))
    opt = torch.optim.SGD([tp], **kw)
    for i in range(STEPS):
        assert lib.goblin_sgd_step(C.byref(o), DT[dt], p.size, ptr(p), ptr(grads[i]), C.byref(st)) == 0
        tp.grad = torch.tensor(grads[i], dtype=TT[dt])
        opt.step()
        assert_close(p, tp.detach().numpy(), dt, f"step {i}")


ADAMW_CASES = [
    dict(lr=1e-2),
    dict(lr=3e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    dict(lr=1e-2, amsgrad=True, weight_decay=0.0),
    dict(lr=5e-3, amsgrad=True, maximize=True, weight_decay=0.05),
]


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("case", range(len(ADAMW_CASES)))
def test_adamw_matches_torch(dt, case):
    kw = ADAMW_CASES[case]
    rng = np.random.default_rng(30 + case)
    p0 = rng.standard_normal((5, 4)).astype(NP[dt])
    grads = grad_seq(dt, STEPS, p0.shape, 40 + case)
    o = AdamwOptions()
    lib.goblin_adamw_params_default(C.byref(o))
    for k, v in kw.items():
        if k == "betas":
            o.beta1, o.beta2 = v
        else:
            setattr(o, k, v)
    p = p0.copy()
    m, v, vmax = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    st = AdamwState(0, ptr(m), ptr(v), ptr(vmax))
    tp = torch.nn.Parameter(torch.tensor(p0, dtype=TT[dt]))
    opt = torch.optim.AdamW([tp], foreach=False, **kw)
    for i in range(STEPS):
        assert lib.goblin_adamw_step(C.byref(o), DT[dt], p.size, ptr(p), ptr(grads[i]), C.byref(st)) == 0
        tp.grad = torch.tensor(grads[i], dtype=TT[dt])
        opt.step()
        assert_close(p, tp.detach().numpy(), dt, f"step {i}")
    assert st.step == STEPS
    s = opt.state[tp]
    assert_close(m, s["exp_avg"].numpy(), dt, "exp_avg")
    assert_close(v, s["exp_avg_sq"].numpy(), dt, "exp_avg_sq")


def test_defaults_match_torch():
    o = AdamwOptions()
    lib.goblin_adamw_params_default(C.byref(o))
    d = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))]).defaults
    assert (o.lr, (o.beta1, o.beta2), o.eps, o.weight_decay, o.amsgrad) == (
        d["lr"], d["betas"], d["eps"], d["weight_decay"], d["amsgrad"])
    s = SgdOptions()
    lib.goblin_sgd_params_default(C.byref(s))
    d = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))]).defaults
    assert (s.lr, s.momentum, s.dampening, s.weight_decay, s.nesterov) == (
        d["lr"], d["momentum"], d["dampening"], d["weight_decay"], d["nesterov"])


def test_bad_arguments():
    o = SgdOptions()
    lib.goblin_sgd_params_default(C.byref(o))
    p = np.zeros(3, np.float32)
    st = SgdState(None, False)
    o.nesterov = True  # needs momentum > 0
    assert lib.goblin_sgd_step(C.byref(o), DT["f32"], 3, ptr(p), ptr(p), C.byref(st)) != 0
    o.nesterov, o.lr = False, -1.0
    assert lib.goblin_sgd_step(C.byref(o), DT["f32"], 3, ptr(p), ptr(p), C.byref(st)) != 0
    o.lr, o.momentum = 0.1, 0.9  # momentum without a buffer
    assert lib.goblin_sgd_step(C.byref(o), DT["f32"], 3, ptr(p), ptr(p), C.byref(st)) != 0
    o.momentum = 0.0
    pi = np.zeros(3, np.int32)
    assert lib.goblin_sgd_step(C.byref(o), DT["i32"], 3, ptr(pi), ptr(pi), C.byref(st)) != 0
    a = AdamwOptions()
    lib.goblin_adamw_params_default(C.byref(a))
    a.beta1 = 1.0
    z = np.zeros(3, np.float64)
    ast = AdamwState(0, ptr(z), ptr(z), None)
    assert lib.goblin_adamw_step(C.byref(a), DT["f64"], 3, ptr(z), ptr(z), C.byref(ast)) != 0
    assert ast.step == 0


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_clip_grad_norm_matches_torch(dt, max_norm, norm_type):
    rng = np.random.default_rng(5)
    gs = [rng.standard_normal(s).astype(NP[dt]) for s in [(3, 4), (5,), (2, 2, 2)]]
    tps = [torch.nn.Parameter(torch.zeros(g.shape, dtype=TT[dt])) for g in gs]
    for tp, g in zip(tps, gs):
        tp.grad = torch.tensor(g)
    want = torch.nn.utils.clip_grad_norm_(tps, max_norm, norm_type=norm_type, foreach=False)
    arr = (C.c_void_p * 3)(*[ptr(g) for g in gs])
    ns = (C.c_int64 * 3)(*[g.size for g in gs])
    total = C.c_double()
    assert lib.goblin_clip_grad_norm(DT[dt], 3, arr, ns, max_norm, norm_type, C.byref(total)) == 0
    assert_close(np.array([total.value]), np.array([float(want)]), dt, "total norm")
    for g, tp in zip(gs, tps):
        assert_close(g, tp.grad.numpy(), dt, "clipped grad")


def test_clip_grad_norm_bad_norm_type():
    g = np.ones(2, np.float64)
    arr = (C.c_void_p * 1)(ptr(g))
    ns = (C.c_int64 * 1)(2)
    assert lib.goblin_clip_grad_norm(DT["f64"], 1, arr, ns, 1.0, 1.0, None) != 0


@pytest.mark.parametrize("warmup,total,factor,eta_min", [(5, 30, 0.1, 0.0), (0, 12, 1.0, 1e-3),
                                                          (3, 4, 0.5, 0.01)])
def test_cosine_warmup_matches_torch(warmup, total, factor, eta_min):
    base = 0.2
    s = LrSchedule(1, base, eta_min, factor, warmup, total)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=eta_min)
    if warmup:
        lin = torch.optim.lr_scheduler.LinearLR(opt, start_factor=factor, total_iters=warmup)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [lin, cos], milestones=[warmup])
    else:
        sched = cos
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for t in range(total + 1):
            want = opt.param_groups[0]["lr"]
            got = lib.goblin_lr_at(C.byref(s), t)
            assert abs(got - want) <= 1e-12 * max(abs(want), 1e-3), f"step {t}: {got} vs {want}"
            opt.step()
            sched.step()
    assert lib.goblin_lr_at(C.byref(s), total + 50) == pytest.approx(eta_min, abs=1e-15)


def test_constant_and_invalid_schedules():
    assert lib.goblin_lr_at(C.byref(LrSchedule(0, 0.3, 0, 1, 0, 0)), 1000) == 0.3
    assert math.isnan(lib.goblin_lr_at(C.byref(LrSchedule(1, 0.3, 0, 1, 10, 10)), 0))
    assert math.isnan(lib.goblin_lr_at(C.byref(LrSchedule(1, 0.3, 0, 0.0, 1, 10)), 0))
    assert math.isnan(lib.goblin_lr_at(C.byref(LrSchedule(0, 0.3, 0, 1, 0, 0)), -1))
