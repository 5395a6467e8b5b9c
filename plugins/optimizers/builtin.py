"""Factories of the built-in optimizers (imported only when an optimizer is built).

Every factory is called as ``factory(model=..., config=..., options=...)`` (``build_timm`` also
gets ``variant=``) and returns a ``torch.optim.Optimizer`` over every trainable parameter of
``model``, configured from ``config.lr`` (already resolved to the declared default when unset),
``config.momentum``, ``config.weight_decay`` and ``options``: the declared options with the
run's ``--opt-arg`` values, typed (see ``initmem_core.plugin_system.optimizer_options``).

What ``--weight-decay`` means differs by optimizer, and that matters for a study of weight
norms:

- ``sgd``: torch's ``weight_decay`` adds ``wd * W`` to the gradient (coupled). For plain SGD that
  is the same update as decoupled decay; with momentum it is accumulated in the buffer.
- ``adam``: coupled L2 too; the ``wd * W`` term is then divided by Adam's second-moment
  preconditioner, so it is *not* a uniform shrink. Use ``adamw`` for decoupled decay.
- ``adamw`` and ``muon``: decoupled, ``W <- W * (1 - lr * wd)`` each step.
- ``timm:*``: timm's own semantics, and timm leaves 1-D parameters (biases, norms) out of the
  decay when ``wd > 0`` (``filter_bias_and_bn``).

The coupled, objective-level regularizer is ``--reg``/``--l2`` (see the regularizer plugins).
"""

from __future__ import annotations

import difflib
from typing import Any, cast

import torch
from torch import nn

from initmem_core.config import EXECUTION_OPT_ARGS
from initmem_core.contracts import record_param_groups
from initmem_core.errors import ConfigError

#: Muon's momentum when ``--momentum`` is left at 0 (timm's and Keller Jordan's default).
MUON_DEFAULT_MOMENTUM = 0.95


def trainable_named_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` for every parameter that requires grad (shared ones once)."""
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ConfigError("the model has no trainable parameters; check the architecture plugin")
    return named


def _params(model: nn.Module) -> list[nn.Parameter]:
    return [p for _, p in trainable_named_parameters(model)]


def build_sgd(model: nn.Module, config, options: dict | None = None) -> torch.optim.Optimizer:
    """Plain SGD, or heavy-ball SGD with ``--momentum`` (default 0: no momentum buffer);
    ``--opt-arg nesterov=true`` / ``dampening=...``."""
    options = options or {}
    if options.get("nesterov") and not config.momentum:
        raise ConfigError("--opt-arg nesterov=true needs --momentum above 0")
    return torch.optim.SGD(
        _params(model), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay, **options
    )


def build_adam(model: nn.Module, config, options: dict | None = None) -> torch.optim.Optimizer:
    """Adam; betas/eps/amsgrad from ``options``. ``weight_decay`` is *coupled* L2 (see module doc)."""
    return torch.optim.Adam(_params(model), lr=config.lr, weight_decay=config.weight_decay, **(options or {}))


def build_adamw(model: nn.Module, config, options: dict | None = None) -> torch.optim.Optimizer:
    """AdamW with torch's default betas/eps and *decoupled* ``weight_decay``.

    Note: torch's AdamW defaults to ``weight_decay=0.01``; here it is ``config.weight_decay``
    (default 0), so AdamW and Adam differ only when ``--weight-decay`` is set.
    """
    return torch.optim.AdamW(_params(model), lr=config.lr, weight_decay=config.weight_decay, **(options or {}))


# -- Muon ------------------------------------------------------------------------------------


def classifier_head(model: nn.Module) -> nn.Linear | None:
    """The classifier head: the last ``nn.Linear`` in module-registration order, if any."""
    head = None
    for module in model.modules():
        if isinstance(module, nn.Linear):
            head = module
    return head


def _suitable_for_muon(param: torch.Tensor) -> bool:
    """timm's shape rule (>= 2 non-unit dims, no leading unit dim, sane size and aspect ratio)."""
    if param.ndim < 2:
        return False
    try:
        from timm.optim.muon import _is_suitable_for_muon
    except ImportError:  # a timm without the helper: keep the documented minimum rule
        return True
    return bool(_is_suitable_for_muon(param))


def split_muon_params(model: nn.Module) -> tuple[list[tuple[str, nn.Parameter]], list[tuple[str, nn.Parameter]]]:
    """Split trainable parameters into (Muon, AdamW fallback) lists of ``(name, param)``.

    Muon gets the hidden kernels: conv and linear weights with ``ndim >= 2`` that timm's shape
    rule accepts (conv kernels are flattened to ``out x (in*k*k)``). The AdamW fallback gets every
    1-D parameter (biases, BatchNorm scales and shifts), any kernel timm's rule rejects
    (e.g. depthwise), and the classifier head, following Keller Jordan's convention that the
    embedding and head layers are trained with AdamW.
    """
    head = classifier_head(model)
    head_ids = {id(p) for p in head.parameters()} if head is not None else set()
    muon, fallback = [], []
    for name, p in trainable_named_parameters(model):
        if id(p) not in head_ids and _suitable_for_muon(p):
            muon.append((name, p))
        else:
            fallback.append((name, p))
    return muon, fallback


def build_muon(model: nn.Module, config, options: dict | None = None) -> torch.optim.Optimizer:
    """timm's Muon with explicit groups: Muon for hidden kernels, AdamW fallback for the rest.

    Settings (the paper leaves them open; these are logged with the run):
    ``lr=config.lr`` for both groups (``fallback_lr_scale=1``; timm's ``match_rms_adamw`` lr
    adjustment scales Muon's orthogonalized update to AdamW's RMS, so one lr serves both),
    ``weight_decay=config.weight_decay`` (decoupled, both groups), ``conv_mode='flatten'``,
    momentum ``config.momentum`` if set, else 0.95, and timm's defaults otherwise
    (``nesterov=False``, 5 quintic Newton-Schulz steps, fallback betas (0.9, 0.95)), each of
    which ``--opt-arg`` may change (``options``).

    Sets ``optimizer.initmem_param_groups = {"muon": [...], "adamw_fallback": [...]}``.
    """
    from timm.optim import Muon

    muon, fallback = split_muon_params(model)
    groups = []
    if muon:
        groups.append({"params": [p for _, p in muon], "use_muon": True})
    if fallback:
        groups.append({"params": [p for _, p in fallback], "use_fallback": True})
    momentum = config.momentum if config.momentum > 0 else MUON_DEFAULT_MOMENTUM
    optimizer = Muon(
        groups,
        lr=config.lr,
        weight_decay=config.weight_decay,
        momentum=momentum,
        conv_mode="flatten",
        **(options or {}),
    )
    record_param_groups(
        optimizer, {"muon": [name for name, _ in muon], "adamw_fallback": [name for name, _ in fallback]}
    )
    return optimizer


# -- timm:* ----------------------------------------------------------------------------------


def _timm_name(variant: str | None) -> str:
    import timm.optim

    # Names only (its annotation covers with_description=True's (name, description) pairs too).
    available = cast(list[str], timm.optim.list_optimizers())
    name = (variant or "").strip().lower()
    base = name.split("_")[-1]  # timm accepts a "lookahead_" prefix
    if not name or base not in available:
        close = difflib.get_close_matches(base, available, n=len(available), cutoff=0.0)[:8]
        raise ConfigError(
            f"unknown timm optimizer '{variant}'; close matches: {', '.join(close)} "
            "(all: python -c 'import timm.optim; print(timm.optim.list_optimizers())')"
        )
    return name


#: Set through initmem's own knobs (or not options at all), so never an --opt-arg.
_NOT_OPTIONS = {"self", "params", "weight_decay", "momentum", "maximize", "capturable", "differentiable", "verbose"}


def timm_defaults(variant: str | None) -> dict:
    """timm's defaults for ``timm:<variant>``: the optimizer class's keyword defaults with timm's
    own overrides (e.g. ``nesterov=True`` for ``sgd``); ``lr`` included. Plain values only."""
    import inspect

    from timm.optim._optim_factory import default_registry

    info = default_registry.get_optimizer_info(_timm_name(variant).split("_")[-1])
    defaults: dict[str, Any] = {}
    # A class timm names by its import path (apex's, bitsandbytes') is not imported to be read.
    keywords = {} if isinstance(info.opt_class, str) else inspect.signature(info.opt_class.__init__).parameters
    for name, parameter in keywords.items():
        value = parameter.default
        if name in _NOT_OPTIONS or value is inspect.Parameter.empty:
            continue
        if name in EXECUTION_OPT_ARGS and value is None:  # how a step executes (None: the library chooses)
            defaults[name] = None
            continue
        if isinstance(value, (bool, int, float, str)) or (
            isinstance(value, tuple) and all(isinstance(v, (int, float)) for v in value)
        ):
            defaults[name] = value
    defaults.update({k: v for k, v in (info.defaults or {}).items() if k not in _NOT_OPTIONS})
    return defaults


def timm_clock(variant: str | None) -> str:
    """The clock convention of a timm optimizer: torch SGD's buffer sums gradients (heavy ball);
    timm's other optimizers average them or normalise the step (``"lr"``)."""
    from timm.optim._optim_factory import default_registry

    name = _timm_name(variant)
    info = default_registry.get_optimizer_info(name.split("_")[-1])
    try:  # a class timm names by its import path (apex's, bitsandbytes') is imported here
        opt_class = default_registry.get_optimizer_class(info, bind_defaults=False)
    except (ImportError, AssertionError) as error:  # not installed, or CUDA-only
        raise _unavailable(name, error) from None
    return "heavy-ball" if isinstance(opt_class, type) and issubclass(opt_class, torch.optim.SGD) else "lr"


def _unavailable(name: str, error: Exception) -> ConfigError:
    message = " ".join(str(error).split()) or type(error).__name__
    return ConfigError(f"timm optimizer '{name}' is unavailable here: {message}; pick another timm:<name>")


def build_timm(
    model: nn.Module, config, variant: str | None = None, options: dict | None = None
) -> torch.optim.Optimizer:
    """Any optimizer in timm's registry, by name (``timm:lion``, ``timm:lookahead_adamw``, ...).

    Built by ``timm.optim.create_optimizer_v2(model, opt=variant, lr=config.lr,
    weight_decay=config.weight_decay, momentum=config.momentum)``, so timm's defaults apply,
    including its exclusion of 1-D parameters from weight decay. Records the resulting groups
    in ``optimizer.initmem_param_groups`` keyed by their weight decay.
    """
    import timm.optim

    name = _timm_name(variant)
    defaults = timm_defaults(variant)
    # Only what --opt-arg changed: the rest stays timm's own choice (create_optimizer_v2 sets some).
    given = {key: value for key, value in (options or {}).items() if value != defaults.get(key)}
    try:
        optimizer = timm.optim.create_optimizer_v2(
            model,
            opt=name,
            lr=config.lr,
            weight_decay=config.weight_decay,
            momentum=config.momentum,
            **given,
        )
    except (ImportError, AssertionError) as error:  # apex / bitsandbytes / CUDA-only optimizers
        raise _unavailable(name, error) from None
    except ValueError as error:  # torch's own argument checks, e.g. timm's default Nesterov with --momentum 0
        message = " ".join(str(error).split())
        raise ConfigError(
            f"timm optimizer '{name}' refused its settings: {message}; set --momentum or --opt-arg accordingly"
        ) from None
    names = {id(p): n for n, p in model.named_parameters()}
    recorded: dict[str, list[str]] = {}
    for group in optimizer.param_groups:
        key = f"weight_decay={group.get('weight_decay', 0.0):g}"
        recorded.setdefault(key, []).extend(names.get(id(p), "?") for p in group["params"])
    record_param_groups(optimizer, recorded)
    return optimizer
