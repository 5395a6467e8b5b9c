"""Claims as a plugin kind: a claim registered from outside initmem is evaluated in `initmem report`
beside the paper's, with its own clock threshold; a failing claim takes no other down; the paper's
claims and presets are the plugin `claims`, which INITMEM_LOAD_PLUGINS can leave out."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core import hookimpl
from initmem_core.plugin_system.loader import load_registry, set_registry
from initmem_core.report.assessment import build_assessed_report
from initmem_core.report.claim_api import Evaluated, difference, per_stratum
from initmem_core.report.claim_groups import Group, Sweep, read_sweep
from initmem_core.report.regime import Check
from initmem_core.report.verdicts import CONTRADICTED, HORIZON_SHORT, NOT_EVALUATED, REPRODUCED
from initmem_core.tracking.export import SweepExport, write_export
from initmem_core.vocabulary import CLOCK_ADAPT
from tests.support import ROOT
from tests.support.builders import two_optimizers

runner = CliRunner()


def adam_minus_sgd(sweep: Sweep) -> object:
    """A deliberately wrong claim: Adam remembers sigma more than SGD does (Adam's T_adapt must have run)."""

    def evaluate(groups: list[Group]) -> Evaluated | None:
        sgd = [g for g in groups if g.config.opt == "sgd"]
        adam = [g for g in groups if g.config.opt == "adam"]
        if not sgd or not adam:
            return None
        quantities = [difference("adam − sgd", adam[0].accuracy, sgd[0].accuracy)]
        return "adam against sgd", quantities, [], Check.of([sgd[0], adam[0]], [(adam[0], CLOCK_ADAPT)])

    return per_stratum(sweep, evaluate, "sgd and adam")


def sgd_minus_adam(sweep: Sweep) -> object:
    def evaluate(groups: list[Group]) -> Evaluated | None:
        sgd = [g for g in groups if g.config.opt == "sgd"]
        adam = [g for g in groups if g.config.opt == "adam"]
        if not sgd or not adam:
            return None
        quantities = [difference("sgd − adam", sgd[0].accuracy, adam[0].accuracy)]
        return "sgd against adam", quantities, [], Check.of([sgd[0], adam[0]])

    return per_stratum(sweep, evaluate, "sgd and adam")


def broken(sweep: Sweep) -> object:
    raise RuntimeError("this claim is broken")


class MyClaims:
    """A third party's claims, registered as a plugin object (a package's module is the same)."""

    def __init__(self, threshold: float = 3.0):
        self.threshold = threshold

    @hookimpl
    def initmem_register_claims(self, register):
        register("sgd_beats_adam", sgd_minus_adam, "SGD remembers more than Adam", axis=("opt", "lr"), source="a note")
        register(
            "adam_remembers_more",
            adam_minus_sgd,
            "Adam remembers more than SGD",
            axis=("opt", "lr"),
            clock=CLOCK_ADAPT,
            threshold=self.threshold,
        )
        register("broken_claim", broken, "A claim that raises")


@pytest.fixture
def with_claims():
    def install(plugin):
        previous = set_registry(load_registry(extra_plugins=[("myclaims", plugin)]))
        installed.append(previous)

    installed: list = []
    yield install
    for previous in installed:
        set_registry(previous)


def test_an_outside_claim_gets_its_verdict_in_initmem_report(with_claims, tmp_path):
    with_claims(MyClaims())
    write_export(SweepExport("mine", two_optimizers()), tmp_path / "s.json.gz")
    result = runner.invoke(
        app, ["report", "--from", str(tmp_path / "s.json.gz"), "-f", "json", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    assert "Warning: claim 'broken_claim'" in result.stderr and "RuntimeError: this claim is broken" in result.stderr
    found = {f["name"]: f for f in json.loads(result.stdout)["findings"]}
    assert found["sgd_beats_adam"]["verdict"] == REPRODUCED
    assert found["adam_remembers_more"]["verdict"] == CONTRADICTED  # Adam's T_adapt 50 is past 3
    # the broken claim is not evaluated and says why, naming its plugin; the paper's claims are still decided beside it
    broken = found["broken_claim"]
    assert broken["verdict"] == NOT_EVALUATED and broken["plugin"] == "myclaims"
    assert broken["error"] == "RuntimeError: this claim is broken" and not broken["needs"]
    assert found["sgd_beats_adam"]["plugin"] == "myclaims" and found["sgd_keeps_memory"]["plugin"] == "claims"
    assert found["sgd_remembers_more_than_adaptive"]["verdict"] == REPRODUCED


def test_a_claims_own_threshold_decides_when_its_clock_has_run(with_claims):
    with_claims(MyClaims(threshold=100.0))  # Adam's T_adapt 50 is short of this claim's 100
    with pytest.warns(UserWarning, match="broken_claim"):
        report = build_assessed_report(two_optimizers())
    found = {f.name: f for f in report.findings}
    assert found["adam_remembers_more"].verdict == HORIZON_SHORT
    assert "T_adapt 50 < 100" in found["adam_remembers_more"].verdict_text
    # the paper's claims keep the pre-registered thresholds
    assert found["adaptive_optimizers_forget"].verdict == REPRODUCED


def test_a_failed_claim_reads_as_failed_naming_its_plugin_in_the_report_and_the_parent_run(with_claims):
    from initmem_core.report.description import description
    from initmem_core.report.render import to_markdown

    with_claims(MyClaims())
    with pytest.warns(UserWarning, match="broken_claim"):
        report = build_assessed_report(two_optimizers())
    failed = "failed: RuntimeError: this claim is broken (plugin myclaims)"
    assert f"- `broken_claim` (A claim that raises): {failed}" in to_markdown(report)
    note = description(report, "mine", "1", "abc", "view")
    assert f"`broken_claim`: {failed}" in note and "| `sgd_beats_adam` (myclaims) |" in note


def test_a_claim_reads_its_axis_statement_and_margin_from_its_registration(with_claims):
    class TwoReadings:
        @hookimpl
        def initmem_register_claims(self, register):
            register("by_arch", sgd_minus_adam, "SGD beats Adam on each architecture", axis=("opt", "lr"))
            register("any_arch", sgd_minus_adam, "SGD beats Adam", axis=("opt", "lr", "arch"), margin="a margin")

    with_claims(TwoReadings())
    cells = [*two_optimizers(arch="resnet20"), *two_optimizers(arch="resnet32")]
    found = {f.name: f for f in build_assessed_report(cells).findings}
    by_arch, anywhere = found["by_arch"], found["any_arch"]
    assert [part.stratum for part in by_arch.parts] == ["arch=resnet20", "arch=resnet32"]  # the arch is held equal
    assert not anywhere.parts and len(anywhere.quantities) == 1  # one stratum: the arch is on its axis
    assert (by_arch.claim, by_arch.margin, by_arch.plugin) == ("SGD beats Adam on each architecture", "", "myclaims")
    assert (anywhere.claim, anywhere.margin) == ("SGD beats Adam", "a margin")
    with pytest.raises(ValueError, match="reads the claim's registration"):
        sgd_minus_adam(read_sweep(cells))  # called outside a report, it has no registration to read


def test_the_paper_is_the_plugin_claims_listed_under_its_kind():
    result = runner.invoke(app, ["plugins", "--json"])
    rows = [r for r in json.loads(result.stdout)["components"] if r["kind"] == "claim"]
    by_name = {r["name"]: r for r in rows}
    assert by_name["adaptive_optimizers_forget"]["plugin"] == "claims"
    declared = by_name["adaptive_optimizers_forget"]["declared"]
    assert declared["clock"] == CLOCK_ADAPT and "opt" in declared["axis"] and "25%" in declared["margin"]
    # the source names the paper by the title docs/PAPER.md gives it, and the page
    paper = (ROOT / "docs" / "PAPER.md").read_text()
    title = re.search(r'^"([^"]+)"', paper, re.MULTILINE).group(1)
    assert title in declared["source"] and declared["source"].endswith("(docs/PAPER.md)")
    presets = [r["name"] for r in json.loads(result.stdout)["components"] if r["kind"] == "preset"]
    assert "paper-mini" in presets


def test_the_allow_list_can_leave_the_papers_claims_and_presets_out(monkeypatch):
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "")
    registry = load_registry()
    assert registry.names("claim") == [] and registry.names("preset") == []
    assert "sgd" in registry.names("optimizer")  # the run's built-in components always load
    previous = set_registry(registry)
    try:
        result = runner.invoke(app, ["sweep", "--preset", "paper-mini", "--dry-run"])
    finally:
        set_registry(previous)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "unknown preset 'paper-mini'; valid presets: none (the plugin 'claims' has the paper's)" in result.stderr
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "claims")
    assert "sgd_keeps_memory" in load_registry().names("claim")


def test_without_the_papers_claims_a_report_evaluates_none_of_them(monkeypatch):
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "")
    report = build_assessed_report(two_optimizers(), registry=load_registry())
    assert report.findings == []


def test_a_claim_with_an_unknown_declaration_is_a_plugin_that_fails_to_load():
    class Misspelt:
        @hookimpl
        def initmem_register_claims(self, register):
            register("x", sgd_minus_adam, "x", axes=("opt",))

    with pytest.warns(UserWarning, match="misspelt"):
        registry = load_registry(extra_plugins=[("misspelt", Misspelt())], strict=False)
    assert "x" not in registry.names("claim") and "axes" in registry.failures[-1].error


def always_reproduced(sweep: Sweep) -> object:
    """A claim that is miscalibrated by construction: reproduced whatever the sweep says."""
    from initmem_core.report.verdicts import Finding

    return Finding("always", "nothing read", REPRODUCED, "always")


def test_the_calibration_check_measures_false_verdicts_and_power(with_claims):
    from initmem_core.testing import calibrate_claim

    class Claims:
        @hookimpl
        def initmem_register_claims(self, register):
            register("sgd_beats_adam", sgd_minus_adam, "SGD remembers more than Adam", axis=("opt", "lr"))
            register("always", always_reproduced, "Always reproduced")

    with_claims(Claims())
    sigmas = (0.1, 1.4, 2.5)
    remembers, forgets = dict(zip(sigmas, (97, 94, 91))), dict(zip(sigmas, (95, 95, 95)))
    worlds = {
        "null": {"sgd": remembers, "adam": remembers},
        "true": {"sgd": remembers, "adam": forgets},
        "configs": {"sgd": {"opt": "sgd", "lr": 0.01}, "adam": {"opt": "adam", "lr": 0.001}},
    }
    good = calibrate_claim("sgd_beats_adam", seeds=4, sweeps=8, **worlds)
    bad = calibrate_claim("always", seeds=4, sweeps=8, **worlds)
    assert bad.false_verdict_rate == 1.0 and bad.power == 1.0  # it cannot tell the worlds apart
    assert good.false_verdict_rate <= 1 / 8 and good.power >= 6 / 8
    assert sum(good.null.values()) == pytest.approx(1.0) and good.sweeps == 8
    again = calibrate_claim("sgd_beats_adam", seeds=4, sweeps=8, **worlds)
    assert again == good  # seeded


@pytest.mark.slow(seconds=40)  # a pytest subprocess calibrating the generated claim on 80 sweeps
def test_a_generated_claim_package_passes_its_own_calibration_test(tmp_path):
    import os
    import subprocess
    import sys

    folder = tmp_path / "pkg"
    assert runner.invoke(app, ["new-plugin", "claim", "adam-forgets", "--dir", str(folder)]).exit_code == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:randomly", "-p", "no:cacheprovider", "tests"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "claim 'adam-forgets' on 40 sweeps" in result.stdout and "1 passed" in result.stdout


def test_what_a_kind_declares_becomes_its_record_and_other_keywords_fail_the_plugin():
    from initmem_core.contracts import OptimizerInfo

    class Declares:
        @hookimpl
        def initmem_register_optimizers(self, register):
            register("my-opt", "torch.optim:SGD", "SGD again", defaults={"lr": 0.2}, clock="heavy-ball")

        @hookimpl
        def initmem_register_architectures(self, register):
            register("my-arch", "x:y", "an architecture that declares a clock", clock="lr")

    with pytest.warns(UserWarning, match="kind 'architecture' takes no clock; it takes fused"):
        registry = load_registry(extra_plugins=[("declares", Declares())], strict=False)
    spec, _ = registry.lookup("optimizer", "my-opt")
    assert spec.info == OptimizerInfo({"lr": 0.2}, "heavy-ball") and spec.info.declared_defaults() == {"lr": 0.2}
    assert "my-arch" not in registry.names("architecture")
