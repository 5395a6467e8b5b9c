"""What the steps of gpu_check share: the plan, the step context, worker processes started in
step, the synthetic CIFAR files, processes timed over one common window, and the comparisons.

Nothing here imports initmem or torch at module level: the parent process of gpu_check only
orchestrates, and a step's own process imports what it uses.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
_NAMES = itertools.count()


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every size and deadline of the check in one place (``--dry-run`` shrinks them all)."""

    device: str
    per_batch: int  # images per CIFAR training batch file (5 files); the test file holds test_images
    test_images: int
    threads: int  # torch CPU threads of every run (0: torch's default)
    cell_batch: int  # the small cells of (b), (c), (d)
    cell_train: int
    cell_eval_size: int  # at most this many validation and test images in those cells (0: all)
    resume_epochs: int
    speed_batch: int
    speed_steps: int  # training steps per timed epoch in (e)
    speed_epochs: int  # epoch 1 warms up (compilation, cuDNN's algorithm search); the rest are timed
    concurrency: tuple[int, ...]
    window_s: float  # (f) and (g): the common wall-clock window every process is timed over
    concurrency_train: int  # training images of each (f) cell (0: all 45,000)
    lockstep_models: tuple[int, ...]  # (g): K
    lockstep_batch: int
    lockstep_warmup: int  # (g): untimed steps before each window (cuDNN's algorithm search)
    lockstep_fp32: bool  # (g): fp32 too, after bf16 with channels-last, if time is left
    lockstep_product_models: int  # (g)'s product path: K whole cells fused, against one and K processes
    lockstep_cell_train: int  # training images of each of those cells
    lockstep_cell_epochs: int
    budget_s: float  # the whole check's wall time, by its own clock
    step_s: dict[str, float]  # each step's hard deadline (its process is killed there)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        tuples = {"concurrency", "lockstep_models"}
        return cls(**{k: tuple(v) if k in tuples else v for k, v in data.items()})


FULL = Plan(
    device="cuda",
    per_batch=10_000,
    test_images=10_000,
    threads=0,
    cell_batch=128,
    cell_train=2048,
    cell_eval_size=2000,
    resume_epochs=12,  # (d) is killed after epoch 2: 10 epochs (seconds on a GPU) to kill it in
    speed_batch=128,
    speed_steps=50,
    speed_epochs=3,
    concurrency=(1, 2, 4, 8),
    window_s=5.0,
    concurrency_train=8192,
    lockstep_models=(1, 4, 8),
    lockstep_batch=128,
    lockstep_warmup=15,
    lockstep_fp32=True,
    lockstep_product_models=8,
    lockstep_cell_train=4096,
    lockstep_cell_epochs=2,
    budget_s=470.0,  # under 8 minutes: a 10-minute command with room for starting and copying back
    # The four checks run side by side (150 s at most together), then (e), (f), (g) one at a time.
    step_s={
        "tests": 150.0,
        "determinism": 120.0,
        "divergence": 90.0,
        "resume": 150.0,
        "speed": 100.0,
        "concurrency": 75.0,
        "lockstep": 135.0,  # the bare loops (85 s), then the product path
    },
)
DRY = Plan(
    device="cpu",
    per_batch=20,
    test_images=20,
    threads=1,
    cell_batch=16,
    cell_train=64,
    cell_eval_size=0,
    resume_epochs=4,
    speed_batch=16,
    speed_steps=2,
    speed_epochs=2,
    concurrency=(1, 2),
    window_s=1.0,
    concurrency_train=64,
    lockstep_models=(1, 2),
    lockstep_batch=8,
    lockstep_warmup=1,
    lockstep_fp32=False,
    lockstep_product_models=2,
    lockstep_cell_train=32,
    lockstep_cell_epochs=1,
    budget_s=770.0,  # a shared 2-core machine: generous, the dry run proves plumbing, not speed
    step_s={
        "tests": 240.0,
        "determinism": 240.0,
        "divergence": 240.0,
        "resume": 240.0,
        "speed": 150.0,
        "concurrency": 150.0,
        "lockstep": 200.0,
    },
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def last_lines(text: str | None, n: int = 6) -> str:
    return " | ".join(line.strip() for line in (text or "").strip().splitlines()[-n:])


def write_json(path: Path, data: Any) -> None:
    """Atomically: a reader (the parent, after a kill) sees the old file or the new one."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=1, default=str))
    temporary.replace(path)


# -- the synthetic CIFAR files ------------------------------------------------------------------------


def write_cifar(root: Path, plan: Plan) -> Path:
    """Random uint8 images in the ``cifar-10-batches-py`` layout torchvision reads (pickles of
    dicts with str keys, read back with ``encoding="latin1"``)."""
    import numpy as np

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)

    def dump(name: str, n: int) -> None:
        entry = {
            "batch_label": name,
            "labels": [int(v) for v in rng.integers(0, 10, n)],
            "data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
            "filenames": [f"{name}_{i}.png" for i in range(n)],
        }
        with open(folder / name, "wb") as handle:
            pickle.dump(entry, handle, protocol=2)

    for i in range(1, 6):
        dump(f"data_batch_{i}", plan.per_batch)
    dump("test_batch", plan.test_images)
    with open(folder / "batches.meta", "wb") as handle:
        meta = {"num_cases_per_batch": plan.per_batch, "label_names": [f"class{k}" for k in range(10)]}
        pickle.dump(meta, handle, protocol=2)
    return root


def skip_cifar_md5() -> None:
    """The synthetic files cannot match the official md5 sums torchvision checks: "exists" instead
    (in gpu_check's own processes only)."""
    import torchvision.datasets.cifar as tv_cifar

    tv_cifar.check_integrity = lambda path, md5=None: Path(path).is_file()


def split_sizes(plan: Plan) -> dict[str, int]:
    """The cifar10 plugin's split of the files written: 10% of training for validation."""
    train_all = 5 * plan.per_batch
    val = int(round(train_all * 0.1))
    return {"train": train_all - val, "val": val, "test": plan.test_images}


# -- the step context -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Context:
    """What a step's process is told: the plan, the shared folder and data, its own deadline and
    the file its result goes to (rewritten as it goes, so a killed step leaves what it found)."""

    plan: Plan
    folder: Path
    data_dir: Path
    dry: bool
    step: str
    deadline: float  # time.time() by which the step's process is killed
    result_path: Path
    pythonpath: list[str]  # for every process a step starts: benchmarks/, the tree, a shim if made

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["plan"] = self.plan.to_json()
        return {k: str(v) if isinstance(v, Path) else v for k, v in data.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Context:
        paths = {"folder", "data_dir", "result_path"}
        values = {k: Path(v) if k in paths else v for k, v in data.items()}
        values["plan"] = Plan.from_json(data["plan"])
        return cls(**values)

    def left_s(self) -> float:
        return self.deadline - time.time()

    def save(self, result: dict[str, Any]) -> None:
        write_json(self.result_path, result)

    def path(self, stem: str) -> Path:
        """A fresh name in the shared folder (each step's names start with the step's own)."""
        return self.folder / f"{self.step}-{stem}-{next(_NAMES)}"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*self.pythonpath, *filter(None, [env.get("PYTHONPATH")])])
        env.pop("INITMEM_LOAD_PLUGINS", None)
        return env

    def command(self, *args: str) -> list[str]:
        return [sys.executable, str(SCRIPT), *args]

    def worker(self, kind: str, spec: dict[str, Any], timeout: float) -> subprocess.CompletedProcess:
        """``gpu_check.py --worker KIND`` in a fresh process, to the end or at most ``timeout`` s."""
        spec_path = self.path(f"{kind}-spec").with_suffix(".json")
        spec_path.write_text(json.dumps(spec))
        return subprocess.run(
            self.command("--worker", kind, "--spec", str(spec_path)),
            capture_output=True,
            text=True,
            timeout=max(1.0, min(timeout, self.left_s())),
            env=self.environment(),
            cwd=self.folder,
        )

    def start_worker(self, kind: str, spec: dict[str, Any], spec_path: Path) -> subprocess.Popen:
        spec_path.write_text(json.dumps(spec))
        return subprocess.Popen(
            self.command("--worker", kind, "--spec", str(spec_path)),
            env=self.environment(),
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )


# -- processes timed over one common window ---------------------------------------------------------


def together_figures(outs: list[dict[str, Any]], each: str) -> dict[str, Any]:
    """What processes run by ``run_together`` measured together: their summed images/s, each one's
    (under ``each``, e.g. ``per_cell``) and how far apart they started."""
    starts = [o["wall"][0] for o in outs]
    return {
        "status": "measured",
        "images_per_s": sum(o["images_per_s"] for o in outs),
        each: [o["images_per_s"] for o in outs],
        "start_spread_s": max(starts) - min(starts),
    }


def run_together(ctx: Context, kind: str, specs: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """Start one ``--worker KIND`` process per spec; once every one is warm (``ready`` written),
    name one start time for all; collect what each measured over its window (``out``), then tell
    them to stop. The worker side is ``Together``. Raises RuntimeError with the reason."""
    folder = ctx.path(tag)
    folder.mkdir()
    shared = {"go": str(folder / "go"), "stop": str(folder / "stop"), "wait_s": max(5.0, ctx.left_s())}
    specs = [
        {**spec, **shared, "ready": str(folder / f"ready{i}"), "out": str(folder / f"out{i}.json")}
        for i, spec in enumerate(specs)
    ]
    processes = [ctx.start_worker(kind, spec, folder / f"spec{i}.json") for i, spec in enumerate(specs)]

    def wait_for(key: str, what: str) -> None:
        while not all(Path(s[key]).exists() for s in specs):
            dead = [p for p in processes if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{tag}: a process exited before it {what}: {last_lines(dead[0].stderr.read())}")
            if ctx.left_s() < 1:
                raise RuntimeError(f"{tag}: not every process {what} before the step's deadline")
            time.sleep(0.01)

    try:
        wait_for("ready", "was warm")
        (folder / "go.tmp").write_text(repr(time.time() + 0.5))
        (folder / "go.tmp").rename(folder / "go")
        wait_for("out", "reported")
        (folder / "stop").write_text("")
        for process in processes:
            _, stderr = process.communicate(timeout=max(1.0, ctx.left_s()))
            if process.returncode != 0:
                raise RuntimeError(f"{tag}: a process exited {process.returncode}: {last_lines(stderr)}")
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"{tag}: a process did not stop: {error}") from None
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return [json.loads(Path(s["out"]).read_text()) for s in specs]


class Together:
    """The worker side of ``run_together``: ``wait_for_start()`` once warm, then ``report()``
    what the window measured, then keep the device busy until ``stopped()`` (so that no process
    is timed while others have stopped)."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec

    def wait_for_start(self) -> None:
        Path(self.spec["ready"]).write_text(str(os.getpid()))
        go = Path(self.spec["go"])
        give_up = time.time() + self.spec["wait_s"]
        while not go.exists():
            if time.time() > give_up:
                raise TimeoutError("no start signal")
            time.sleep(0.005)
        start_at = float(go.read_text())
        while time.time() < start_at:
            time.sleep(0.001)

    def report(self, figures: dict[str, Any]) -> None:
        out = Path(self.spec["out"])
        write_json(out, figures)

    def stopped(self) -> bool:
        return Path(self.spec["stop"]).exists()


# -- knobs and comparisons ------------------------------------------------------------------------------


def config_fields() -> set[str]:
    from initmem_core.config import FIELDS

    return set(FIELDS)


def missing_knobs(knobs: dict[str, Any]) -> list[str]:
    """Knobs this version of initmem does not have (the check then says so instead of failing)."""
    fields = config_fields()
    return [key for key in knobs if key not in fields]


def cli_args(knobs: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for key, value in knobs.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args += [flag] if value else []
        else:
            args += [flag, str(value)]
    return args


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def history_differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[str]:
    if len(a) != len(b):
        return [f"{len(a)} rows vs {len(b)}"]
    return [
        f"epoch {row.get('epoch')} {key}: {row[key]!r} vs {other.get(key)!r}"
        for row, other in zip(a, b)
        for key in row
        if not same_value(row[key], other.get(key))
    ]


def weight_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    import torch

    if a.keys() != b.keys():
        return ["different parameter names"]
    return [key for key in a if not torch.equal(a[key], b[key])]
