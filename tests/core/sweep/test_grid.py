"""Sweep grids: lists, ranges, TOML sweep files, CLI overrides, bad specs, groups and names."""

from __future__ import annotations

import textwrap

import pytest

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.groups import group_fields, group_keys, metric_suffix
from initmem_core.plugin_system.loader import load_registry
from initmem_core.sweep.grid import (
    SweepSpec,
    default_name,
    expand,
    parse_range,
    parse_values,
    spec_from_toml,
    spec_from_values,
)


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("sigma", "0.1,0.5,1,2", (0.1, 0.5, 1.0, 2.0)),
        ("sigma", "0.1:2.5:7", (0.1, 0.5, 0.9, 1.3, 1.7, 2.1, 2.5)),
        ("sigma", "0.1:0.3:3", (0.1, 0.2, 0.3)),  # no 0.20000000000000004
        ("batch_size", "16,64,256", (16, 64, 256)),
        ("batch_size", "16:256:4", (16, 96, 176, 256)),
        ("seed", "0:2:3", (0, 1, 2)),
        ("l2", "0,1e-4,1e-2", (0.0, 1e-4, 1e-2)),
        ("opt", "sgd, adam,adamw", ("sgd", "adam", "adamw")),
        ("opt", "timm:lion", ("timm:lion",)),  # a colon in a name is not a range
        ("epochs", "5", (5,)),
        ("metrics", "a,b", (("a", "b"),)),  # a list-typed field: text is one value
    ],
)
def test_lists_and_ranges_from_text(name, text, expected):
    assert parse_values(name, text) == expected


def test_ints_stay_ints_and_lists_from_python_values():
    assert all(type(v) is int for v in parse_values("batch_size", "16:256:4"))
    assert parse_values("sigma", [0.5, 1, "2"]) == (0.5, 1.0, 2.0)
    assert parse_values("metrics", [["a"], ["a", "b"]]) == (("a",), ("a", "b"))
    assert parse_values("epochs", 3) == (3,)


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("batch_size", "10:20:4", "not all whole numbers"),
        ("sigma", "0.1:2.5", "a range is start:stop:count"),
        ("sigma", "0.1:2.5:1", "at least 2"),
        ("sigma", "0.1:2.5:x", "at least 2"),
        ("sigma", "a:b:3", "--sigma: expected a number, got 'a'"),
        ("sigma", "0.5,big", "--sigma: expected a number, got 'big'"),
        ("opt", "sgd,,adam", "give at least one value"),
        ("sigma", "1,1.0", "lists 1.0 more than once"),
        ("batch_size", "12.5,16", "expected a whole number"),
        ("sigm", "1", r"unknown key 'sigm' in the sweep \(did you mean 'sigma'\?\); valid keys: "),
    ],
)
def test_bad_specs_are_one_line_config_errors(name, text, message):
    with pytest.raises(ConfigError, match=message) as error:
        parse_values(name, text)
    assert "\n" not in str(error.value)


def test_a_range_on_a_text_option_says_ranges_need_numbers():
    with pytest.raises(ConfigError, match="--schedule a:b:3: a range start:stop:count needs a numeric option"):
        parse_range("schedule", "a:b:3")


def write(tmp_path, text):
    path = tmp_path / "sweep.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_toml_sweep_file_with_base_grid_and_name(tmp_path):
    spec = spec_from_toml(
        write(
            tmp_path,
            """
        name = "sgd-vs-adam"
        [base]
        data = "digits"
        epochs = 2
        metrics = ["weight-norms"]
        [grid]
        sigma = "0.5:2:4"
        opt = ["sgd", "adam"]
        batch_size = [16, 64]
    """,
        )
    )
    assert spec.name == "sgd-vs-adam"
    assert spec.axes["sigma"] == (0.5, 1.0, 1.5, 2.0)
    assert spec.axes["metrics"] == (("weight-norms",),)
    assert spec.varying == ["sigma", "opt", "batch_size"]
    cells = expand(spec)
    assert len(cells) == 16 and all(c.epochs == 2 and c.data == "digits" for c in cells)


def test_cli_values_replace_both_base_and_grid_of_the_file(tmp_path):
    spec = spec_from_toml(
        write(
            tmp_path,
            """
        [base]
        epochs = 5
        [grid]
        sigma = [0.5, 1.0, 2.0]
        opt = ["sgd", "adam"]
    """,
        )
    )
    merged = spec.override(spec_from_values({"sigma": "0.1", "epochs": "1,2"}))
    assert merged.axes["sigma"] == (0.1,)
    assert merged.axes["epochs"] == (1, 2)
    assert merged.axes["opt"] == ("sgd", "adam")
    assert merged.varying == ["opt", "epochs"]


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "[grid]\nsigm = [1.0]\n",
            "unknown key 'sigm' in \\[grid\\] of .*sweep.toml \\(did you mean 'sigma'\\?\\); valid keys: ",
        ),
        ("[base]\nbatchsize = 4\n", "unknown key 'batchsize' in \\[base\\] of .* \\(did you mean 'batch_size'\\?\\)"),
        (
            "[grids]\nsigma = [1.0]\n",
            "unknown key 'grids' in .*; it takes name, \\[base\\], \\[grid\\], \\[\\[groups\\]\\], \\[execution\\]",
        ),
        ("[base]\nsigma = [1.0, 2.0]\n", "\\[base\\] sigma in .* must be one value; put lists in \\[grid\\]"),
        ("[grid]\nsigma = 1.0\n", "\\[grid\\] sigma in .* must be a list or a range"),
        ("[base]\nsigma = 1.0\n[grid]\nsigma = [1.0, 2.0]\n", "'sigma' is in both \\[base\\] and \\[grid\\]"),
        ("[grid\nsigma = 1", "is not valid TOML"),
    ],
)
def test_bad_sweep_files_are_rejected_with_one_line(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message) as error:
        spec_from_toml(write(tmp_path, text))
    assert "\n" not in str(error.value)


def test_every_cell_is_validated_with_the_registry_before_anything_runs():
    registry = load_registry(entry_points=False)
    with pytest.raises(ConfigError, match=r"--sigma must be greater than 0, got 0.0 \(in the cell sigma=0.0\)"):
        expand(spec_from_values({"sigma": "0,1"}), registry)
    with pytest.raises(Exception, match=r"unknown optimizer 'adma' \(did you mean 'adam'\?\); valid names: adam"):
        expand(spec_from_values({"opt": "sgd,adma"}), registry)


def test_cells_run_group_by_group_with_sigma_varying_fastest():
    cells = expand(spec_from_values({"sigma": "0.5,1", "seed": "0,1", "opt": "sgd,adam"}))
    assert [(c.opt, c.seed, c.sigma) for c in cells[:4]] == [
        ("sgd", 0, 0.5),
        ("sgd", 0, 1.0),
        ("sgd", 1, 0.5),
        ("sgd", 1, 1.0),
    ]
    assert len({c.config_hash() for c in cells}) == 8


def test_groups_are_the_fields_that_vary_besides_sigma_and_seed():
    cells = expand(spec_from_values({"sigma": "0.5,1", "seed": "0,1", "opt": "sgd,adam", "batch_size": "16,64"}))
    fields = group_fields(cells)
    assert fields == ["opt", "batch_size"]
    assert group_keys(cells[:1]) == ["opt=sgd,batch_size=16"]
    assert len(set(group_keys(cells))) == 4
    single = expand(spec_from_values({"sigma": "0.5,1", "seed": "0,1"}))
    assert group_fields(single) == [] and set(group_keys(single)) == {"opt=sgd"}
    # Execution knobs never split groups: they change how a cell runs, not what it computes.
    assert group_fields([RunConfig(threads=1), RunConfig(threads=2, sigma=2.0)]) == []


def test_metric_suffix_is_what_mlflow_accepts():
    assert metric_suffix("opt=sgd,batch_size=64") == "opt-sgd.batch_size-64"
    assert metric_suffix("opt=timm:lion,l2=0.01") == "opt-timm_lion.l2-0.01"
    assert metric_suffix("all") == "all"


def test_default_name_is_readable_and_the_same_for_the_same_grid():
    spec = spec_from_values({"data": "digits", "sigma": "0.5,1", "opt": "sgd,adam"})
    name = default_name(spec)
    assert name.startswith("digits-resnet20-sigma-opt-")
    assert default_name(spec_from_values({"opt": "sgd,adam", "sigma": "0.5,1", "data": "digits"})) == name
    assert default_name(spec.override(spec_from_values({"epochs": 3}))) != name
    # threads does not change what a cell computes, so it does not change the sweep either
    assert default_name(spec.override(spec_from_values({"threads": 2}))) == name
    assert default_name(SweepSpec()).startswith("digits-resnet20-single-")


def test_estimated_work_counts_optimizer_steps_when_sizes_are_known():
    cells = expand(spec_from_values({"train_size": 200, "batch_size": "50,64", "epochs": 2}))
    from initmem_cli.dry_run import work_of

    assert work_of(cells, None) == {"text": f"{2 * 4 + 2 * 4:,} optimizer steps", "optimizer_steps": 16, "epochs": 4}
    assert work_of(expand(spec_from_values({"epochs": "2,3"})), None)["text"] == "5 epochs"


def test_groups_are_a_union_of_grids_and_the_cli_overrides_them(tmp_path):
    path = tmp_path / "paper.toml"
    path.write_text(
        "[base]\nepochs = 3\n[grid]\nsigma = [0.5, 2.0]\nseed = [0, 1]\n"
        '[[groups]]\nopt = "sgd"\nlr = 0.01\n[[groups]]\nopt = "adam"\nlr = 0.001\n'
        '[[groups]]\nopt = "sgd"\nlr = 0.01\nl2 = 0.01\n'
    )
    spec = spec_from_toml(path)
    cells = expand(spec)
    assert len(cells) == 3 * 2 * 2
    assert {(c.opt, c.lr, c.l2) for c in cells} == {("sgd", 0.01, 0.0), ("adam", 0.001, 0.0), ("sgd", 0.01, 0.01)}
    assert spec.varying == ["sigma", "opt", "lr", "l2", "seed"]
    overridden = spec.override(spec_from_values({"lr": "0.1"}))
    assert {c.lr for c in expand(overridden)} == {0.1}
    assert len(expand(overridden)) == 3 * 2 * 2


def test_groups_that_repeat_a_cell_run_it_once(tmp_path):
    path = tmp_path / "twice.toml"
    path.write_text('[grid]\nsigma = [1.0]\n[[groups]]\nopt = "sgd"\n[[groups]]\nopt = "sgd"\n')
    assert len(expand(spec_from_toml(path))) == 1
    path.write_text('[grid]\nopt = ["sgd", "adam"]\n[[groups]]\nopt = "sgd"\n')
    with pytest.raises(ConfigError, match="'opt' is in both \\[grid\\] and \\[\\[groups\\]\\]"):
        spec_from_toml(path)
