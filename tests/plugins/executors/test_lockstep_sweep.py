"""Lockstep sweeps (plugins/executors/lockstep*.py): what fuses is declared, and a fused job's
cells are the lone runs' (their metrics, artifacts and weights to float tolerance), one model's
divergence is its own, and a killed job resumes to the uninterrupted job's values."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from initmem_core.config import RunConfig
from initmem_core.plugin_system.loader import get_registry
from initmem_core.vocabulary import DIVERGED_TAG, FAILED, FINISHED, LOCKSTEP_TAG
from initmem_plugins.executors.lockstep import plan_lockstep

BASE = dict(arch="resnet20", data="digits", epochs=2, batch_size=32, train_size=96, eval_size=64, threads=1)


def test_architectures_and_optimizers_declare_what_fuses():
    from cli.plugins import plugins_report

    rows = {(row["kind"], row["name"]): row for row in plugins_report(get_registry())["components"]}
    for depth in (20, 32, 44, 56, 110):
        assert rows[("architecture", f"resnet{depth}")]["fused"].endswith(":fuse_cifar_resnets")
    assert rows[("architecture", "resnet9")]["fused"] == ""  # not yet: it has no fused form
    assert [rows[("optimizer", name)]["elementwise"] for name in ("sgd", "adam", "adamw", "muon")] == [
        True,
        True,
        True,
        False,
    ]


def test_sigma_groups_fuse_per_seed_in_balanced_jobs_and_the_rest_say_why():
    registry = get_registry()
    cells = [RunConfig(**BASE, sigma=s, seed=seed) for seed in (0, 1) for s in (0.5, 1, 2, 3, 4, 5, 6)]
    muon = [RunConfig(**BASE, sigma=s, opt="muon") for s in (0.5, 1)]
    plan = plan_lockstep(cells + muon, registry, "on", max_models=4, config_of=lambda c: c)
    fused = plan.fused
    assert sorted(len(job) for job in fused) == [3, 3, 4, 4]
    assert all(len({(c.seed, c.opt) for c in job}) == 1 for job in fused)  # one seed, one everything but sigma
    assert plan.reasons == {"--opt muon does not declare an element-wise update": 2}
    assert [len(job) for job in plan.jobs if len(job) == 1] == [1, 1]
    assert any("14 cells fuse into 4 job(s)" in line for line in plan.lines())
    # auto fuses 8x8 digits at b = 32 on the CPU, where it was measured to pay, not b = 128
    assert plan_lockstep(cells, registry, "auto", config_of=lambda c: c).fused
    big = [c.replace(batch_size=128) for c in cells]
    assert not plan_lockstep(big, registry, "auto", config_of=lambda c: c).fused
    # 28x28 Fashion-MNIST at b = 32 too (2.07x as whole processes); CIFAR's 32x32 was not measured
    fashion = [c.replace(data="fashion-mnist") for c in cells]
    assert len(plan_lockstep(fashion, registry, "auto", config_of=lambda c: c).fused) == 2  # a job per seed
    cifar = plan_lockstep([c.replace(data="cifar10") for c in cells], registry, "auto", config_of=lambda c: c)
    assert not cifar.fused and any("at most 784 pixels" in reason for reason in cifar.reasons)


def _job_and_lone_runs(configs, diverge_at=None):
    import torch

    from initmem_core.tracking.tracker import MemoryTracker
    from initmem_core.training.runner import run
    from initmem_plugins.executors.lockstep_job import run_lockstep

    class Kept(MemoryTracker):
        def log_artifact(self, local_path, artifact_path=None):
            super().log_artifact(local_path, artifact_path)
            self.weights = torch.load(local_path, weights_only=True)

    fused = [Kept() for _ in configs]
    outcomes = run_lockstep(configs, fused)
    lone = []
    for config in configs:
        tracker = Kept()
        try:
            run(config, tracker=tracker)
        except Exception:
            pass
        lone.append(tracker)
    return outcomes, fused, lone


def assert_same_run(fused, lone, rtol=1e-3, atol=1e-4):
    import torch

    got = {(step, key): value for step, key, value in fused.metrics}
    expected = {(step, key): value for step, key, value in lone.metrics}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=rtol, abs=atol), key
    assert fused.texts.keys() == lone.texts.keys() and fused.files.keys() == lone.files.keys()
    assert fused.tags[LOCKSTEP_TAG] and LOCKSTEP_TAG not in lone.tags
    assert {k: v for k, v in fused.tags.items() if k != LOCKSTEP_TAG} == lone.tags
    assert fused.params == lone.params
    for name, tensor in lone.weights.items():  # a plain model's state dict, loadable as such
        torch.testing.assert_close(fused.weights[name], tensor, rtol=rtol, atol=atol)


@pytest.mark.slow
@pytest.mark.parametrize(
    "optimizer", [dict(opt="sgd", momentum=0.9, weight_decay=5e-4), dict(opt="adam"), dict(opt="adamw")]
)
def test_a_fused_job_is_its_cells_lone_runs(optimizer):
    configs = [RunConfig(**BASE, **optimizer, sigma=s) for s in (0.5, 1.0, 2.0)]
    outcomes, fused, lone = _job_and_lone_runs(configs)
    assert outcomes == [(FINISHED, "")] * 3
    for one, alone in zip(fused, lone, strict=True):
        assert one.status == alone.status == FINISHED
        assert_same_run(one, alone)


@pytest.mark.slow
def test_a_model_that_diverges_ends_its_own_cell_and_the_others_finish(monkeypatch):
    import torch

    from initmem_plugins.executors import lockstep_job

    fuse = lockstep_job.fuse

    def fuse_with_a_fault(members):
        """Model 1's training loss turns NaN at its second step; the others' stay the lone runs'
        (once it has left, the other two are fused anew, without a fault)."""
        fused = fuse(members)
        if len(members) < 3:
            return fused
        forward, calls = fused.forward, []

        def faulty(x):
            out = forward(x)
            if fused.training:
                calls.append(1)
                if len(calls) >= 2:
                    out = out.clone()
                    out[1] = torch.nan
            return out

        fused.forward = faulty
        return fused

    monkeypatch.setattr(lockstep_job, "fuse", fuse_with_a_fault)
    configs = [RunConfig(**BASE, sigma=s) for s in (0.5, 1.0, 2.0)]
    outcomes, fused, lone = _job_and_lone_runs(configs)
    assert [status for status, _ in outcomes] == [FINISHED, FAILED, FINISHED]
    assert "Diverged" in outcomes[1][1]
    assert [tracker.status for tracker in fused] == [FINISHED, FAILED, FINISHED]
    assert fused[1].tags[DIVERGED_TAG] == "true" and fused[1].tags["diverged_step"] == "2"
    assert "final_weights.pt" not in fused[1].files  # ended where it diverged, as a lone run does
    for index in (0, 2):
        assert_same_run(fused[index], lone[index])


#: A fused job in its own process, killed (SIGKILL) once a tracker logs the evaluation of epoch
#: ``kill_at``, or resumed: prints its outcomes and every run's metrics, tags and status as JSON.
#: ``BASE`` and ``SIGMAS`` are prepended by ``fused_job``.
KILLED_JOB = textwrap.dedent(
    """
    import json, os, signal, sys
    from initmem_core.config import RunConfig
    from initmem_core.tracking.tracker import MemoryTracker
    from initmem_plugins.executors.lockstep_job import run_lockstep

    folder, kill_at, resume = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "resume"

    class Tracker(MemoryTracker):
        def log_metrics(self, metrics, step):
            super().log_metrics(metrics, step)
            if step == kill_at and "val_loss" in metrics:
                os.kill(os.getpid(), signal.SIGKILL)

    base = dict(BASE, checkpoint_dir=folder, checkpoint_every=1, deterministic=True)
    configs = [RunConfig(**base, sigma=s) for s in SIGMAS]
    trackers = [Tracker() for _ in configs]
    outcomes = run_lockstep(configs, trackers, resume=[resume] * len(configs))
    runs = [{"metrics": [m[:2] + (repr(m[2]),) for m in t.metrics], "tags": t.tags, "status": t.status}
            for t in trackers]
    print(json.dumps({"outcomes": outcomes, "runs": runs}))
    """
)


def fused_job(base: dict, sigmas: tuple[float, ...], folder, kill_at: int, mode: str):
    """``KILLED_JOB`` on ``base`` at ``sigmas``: the finished process and its JSON (``None`` if it failed)."""
    import json

    script = f"BASE = {base!r}\nSIGMAS = {sigmas!r}\n" + KILLED_JOB
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder), str(kill_at), mode], capture_output=True, text=True, timeout=300
    )
    return done, (json.loads(done.stdout) if done.returncode == 0 else None)


def at_epoch(found: dict, epoch: int) -> list[list]:
    """Each run's metrics logged at ``epoch``."""
    return [[m for m in run["metrics"] if m[0] == epoch] for run in found["runs"]]


@pytest.mark.slow
def test_a_killed_fused_job_resumes_to_the_uninterrupted_jobs_values(tmp_path):
    sigmas = (0.5, 2.0)
    whole, uninterrupted = fused_job(BASE, sigmas, tmp_path / "whole", -1, "fresh")
    again, _ = fused_job(BASE, sigmas, tmp_path / "again", -1, "fresh")
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout == again.stdout  # --deterministic: bit-identical across processes
    killed, _ = fused_job(BASE, sigmas, tmp_path / "killed", 2, "fresh")  # after epoch 1's checkpoint
    assert killed.returncode == -9
    resumed, after = fused_job(BASE, sigmas, tmp_path / "killed", -1, "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert after["outcomes"] == uninterrupted["outcomes"]
    assert at_epoch(after, 2) == at_epoch(uninterrupted, 2)  # epoch 2, trained again from the checkpoint


# With --patience 1 these three sigmas stop at three epochs (3, 2 and the cap, 6): the first, whose
# batches the job draws, stops while others train on.
PATIENT = dict(BASE, epochs=6, opt="adam", lr=0.01, patience=1)
PATIENT_SIGMAS = (0.25, 0.5, 2.0)


@pytest.mark.slow
def test_with_patience_each_model_stops_where_its_lone_run_does_and_the_others_train_on():
    configs = [RunConfig(**PATIENT, sigma=s) for s in PATIENT_SIGMAS]
    outcomes, fused, lone = _job_and_lone_runs(configs)
    assert outcomes == [(FINISHED, "")] * 3
    stops = [{key: value for _, key, value in tracker.metrics}["stop_epoch"] for tracker in lone]
    assert len(set(stops)) == 3 and min(stops) < PATIENT["epochs"]  # models stop at different epochs
    for one, alone in zip(fused, lone, strict=True):
        # its history ends where it stopped, its summary and stop_reason are the lone run's, and its
        # final weights (BatchNorm statistics included) are where it stopped, untouched by the others
        assert_same_run(one, alone)
        assert max(step for step, key, _ in one.metrics if key == "val_loss") == stops[fused.index(one)]


@pytest.mark.slow
def test_a_killed_fused_job_with_patience_resumes_to_the_uninterrupted_jobs_values(tmp_path):
    def job(folder, kill_at, mode):
        return fused_job(PATIENT, PATIENT_SIGMAS, folder, kill_at, mode)

    whole, uninterrupted = job(tmp_path / "whole", -1, "fresh")
    assert whole.returncode == 0, whole.stderr
    stops = [
        int(float(dict((key, value) for _, key, value in run["metrics"])["stop_epoch"]))
        for run in uninterrupted["runs"]
    ]
    first = min(stops)
    assert first < max(stops)  # one model stopped while the others trained on
    # Killed in the epoch after the first model stopped: that one's last checkpoint is where it
    # stopped (a run killed before it was ended), the others' the epoch before.
    killed, _ = job(tmp_path / "killed", first + 1, "fresh")
    assert killed.returncode == -9
    resumed, after = job(tmp_path / "killed", -1, "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert after["outcomes"] == uninterrupted["outcomes"] == [[FINISHED, ""]] * 3
    for again, run, stop in zip(after["runs"], uninterrupted["runs"], stops, strict=True):
        assert again["status"] == FINISHED and again["tags"]["stop_reason"] == run["tags"]["stop_reason"]
        # bit-identical: every figure the resumed run logged is the uninterrupted run's, and it
        # logged everything the uninterrupted one did after the checkpoint (its stop epoch's summary)
        logged = {(step, key): value for step, key, value in run["metrics"]}
        resumed_logged = {(step, key): value for step, key, value in again["metrics"]}
        assert resumed_logged.items() <= logged.items()
        assert {key for key in logged if key[0] > first} | {(stop, "stop_epoch")} <= resumed_logged.keys()
