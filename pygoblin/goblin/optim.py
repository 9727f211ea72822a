"""goblin.optim: optimizer and learning-rate schedule settings for grid.train().

These are descriptions, not optimizers that step tensors themselves: the trainer
(goblin/train.h) owns the parameters and optimizer state and applies the step in
libgoblin (goblin/optim.h), with PyTorch's formulas:

    SGD(lr, momentum=0, dampening=0, nesterov=False, weight_decay=0)  # torch.optim.SGD
    AdamW(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)          # torch.optim.AdamW
    CosineWarmup(total_steps, warmup_steps=0, warmup_start_factor=1.0, eta_min=0.0)

CosineWarmup is torch's SequentialLR(LinearLR(start_factor, total_iters=warmup),
CosineAnnealingLR(T_max=total - warmup, eta_min)) as one closed form, held at eta_min
after total_steps; Constant() (the default) keeps the optimizer's lr every round.
"""
import math

from . import _goblin

_LR_KIND = _goblin.enum_values("lr_kind")  # goblin/optim.h

__all__ = ["Optimizer", "SGD", "AdamW", "Schedule", "Constant", "CosineWarmup"]


def _num(name, v, lo=0.0, hi=math.inf, hi_open=False):
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(v).__name__}") from None
    if not (x >= lo and (x < hi if hi_open else x <= hi)):
        rng = f"[{lo}, {hi})" if hi_open else f"[{lo}, {hi}]"
        raise ValueError(f"{name} must be in {rng}, got {v!r}")
    return x


class Optimizer:
    """Base of the optimizer settings; options() is what the trainer receives."""

    kind = None

    def options(self):
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._repr_items())
        return f"goblin.optim.{type(self).__name__}({args})"


class SGD(Optimizer):
    """torch.optim.SGD: d = g (+ wd p); momentum buffer; Nesterov; p -= lr d."""

    kind = "sgd"

    def __init__(self, lr=1e-3, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0, maximize=False):
        self.lr = _num("lr", lr)
        self.momentum = _num("momentum", momentum)
        self.dampening = _num("dampening", dampening, -math.inf)
        self.nesterov = bool(nesterov)
        self.weight_decay = _num("weight_decay", weight_decay)
        self.maximize = bool(maximize)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError("Nesterov momentum needs momentum > 0 and dampening 0")

    def _repr_items(self):
        return [("lr", self.lr), ("momentum", self.momentum), ("dampening", self.dampening),
                ("nesterov", self.nesterov), ("weight_decay", self.weight_decay)]

    def options(self):
        return {"optimizer": "sgd", "lr": self.lr, "momentum": self.momentum, "dampening": self.dampening,
                "nesterov": self.nesterov, "weight_decay": self.weight_decay, "maximize": self.maximize}

    def torch(self, params):
        """The same optimizer in PyTorch (for comparisons)."""
        import torch
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, dampening=self.dampening,
                               nesterov=self.nesterov, weight_decay=self.weight_decay, maximize=self.maximize)


class AdamW(Optimizer):
    """torch.optim.AdamW (decoupled weight decay)."""

    kind = "adamw"

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, maximize=False):
        self.lr = _num("lr", lr)
        if len(betas) != 2:
            raise ValueError("betas must be a pair (beta1, beta2)")
        self.betas = (_num("beta1", betas[0], 0.0, 1.0, True), _num("beta2", betas[1], 0.0, 1.0, True))
        self.eps = _num("eps", eps)
        self.weight_decay = _num("weight_decay", weight_decay)
        self.amsgrad = bool(amsgrad)
        self.maximize = bool(maximize)

    def _repr_items(self):
        return [("lr", self.lr), ("betas", self.betas), ("eps", self.eps), ("weight_decay", self.weight_decay),
                ("amsgrad", self.amsgrad)]

    def options(self):
        return {"optimizer": "adamw", "lr": self.lr, "beta1": self.betas[0], "beta2": self.betas[1],
                "eps": self.eps, "weight_decay": self.weight_decay, "amsgrad": self.amsgrad,
                "maximize": self.maximize}

    def torch(self, params):
        """The same optimizer in PyTorch (for comparisons)."""
        import torch
        return torch.optim.AdamW(params, lr=self.lr, betas=self.betas, eps=self.eps,
                                 weight_decay=self.weight_decay, amsgrad=self.amsgrad, maximize=self.maximize)


class Schedule:
    """Base of the learning-rate schedules."""

    def options(self):
        raise NotImplementedError

    def lr_at(self, base_lr, step):
        """The learning rate of 0-based round `step`: the library's goblin_lr_at, the very
        function the trainer applies."""
        raise NotImplementedError


class Constant(Schedule):
    """The optimizer's lr every round."""

    def options(self):
        return {"schedule_kind": _LR_KIND["constant"]}

    def lr_at(self, base_lr, step):
        return _goblin.lr_at(_LR_KIND["constant"], float(base_lr), int(step))

    def __repr__(self):
        return "goblin.optim.Constant()"


class CosineWarmup(Schedule):
    """Linear warm-up from warmup_start_factor * lr over warmup_steps rounds, then
    cosine decay to eta_min at total_steps (held there afterwards)."""

    def __init__(self, total_steps, warmup_steps=0, warmup_start_factor=1.0, eta_min=0.0):
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.warmup_start_factor = _num("warmup_start_factor", warmup_start_factor)
        if not 0 < self.warmup_start_factor <= 1:
            raise ValueError("warmup_start_factor must be in (0, 1]")
        self.eta_min = _num("eta_min", eta_min)
        if self.warmup_steps < 0 or self.total_steps <= self.warmup_steps:
            raise ValueError("need 0 <= warmup_steps < total_steps")

    def options(self):
        return {"schedule_kind": _LR_KIND["cosine-warmup"], "total_steps": self.total_steps, "warmup_steps": self.warmup_steps,
                "warmup_start_factor": self.warmup_start_factor, "eta_min": self.eta_min}

    def lr_at(self, base_lr, step):
        return _goblin.lr_at(_LR_KIND["cosine-warmup"], float(base_lr), int(step), self.total_steps,
                             self.warmup_steps, self.warmup_start_factor, self.eta_min)

    def __repr__(self):
        return (f"goblin.optim.CosineWarmup(total_steps={self.total_steps}, warmup_steps={self.warmup_steps}, "
                f"warmup_start_factor={self.warmup_start_factor}, eta_min={self.eta_min})")
