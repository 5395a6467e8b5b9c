"""Does the report recover a known forgetting time? The paper's forgetting model on synthetic sweeps
(``initmem_plugins.claims.forgetting_sweeps``), fed through ``build_report`` exactly as a real sweep
is: how often the radial half-life (in T_L2) is within 10% of the truth, how often its 95% interval
covers it, and how the claim *forgetting follows the clocks* reads those sweeps.

    python -m benchmarks.forgetting_times                # 200 sweeps, about a minute and a half
    python -m benchmarks.forgetting_times --write-docs   # replace the section in docs/STATISTICS.md
    python -m benchmarks.forgetting_times --sweeps 2     # the smoke test's size
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from initmem_plugins.claims.forgetting_sweeps import (
    EPOCHS,
    GROUPS,
    HALF_LIFE,
    NORM_NOISE,
    SEED_SD,
    SEEDS,
    SIGMAS,
    STEPS,
    measure,
    measure_finding,
)

SECTION = "## Forgetting times"


def section(result: dict[str, float], finding: dict[str, float]) -> str:
    return f"""{SECTION}

`benchmarks/forgetting_times.py` checks the half-life of the forgetting view (report/forgetting.py)
on synthetic sweeps with a known answer: {len(GROUPS)} groups of SGD with L2 ((lambda, lr) =
{", ".join(f"({l2:g}, {lr:g})" for l2, lr in GROUPS)}), {len(SIGMAS)} sigmas, {SEEDS} seeds, {EPOCHS} epochs of
{STEPS} steps, whose radial memory decays as 2^(-T_L2 / h_k): each seed's half-life h_k is the
truth h = {HALF_LIFE:g} (in T_L2) times exp({SEED_SD:g} z), and each run's log ||W|| carries noise of sd
{NORM_NOISE:g} per epoch. Over {result["sweeps"]} simulated sweeps ({result["half_lives"]} group half-lives):

| radial half-life in T_L2 | measured |
|---|---|
| within 10% of the truth | {100 * result["within_10pct"]:.1f}% |
| 95% interval covers the truth | {100 * result["coverage"]:.1f}% |
| median relative error | {100 * result["median_error"]:+.2f}% |
| largest relative error | {100 * result["worst_error"]:.1f}% |

The estimate is the geometric mean of the seeds' half-lives, its interval a t interval over seeds
in log units; each seed's crossing is interpolated linearly between the two epochs that bracket it
(a straight line between two points of a convex decay crosses a little late, noise a little early:
both are far below the seeds' spread here). Such a test of the half-life needs the horizon to pass
it: a memory that never falls to half is reported as *not within the horizon*, with the clocks
reached, never extrapolated.

The finding *forgetting follows the clocks* (report/findings.py) on the same sweeps: its three
groups share the mechanism (SGD with L2: T_L2) and differ in lambda and lr. When they forget on T_L2
as above it is reproduced in {100 * finding["clock_reproduced"]:.1f}% of sweeps and contradicted in
{100 * finding["clock_contradicted"]:.1f}%; when each forgets with a half-life of 12 epochs whatever its clock,
it is reproduced in {100 * finding["epoch_reproduced"]:.1f}% and contradicted in {100 * finding["epoch_contradicted"]:.1f}%.

Regenerate: `python -m benchmarks.forgetting_times --write-docs` (about a minute and a half).
"""


def write_docs(text: str, path: Path) -> None:
    """Replace (or append) this section of docs/STATISTICS.md, leaving the rest as it is."""
    page = path.read_text(encoding="utf-8") if path.exists() else "# Statistics\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    page = pattern.sub(lambda _: text + "\n", page) if pattern.search(page) else page.rstrip("\n") + "\n\n" + text
    path.write_text(page.rstrip("\n") + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=200)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result, finding = measure(args.sweeps), measure_finding(args.sweeps)
    text = section(result, finding)
    print(text)
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.write_docs:
        write_docs(text, Path(__file__).resolve().parents[1] / "docs" / "STATISTICS.md")


if __name__ == "__main__":
    main()
