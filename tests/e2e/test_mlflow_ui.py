"""The prepared MLflow view end to end: `initmem ui` over a store with a finished sweep prints its URLs only once the
server answers, the prepared view renders in headless Chromium with the sweep's cells, columns and
groups and no manual step, and SIGTERM leaves no process and no listening port behind.

What a researcher sees first: in a 1400 x 900 window, MLflow's Assistant panel open as on a first visit, the runs
table shows sigma and the key metrics without scrolling, group rows show no average of a config
value, and the chart tab draws its charts a card a row. ``INITMEM_UI_SCREENSHOTS=1`` writes what
the window shows to docs/images (the README's pictures of the view)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from initmem_core.groups import short_labels

# Skipped, not an error, where MLflow is not installed (the GPU machine has none).
from tests.support import ROOT
from tests.support.chromium_page import ChromiumPage
from tests.support.cli_processes import initmem_command
from tests.support.local_services import STARTUP_S, _alive, _children, free_port, stop_session

MlflowClient = pytest.importorskip("mlflow").MlflowClient

pytestmark = pytest.mark.slow  # a sweep, an MLflow server and a browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: The window a researcher's laptop gives the browser.
WIDTH, HEIGHT = 1400, 900
DOCS_IMAGES = ROOT / "docs" / "images"


def _descendants(pid: int) -> set[int]:
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _listening(port: int) -> bool:
    wanted = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1].endswith(wanted) and fields[3] == "0A":  # 0A: LISTEN
                return True
    return False


@pytest.fixture(scope="module")
def ui(tmp_path_factory, store_in):
    """A finished 2-optimizer x 2-sigma sweep, and `initmem ui` serving its store."""
    from initmem_core import run_sweep

    folder = tmp_path_factory.mktemp("ui")
    uri = store_in(folder)
    result = run_sweep(
        {
            "opt": "sgd,adam",
            "sigma": "0.5,2.0",
            "data": "digits",
            "epochs": 1,
            "train_size": 64,
            "threads": 1,
            "checkpoint_every": 0,
        },
        name="ui-e2e",
        tracking_uri=uri,
        out=folder / "out",
    )
    port = free_port()
    process = subprocess.Popen(
        initmem_command("ui", "--port", str(port), "--tracking-uri", uri),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines, answered = [], []
    deadline = time.monotonic() + STARTUP_S
    try:
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            if "http://" in line:  # the moment a URL is printed, the server must already answer
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                    answered.append(response.status)
            lines.append(line)
            if "Ctrl-C" in line:
                break
        assert any("prepared comparison" in line for line in lines), "".join(lines)
        yield {"process": process, "port": port, "lines": lines, "answered": answered, "result": result, "uri": uri}
    finally:
        stop_session(process.pid)


def test_ui_prints_the_runs_page_and_the_view_only_once_the_server_answers(ui):
    result = ui["result"]
    assert ui["answered"] == [200, 200]
    text = "".join(ui["lines"])
    base = f"http://127.0.0.1:{ui['port']}/#/experiments/{result.experiment_id}/runs"
    assert f"{base}?workflowType=machine_learning\n" in text  # the sidebar in model-training mode
    assert f"{base}?viewStateShareKey={result.view_key}&workflowType=machine_learning\n" in text


def _page(url: str, folder: Path) -> ChromiumPage:
    return ChromiumPage(CHROMIUM, url, folder / "profile", free_port(), WIDTH, HEIGHT)


def _screenshot(page: ChromiumPage, name: str) -> None:
    if os.environ.get("INITMEM_UI_SCREENSHOTS") == "1":
        page.screenshot(DOCS_IMAGES / name)


#: The runs table as laid out: the header cells wholly inside the table's visible width, left to
#: right, and each row's text by column id.
TABLE = """(() => {
  const clip = document.querySelector('.ag-center-cols-viewport').getBoundingClientRect();
  const right = Math.min(clip.right, window.innerWidth);
  const visible = [...document.querySelectorAll('.ag-header-row-column .ag-header-cell[col-id]')]
    .map((cell) => [cell.getAttribute('col-id'), cell.getBoundingClientRect()])
    .filter(([, box]) => box.width > 0 && box.left >= 0 && box.right <= right + 1)
    .sort((a, b) => a[1].left - b[1].left)
    .map(([id]) => id);
  const rows = {};
  for (const cell of document.querySelectorAll('.ag-row [col-id]')) {
    const index = cell.closest('.ag-row').getAttribute('row-index');
    (rows[index] = rows[index] || {})[cell.getAttribute('col-id')] = cell.innerText.trim();
  }
  return {visible, rows: Object.keys(rows).sort((a, b) => a - b).map((index) => rows[index])};
})()"""
HTML = "document.documentElement.outerHTML"
#: The scatter plot's box on the page.
PLOT_BOX = "document.querySelector('.trace.scatter').closest('.js-plotly-plot').getBoundingClientRect().toJSON()"
SCROLL_TO_PARALLEL = """[...document.querySelectorAll('*')].find((element) =>
  element.children.length === 0 && element.textContent.startsWith('Parallel Coor')).scrollIntoView()"""


def _need_chromium() -> None:
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: .ci/run installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")


#: Every header cell the grid has drawn: its column id and its place among all columns.
HEADERS = """[...document.querySelectorAll('.ag-header-row-column .ag-header-cell[col-id]')]
  .map((cell) => [cell.getAttribute('col-id'), Number(cell.getAttribute('aria-colindex'))])"""
SCROLL_RIGHT = """for (const box of document.querySelectorAll(
  '.ag-body-horizontal-scroll-viewport, .ag-center-cols-viewport')) box.scrollLeft = box.scrollWidth"""


def _headers(place: dict[str, int], wanted: list[str]) -> list[str]:
    """Of the ``wanted`` column ids, those the table shows, in the order it shows them."""
    return sorted((column for column in place if column in wanted), key=place.__getitem__)


def _cells(ui) -> list:
    result = ui["result"]
    runs = MlflowClient(ui["uri"]).search_runs(
        [result.experiment_id], f"tags.`mlflow.parentRunId` = '{result.parent_run_id}'"
    )
    assert len(runs) == 4
    return runs


def _text(page: ChromiumPage) -> str:
    return re.sub(r"\s+", " ", page.evaluate("document.body.innerText"))


@pytest.mark.slow(seconds=90)  # the module's sweep and server, then a browser
def test_the_prepared_view_opens_in_chromium_on_the_sweeps_cells_columns_and_groups(ui, tmp_path):
    """What the saved view sets is what the page shows: its filter (the sweep's cells, no other
    run), its columns (exactly those, in its order) and its grouping (one group per label); at
    1400 px, sigma and the key metrics in view, and config values as logged, never averaged."""
    from initmem_core.tracking.ui_view import view_state

    _need_chromium()
    result, runs = ui["result"], _cells(ui)
    url = next(line.split()[-1] for line in ui["lines"] if "prepared comparison" in line)
    with _page(url, tmp_path) as page:
        page.wait_for("document.querySelectorAll('.ag-row').length >= 6")  # two groups, four cells
        table = page.settled(TABLE)
        text = _text(page)
        _screenshot(page, "mlflow-prepared-view.png")
        headers = dict(page.evaluate(HEADERS))
        page.evaluate(SCROLL_RIGHT)  # the grid draws only the columns near its visible width
        time.sleep(1)
        headers |= dict(page.evaluate(HEADERS))
    assert "viewing a shared view" in text, text[:2000]
    for run in runs:
        assert run.info.run_name in text
    assert f"{len(runs)} matching runs" in text  # the sweep's cells, not its parent nor other runs

    # at 1400 px, beside the Assistant panel: metric columns in view, not off to the right
    assert any(column.startswith("metrics.") for column in table["visible"]), table["visible"]
    name = "attributes.`Run Name`"
    group_rows = [row for row in table["rows"] if row[name].startswith("Group: ")]
    cell_rows = {row[name].splitlines()[-1]: row for row in table["rows"] if row not in group_rows}
    assert len(group_rows) == 2 and len(cell_rows) == 4
    for row in group_rows:  # a metric's mean is the point; a number in any other column is a config value's
        assert all(
            not re.fullmatch(r"[-+.\de]+", v) or v == "-" for k, v in row.items() if not k.startswith("metrics.")
        ), row
        assert row["metrics.`best_val_test_acc`"].endswith("(average)"), row

    state = view_state(result.parent_run_id)
    held = {
        f"{kind}.`{key}`" for run in runs for kind in ("params", "metrics", "tags") for key in getattr(run.data, kind)
    }
    # the table draws a chosen column only where some run holds it (tau_interp needs an interpolation)
    shown = [c for c in state["columnOrder"] if c in held or c.startswith("attributes.")]
    assert {"tags.`sigma`", "tags.`lr`", "metrics.`best_val_test_acc`", "attributes.`Dataset`"} <= set(shown)
    every_column = sorted(held | set(state["columnOrder"]))  # a column the view did not choose is not shown
    assert _headers(headers, every_column) == shown
    # in view without scrolling: sigma, then test accuracy at the selected checkpoint and fit
    in_view = [column for column in table["visible"] if column in every_column]
    assert in_view[:3] == ["tags.`sigma`", "metrics.`best_val_test_acc`", "metrics.`fit`"], table["visible"]

    groups = {cell.group for cell in result.cells}
    assert len(groups) == 2
    labels = short_labels(sorted(groups))[0]  # the view groups by each group's one short label
    for group in groups:
        assert f"Group: {labels[group]}" in text
    assert len(re.findall(r"Group: ", text)) == len(groups)  # no group for the parent or runs outside the sweep
    for row in group_rows:  # no mean of a config value (sigma 1.25, lr 0.049999…): empty
        assert row["tags.`sigma`"] == row["tags.`lr`"] == row["tags.`seed`"] == "", row
    for run in runs:  # a cell's values as its params hold them: "2.0", "0.05"
        row = cell_rows[run.info.run_name]
        assert [row[f"tags.`{key}`"] for key in ("sigma", "lr", "seed")] == [
            run.data.params[key] for key in ("sigma", "lr", "seed")
        ], row
    assert {row["tags.`lr`"] for row in cell_rows.values()} == {"0.05", "0.001"}  # SGD's and Adam's defaults


RUN_COLOR = re.compile(r'value="#([0-9a-f]{6})"></label><a[^>]*href="#/experiments/\d+/runs/([0-9a-f]{32})"')
POINT = re.compile(
    r'<path class="point[^"]*" transform="translate\(([-\d.]+),([-\d.]+)\)"[^>]*?'
    r"fill: rgb\((\d+), (\d+), (\d+)\)"
)


@pytest.mark.slow(seconds=45)
def test_the_views_chart_tab_draws_test_accuracy_against_sigma_for_every_cell_of_every_group(ui, tmp_path):
    """The saved view's chart, drawn by MLflow (plotly) in Chromium: one point per cell in the
    cell's colour from the runs list, across by sigma and up by best_val_test_acc on linear axes,
    a card as wide as the chart area (three a row draw it too small to read at 1400 px)."""
    from initmem_core.tracking.ui_view import view_url

    _need_chromium()
    result = ui["result"]
    url = view_url(f"http://127.0.0.1:{ui['port']}", result.experiment_id, result.view_key, charts=True)
    with _page(url, tmp_path) as page:
        page.wait_for("document.querySelectorAll('.trace.scatter .point').length >= 4")
        _screenshot(page, "mlflow-prepared-charts.png")
        text, dom = _text(page), page.evaluate(HTML)
        plot = page.evaluate(PLOT_BOX)
        # the parallel-coordinates chart below it, drawn once scrolled into view (not hidden as empty)
        page.evaluate(SCROLL_TO_PARALLEL)
        page.wait_for("!!document.querySelector('.parcoords')", timeout=30)
    assert plot["width"] >= 400 and plot["height"] >= 300, plot  # MLflow's three a row: 140 px wide
    assert "viewing a shared view" in text and "initmem: accuracy against sigma (2)" in text, text[:2000]
    labels = short_labels(sorted({cell.group for cell in result.cells}))[0]
    for label in labels.values():
        assert f"Group: {label}" in text  # the runs list beside the chart, grouped by label
    scatters = re.findall(r'<g class="trace scatter.*?</g></g>', dom, flags=re.S)
    assert len(scatters) == 1, f"{len(scatters)} scatter plots drawn"
    assert re.search(r'class="xtitle"[^>]*>sigma<', dom) and re.search(r'class="ytitle"[^>]*>best_val_test_acc<', dom)

    runs = MlflowClient(ui["uri"]).search_runs(
        [result.experiment_id], f"tags.`mlflow.parentRunId` = '{result.parent_run_id}'"
    )
    cells = {run.info.run_id: (float(run.data.params["sigma"]), run.data.metrics["best_val_test_acc"]) for run in runs}
    assert {cell.run_id for cell in result.cells} == set(cells) and len(cells) == 4
    # MLflow colours a run from its id (two runs may share a colour): every cell's colour is drawn, and no other
    colors = {run_id: color for color, run_id in RUN_COLOR.findall(dom)}
    points = [
        (round(float(x), 1), float(y), "".join(f"{int(c):02x}" for c in rgb))
        for x, y, *rgb in POINT.findall(scatters[0])
    ]
    assert len(points) == len(cells)
    assert {color for *_, color in points} == {colors[run_id] for run_id in cells}
    for group in {cell.group for cell in result.cells}:
        assert {colors[cell.run_id] for cell in result.cells if cell.group == group} <= {c for *_, c in points}
    # one column of points per sigma, in sigma's order, as many points as cells at that sigma
    sigmas = sorted({sigma for sigma, _ in cells.values()})
    columns = sorted({x for x, _, _ in points})
    assert len(columns) == len(sigmas) == 2
    placed = []  # (accuracy, y) pairs, lowest accuracy lowest on the chart (plotly's y grows downwards)
    for sigma, x in zip(sigmas, columns):
        accuracies = sorted(acc for s, acc in cells.values() if s == sigma)
        heights = sorted((y for px, y, _ in points if px == x), reverse=True)
        assert len(accuracies) == len(heights), (sigma, accuracies, heights)
        placed += zip(accuracies, heights)
    (low, y_low), (high, y_high) = min(placed), max(placed)
    if high == low:
        assert all(abs(y - y_low) <= 1 for _, y in placed)
    else:  # a linear axis: every point where the line through the extremes puts its accuracy
        assert y_high < y_low
        for acc, y in placed:
            assert abs(y - (y_low + (acc - low) * (y_high - y_low) / (high - low))) <= 1.0, (acc, y, placed)


def test_sigterm_stops_every_process_ui_started_and_frees_the_port(ui):
    process, port = ui["process"], ui["port"]
    started = _descendants(process.pid)
    assert started and _listening(port)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (any(_alive(pid) for pid in started) or _listening(port)):
        time.sleep(0.2)
    assert not [pid for pid in started if _alive(pid)]
    assert not _listening(port)
