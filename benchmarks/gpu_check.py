"""One prepared GPU check: correctness on CUDA and speed, in under 8 minutes by its own clock.

    python -m benchmarks.gpu_check --out DIR        # on a CUDA machine: every step; DIR gets what it found
    python -m benchmarks.gpu_check --dry-run        # every step at toy size on the CPU
    python -m benchmarks.gpu_check --dry-run --docs /tmp/PERFORMANCE.md --json /tmp/gpu.json

Seven steps (benchmarks/gpu_steps/, one module each), each reported passed or failed; the script
exits 1 if any failed:

(a) ``tests``: ``pytest -m gpu tests`` (on a GPU machine none of them may skip);
(b) ``determinism``, (c) ``divergence``, (d) ``resume``: small cells checked for exact agreement;
(e) ``speed``: ms per step and per epoch of ResNet-20 and ResNet-9 against a bare loop;
(f) ``concurrency``: images/s of 1, 2, 4, 8 concurrent ResNet-20 cells;
(g) ``lockstep``: K ResNet-20s fused into one model against K processes, K = 1, 4, 8; then the
product path: 8 whole cells as one fused sweep job (evaluation on, tracking off) against one cell
and against 8 processes, in cells per hour.

Each step runs in its own process (its own session) with a hard deadline: a step that outlasts
it is killed with everything it started and reported failed, with whatever it had saved, and
the others still run. (a)-(d) check correctness and run side by side; then (e), (f), (g) run one
at a time, alone on the device. Every deadline fits inside ``--budget`` (470 s on a GPU).

What it writes: with ``--json``, every sample; with ``--out DIR``, ``gpu_check.json``, the
section (``gpu_check.md``), the log (``gpu_check.log``) and, after a complete run (every step run
and passed), ``PERFORMANCE.md``: docs/PERFORMANCE.md with its GPU section replaced. Without
``--out`` a complete run on a GPU rewrites docs/PERFORMANCE.md itself (``--docs`` names another
page); an incomplete one changes no page.

Needs neither MLflow (tracking is off everywhere) nor the CIFAR files (it writes synthetic ones
in the ``cifar-10-batches-py`` format, whose md5 sums torchvision's check is told to accept in
this script's processes only). Runs from the tree (``PYTHONPATH=.``) or pip-installed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_steps import CHECKS, LETTER, MODULE, NAMES
from benchmarks.gpu_steps.common import (
    DRY,
    FULL,
    ROOT,
    Context,
    Plan,
    last_lines,
    log,
    skip_cifar_md5,
    write_cifar,
    write_json,
)

DOCS = ROOT / "docs" / "PERFORMANCE.md"
#: ``--worker KIND``: the module under gpu_steps whose WORKERS holds it.
WORKER_MODULES = {
    "run": "cells",
    "throughput": "concurrency",
    "lockstep-fused": "lockstep",
    "lockstep-process": "lockstep",
    "lockstep-product": "lockstep",
}
#: The packages a step's processes import, and the folders of the tree they are in.
PACKAGES = {"initmem_core": "initmem_core", "initmem_plugins": "plugins", "initmem_cli": "cli"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="every step at toy size on the CPU")
    parser.add_argument("--out", type=Path, help="a folder for the JSON, the section, the log and the docs page")
    parser.add_argument(
        "--docs",
        type=Path,
        help="the page a complete run rewrites (default: docs/PERFORMANCE.md on a GPU without --out)",
    )
    parser.add_argument("--json", type=Path, help="also write every result to this JSON file")
    parser.add_argument("--budget", type=float, help="seconds the whole check may take (default 420; dry run 720)")
    parser.add_argument("--steps", default=",".join(NAMES), help=f"a comma-separated subset of {', '.join(NAMES)}")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--context", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def fail(message: str) -> None:
    print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(2)


# -- inside a step's process ---------------------------------------------------------------------------


def step_function(step: str) -> Any:
    module = importlib.import_module(f"benchmarks.gpu_steps.{MODULE[step]}")
    return getattr(module, step) if MODULE[step] == "cells" else module.run


def run_step(context_path: Path) -> int:
    ctx = Context.from_json(json.loads(context_path.read_text()))
    skip_cifar_md5()
    try:
        result = step_function(ctx.step)(ctx)
    except Exception as error:
        import traceback

        traceback.print_exc()
        found = json.loads(ctx.result_path.read_text()) if ctx.result_path.exists() else {}
        problems = [f"{type(error).__name__}: {error}", *found.get("problems", [])]
        ctx.save({**found, "passed": False, "detail": found.get("detail", ctx.step), "problems": problems})
        return 1
    ctx.save(result)
    return 0


# -- the parent: steps as processes with deadlines --------------------------------------------------------


def pythonpath(folder: Path) -> list[str]:
    """benchmarks/ and the tree for every process a step starts, and a folder of links naming the
    tree's plugins and cli as the packages they install as, where this tree's are not importable."""
    paths = [str(ROOT / "benchmarks"), str(ROOT)]
    missing = []
    for package, where in PACKAGES.items():
        spec = importlib.util.find_spec(package)
        origin = Path(spec.origin).resolve() if spec and spec.origin else None
        if origin is None or not origin.is_relative_to((ROOT / where).resolve()):
            missing.append((package, where))
    if any(package != "initmem_core" for package, _ in missing):
        shim = folder / "shim"
        shim.mkdir()
        for package, where in missing:
            if package != "initmem_core":  # the tree itself is on the path
                (shim / package).symlink_to(ROOT / where, target_is_directory=True)
        paths.insert(0, str(shim))
    return paths


class Steps:
    """Starts each step's process and collects its result by its deadline, whatever happens."""

    def __init__(self, plan: Plan, folder: Path, data_dir: Path, dry: bool, whole: float, later: list[str], logs: Path):
        self.plan, self.folder, self.data_dir, self.dry, self.whole = plan, folder, data_dir, dry, whole
        self.later, self.logs = later, logs
        self.paths = pythonpath(folder)
        self.running: dict[str, tuple[subprocess.Popen, Context, float]] = {}

    def command(self, step: str, context_path: Path) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), "--step", step, "--context", str(context_path)]

    def start(self, step: str) -> None:
        reserve = sum(self.plan.step_s[s] for s in self.later if s != step and NAMES.index(s) > NAMES.index(step))
        # A check gets its own share; a timed step also what the checks left (speed, first, uses it).
        share = self.plan.step_s[step] if step in CHECKS else float("inf")
        deadline = min(time.time() + share, self.whole - reserve)
        ctx = Context(
            self.plan,
            self.folder,
            self.data_dir,
            self.dry,
            step,
            deadline,
            self.folder / f"result-{step}.json",
            self.paths,
        )
        context_path = self.folder / f"context-{step}.json"
        context_path.write_text(json.dumps(ctx.to_json()))
        log(f"({LETTER[step]}) {step}: started, {deadline - time.time():.0f} s at most")
        with open(self.logs / f"{step}.log", "w") as output:
            process = subprocess.Popen(
                self.command(step, context_path),
                stdout=output,
                stderr=subprocess.STDOUT,
                env=ctx.environment(),
                cwd=self.folder,
                start_new_session=True,  # its own process group: a kill ends what it started too
            )
        self.running[step] = (process, ctx, time.time())

    def finish(self, step: str) -> dict[str, Any]:
        process, ctx, started = self.running.pop(step)
        try:
            process.wait(timeout=max(0.0, ctx.deadline - time.time()))
            killed = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            killed = True
        try:
            os.killpg(process.pid, signal.SIGKILL)  # anything it left running
        except ProcessLookupError:
            pass
        result = json.loads(ctx.result_path.read_text()) if ctx.result_path.exists() else {}
        result.setdefault("detail", step)
        problems = list(result.get("problems", []))
        if killed:
            problems.insert(0, f"outlasted its deadline of {ctx.deadline - started:.0f} s and was stopped")
        elif process.returncode != 0 and not problems:
            problems.append(
                f"its process exited {process.returncode}: {last_lines((self.logs / f'{step}.log').read_text())}"
            )
        result.update(
            problems=problems,
            passed=bool(result.get("passed")) and not killed and process.returncode == 0,
            finished=not killed and process.returncode == 0,
            seconds=time.time() - started,
        )
        verdict = "passed" if result["passed"] else "FAILED"
        log(
            f"({LETTER[step]}) {step}: {verdict} in {result['seconds']:.0f} s - {result['detail']}"
            + "".join(f"\n    {p}" for p in problems)
        )
        return result


def gpu_machine(plan: Plan) -> dict[str, Any]:
    import platform

    import torch

    from benchmarks.machine_info import cpu_model, memory_gib

    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": memory_gib(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": plan.device,
    }
    if plan.device.startswith("cuda"):
        info.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    return info


def code_version() -> dict[str, Any]:
    try:
        from benchmarks.timing import code_version as version

        return version()
    except Exception as error:  # initmem not importable in this process: the steps say so themselves
        return {"commit": None, "error": f"{type(error).__name__}: {error}"}


def write_outputs(
    results: dict[str, Any], text: str, *, json_path: Path | None, out: Path | None, docs: Path | None, dry: bool
) -> Path | None:
    """Every sample to ``json_path`` and ``out/gpu_check.json``, the section to ``out/gpu_check.md``;
    a docs page only after a complete run: ``out/PERFORMANCE.md`` (``docs``, by default
    docs/PERFORMANCE.md, with its section replaced) with ``out``, else ``docs`` itself (by default
    docs/PERFORMANCE.md on a GPU, none in a dry run). Returns the page written, if any."""
    from benchmarks.gpu_steps.report import write_section

    for path in [json_path, out and out / "gpu_check.json"]:
        if path:
            write_json(path, results)
    if out:
        (out / "gpu_check.md").write_text(text + "\n")
    target = (out / "PERFORMANCE.md") if out else (docs or (None if dry else DOCS))
    if target is None:
        return None
    if not results["complete"]:
        log(f"{target} not written: only a complete run (every step run and passed) writes it")
        return None
    if out:
        shutil.copy(docs or DOCS, target)
    write_section(target, text)
    log(f"wrote the GPU section of {target}")
    return target


def check(args: argparse.Namespace, kept: Tee) -> int:
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in steps if s not in NAMES]
    if unknown:
        fail(f"--steps: unknown {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    plan = DRY if args.dry_run else FULL
    if args.budget:
        plan = Plan(**{**plan.__dict__, "budget_s": args.budget})
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        fail("no CUDA GPU here: run this on a GPU machine, or pass --dry-run to run every step at toy size on the CPU")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    began = time.time()
    results: dict[str, Any] = {
        "dry_run": args.dry_run,
        "machine": gpu_machine(plan),
        "code": code_version(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "plan": plan.to_json(),
        "steps": {},
    }
    with tempfile.TemporaryDirectory(prefix="initmem-gpu-check-") as temporary:
        folder = Path(temporary)
        logs = folder / "logs"
        logs.mkdir()
        log(f"writing CIFAR-format data ({5 * plan.per_batch:,} + {plan.test_images:,} images)")
        data_dir = write_cifar(folder / "cifar", plan)
        later = [s for s in NAMES if s in steps and s not in CHECKS]
        runner = Steps(plan, folder, data_dir, args.dry_run, began + plan.budget_s, later, logs)
        for step in [s for s in CHECKS if s in steps]:  # side by side
            runner.start(step)
        for step in [s for s in CHECKS if s in steps]:
            results["steps"][step] = runner.finish(step)
        for step in later:  # one at a time, alone on the device
            runner.start(step)
            results["steps"][step] = runner.finish(step)
        step_logs = "".join(f"\n===== {p.stem} =====\n{p.read_text()}" for p in sorted(logs.glob("*.log")))
    from benchmarks.gpu_steps.report import goals, section

    results["seconds"] = time.time() - began
    results["goals"] = goals(results, args.dry_run)
    results["passed"] = all(r["passed"] for r in results["steps"].values())
    results["complete"] = results["passed"] and set(results["steps"]) == set(NAMES)
    try:
        text = section(results)
    except Exception as error:  # the samples are still written
        text = f"The section could not be written ({type(error).__name__}: {error}); the JSON holds every sample."
    print(text)
    write_outputs(results, text, json_path=args.json, out=args.out, docs=args.docs, dry=args.dry_run)
    log(f"{'every step passed' if results['passed'] else 'some steps FAILED'} in {results['seconds']:.0f} s")
    if args.out:
        (args.out / "gpu_check.log").write_text(kept.getvalue() + step_logs)
    return 0 if results["passed"] else 1


class Tee:
    """stderr, kept too, for ``--out DIR/gpu_check.log``."""

    def __init__(self, stream: Any):
        self.stream, self.kept = stream, []

    def write(self, text: str) -> int:
        self.kept.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def getvalue(self) -> str:
        return "".join(self.kept)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--as-initmem"]:  # ``initmem ...`` with the synthetic CIFAR files accepted
        skip_cifar_md5()
        sys.argv = ["initmem", *argv[1:]]
        from initmem_cli.entry import main as initmem_main

        initmem_main()
        return 0
    args = parse_args(argv)
    if args.worker:
        if args.worker not in WORKER_MODULES:
            fail(f"--worker: unknown {args.worker}")
        skip_cifar_md5()
        module = importlib.import_module(f"benchmarks.gpu_steps.{WORKER_MODULES[args.worker]}")
        module.WORKERS[args.worker](json.loads(args.spec.read_text()))
        return 0
    if args.step:
        return run_step(args.context)
    kept = Tee(sys.stderr)
    sys.stderr = kept  # type: ignore[assignment]
    try:
        return check(args, kept)
    finally:
        sys.stderr = kept.stream


if __name__ == "__main__":
    raise SystemExit(main())
