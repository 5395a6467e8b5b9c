"""A lockstep job: K cells of one sigma group trained as one fused model in one process, each
cell keeping its own child run exactly as if it had run alone.

Each cell is planned and built as a lone run (``plan_run``, ``build_setup``: its own initial
weights from its own seed streams, its own optimizer, schedule, metrics, W0), and its run is
opened, checkpointed, resumed and ended by the runner's own functions. Only the training step is
shared: the architecture's declared fused form (``contracts.ArchitectureInfo.fused``) holds the K
models' parameters and BatchNorm buffers, each plain model's tensors are rebound to views of
them, one forward and backward on the group's batch (the seed's data order, the same for every
sigma) gives each model its own gradient (the sum of the K mean losses), and each model's own
optimizer steps its own views. So each model's evaluation, metrics, selection, clocks,
checkpoints and ``final_weights.pt`` are the lone run's code on the lone run's model; its
checkpoint is a lone run's, which a fused job (or a lone run) resumes.

Each model ends its own run where a lone run would: at its own stopping point
(``selection.stopping``: ``--patience`` on its own validation loss, ``--until``, the last epoch),
FINISHED, or DIVERGED at the step its loss turned non-finite. An ended model takes its own
storage back and leaves: the others are fused anew without it (the same values, fewer models), so
its weights, BatchNorm statistics and optimizer state stay where it ended, and the job ends when
every model has. SIGTERM/SIGHUP/Ctrl-C checkpoint every live model and end each KILLED.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from initmem_core.config import RunConfig
from initmem_core.errors import Diverged
from initmem_core.kinds import resolve
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.registry import Registry
from initmem_core.tracking.tracker import Tracker
from initmem_core.training import runner
from initmem_core.training.checkpoint_format import header
from initmem_core.training.checkpoint_store import CheckpointStore
from initmem_core.training.clocks import ForgettingClocks
from initmem_core.training.divergence import LossGuard, all_finite
from initmem_core.training.loaders import FULL_TEST
from initmem_core.training.loop import (
    EpochInterrupted,
    NoProgress,
    evaluated_at,
    evaluation_row,
    loss_diverged,
    summarize,
)
from initmem_core.training.plan import RunPlan, plan_run
from initmem_core.training.selection import SelectedCheckpoint, stopping
from initmem_core.training.setup import TrainingSetup, build_setup, process_settings_kept
from initmem_core.training.state import EpochSums, restore, snapshot
from initmem_core.training.stop_signals import Stopped, StopSignals
from initmem_core.vocabulary import FAILED, FINISHED, LOCKSTEP_TAG

Outcome = tuple[str, str]  # (status, error as text), as ``sweep.executor.run_cell`` returns


class FusedModel(Protocol):
    """What an architecture's declared fused form builds (``kinds.ArchitectureInfo``), as the job
    uses it: a module of K models whose output is K x N x classes and whose ``split(tensors)`` gives
    its named tensors back as K state dicts of views in one model's names."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...
    def split(self, tensors: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]: ...
    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]: ...
    def train(self) -> Any: ...
    def eval(self) -> Any: ...
    def zero_grad(self, set_to_none: bool = True) -> None: ...


@dataclass
class Member:
    """One model of the job: its lone run's plan, setup, tracker and training state."""

    plan: RunPlan
    setup: TrainingSetup
    tracker: Tracker
    progress: Any
    run_id: str = ""
    checkpoints: CheckpointStore | None = None
    clocks: ForgettingClocks = field(default_factory=ForgettingClocks)
    history: list[dict[str, float]] = field(default_factory=list)
    selection: SelectedCheckpoint | None = None
    sums: Any = None
    guard: Any = None
    outcome: Outcome | None = None  # set once its run has ended

    @property
    def alive(self) -> bool:
        return self.outcome is None

    def record(self, epoch: int, batch_figures: tuple[float, float] | None, lr: float, evaluated=None) -> None:
        assert self.selection is not None
        row = evaluation_row(self.setup, epoch, self.history, self.clocks, batch_figures, lr, self.selection, evaluated)
        self.tracker.log_metrics(row, epoch)
        self.history.append({"epoch": epoch, **row})
        self.progress.epoch_done(epoch, row)

    def checkpoint(self, position: tuple[int, int], loader_state: dict[str, Any]) -> str | None:
        if self.checkpoints is None:
            return None
        assert self.selection is not None
        state = snapshot(self.setup, position, self.clocks, self.history, self.sums, loader_state, self.selection)
        return str(self.checkpoints.save({**header(self.plan.config, self.plan.config_hash, self.run_id), **state}))

    def end(self, error: BaseException) -> None:
        """End its run as a lone run ending with ``error`` would (DIVERGED, KILLED, FAILED)."""
        status, _ = runner.fail_run(self.tracker, self.checkpoints, error)
        self.outcome = (status, f"{type(error).__name__}: {error}" if status == FAILED else "")


def run_lockstep(
    configs: Sequence[RunConfig],
    trackers: Sequence[Tracker],
    progresses: Sequence[Any] | None = None,
    *,
    registry: Registry | None = None,
    resume: Sequence[bool] | None = None,
) -> list[Outcome]:
    """Train ``configs`` (cells that differ only in sigma) as one fused model; each writes to its
    own tracker (a sweep's child run). Returns each cell's (status, error), as ``run_cell`` does;
    a signal ends every live run KILLED and propagates (``Stopped``), as does any other exit
    (``SystemExit``: submitit requeuing a preempted Slurm job), as a lone run's does."""
    registry = registry or get_registry()
    progresses = progresses or [None] * len(configs)
    resume = resume or [False] * len(configs)
    try:
        plans = [plan_run(config, registry, tracker.uri) for config, tracker in zip(configs, trackers, strict=True)]
    except Exception as error:
        return [(FAILED, f"{type(error).__name__}: {error}")] * len(configs)
    with process_settings_kept():  # threads, determinism, TF32: as they were, after the job
        try:
            members = [
                Member(plan, build_setup(plan), tracker, progress or NoProgress())
                for plan, tracker, progress in zip(plans, trackers, progresses, strict=True)
            ]
        except Exception as error:
            return [(FAILED, f"{type(error).__name__}: {error}")] * len(configs)
        with StopSignals() as stop:
            opened: list[Member] = []
            try:
                states = []
                for member, resumed in zip(members, resume, strict=True):
                    tags = {LOCKSTEP_TAG: str(len(members))}
                    member.run_id, member.checkpoints, state = runner.open_run(
                        member.plan, member.setup, member.tracker, tags, resumed
                    )
                    opened.append(member)
                    states.append(state)
                    runner.log_run_files(member.plan, member.setup, member.tracker)
                _train(members, states, stop)
            except BaseException as error:
                for member in opened:
                    if member.alive:
                        member.end(error)
                for member in members:
                    if member.outcome is None:
                        member.outcome = (FAILED, f"{type(error).__name__}: {error}")
                if not isinstance(error, Exception):  # a signal (Stopped), Ctrl-C, SystemExit: the caller's
                    raise
    return [member.outcome or (FAILED, "never ended") for member in members]


def fuse(members: Sequence[Member]) -> FusedModel:
    """The fused model of the members' models, whose tensors each plain model then views."""
    spec = members[0].plan.components["architecture"].spec
    models = [member.setup.model for member in members]
    fused = resolve(spec.info.fused)(models)
    fused.to(members[0].setup.device, memory_format=members[0].setup.memory_format)
    parameters = fused.split({name: p.data for name, p in fused.named_parameters()})
    buffers = fused.split(dict(fused.named_buffers()))
    for model, own_parameters, own_buffers in zip(models, parameters, buffers, strict=True):
        for name, parameter in model.named_parameters():
            parameter.data = own_parameters[name]
        for name, _ in model.named_buffers():
            owner, _, leaf = name.rpartition(".")
            model.get_submodule(owner)._buffers[leaf] = own_buffers[name]
    return fused


def unfuse(members: Sequence[Member]) -> None:
    """Each plain model gets its own storage again (its final weights are saved from it)."""
    for member in members:
        model = member.setup.model
        for parameter in model.parameters():
            parameter.data = parameter.data.clone()
        for name, buffer in list(model.named_buffers()):
            owner, _, leaf = name.rpartition(".")
            model.get_submodule(owner)._buffers[leaf] = buffer.clone()


def _train(members: list[Member], states: list[dict[str, Any] | None], stop: StopSignals) -> None:
    """``loop.train`` for K models at once, each ending its own run where a lone run would: at
    its own ``selection.stopping`` point (``--patience``, ``--until``, the last epoch), as
    ``runner.run`` ends one. The live models stay fused; one that leaves gets its own storage
    back, and the others are fused anew without it."""
    lead = members[0].setup
    config = lead.config
    steps_per_epoch = len(lead.train_loader)
    positions = set()
    for member, state in zip(members, states, strict=True):
        member.selection = SelectedCheckpoint(keep_weights=FULL_TEST in member.setup.eval_loaders)
        member.progress.start(config.epochs, steps_per_epoch)
        member.sums = EpochSums.zero(member.setup.device)
        if state is None:
            positions.add((0, 0))
        else:
            position, member.sums = restore(member.setup, state, member.clocks, member.history, member.selection)
            positions.add(position)
            member.progress.advance(position[0] * steps_per_epoch + position[1])
    if len(positions) != 1:
        raise RuntimeError(f"the cells of a lockstep job stand at different points {sorted(positions)}")
    ((done, step),) = positions
    for member in members:  # killed after the checkpoint where it stopped early: it trains no further
        if member.history and _stop_reason(member):
            _finish(member, stop)
    live = [member for member in members if member.alive]
    if not live:
        return
    fused = fuse(live)
    if done == 0 and step == 0:
        evaluated = _evaluate_fused(fused, live)
        for member, scores in zip(live, evaluated, strict=True):
            member.record(0, None, member.setup.optimizer.param_groups[0]["lr"], scores)
    for member in live:
        member.guard = LossGuard(member.setup.device, start=done * steps_per_epoch + step)
    for epoch in range(done + 1, config.epochs + 1):
        loader_state = lead.train_loader.state_dict()
        try:
            lr, fused, live = _epoch(fused, live, lead.train_loader, epoch, step, stop)
        except EpochInterrupted as interrupted:
            assert stop.signum is not None
            saved = [m.checkpoint((epoch - 1, interrupted.step), loader_state) for m in members if m.alive]
            raise Stopped(stop.signum, saved[0] if saved else None) from None
        stopping_now = []
        if live and evaluated_at(epoch, config):
            for member in live:
                try:
                    _epoch_checks(member, epoch, steps_per_epoch)
                except Diverged as diverged:
                    member.end(diverged)
            fused, live = _without_ended(fused, live)
            evaluated = _evaluate_fused(fused, live) if live else []
            for member, scores in zip(live, evaluated, strict=True):
                figures = (member.sums.loss.item() / member.sums.seen, _accuracy(member.sums))
                member.record(epoch, figures, lr, scores)
                if _stop_reason(member):
                    stopping_now.append(member)
        for member in live:
            member.sums = EpochSums.zero(member.setup.device)
        step = 0
        # Checkpoint on schedule, where a model stops (early or at the end), and before stopping on a signal.
        every = config.checkpoint_every
        scheduled = stop.requested or bool(every and epoch % every == 0)
        state = lead.train_loader.state_dict()
        saved = [m.checkpoint((epoch, 0), state) for m in live if scheduled or m in stopping_now]
        if stop.requested:
            assert stop.signum is not None
            raise Stopped(stop.signum, saved[0] if saved else None)
        if stopping_now:
            for member in stopping_now:
                member.progress.advance((config.epochs - epoch) * steps_per_epoch)  # the cap's steps it did not need
                unfuse([member])
                _finish(member, stop)
            fused, live = _without_ended(fused, live)
            if stop.requested and live:  # a signal while those runs were written: stop the others now
                assert stop.signum is not None
                saved = [m.checkpoint((epoch, 0), state) for m in live]
                raise Stopped(stop.signum, saved[0] if saved else None)
        if not live:
            return


def _stop_reason(member: Member) -> str | None:
    """Where its history ends, whether (and why) its run stops there: a lone run's rule."""
    return stopping(member.setup.config, member.plan.min_epochs, member.history)


def _without_ended(fused: FusedModel, live: list[Member]) -> tuple[FusedModel, list[Member]]:
    """The fused model of the members still training: an ended one (stopped, diverged) takes its
    own storage and leaves, so that nothing of the others' training touches its weights, BatchNorm
    statistics or optimizer state, and the rest are fused anew (the same values, fewer models)."""
    left = [member for member in live if member.alive]
    if len(left) == len(live):
        return fused, live
    unfuse(live)
    return (fuse(left) if left else fused), left


@torch.no_grad()
def _evaluate_fused(fused: FusedModel, members: list[Member]) -> list[Any]:
    """``loop.evaluate_correct`` of every member on the three splits, in one fused pass a batch
    (eval mode: each model's running statistics); the splits are the same for every sigma."""
    lead = members[0].setup
    _, autocast = lead.forward_pass()
    results: dict[str, list[tuple[float, float, torch.Tensor]]] = {}
    fused.eval()
    for split in ("train", "val", "test"):
        loader = lead.eval_loaders[split]
        loss_sums = torch.zeros(len(members), device=lead.device)
        right = []
        for xb, yb in loader:
            with autocast():
                logits = fused(xb.contiguous(memory_format=lead.memory_format)).float()
            loss_sums += F.cross_entropy(logits.transpose(1, 2), yb.expand(len(members), -1), reduction="none").sum(1)
            right.append(logits.argmax(2) == yb)
        correct = torch.cat(right, dim=1)
        n = loader.num_examples
        losses, counts = loss_sums.tolist(), correct.sum(1).tolist()
        results[split] = [(losses[k] / n, counts[k] / n, correct[k]) for k in range(len(members))]
    fused.train()
    return [lambda name, k=k: results[name][k] for k in range(len(members))]


def _accuracy(sums: EpochSums) -> float:
    return sums.correct.item() / sums.seen


def _epoch_checks(member: Member, epoch: int, steps_per_epoch: int) -> None:
    """``loop.train``'s divergence checks at an evaluation point."""
    if member.guard.bad_step() is not None:
        raise loss_diverged(member.guard, steps_per_epoch)
    if not math.isfinite(member.sums.loss.item() / member.sums.seen):
        raise Diverged(epoch, "the training loss")
    if not all_finite(member.setup.model):
        raise Diverged(epoch, "a weight or BatchNorm statistic")


def _epoch(
    fused: FusedModel, live: list[Member], loader: Any, epoch: int, step: int, stop: StopSignals
) -> tuple[float, FusedModel, list[Member]]:
    """``loop.run_epoch`` for the live members on the job's batches (``loader``: the first
    member's, which the job draws from, whoever is still training): one fused forward and
    backward a step, each member's optimizer and schedule stepping its own views. A member whose loss is not finite
    ends DIVERGED at once and leaves the fused model (``_without_ended``); returns the last rate
    applied and the fused model and members still training."""
    lead = live[0].setup
    _, autocast = lead.forward_pass()
    memory_format = lead.memory_format
    steps_per_epoch = len(loader)
    lr = lead.optimizer.param_groups[0]["lr"]
    fused.train()
    for x, y in loader.epoch(step):
        with autocast():
            logits = fused(x.contiguous(memory_format=memory_format)).float()  # K x N x classes
        losses = F.cross_entropy(logits.flatten(0, 1), y.repeat(len(live)), reduction="none").view(len(live), -1)
        losses = losses.mean(1)
        fused.zero_grad(set_to_none=True)
        losses.sum().backward()
        # every parameter takes part in the forward pass: each has its gradient now
        gradients = fused.split({name: p.grad for name, p in fused.named_parameters() if p.grad is not None})
        right = (logits.argmax(2) == y).sum(1)
        for index, member in enumerate(live):
            setup, rule = member.setup, member.plan.rule
            multiplier = setup.scheduler.at((epoch - 1) * steps_per_epoch + step)  # its rates and its clocks'
            member.clocks.tick(rule.eta(multiplier), len(y), rule.shrink)
            for name, parameter in setup.model.named_parameters():
                parameter.grad = gradients[index][name]
            if setup.regularizer is not None:
                setup.regularizer.add_gradient(*setup.penalized())
            setup.optimizer.step()
            member.sums.loss += losses[index].detach() * len(y)
            member.sums.correct += right[index]
            member.sums.seen += len(y)
            member.progress.advance(1)
        lr = live[0].setup.optimizer.param_groups[0]["lr"]  # the rate this step applied, as logged
        step += 1
        for index, member in enumerate(live):
            if member.guard.tripped(losses[index]):
                member.end(loss_diverged(member.guard, steps_per_epoch))
        fused, live = _without_ended(fused, live)
        if not live:
            return lr, fused, live
        if stop.requested and step < steps_per_epoch:
            raise EpochInterrupted(step)
    return lr, fused, live


def _finish(member: Member, stop: StopSignals) -> None:
    """The end of a member's run where its history stops, as ``loop.train`` and
    ``runner.run`` ends one (``runner.finish_run``, ``end_run``; its model has its own storage by now)."""
    setup, tracker = member.setup, member.tracker
    assert member.selection is not None
    finishing, stop.finishing = stop.finishing, True  # a signal now waits until the run is written
    try:
        summary = summarize(setup, member.selection, member.history)
        runner.finish_run(member.plan, setup, tracker, member.checkpoints, member.history, summary)
        runner.end_run(tracker, member.checkpoints, FINISHED)
        member.outcome = (FINISHED, "")
    finally:
        stop.finishing = finishing
