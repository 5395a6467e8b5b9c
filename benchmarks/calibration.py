"""The paper's claims calibrated by the check any claim gets (``initmem_core.testing.calibrate_claim``):
each claim on synthetic sweeps of a world where it is false and one where it is true
(``initmem_plugins.claims.calibration.WORLDS``), every run scored on one shared test set with the
noise fitted to the exports. Writes its table into docs/STATISTICS.md with ``--write-docs``.

    python -m benchmarks.calibration --sweeps 200 --write-docs     # about 4 min on 2 cores
    python -m benchmarks.calibration --smoke                        # 4 sweeps per world, docs untouched

The earlier 170-row table (its own simulation, per-example flip models among them) was measured by
the calibration.py retired at bf423f4 (docs/STATISTICS.md).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- paper claims calibrated: begin -->", "<!-- paper claims calibrated: end -->"
COLUMNS = "| claim | false where (null) | false verdicts | true where | power | contradicted where true |"


def calibrate(task: tuple[int, int, int]) -> str:
    """One world's table line: (index into WORLDS, sweeps, seeds)."""
    from initmem_core.testing import calibrate_claim
    from initmem_plugins.claims.calibration import WORLDS

    index, sweeps, seeds = task
    world = WORLDS[index]
    c = calibrate_claim(world.claim, seeds=seeds, sweeps=sweeps, seed=index, **world.arguments())
    return (
        f"| `{world.claim}` | {world.null_text} | {c.false_verdict_rate:.1%} | {world.true_text} "
        f"| {c.power:.1%} | {c.wrong_way_rate:.1%} |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=200, help="synthetic sweeps per world")
    parser.add_argument("--seeds", type=int, default=6, help="seeds per cell")
    parser.add_argument("--workers", type=int, default=2, help="processes calibrating claims side by side")
    parser.add_argument("--smoke", action="store_true", help="4 sweeps per world: the plumbing only")
    parser.add_argument("--write-docs", action="store_true", help="replace the table in docs/STATISTICS.md")
    args = parser.parse_args(argv)
    from initmem_plugins.claims.calibration import WORLDS

    sweeps = 4 if args.smoke else args.sweeps
    start = time.perf_counter()
    tasks = [(index, sweeps, args.seeds) for index in range(len(WORLDS))]
    with concurrent.futures.ProcessPoolExecutor(max(1, args.workers)) as pool:
        lines = list(pool.map(calibrate, tasks))
    command = f"python -m benchmarks.calibration --sweeps {sweeps} --seeds {args.seeds}"
    table = "\n".join(
        [
            f"Measured by `{command}` ({(time.perf_counter() - start) / 60:.1f} min), {args.seeds} seeds "
            f"per cell, {sweeps} sweeps per world, the noise fitted to digits' exports (360 test examples).",
            "",
            COLUMNS,
            "|" + "---|" * (COLUMNS.count("|") - 1),
            *lines,
        ]
    )
    print(table)
    if args.write_docs and not args.smoke:
        path = ROOT / "docs" / "STATISTICS.md"
        text = path.read_text()
        head, rest = text.split(BEGIN)
        path.write_text(head + BEGIN + "\n" + table + "\n" + rest[rest.index(END) :])


if __name__ == "__main__":
    main()
