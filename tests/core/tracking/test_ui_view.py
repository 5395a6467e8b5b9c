"""The prepared MLflow view without a server: group labels and run names that describe a cell, the prepared MLflow
view's state, the parent's description, and terminal tables that never cut a value."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest
from rich.console import Console

from initmem_cli.tables import fitted_tables
from initmem_core.config import RunConfig
from initmem_core.groups import group_label
from initmem_core.report.description import description
from initmem_core.report.memory import build_report
from initmem_core.sweep.grid import cell_names, plan_sweep
from initmem_core.tracking.ui_view import view_key, view_state
from tests.support.builders import cell, record


def test_two_sweeps_with_different_learning_rates_never_share_a_group_label():
    first = plan_sweep({"opt": "adam,sgd", "lr": "0.001", "sigma": "0.5,1"})
    second = plan_sweep({"opt": "adam,sgd", "lr": "0.0001", "sigma": "0.5,1"})
    assert not set(first.groups) & set(second.groups)
    assert "opt=adam,lr=0.001" in first.groups and "opt=adam,lr=0.0001" in second.groups


def test_a_group_label_depends_on_the_group_alone_not_on_the_rest_of_the_sweep():
    # the old labels left out a sweep's most common value: `opt=adam` meant different lrs in different sweeps
    alone = plan_sweep({"opt": "adam", "lr": "0.001", "sigma": "0.5,1"})
    mixed = plan_sweep({"opt": "adam", "lr": "0.001,0.001001,0.002", "sigma": "0.5,1"})
    assert set(alone.groups) < set(mixed.groups)
    assert len(set(mixed.groups)) == 3  # 0.001 and 0.001001 stay apart
    assert group_label(RunConfig(opt="adam", lr=0.001, sigma=4.0, seed=3)) == "opt=adam,lr=0.001"


def test_cell_names_carry_every_varying_value_and_are_unique():
    plan = plan_sweep({"opt": "adam,sgd", "lr": "0.05,0.0001,0.001", "sigma": "0.5,1", "batch_size": "32,64"})
    assert len(set(plan.names)) == len(plan.cells) == 24
    assert "resnet20-adam-lr0.001-b32-s0.5-seed0" in plan.names
    for name, config in zip(plan.names, plan.cells):
        assert f"lr{config.lr:.12g}" in name and f"s{config.sigma:g}" in name and config.opt in name


def test_cell_names_stay_unique_when_two_values_print_alike():
    configs = [RunConfig(data="digits"), RunConfig(data="digits", augment="on")]
    names = cell_names(configs, ["augment"])
    assert names[0] != names[1] and names[1].startswith("resnet20-sgd-augon-")


def test_the_view_filters_to_the_sweep_groups_by_group_and_shows_the_chosen_columns():
    state = view_state("a" * 32)
    assert state["searchFilter"] == f"tags.`mlflow.parentRunId` = '{'a' * 32}'"
    # by the group's short label, which MLflow's 190 px name column shows ("Group: lr=0.003")
    assert state["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "initmem.group_label"}]
    # sigma first, the key metrics next (what a 1400 px window shows), seed and rate, then why each run stopped
    assert (
        state["selectedColumns"]
        == state["columnOrder"]
        == [
            "tags.`sigma`",
            "metrics.`best_val_test_acc`",
            "metrics.`fit`",
            "metrics.`tau_interp`",
            "metrics.`weight_norm_ratio`",
            "tags.`seed`",
            "tags.`lr`",
            "tags.`stop_reason`",
            "metrics.`stop_epoch`",
            "attributes.`Dataset`",
        ]
    )
    # no param column: a group row would show its mean over the group's cells (sigma 1.25)
    assert not [column for column in state["selectedColumns"] if column.startswith("params.")]
    [scatter] = [c for c in state["compareRunCharts"] if c["type"] == "SCATTER"]
    assert (scatter["xaxis"]["key"], scatter["yaxis"]["key"]) == ("sigma", "best_val_test_acc")
    assert [section["columns"] for section in state["compareRunSections"]] == [1]  # a chart as wide as the area
    json.dumps(state)  # stored as JSON in an experiment tag
    assert view_key("a") == view_key("a") != view_key("b")
    assert re.fullmatch(r"[\w\-.]+", view_key("sweep with spaces/and:colons"))


def test_a_run_logs_its_table_columns_as_tags_with_the_text_of_its_params():
    from initmem_core.tracking.cells import table_tags
    from initmem_core.training.plan import config_params

    config = RunConfig(opt="sgd", lr=0.05, sigma=2.0, seed=3)
    params = config_params(config, config.config_hash())
    assert table_tags(params) == {"sigma": "2.0", "seed": "3", "lr": "0.05"}


def test_the_parent_description_holds_the_spread_table_and_links_its_view_and_plots():
    report = build_report(
        [
            cell("sgd", 0.5, 0, 0.5),
            cell("sgd", 2.0, 0, 0.75),
            cell("adam", 0.5, 0, 0.6),
            cell("adam", 2.0, 0, 0.6),
        ]
    )
    text = description(report, "demo", "7", "r" * 32, "initmem-k")
    spreads = {g.group: g.spread for g in report.groups}
    assert f"| sgd | {spreads['opt=sgd']:.2f} |" in text and f"| adam | {spreads['opt=adam']:.2f} |" in text
    assert not math.isclose(spreads["opt=sgd"], spreads["opt=adam"])
    assert "(/#/experiments/7/runs?viewStateShareKey=initmem-k&workflowType=machine_learning)" in text
    assert (
        "(/#/experiments/7/runs?viewStateShareKey=initmem-k&workflowType=machine_learning&compareRunsMode=CHART)"
        in text
    )
    assert f"(/#/experiments/7/runs/{'r' * 32}/artifacts/report/test_acc_vs_sigma.png)" in text
    # beside the paper's spread, the debiased one; one seed per sigma measures none, and it says why
    assert "debiased pp [95% interval]" in text and "fewer than two sigmas with enough trained runs" in text


def test_the_parent_description_shows_the_debiased_spread_with_its_interval():
    report = build_report(
        [cell("sgd", s, seed, acc + 0.01 * seed) for seed in range(4) for s, acc in ((0.5, 0.5), (2.0, 0.75))]
    )
    g = report.groups[0]
    text = description(report, "demo", "7", "r" * 32, "initmem-k")
    assert f"| {g.debiased_spread:+.2f} [{g.debiased_spread_lo:+.2f}, {g.debiased_spread_hi:+.2f}] |" in text


@pytest.mark.parametrize("width", [80, 50])
def test_tables_fold_rather_than_cut_on_a_narrow_terminal(width):
    headers = ["sigma", "test acc %", "a long header that wraps", "tau_interp", "‖W‖/‖W0‖", "T_SGD"]
    rows = [
        ["0.5", "12.34", "1.2345e-08", "123456789", "1.0001", "0.0012345"],
        ["2", "99.99", "x" * (width + 10), "–", "1", "3"],
    ]  # one value wider than the terminal
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    console.print(*fitted_tables("a title", headers, rows, width, right=(1, 2, 3, 4, 5)))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    flat = re.sub(r"[\s│┃]", "", text)
    for value in [v for row in rows for v in row] + [w for h in headers for w in h.split()]:
        assert value in flat, value


def test_the_report_keeps_every_number_of_long_labelled_groups_whole_at_80_columns():
    from initmem_cli.report import rich_tables

    base = dict(epochs=2, train_size=256, batch_size=32)  # constants of the sweep make labels long
    records = [
        record(
            RunConfig(opt=opt, lr=lr, sigma=sigma, seed=seed, **base),
            acc,
            metrics={"weight_norm": 13.3, "clock_sgd": 3.125e-4},
        )
        for opt, lr in (("sgd", 0.05), ("adam", 0.001))
        for sigma, seed, acc in ((0.5, 0, 0.80), (0.5, 1, 0.84), (2.0, 0, 0.60), (2.0, 1, 0.71))
    ]
    report = build_report(records)
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    console.print(*rich_tables(report, "t", 80))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    (pair,) = report.pairs
    for number in (f"{pair.spread_diff:+.2f}", f"{pair.acc_diff:+.2f}", "0.0003125"):
        assert any(number in line for line in text.splitlines()), number  # on one line, not folded


# -- the saved view against the MLflow UI that reads it ---------------------------------------

#: A character of a JavaScript identifier: a key is found only as a whole name, not inside a longer one.
JS_NAME_CHAR = re.compile(r"[\w$]")


def _mlflow_ui_scripts() -> Path | None:
    """The installed MLflow UI's compiled JavaScript, found without importing MLflow (seconds)."""
    spec = importlib.util.find_spec("mlflow")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "server" / "js" / "build" / "static" / "js"
    return folder if any(folder.glob("*.js")) else None


@pytest.fixture(scope="module")
def ui_bundle() -> str:
    folder = _mlflow_ui_scripts()
    if folder is None:
        pytest.skip(
            "MLflow's UI bundle (mlflow/server/js/build/static/js/*.js) is not installed: "
            "no UI to check the saved view against"
        )
    return "\n".join(path.read_text(encoding="utf-8", errors="replace") for path in sorted(folder.glob("*.js")))


def _names(bundle: str, word: str) -> bool:
    """Whether ``word`` occurs in the bundle as a whole name: a property (``.runsCountToCompare``,
    ``{groupBy:``) or a string (``"viewStateShareKey"``), not a piece of a longer name."""
    start = bundle.find(word)
    while start != -1:
        end = start + len(word)
        if not (start and JS_NAME_CHAR.match(bundle[start - 1])) and not (
            end < len(bundle) and JS_NAME_CHAR.match(bundle[end])
        ):
            return True
        start = bundle.find(word, start + 1)
    return False


class ExperimentTags:
    """The two experiment calls ``write_view`` makes, recorded."""

    def __init__(self):
        self.tags: dict[str, str] = {}

    def set_experiment_tag(self, experiment_id, key, value):
        self.tags[key] = value

    def get_experiment(self, experiment_id):
        return SimpleNamespace(tags=dict(self.tags))


def _keys(value) -> set[str]:
    """Every key of every mapping inside ``value``."""
    if isinstance(value, dict):
        return set(value) | set().union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


#: Keys whose values are the UI's own enumerations (a chart type, an axis kind, a group's mode).
ENUM_KEYS = ("type", "runsHiddenMode", "aggregateFunction", "mode")


def _enum_values(value) -> set[str]:
    if isinstance(value, dict):
        own = {v for k, v in value.items() if k in ENUM_KEYS and isinstance(v, str)}
        return own | set().union(*(_enum_values(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_enum_values(v) for v in value))
    return set()


def test_every_key_of_the_saved_view_is_one_the_installed_mlflow_ui_reads(ui_bundle):
    """An MLflow upgrade that renames or drops a field of the runs page's saved view (the view
    would then open without its columns, groups or charts, silently) fails here: every key
    ``write_view`` writes, the envelope's and the state's down to each chart's, every enumerated
    value, the tags and the address's parameters are names in the UI's JavaScript."""
    from initmem_core.tracking.ui_view import MODEL_TRAINING, view_url, write_view
    from initmem_core.vocabulary import KIND_TAG, VIEW_TAG_PREFIX

    experiment = ExperimentTags()
    key = write_view(experiment, "7", "demo", "a" * 32)
    envelope = json.loads(experiment.tags[VIEW_TAG_PREFIX + key])
    # the UI's envelope check: a string name, a number createdAt (updatedAt falls back to it), a string state
    assert isinstance(envelope["name"], str) and isinstance(envelope["createdAt"], int)
    assert isinstance(envelope["updatedAt"], int) and isinstance(envelope["state"], str)
    state = json.loads(envelope["state"])
    assert experiment.tags[KIND_TAG] == MODEL_TRAINING

    address = parse_qs(urlsplit(urlsplit(view_url("http://h", "7", key, charts=True)).fragment).query)
    assert address.pop("viewStateShareKey") == [key]
    words = {"viewStateShareKey", *address, *_keys(envelope), *_keys(state)}
    strings = {VIEW_TAG_PREFIX, KIND_TAG, MODEL_TRAINING, *_enum_values(state), *(v for [v] in address.values())}
    columns = [column.partition(".") for column in state["selectedColumns"] + state["columnOrder"]]
    strings |= {kind for kind, _, _ in columns}  # the table's column kinds: params, metrics, attributes
    strings |= {name.strip("`") for kind, _, name in columns if kind == "attributes"}  # e.g. Dataset
    assert {"runsCountToCompare", "metricSectionId", "groupByData", "createdAt", "workflowType"} <= words

    assert not _names(ui_bundle, "initmemNoSuchViewKey")  # the search can fail
    unread = sorted(word for word in words if not _names(ui_bundle, word))
    assert not unread, f"keys of the saved view the MLflow UI no longer reads: {unread}"
    unknown = sorted(s for s in strings if f'"{s}"' not in ui_bundle and f"`{s}" not in ui_bundle)
    assert not unknown, f"values of the saved view the MLflow UI does not know: {unknown}"
