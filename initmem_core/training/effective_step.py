"""``--lr-match-sigma REF``: the effective-step control of docs/PAPER.md's last section.

A kernel whose output only a normalisation layer reads is *scale-invariant*: ``W -> c * W``
(``c > 0``) leaves the network's function unchanged, its gradient scales like ``1 / c``, and a plain
SGD step turns its direction by about ``lr / ||W||**2``. An initialization at sigma therefore starts
those kernels at an effective rate ``1 / sigma**2`` times the one at sigma 1. The control gives the
scale-invariant kernels the rate ``lr * (sigma / REF)**2`` (``schedules.lr_match_factor``), the rest
(norm affine, biases, the head) ``lr``, so every sigma starts at the effective step REF would have.

Which kernels: the model's own declaration (``contracts.DeclaresScaleInvariance``) when it has
one, else a ``torch.fx`` trace (``traced_scale_invariant``). The optimizer keeps one group per
(original group, invariant or not), the plain one first: the schedule (a ``LambdaLR`` on each
group's own initial rate) scales both alike, and the clocks, which read the first group, keep
counting the plain ``lr``.
"""

from __future__ import annotations

import torch
from torch import nn

from initmem_core.contracts import DeclaresScaleInvariance
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.optimizer_options import not_sgd_family
from initmem_core.training.schedules import lr_match_factor

#: Layers that divide their input by its spread, so the kernel feeding them loses its scale.
NORMS = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)
#: Layers whose weight can be scale-invariant.
KERNELS = (nn.modules.conv._ConvNd, nn.Linear)


def _feeds_only_norms(node: torch.fx.Node, module: nn.Module, modules: dict[str, nn.Module]) -> bool:
    norms = [modules.get(str(user.target)) if user.op == "call_module" else None for user in node.users]
    # BatchNorm subtracts each channel's mean, so a per-channel bias vanishes; the others do not.
    allowed = nn.modules.batchnorm._BatchNorm if module.bias is not None else NORMS
    return bool(norms) and all(isinstance(norm, allowed) for norm in norms)


def traced_scale_invariant(model: nn.Module) -> list[str] | None:
    """The ``weight`` of every conv and linear module all of whose calls feed a norm layer directly,
    by name; ``None`` when ``torch.fx`` cannot trace the model (data-dependent control flow...)."""
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:  # fx raises many kinds (TraceError, TypeError, NotImplementedError...)
        return None
    modules = dict(model.named_modules())
    verdicts: dict[str, bool] = {}
    for node in graph.nodes:
        module = modules.get(str(node.target)) if node.op == "call_module" else None
        if isinstance(module, KERNELS):
            name = str(node.target)
            verdicts[name] = verdicts.get(name, True) and _feeds_only_norms(node, module, modules)
    return [f"{name}.weight" if name else "weight" for name, invariant in verdicts.items() if invariant]


def scale_invariant_names(model: nn.Module, arch: str) -> list[str]:
    """The architecture's scale-invariant weights: declared, else traced. ``ConfigError`` when
    neither says, or none exist (the control would change nothing)."""
    names = model.scale_invariant_parameters() if isinstance(model, DeclaresScaleInvariance) else None
    names = traced_scale_invariant(model) if names is None else list(names)
    if names is None:
        raise ConfigError(
            f"--lr-match-sigma: architecture {arch} declares no scale-invariant weights and torch.fx cannot "
            "trace it; give its model a scale_invariant_parameters() method, or leave --lr-match-sigma at 0"
        )
    if not names:
        raise ConfigError(
            f"--lr-match-sigma: architecture {arch} has no scale-invariant weights (no conv or linear kernel "
            "feeds a normalisation layer), so the control would change nothing; leave it at 0"
        )
    known = dict(model.named_parameters())
    missing = [name for name in names if name not in known]
    if missing:
        raise ConfigError(f"architecture {arch} declares scale-invariant weights it lacks: {', '.join(missing)}")
    return names


def match_effective_step(optimizer: torch.optim.Optimizer, model: nn.Module, config) -> dict[str, list[str]]:
    """Split every parameter group of ``optimizer`` in place into its plain part (``lr``, first)
    and its scale-invariant part (``lr * lr_match_factor(config)``). Call before the scheduler is
    built. Returns the parameter names by group, for the run's record."""
    if not isinstance(optimizer, torch.optim.SGD):
        raise not_sgd_family(config.opt, f"builds {type(optimizer).__name__}")
    declared = set(scale_invariant_names(model, config.arch))
    invariant = {id(p) for name, p in model.named_parameters() if name in declared}
    names = {id(p): name for name, p in model.named_parameters()}
    factor = lr_match_factor(config)
    groups = []
    for group in optimizer.param_groups:
        plain = [p for p in group["params"] if id(p) not in invariant]
        matched = [p for p in group["params"] if id(p) in invariant]
        if plain:
            groups.append({**group, "params": plain})
        if matched:
            groups.append({**group, "params": matched, "lr": group["lr"] * factor})
    if invariant and not any(id(p) not in invariant for p in groups[0]["params"]):
        raise ConfigError(
            f"--lr-match-sigma: every parameter of {config.arch} is declared scale-invariant, so none keeps "
            "the plain rate the clocks count; check the architecture's declaration"
        )
    optimizer.param_groups.clear()
    for group in groups:
        optimizer.add_param_group(group)
    scaled = f"scale_invariant (lr x {factor:g})"
    record: dict[str, list[str]] = {"plain_lr": [], scaled: []}
    for group in optimizer.param_groups:
        for p in group["params"]:
            record[scaled if id(p) in invariant else "plain_lr"].append(names.get(id(p), "?"))
    return record
