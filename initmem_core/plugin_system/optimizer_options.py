"""An optimizer's own settings: the defaults it declares, and ``--opt-arg key=value`` checked against them.

An optimizer plugin registers ``defaults={"lr": ..., "betas": (0.9, 0.999), ...}``: ``lr`` is what
``--lr`` left unset (0) means, every other key is an option ``--opt-arg`` may set, and its default
value gives the type a command-line value is read as. ``settle`` is what a run's plan
(``training.plan.plan_run``, the one caller) takes from here: the config that is hashed, logged
and built, holding the resolved ``lr`` and the options in one canonical spelling, and the typed
options. Imports no torch (a family's defaults may, when read).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from initmem_core.config import FIELDS, RunConfig
from initmem_core.errors import ConfigError, did_you_mean
from initmem_core.kinds import flag_for
from initmem_core.plugin_system.registry import ComponentSpec

#: The rate of an optimizer that declares none (the old global default of ``--lr``).
FALLBACK_LR = 0.05


def split_opt_args(items: Iterable[str], flag: str = "--opt-arg", example: str = "betas=0.9,0.99") -> dict[str, str]:
    """``["betas=0.9,0.99", "eps=1e-8"]`` -> ``{"betas": "0.9,0.99", "eps": "1e-8"}``."""
    parsed: dict[str, str] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise ConfigError(f"{flag} {item!r}: write key=value, e.g. {flag} {example}")
        if key in parsed:
            raise ConfigError(f"{flag} {key} is given more than once")
        parsed[key] = value.strip()
    return parsed


def _scalar(text: str, like: Any) -> Any:
    if isinstance(like, bool):
        if text.lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            raise ValueError
        return text.lower() in ("true", "1", "yes", "on")
    if isinstance(like, int):
        return int(text)
    if isinstance(like, float):
        return float(text)
    if like is None:  # a boolean (fused=true, where torch's default is None), a number or text
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        try:
            return float(text)
        except ValueError:
            return text
    return text


def coerce_option(key: str, text: str, default: Any) -> Any:
    """Read ``text`` as the type of the declared ``default`` (a tuple: comma-separated items)."""
    try:
        if isinstance(default, (tuple, list)):
            items = [part.strip() for part in text.split(",")]
            if len(items) != len(default):
                raise ValueError
            return tuple(_scalar(part, like) for part, like in zip(items, default))
        return _scalar(text, default)
    except ValueError:
        expected = (
            f"{len(default)} comma-separated values like {render(default)}"
            if isinstance(default, (tuple, list))
            else f"a value like {render(default)}"
        )
        raise ConfigError(f"--opt-arg {key}={text}: expected {expected}") from None


def render(value: Any) -> str:
    """The canonical text of an option value (what the hash and the params hold)."""
    if isinstance(value, (tuple, list)):
        return ",".join(render(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def typed_given(config: RunConfig, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Only the options ``--opt-arg`` set, typed against the optimizer's declared ``defaults``."""
    given = split_opt_args(config.opt_arg)
    valid = sorted(key for key in defaults if key != "lr")
    for key, text in given.items():
        if key == "lr":
            raise ConfigError("--opt-arg lr: set the learning rate with --lr")
        if key in FIELDS and key not in valid:  # momentum, weight_decay: the run's own knobs
            raise ConfigError(f"--opt-arg {key}: {key} is initmem's own option; set it with {flag_for(key)} {text}")
        if key not in valid:
            listing = ", ".join(valid) if valid else "none (it declares no options)"
            raise ConfigError(
                f"--opt-arg {key}: optimizer {config.opt} has no option '{key}'{did_you_mean(key, valid)}; "
                f"valid keys: {listing}"
            )
    return {key: coerce_option(key, text, defaults[key]) for key, text in given.items()}


def not_sgd_family(opt: str, built: str) -> ConfigError:
    """``--lr-match-sigma`` with an optimizer whose step does not scale like the gradient."""
    return ConfigError(
        f"--lr-match-sigma is for SGD-family optimizers (their step turns a scale-invariant kernel by "
        f"lr/||W||^2), and {opt} {built}; use --opt sgd or leave --lr-match-sigma at 0"
    )


def settle(config: RunConfig, spec: ComponentSpec, defaults: Mapping[str, Any]) -> tuple[RunConfig, dict[str, Any]]:
    """The run's config with its optimizer's settings resolved, and every option of the optimizer,
    typed: its declared ``defaults``, then the ``--opt-arg``s. The config holds ``lr`` = the declared
    default when unset (0) and the ``--opt-arg``s checked, typed and spelled canonically (sorted
    ``key=value``, without those equal to the declared default); the options are read from that
    spelling. ``spec``: the optimizer's; ``defaults``: what it declares."""
    # a step normalised, or averaged: not SGD's (a family: when built)
    if config.lr_match_sigma and spec.info.clock == "lr":
        raise not_sgd_family(config.opt, "normalises or averages its step")
    typed = typed_given(config, defaults)
    # A value equal to the declared default changes nothing, so it leaves the hash alone too.
    canonical = tuple(f"{key}={render(value)}" for key, value in sorted(typed.items()) if value != defaults[key])
    lr = config.lr or float(defaults.get("lr", FALLBACK_LR))
    if lr != config.lr or canonical != tuple(config.opt_arg):
        config = config.replace(lr=lr, opt_arg=canonical)
    options = {key: value for key, value in defaults.items() if key != "lr"}
    return config, {**options, **typed_given(config, defaults)}


def describe(defaults: Any) -> str:
    """The defaults as ``initmem plugins`` shows them, without reading a family's lazily."""
    if defaults is None:
        return f"lr {FALLBACK_LR:g} (declares none)"
    if isinstance(defaults, str):
        return "the library's own, per variant (see --opt-arg)"
    return ", ".join(f"{key} {render(value)}" for key, value in defaults.items())
