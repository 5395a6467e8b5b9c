"""The report's figures, a plugin kind (``initmem_register_figures``): every registered figure drawn
into the report's folder, one that fails taking none down, and the files the parent run's
description links. The figures themselves are plugins (the report's own: ``initmem_plugins.figures``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from initmem_core.errors import RunWarning
from initmem_core.kinds import resolve
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.registry import ComponentSpec, Registry
from initmem_core.report.memory import Report
from initmem_core.tracking.records import CellRecord

#: The kind figures register as (``kinds.REPORT_KINDS``).
FIGURE = "figure"


class FigureFactory(Protocol):
    """A report figure: draws one figure of ``report`` (``initmem_core.report.memory.Report``, its
    claims' ``findings`` on it) and writes it to ``path`` (the report's folder joined with the
    figure's declared ``FigureInfo.file``); returns the path written, or ``None`` when the report
    lacks what the figure needs (no claim evaluated, no per-epoch histories). ``records``: the
    cells the report was built from (``initmem_core.tracking.records.CellRecord``: config, every
    metric logged, histories), for what the report does not aggregate. A figure that raises is
    left out with a one-line warning; the report's other files and figures are still written."""

    def __call__(self, *, report: Report, path: Path, records: Sequence[CellRecord]) -> Path | None: ...


def figure_specs(registry: Registry | None = None) -> list[ComponentSpec]:
    """Every registered figure, in registration order (the report's own first)."""
    registry = get_registry() if registry is None else registry
    return list(registry.components.get(FIGURE, {}).values())


def figure_files(registry: Registry | None = None) -> list[str]:
    """The file name of every registered figure: what the parent run's description links."""
    return list(dict.fromkeys(spec.info.file_for(spec.name) for spec in figure_specs(registry)))


def _left_out(spec: ComponentSpec, why: str) -> None:
    why = " ".join(why.split())  # one line, always
    warnings.warn(f"figure '{spec.name}' ({spec.provider}) left out: {why}", RunWarning, stacklevel=3)


def draw_figures(
    report: Report, folder: str | Path, registry: Registry | None = None, records: Sequence[CellRecord] = ()
) -> list[Path]:
    """Every registered figure of ``report`` (built from ``records``) into ``folder``; returns the
    paths written. A figure returns ``None`` when the report lacks what it needs; one that fails is
    left out with a one-line warning naming it, its plugin and the error. A file two figures declare
    is written by the first registered (the report's own before others')."""
    folder, written = Path(folder), []
    taken: dict[str, str] = {}  # file -> the figure that writes it
    for spec in figure_specs(registry):
        file = spec.info.file_for(spec.name)
        if file in taken:
            _left_out(spec, f"figure '{taken[file]}' writes {file} already")
            continue
        taken[file] = spec.name
        try:
            path = spec.build(report=report, path=folder / file, records=records)
            if path is not None and not Path(path).is_file():
                raise TypeError(f"returned {path!r}, which is not a file it wrote")
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as error:  # a broken figure must not take the report down
            _left_out(spec, f"{type(error).__name__}: {error}")
            continue
        if path is not None:
            written.append(Path(path))
    return written


def warm_up(registry: Registry | None = None) -> None:
    """Call each distinct warm-up the registered figures declare (``FigureInfo.warm_up``: their
    library's import, its fonts), so that drawing the report later does not wait for them; a sweep
    calls this on a thread while its cells train. A warm-up that fails is only a lost head start."""
    targets = dict.fromkeys(spec.info.warm_up for spec in figure_specs(registry) if spec.info.warm_up)
    for target in targets:
        try:
            resolve(target)()
        except Exception:  # the report draws, and says what fails, for itself
            continue
