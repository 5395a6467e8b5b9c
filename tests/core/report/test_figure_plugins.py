"""Figures as a plugin kind: a figure registered from an outside package is drawn by `initmem report`
beside the report's own; a figure that raises takes neither the report nor the other figures down;
the report's own figures are the plugin `figures`, which INITMEM_LOAD_PLUGINS can leave out."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core import hookimpl
from initmem_core.plugin_system.loader import load_registry
from initmem_core.report.description import description
from initmem_core.report.figures import draw_figures, figure_files, warm_up
from initmem_core.report.memory import build_report
from initmem_core.tracking.export import SweepExport, write_export
from initmem_plugins.figures import FILES
from tests.support.builders import two_optimizers

runner = CliRunner()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: A researcher's package: the figure of docs/plugins.md ("Writing a figure"), drawn from what each
#: cell logged, and one that raises.
SHARPNESS = """
from initmem_core import hookimpl
from initmem_core.groups import group_label
from initmem_plugins.figures.canvas import new_figure, save_figure


@hookimpl
def initmem_register_figures(register):
    register("sharpness_vs_sigma", "sharpplug_mod:sharpness_vs_sigma", "Final sharpness against sigma, per group",
             file="sharpness_vs_sigma.png")
    register("broken_figure", "sharpplug_mod:broken", "A figure that raises")


def sharpness_vs_sigma(report, path, records):
    cells = [r for r in records if "sharpness" in r.metrics]
    if not cells:
        return None
    figure = new_figure(6.4, 4.2)
    ax = figure.add_subplot()
    for group in report.groups:
        mine = sorted((r.config.sigma, r.metrics["sharpness"]) for r in cells if group_label(r.config) == group.group)
        if mine:
            ax.plot(*zip(*mine), "o", label=group.group)
    ax.set(xlabel="σ_w", ylabel="sharpness")
    figure.legend(loc="outside lower center", fontsize="small")
    return save_figure(figure, path)


def broken(report, path):
    raise RuntimeError("this figure is broken")
"""


def with_sharpness(records):
    """The cells as a sweep whose runs logged a sharpness metric (larger at larger sigma)."""
    return [dataclasses.replace(r, metrics={**r.metrics, "sharpness": 10 * r.config.sigma}) for r in records]


def export(tmp_path, records) -> str:
    path = tmp_path / "s.json.gz"
    write_export(SweepExport("mine", records), path)
    return str(path)


@pytest.mark.slow(seconds=8)  # draws every figure of the report
def test_an_outside_figure_is_drawn_beside_the_reports_own(install_fake_plugin, tmp_path):
    install_fake_plugin("sharpplug", SHARPNESS)
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["report", "--from", export(tmp_path, with_sharpness(two_optimizers())), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    pngs = {p.name for p in out.glob("*.png")}
    assert pngs == {*FILES, "sharpness_vs_sigma.png"}  # verdicts.png among the report's own
    assert all(path.read_bytes()[:8] == PNG_SIGNATURE for path in out.glob("*.png"))
    # the one that raises: one warning line naming it, its plugin and the error; nothing written for it
    (line,) = [line for line in result.stderr.splitlines() if "broken_figure" in line]
    assert line.startswith("Warning: figure 'broken_figure' (plugin 'sharpplug' (sharpplug 1.0))")
    assert line.endswith("left out: RuntimeError: this figure is broken")
    assert {"report.md", "report.csv"} <= {p.name for p in out.iterdir()}


def test_a_figure_that_raises_takes_no_other_figure_down(install_fake_plugin, tmp_path, monkeypatch):
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "sharpplug")  # the outside figures alone: quick
    install_fake_plugin("sharpplug", SHARPNESS)
    registry = load_registry()
    with pytest.warns(UserWarning, match="figure 'broken_figure'.*RuntimeError: this figure is broken"):
        written = draw_figures(build_report(two_optimizers()), tmp_path, registry, with_sharpness(two_optimizers()))
    assert [p.name for p in written] == ["sharpness_vs_sigma.png"]
    # without the records the figure needs, it writes nothing and says nothing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        draw_figures(build_report(two_optimizers()), tmp_path / "none", registry, two_optimizers())
    assert not (tmp_path / "none").exists() and [str(w.message) for w in caught if "sharpness" in str(w.message)] == []


def test_without_the_figures_plugin_a_report_is_its_tables(monkeypatch, tmp_path):
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "claims")
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["report", "--from", export(tmp_path, two_optimizers()), "-f", "json", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["findings"]  # the claims still decided
    assert sorted(p.name for p in out.iterdir()) == ["report.csv", "report.md"]
    assert load_registry().names("figure") == []


def test_the_description_links_every_registered_figure_without_drawing_it(install_fake_plugin):
    install_fake_plugin("sharpplug", SHARPNESS)
    registry = load_registry()
    assert figure_files(registry) == [*FILES, "sharpness_vs_sigma.png", "broken_figure.png"]
    note = description(build_report(two_optimizers()), "s", "1", "abc", "key", registry)
    assert "[sharpness_vs_sigma.png](" in note and "[verdicts.png](" in note


def test_a_figure_file_outside_the_reports_folder_is_a_plugin_that_fails_to_load():
    class Escaping:
        @hookimpl
        def initmem_register_figures(self, register):
            register("escape", "x:y", "writes elsewhere", file="../escape.png")

    with pytest.warns(UserWarning, match="escaping"):
        registry = load_registry(extra_plugins=[("escaping", Escaping())], strict=False)
    assert "escape" not in registry.names("figure") and "plain file name" in registry.failures[-1].error


def test_two_figures_declaring_one_file_write_it_once(tmp_path, monkeypatch):
    class Clashing:
        @hookimpl
        def initmem_register_figures(self, register):
            register("mine", lambda path: path.write_bytes(b"mine") and path, "first", file="same.png")
            register("theirs", lambda path: path.write_bytes(b"theirs") and path, "second", file="same.png")

    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "")  # these two alone
    registry = load_registry(extra_plugins=[("clashing", Clashing())], entry_points=False)
    with pytest.warns(UserWarning, match="figure 'theirs'.*figure 'mine' writes same.png already"):
        written = draw_figures(build_report(two_optimizers()), tmp_path, registry)
    assert written == [tmp_path / "same.png"] and written[0].read_bytes() == b"mine"


def test_the_warm_up_calls_each_declared_warm_up_once_and_survives_one_that_fails(monkeypatch):
    import sys
    import types

    calls = []
    module = types.ModuleType("warm_mod")
    module.fine = lambda: calls.append("fine")  # type: ignore[attr-defined]
    module.failing = lambda: 1 / 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "warm_mod", module)

    class Warming:
        @hookimpl
        def initmem_register_figures(self, register):
            register("a", "x:y", "", warm_up="warm_mod:failing")
            register("b", "x:y", "", warm_up="warm_mod:fine")
            register("c", "x:y", "", warm_up="warm_mod:fine")

    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "")
    warm_up(load_registry(extra_plugins=[("warming", Warming())], entry_points=False))
    assert calls == ["fine"]


def test_the_core_imports_no_drawing_library():
    """The core writes whatever figures are registered and draws none itself: no module of it
    imports matplotlib, even inside a function (the figures are the plugin `figures`)."""
    import ast
    from pathlib import Path

    import initmem_core

    found = []
    for path in Path(initmem_core.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}:{node.lineno}" for name in names if name.split(".")[0] == "matplotlib"]
    assert not found, found
