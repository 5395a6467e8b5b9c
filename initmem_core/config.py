"""The one config object of a run: every knob in one place, validated, hashed and logged as is.

The CLI builds its ``run`` and ``sweep`` options from these fields (help text and panels
included), so a knob added here is an option everywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from initmem_core.errors import ConfigError, did_you_mean
from initmem_core.kinds import flag_for
from initmem_core.vocabulary import CLOCKS

#: Bounds beyond which a run cannot mean anything: sigma * Z overflows float32 long before 1e300,
#: checkpoint names hold 6 digits of epochs, torch seeds are unsigned 64-bit.
MAX_SIGMA, MAX_LR, MAX_EPOCHS = 1e3, 1e3, 999_999
MAX_SEED, MAX_INT = 2**64 - 1, 2**63 - 1

MODEL, OPTIM, REG, DATA, EVAL, REPRO, EXEC = (
    "Model and initialization",
    "Optimization",
    "Regularization",
    "Data",
    "Metrics",
    "Reproducibility",
    "Execution",
)


#: What a finished run keeps of its checkpoints (``keep_checkpoints``, ``CheckpointStore.finish``).
KEEP_CHECKPOINTS = ("last", "all", "none")


def knob(
    default: Any,
    help: str,
    panel: str,
    *,
    check: str | None = None,
    hashed: bool = True,
    choices: tuple[str, ...] | None = None,
    maximum: float | None = None,
    shown: str | None = None,
    hashed_when_set: bool = False,
) -> Any:
    """A config field with what the CLI and the validator need to know about it.

    A field that selects a component (``arch``, ``opt``...) is named in the table of kinds
    (``initmem_core.kinds``), which says its flag and its registry. ``check``: a numeric rule
    (``positive``, ``non-negative``, ``unit-interval``, ``at-least-1``). ``hashed=False``: the knob
    changes how a run executes, not what it computes, so it is left out of the config hash that
    identifies a sweep cell. ``maximum``: the largest value accepted (whole numbers are otherwise
    bounded by what a 64-bit integer holds). ``shown``: the default as ``--help`` states it, when
    the value itself does not say it (``lr`` 0 stands for the optimizer's own default).
    ``hashed_when_set``: hashed only when it differs from its default, so that a knob added after
    runs were hashed leaves their hashes (finished sweep cells, checkpoint folders) as they were.
    """
    if maximum is not None:
        help = f"{help} (at most {maximum:g})"
    meta = {
        "help": help,
        "panel": panel,
        "check": check,
        "hashed": hashed,
        "choices": choices,
        "maximum": maximum,
        "shown": shown,
        "hashed_when_set": hashed_when_set,
    }
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: tuple(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class RunConfig:
    # Model and initialization: sigma enters only through the initializer.
    arch: str = knob("resnet20", "Architecture (see `initmem plugins`)", MODEL)
    init: str = knob("fan-in", "Initializer that applies sigma", MODEL)
    sigma: float = knob(1.0, "Initialization scale sigma_w", MODEL, check="positive", maximum=MAX_SIGMA)
    arch_arg: tuple[str, ...] = knob(
        (),
        "A keyword of the architecture's factory, key=value, e.g. drop_rate=0.1; repeatable",
        MODEL,
        hashed_when_set=True,
    )
    # Optimization
    opt: str = knob("sgd", "Optimizer", OPTIM)
    lr: float = knob(
        0.0,
        "Peak learning rate; unset (0): the optimizer's declared default",
        OPTIM,
        check="non-negative",
        maximum=MAX_LR,
        shown="the optimizer's own: sgd 0.05, adam/adamw 0.001, muon 0.01 in timm's units; `initmem plugins` lists all",
    )
    momentum: float = knob(0.0, "SGD momentum (0: plain SGD)", OPTIM, check="unit-interval")
    weight_decay: float = knob(
        0.0, "Optimizer weight decay: coupled for sgd/adam, decoupled for adamw/muon", OPTIM, check="non-negative"
    )
    opt_arg: tuple[str, ...] = knob(
        (),
        "An option of the optimizer as key=value, e.g. betas=0.9,0.99 "
        "(repeatable; `initmem plugins` lists each optimizer's)",
        OPTIM,
    )
    batch_size: int = knob(64, "Training batch size b", OPTIM, check="at-least-1")
    epochs: int = knob(
        30, "Training epochs (with --until or --patience: the cap)", OPTIM, check="at-least-1", maximum=MAX_EPOCHS
    )
    until: str = knob(
        "",
        "Train until a forgetting clock reaches a value, CLOCK=VALUE with CLOCK one of clock_sgd, clock_l2, "
        "clock_adapt (e.g. clock_l2=2.0): the fewest epochs whose final clock reaches it, under this "
        "run's schedule; --epochs, if given, is then the cap",
        OPTIM,
        shown="off: --epochs sets the epochs",
        hashed_when_set=True,
    )
    patience: int = knob(
        0,
        "Early stopping: end once the best validation loss (the selection's) has not improved for N evaluations "
        "(epochs, or --eval-every points), by --epochs at most; with --until, not before its target",
        OPTIM,
        check="non-negative",
        maximum=MAX_EPOCHS,
        shown="off (0): the run trains its whole horizon",
        hashed_when_set=True,
    )
    lr_match_sigma: float = knob(
        0.0,
        "The effective-step control, REF: the scale-invariant kernels (those feeding a normalisation "
        "layer) train at lr * (sigma / REF)^2, everything else (norm affine, biases, the head) at lr; "
        "SGD-family optimizers only. The clocks keep counting the plain lr",
        OPTIM,
        check="non-negative",
        maximum=MAX_SIGMA,
        shown="off (0): one rate for every parameter",
        hashed_when_set=True,
    )
    schedule: str = knob("constant", "Learning-rate schedule", OPTIM, choices=("constant", "step", "cosine"))
    warmup_epochs: float = knob(0.0, "Linear warm-up length in epochs", OPTIM, check="non-negative")
    lr_step_epochs: int = knob(30, "Step schedule: decay every this many epochs", OPTIM, check="at-least-1")
    lr_gamma: float = knob(0.1, "Step schedule: decay factor", OPTIM, check="positive")
    # Regularization: coupled, i.e. part of the objective (decoupled decay is --weight-decay).
    reg: str = knob("l2", "Explicit regularizer applied with coefficient --l2", REG)
    l2: float = knob(0.0, "Regularization coefficient lambda (0: off)", REG, check="non-negative")
    # Data
    data: str = knob("digits", "Dataset", DATA)
    data_dir: str = knob(
        "", "Folder holding the dataset files (default: ~/.cache/initmem/<dataset>)", DATA, hashed=False
    )
    download: bool = knob(
        False,
        "Download the dataset when its files are missing (cifar10, cifar100, fashion-mnist, mnist) into "
        "--data-dir or ~/.cache/initmem/<dataset>, with torchvision's downloader and checksums",
        DATA,
        hashed=False,
    )
    augment: str = knob(
        "auto", "Augmentation: auto (the dataset's default), on, off", DATA, choices=("auto", "on", "off")
    )
    train_size: int = knob(
        0,
        "Train on the first N training examples (0: all); the validation and test splits are still scored "
        "whole at every evaluation unless --eval-size caps them",
        DATA,
        check="non-negative",
    )
    # Metrics
    metrics: tuple[str, ...] = knob((), "Extra metric plugins to compute every epoch", EVAL)
    train_eval_size: int = knob(
        0,
        "Clean training-set evaluation (train_acc, tau_interp) on a fixed, data-seeded subset of N examples (0: all)",
        EVAL,
        check="non-negative",
    )
    eval_size: int = knob(
        0,
        "Score a fixed, data-seeded subset of at most N validation and N test examples every epoch (0: all); "
        "the selected checkpoint is scored once on the whole test split. With a small --train-size on a large "
        "dataset evaluation is most of a run's time (the sweep's --dry-run counts it)",
        DATA,
        check="non-negative",
    )
    interp_threshold: float = knob(
        0.995, "Train accuracy that counts as interpolation (tau_interp)", EVAL, check="unit-interval"
    )
    eval_every: int = knob(
        1,
        "Evaluate (train, val, test, metrics) every N epochs, and at the first and last: "
        "tau_interp and the best-validation checkpoint are then read at that resolution",
        EVAL,
        check="at-least-1",
        maximum=MAX_EPOCHS,
        hashed_when_set=True,
    )
    # Reproducibility
    seed: int = knob(
        0, "Seed of the initial draw Z and of the data order", REPRO, check="non-negative", maximum=MAX_SEED
    )
    data_seed: int = knob(0, "Seed of the train/validation split", REPRO, check="non-negative", maximum=MAX_SEED)
    deterministic: bool = knob(
        False,
        "Use PyTorch's deterministic algorithms, which GPUs need for "
        "bit-identical reruns (on CPU a fixed --threads is enough)",
        REPRO,
        hashed=False,
    )
    # Execution: how, not what.
    device: str = knob("auto", "Device: auto, cpu, cuda, cuda:N or mps", EXEC, hashed=False)
    threads: int = knob(0, "CPU threads for torch (0: torch's default)", EXEC, check="non-negative", hashed=False)
    channels_last: bool = knob(False, "Channels-last memory format (faster convolutions on GPUs)", EXEC, hashed=False)
    amp: str = knob(
        "off",
        "Mixed precision: off, or bf16 autocast (weights, BatchNorm and optimizer stay fp32)",
        EXEC,
        choices=("off", "bf16"),
    )
    compile: bool = knob(
        False,
        "torch.compile the model for training and evaluation (compiled once per process and "
        "architecture, reused across sweep cells)",
        EXEC,
        hashed=False,
    )
    compile_mode: str = knob(
        "default",
        "torch.compile mode with --compile: default, reduce-overhead (CUDA graphs) or max-autotune",
        EXEC,
        choices=("default", "reduce-overhead", "max-autotune"),
        hashed=False,
    )
    tf32: str = knob(
        "off",
        "TensorFloat-32 for fp32 matmuls and convolutions on GPUs: off (true fp32, a science run's "
        "default) or on (faster on Ampere and newer, about 3 significant digits)",
        EXEC,
        choices=("off", "on"),
        hashed_when_set=True,
    )
    loader: str = knob(
        "device",
        "Input pipeline: device (whole dataset on the device) or torchvision (DataLoader)",
        EXEC,
        choices=("device", "torchvision"),
        hashed=False,
    )
    eval_batch_size: int = knob(1024, "Batch size for evaluation passes", EXEC, check="at-least-1", hashed=False)
    # Checkpoints: where a killed run is resumed from (see initmem_core.training.checkpoint_store and .resume).
    checkpoint_every: int = knob(
        1, "Checkpoint every N epochs and at the end (0: never)", EXEC, check="non-negative", hashed=False
    )
    checkpoint_dir: str = knob(
        "",
        "Checkpoint folder, one subfolder per config hash (default: initmem-checkpoints "
        "beside the SQLite tracking database, else in the current folder)",
        EXEC,
        hashed=False,
    )
    keep_checkpoints: str = knob(
        "last",
        "What a finished run keeps of its checkpoints: last (what --resume of a longer horizon needs), "
        "all (every one written), none",
        EXEC,
        choices=KEEP_CHECKPOINTS,
        hashed=False,
    )

    # -- derived -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in dataclasses.fields(self)
        }

    def config_hash(self) -> str:
        """Identifies what a run computes; sweeps use it to skip cells that already finished.
        A run's is derived once, by its plan (``training.plan.RunPlan.config_hash``)."""
        hashed = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata["hashed"] and not (f.metadata["hashed_when_set"] and getattr(self, f.name) in (f.default, ()))
        }
        if self.until and not self.patience:  # the target sets the epochs; --epochs only caps them
            del hashed["epochs"]
        # How an optimizer's step is executed (one fused kernel, or one per tensor list) is not what it computes.
        hashed["opt_arg"] = tuple(item for item in self.opt_arg if item.partition("=")[0] not in EXECUTION_OPT_ARGS)
        text = json.dumps(hashed, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def run_name(self, fields: Iterable[str] | None = None) -> str:
        """A name for humans: the architecture, the optimizer, each of ``fields`` (by default every
        hashed setting but ``UNNAMED`` that differs from its default: what tells this run from
        others), sigma and seed, e.g. ``resnet56-muon-lr0.003-clock_sgd=0.05-s2.0-seed0``. A sweep
        names its cells by the fields it varies (``sweep.grid.cell_names``)."""
        if fields is None:
            fields = [name for name in HASHED if name not in UNNAMED and getattr(self, name) != getattr(DEFAULTS, name)]
        told = [n for n in fields if n not in ("arch", "opt", "sigma", "seed") and not (n == "epochs" and self.until)]
        parts = [self.arch, self.opt, *(setting_text(n, getattr(self, n)) for n in told)]
        name = "-".join([*parts, f"s{short_number(self.sigma)}", f"seed{self.seed}"])
        return re.sub(r"[^\w.+:=,-]", "_", name)  # nothing a file name or a shell would trip on

    def replace(self, **changes: Any) -> RunConfig:
        return from_mapping({**self.to_dict(), **changes})


#: ``--opt-arg`` keys that choose how an optimizer executes its step, not what it computes: left
#: out of the config hash, like ``--compile`` and ``--channels-last``.
EXECUTION_OPT_ARGS = ("foreach", "fused")


def parse_until(text: str) -> tuple[str, float] | None:
    """``--until``: ``"clock_l2=2.0"`` -> ``("clock_l2", 2.0)``; ``""`` -> ``None`` (``--epochs``
    sets the epochs). ``ConfigError`` for anything else. See ``initmem_core.training.horizons``."""
    text = str(text).strip()
    if not text:
        return None
    clock, equals, value = (part.strip() for part in text.partition("="))
    if not equals or clock not in CLOCKS:  # --until may target every clock
        valid = ", ".join(sorted(CLOCKS))
        raise ConfigError(
            f"--until {text!r}{did_you_mean(clock, list(CLOCKS))}: write CLOCK=VALUE with CLOCK one of {valid}, "
            "e.g. --until clock_l2=2.0"
        )
    try:
        target = float(value)
    except ValueError:
        target = math.nan
    if not (math.isfinite(target) and target > 0):
        raise ConfigError(f"--until {text!r}: the target must be a number greater than 0, e.g. --until {clock}=2.0")
    return clock, target


def _canonical_until(text: str) -> str:
    """One spelling per target (``clock_l2=2`` and ``clock_l2=2.0`` are one cell, one hash)."""
    parsed = parse_until(text)
    return f"{parsed[0]}={parsed[1]!r}" if parsed else ""


#: What only measures a run, not what it trains: left out of a single run's name.
UNNAMED = ("metrics", "train_eval_size", "eval_size", "eval_every", "interp_threshold")
#: How run names (``lr0.001``) and group labels (``lr=0.001``) name a field; a text field without
#: one shows its value alone (``adamw``, ``fashion-mnist``, ``clock_sgd=0.05``).
NAME_PREFIX = {
    **{"momentum": "mom", "weight_decay": "wd", "batch_size": "b", "epochs": "ep", "train_size": "n"},
    **{"warmup_epochs": "warm", "interp_threshold": "thr", "augment": "aug", "amp": "amp", "tf32": "tf32"},
}


def value_text(value: Any) -> str:
    """A value as group and cell names show it: a float to 6 significant digits, a tuple joined by ``+``."""
    return (
        ("+".join(value) or "none")
        if isinstance(value, tuple)
        else f"{value:g}"
        if isinstance(value, float)
        else str(value)
    )


def exact_text(value: Any) -> str:
    """A value as a group label or run name shows it."""
    # 12 significant digits, not value_text's 6: lr 0.0010001 and 0.001 must not share a label.
    return f"{value:.12g}" if isinstance(value, float) else value_text(value)


def setting_text(name: str, value: Any, equals: str = "") -> str:
    """One setting as a run name (``lr0.001``, ``b32``) or, with ``equals="="``, a group label shows it."""
    if name not in NAME_PREFIX and isinstance(FIELDS[name].default, str):
        return exact_text(value)
    return f"{NAME_PREFIX.get(name, name)}{equals}{exact_text(value)}"


def short_number(value: float) -> str:
    text = f"{value:g}"
    return text if any(c in text for c in ".e") else f"{text}.0"


FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
#: The fields the config hash may hold (``knob(hashed=...)``): what a run computes, in field order.
HASHED = tuple(name for name, f in FIELDS.items() if f.metadata["hashed"])
DEFAULTS = RunConfig()


def field_type(name: str) -> type:
    default = FIELDS[name].default
    return tuple if default is dataclasses.MISSING else type(default)  # knob gives only tuple fields a factory


def unknown_key_error(key: str, source: str) -> ConfigError:
    return ConfigError(
        f"unknown key '{key}' in {source}{did_you_mean(key, list(FIELDS))}; valid keys: {', '.join(sorted(FIELDS))}"
    )


def coerce(name: str, value: Any) -> Any:
    """Convert ``value`` (from TOML or a command line string) to the type of field ``name``."""
    kind = field_type(name)
    try:
        if kind is tuple:
            if isinstance(value, Mapping):  # TOML: opt_arg = {betas = "0.9,0.99"}
                value = [
                    f"{k}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}" for k, v in value.items()
                ]
            if isinstance(value, str) and name in ("opt_arg", "arch_arg"):  # a comma starts an item only before key=
                items = re.split(r",(?=\s*[A-Za-z_][\w.]*\s*=)", value)
            else:
                items = value.split(",") if isinstance(value, str) else list(value)
            return tuple(str(item).strip() for item in items if str(item).strip())
        if kind is bool:
            if isinstance(value, str):
                return value.strip().lower() in {"1", "true", "yes", "on"}
            return bool(value)
        if kind in (int, float) and isinstance(value, bool):
            raise ValueError  # True == 1 to Python; a TOML true is not a number
        if kind is int:
            number = float(value) if isinstance(value, str) and any(c in value for c in ".eE") else value
            if isinstance(number, float) and not number.is_integer():
                raise ValueError
            return int(number)
        if kind is float:
            return float(value)
        if name == "until":
            return _canonical_until(value)
        return str(value)
    except (TypeError, ValueError):
        expected = {int: "a whole number", float: "a number", tuple: "a list"}.get(kind, "text")
        raise ConfigError(f"{flag_for(name)}: expected {expected}, got {value!r}") from None


def from_mapping(values: Mapping[str, Any], source: str = "the config") -> RunConfig:
    """A config from the values given (the rest at their defaults). With ``until`` given and
    ``epochs`` not (nor ``patience``), there is no cap: the run takes as many epochs as the target needs."""
    for key in values:
        if key not in FIELDS:
            raise unknown_key_error(key, source)
    if values.get("until") and "epochs" not in values and not coerce("patience", values.get("patience", 0)):
        values = {**values, "epochs": MAX_EPOCHS}
    return RunConfig(**{key: coerce(key, value) for key, value in values.items()})


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file into a plain dict (never evaluated, never unpickled)."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; check the path given to --config") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a folder; --config takes a TOML file") from None
    except OSError as error:
        raise ConfigError(f"config file {path} cannot be read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not valid TOML: it is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None


_CHECKS = {
    "positive": (lambda v: v > 0, "must be greater than 0"),
    "non-negative": (lambda v: v >= 0, "must be 0 or greater"),
    "unit-interval": (lambda v: 0 <= v <= 1, "must be between 0 and 1"),
    "at-least-1": (lambda v: v >= 1, "must be 1 or greater"),
}


def validate(config: RunConfig) -> RunConfig:
    """Check every value. Returns the config with its values spelled canonically: use the return
    value. The config to *run* also has every component it names looked up and its optimizer's
    settings resolved: ``training.plan.plan_run(config, registry).config``."""
    for name, f in FIELDS.items():
        value, flag = getattr(config, name), flag_for(name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{flag} must be a finite number, got {value}")
        if f.metadata["check"]:
            ok, rule = _CHECKS[f.metadata["check"]]
            if not ok(value):
                raise ConfigError(f"{flag} {rule}, got {value}")
        top = f.metadata.get("maximum")
        if top is None and type(value) is int:
            top = MAX_INT
        if top is not None and value > top:
            raise ConfigError(
                f"{flag} must be at most {top:g}, got {value:g}"
                if isinstance(value, float)
                else f"{flag} must be at most {int(top)}, got {value}"
            )
        if f.metadata["choices"] and value not in f.metadata["choices"]:
            choices = list(f.metadata["choices"])
            raise ConfigError(
                f"{flag}: unknown value '{value}'{did_you_mean(str(value), choices)}; "
                f"valid values: {', '.join(sorted(choices))}"
            )
    if config.momentum >= 1:
        raise ConfigError(f"--momentum must be below 1, got {config.momentum}")
    if config.lr_match_sigma:  # the kernels' rate, lr * (sigma / REF)^2, must be a rate too
        ratio = config.sigma / config.lr_match_sigma
        factor = ratio * ratio  # inf, not OverflowError, for a REF far below sigma
        if not (math.isfinite(factor) and config.lr * factor <= MAX_LR):
            raise ConfigError(
                f"--lr-match-sigma {config.lr_match_sigma:g}: the scale-invariant kernels' rate, "
                f"lr * (sigma / REF)^2 at sigma {config.sigma:g}, would exceed {MAX_LR:g}; use a REF nearer sigma"
            )
    return dataclasses.replace(config, until=_canonical_until(config.until))
