"""Optimizers declare their defaults and options: --lr unset means the declared lr; --opt-arg
reaches the optimizer, typed, checked against what it declares, hashed and logged."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core import run
from initmem_core.config import from_mapping
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.optimizer_options import coerce_option, split_opt_args
from initmem_core.sweep.grid import expand, spec_from_toml
from initmem_core.tracking.tracker import MemoryTracker
from initmem_core.training.plan import plan_run
from tests.support.cli_processes import SYNTHETIC

SMALL = {**SYNTHETIC, "batch_size": 32, "epochs": 1}


def resolved(**values):
    return plan_run(from_mapping(values), get_registry()).config


@pytest.mark.parametrize("opt, lr", [("sgd", 0.05), ("adam", 1e-3), ("adamw", 1e-3), ("muon", 0.01)])
def test_unset_lr_is_the_optimizers_declared_default(opt, lr):
    assert resolved(opt=opt).lr == lr
    assert resolved(opt=opt, lr=0.3).lr == 0.3  # a given rate wins


def test_the_resolved_rate_is_the_one_hashed_so_unset_and_explicit_are_one_cell():
    assert resolved(opt="adam").config_hash() == resolved(opt="adam", lr=1e-3).config_hash()
    assert resolved(opt="adam").config_hash() != resolved(opt="adam", lr=2e-3).config_hash()


def test_timm_family_exposes_timms_own_defaults():
    lion = resolved(opt="timm:lion")
    assert lion.lr == 1e-4  # timm's Lion signature default
    assert resolved(opt="timm:lion", opt_arg=("betas=0.95,0.98",)).opt_arg == ("betas=0.95,0.98",)


def test_opt_arg_reaches_the_optimizer_typed_and_is_logged():
    tracker = MemoryTracker()
    result = run(**SMALL, opt="adam", opt_arg=("betas=0.9,0.99", "amsgrad=true"), tracker=tracker)
    assert result.config.lr == 1e-3
    group = tracker.params
    assert group["optimizer.betas"] == (0.9, 0.99) and group["optimizer.amsgrad"] is True
    assert group["opt_arg.betas"] == "0.9,0.99" and group["opt_arg"] == "amsgrad=True,betas=0.9,0.99"
    # What was logged reads back as the same config (the report rebuilds configs from params).
    assert from_mapping({"opt": "adam", "opt_arg": group["opt_arg"]}).opt_arg == ("amsgrad=True", "betas=0.9,0.99")


def test_opt_args_are_canonical_in_the_hash():
    a = resolved(opt="adam", opt_arg=("eps=1e-8", "betas=0.9, 0.99"))
    b = resolved(opt="adam", opt_arg=("betas=0.9,0.99",))
    assert a.config_hash() == b.config_hash()  # eps=1e-8 is the default: it changes nothing
    assert a.opt_arg == ("betas=0.9,0.99",)
    assert resolved(opt="adam", opt_arg=("eps=1e-6",)).opt_arg == ("eps=1e-06",)


@pytest.mark.parametrize(
    "items, message",
    [
        (("momentum=0.9",), "--opt-arg momentum: momentum is initmem's own option; set it with --momentum 0.9"),
        (("weight_decay=0.1",), "set it with --weight-decay 0.1"),
        (("beta=0.9,0.99",), "has no option 'beta' (did you mean 'betas'?); valid keys: amsgrad, betas,"),
        (("betas=0.9",), "--opt-arg betas=0.9: expected 2 comma-separated values like 0.9,0.999"),
        (("lr=0.1",), "--opt-arg lr: set the learning rate with --lr"),
        (("betas",), "--opt-arg 'betas': write key=value"),
    ],
)
def test_bad_opt_args_are_one_clear_error(items, message):
    with pytest.raises(ConfigError) as error:
        resolved(opt="adam", opt_arg=items)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_unknown_key_on_the_command_line_is_one_line_naming_the_valid_ones():
    result = CliRunner().invoke(app, ["run", "--opt", "adam", "--opt-arg", "beta=0.9,0.99", "--no-tracking"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "has no option 'beta' (did you mean 'betas'?); valid keys: " in lines[0], result.stderr
    assert {"amsgrad", "eps"} <= set(lines[0].split("valid keys: ")[1].split(", "))


def test_split_and_coerce_by_hand():
    assert split_opt_args(["betas=0.9,0.99", " eps = 1e-6"]) == {"betas": "0.9,0.99", "eps": "1e-6"}
    assert coerce_option("ns_steps", "3", 5) == 3 and coerce_option("nesterov", "yes", False) is True
    with pytest.raises(ConfigError):
        coerce_option("ns_steps", "3.5", 5)


def test_opt_arg_is_a_sweepable_knob_in_toml(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text('[base]\nopt = "adam"\nepochs = 1\n[grid]\nopt_arg = [["betas=0.9,0.99"], ["betas=0.8,0.9"]]\n')
    cells = expand(spec_from_toml(path), get_registry())
    assert [c.opt_arg for c in cells] == [("betas=0.9,0.99",), ("betas=0.8,0.9",)]
    assert len({c.config_hash() for c in cells}) == 2 and {c.lr for c in cells} == {1e-3}
