"""``--lr-match-sigma REF``, the effective-step control: which kernels are scale-invariant (and that
they are: the output ignores their scale), the rate of each parameter group under the schedule,
the plain run at sigma = REF bit for bit, clocks that keep counting the plain rate, the hash."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import initmem_core
from initmem_core.config import RunConfig, validate
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.loader import get_registry
from initmem_core.training.effective_step import scale_invariant_names, traced_scale_invariant
from initmem_core.training.plan import plan_run
from initmem_core.training.schedules import lr_match_factor, lr_multiplier
from initmem_core.training.setup import build_setup, process_settings_kept
from tests.support import cli_processes
from tests.support.cli_processes import only_run

#: The shared tiny run for two epochs, every example scored, without checkpoints.
TINY = dict(cli_processes.TINY, arch="resnet20", epochs=2, eval_size=64, train_eval_size=64, checkpoint_every=0)


@pytest.fixture(autouse=True)
def one_thread():
    """As the runs here (``threads=1``): two threads spin against each other on a loaded machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def resnet(name: str = "resnet20") -> nn.Module:
    return get_registry().build("architecture", name, in_channels=1, num_classes=10, image_size=8)


def setup_of(**changes):
    registry = get_registry()
    with process_settings_kept():  # build_setup sets threads and determinism for the process
        return build_setup(plan_run(RunConfig(**{**TINY, **changes}), registry))


# -- which kernels are scale-invariant ----------------------------------------------------------


def test_every_conv_kernel_of_resnet20_is_scale_invariant_and_nothing_else_is():
    model = resnet()
    found = set(scale_invariant_names(model, "resnet20"))
    convs = {f"{name}.weight" for name, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    assert len(convs) == 19 and found == convs
    bns = [name for name, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]
    norms = {f"{name}.{p}" for name in bns for p in ("weight", "bias")}
    assert len(norms) == 38 and not found & (norms | {"fc.weight", "fc.bias"})


def test_resnet9_s_conv_kernels_are_found_through_its_sequentials():
    model = resnet("resnet9")
    convs = {f"{name}.weight" for name, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    assert set(traced_scale_invariant(model) or ()) == convs and "linear.weight" not in convs


@torch.no_grad()
def test_scaling_an_invariant_kernel_leaves_the_output_unchanged_and_scaling_the_others_does_not():
    torch.manual_seed(0)
    model = resnet().train()  # train mode: BatchNorm normalises with this batch's statistics
    x = torch.randn(8, 1, 8, 8)
    reference = model(x)
    invariant = set(scale_invariant_names(model, "resnet20"))
    for name, p in model.named_parameters():
        if name not in invariant | {"fc.weight", "bn1.weight"}:
            continue
        p.mul_(3.0)
        changed = model(x)
        p.div_(3.0)
        if name in invariant:
            torch.testing.assert_close(changed, reference, rtol=1e-4, atol=1e-4, msg=name)
        elif name in ("fc.weight", "bn1.weight"):
            assert not torch.allclose(changed, reference, rtol=1e-2, atol=1e-2), name


def test_a_norm_that_keeps_a_per_channel_bias_makes_the_kernel_not_invariant():
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, bias=True),
        nn.BatchNorm2d(4),  # removes the bias: invariant
        nn.Conv2d(4, 4, 3, bias=True),
        nn.GroupNorm(2, 4),  # keeps it: not invariant
        nn.Conv2d(4, 4, 3, bias=False),
        nn.GroupNorm(2, 4),  # no bias: invariant
        nn.Flatten(),
        nn.LazyLinear(3),
    )
    model(torch.randn(2, 1, 9, 9))
    assert traced_scale_invariant(model) == ["0.weight", "4.weight"]


class Declared(nn.Module):
    def __init__(self, declared: list[str]):
        super().__init__()
        self.body, self.head, self.declared = nn.Linear(4, 4), nn.Linear(4, 2), declared

    def forward(self, x):
        return self.head(self.body(x))

    def scale_invariant_parameters(self) -> list[str]:
        return self.declared


class Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)

    def forward(self, x):
        return self.bn(self.conv(x)) if x.sum() > 0 else x  # data-dependent: fx cannot trace it


def test_a_declaration_beats_the_trace_and_a_model_neither_explains_is_refused():
    assert scale_invariant_names(Declared(["body.weight"]), "toy") == ["body.weight"]
    with pytest.raises(ConfigError, match="declares scale-invariant weights it lacks: nope"):
        scale_invariant_names(Declared(["nope"]), "toy")
    assert traced_scale_invariant(Untraceable()) is None
    with pytest.raises(ConfigError, match="declares no scale-invariant weights and torch.fx cannot trace it"):
        scale_invariant_names(Untraceable(), "toy")
    with pytest.raises(ConfigError, match="has no scale-invariant weights"):
        scale_invariant_names(nn.Sequential(nn.Linear(2, 2)), "toy")


# -- the groups' rates --------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_the_kernels_rate_is_lr_times_sigma_over_ref_squared_under_the_schedule(schedule):
    built = setup_of(sigma=2.0, lr=0.01, lr_match_sigma=0.5, schedule=schedule, warmup_epochs=0.5)
    optimizer, names = built.optimizer, dict(built.model.named_parameters())
    factor = lr_match_factor(built.config)
    assert factor == 16.0
    plain, matched = optimizer.param_groups
    invariant = set(scale_invariant_names(built.model, "resnet20"))
    assert {id(p) for p in matched["params"]} == {id(names[n]) for n in invariant}
    assert len(plain["params"]) + len(matched["params"]) == len(names)
    steps = len(built.train_loader)
    for k in range(2 * steps):  # through warm-up and the schedule
        built.scheduler.at(k)
        assert plain["lr"] == pytest.approx(0.01 * lr_multiplier(built.config, k, steps), rel=1e-12)
        assert matched["lr"] == pytest.approx(0.16 * lr_multiplier(built.config, k, steps), rel=1e-12)
    assert built.optimizer.initmem_param_groups["scale_invariant (lr x 16)"] == [n for n in names if n in invariant]


@pytest.mark.slow  # three runs
def test_sigma_equal_to_ref_is_the_plain_run_bit_for_bit_and_the_clocks_count_the_plain_rate():
    plain = initmem_core.run(**TINY, sigma=2.0, tracking=False)
    same = initmem_core.run(**TINY, sigma=2.0, lr_match_sigma=2.0, tracking=False)
    assert same.history == plain.history
    for (name, a), (_, b) in zip(plain.model.state_dict().items(), same.model.state_dict().items()):
        assert torch.equal(a, b), name
    matched = initmem_core.run(**TINY, sigma=2.0, lr_match_sigma=1.0, tracking=False)
    assert matched.history[-1]["weight_norm"] != plain.history[-1]["weight_norm"]
    for clock in ("clock_sgd", "clock_adapt", "lr"):
        assert [row[clock] for row in matched.history] == [row[clock] for row in plain.history]


def test_optimizers_that_normalise_their_step_are_refused():
    registry = get_registry()
    for opt in ("adam", "adamw", "muon"):
        with pytest.raises(ConfigError, match="--lr-match-sigma is for SGD-family optimizers"):
            plan_run(RunConfig(opt=opt, lr_match_sigma=1.0), registry)
    assert plan_run(RunConfig(opt="sgd", momentum=0.9, lr_match_sigma=1.0), registry).config.lr == 0.05


# -- the config -------------------------------------------------------------------------------


def test_the_hash_is_unchanged_when_off_and_changes_when_set():
    # The hashes of these configs before the knob existed: sweep cells resume by them.
    assert RunConfig().config_hash() == "ea0db52dc4cf70bf"
    assert RunConfig(lr_match_sigma=0.0).config_hash() == "ea0db52dc4cf70bf"
    assert RunConfig(sigma=2.5, lr=0.01, batch_size=32, epochs=15).config_hash() == "af167d3aa8cef8b3"
    assert RunConfig(lr_match_sigma=1.0).config_hash() != RunConfig().config_hash()
    assert RunConfig(lr_match_sigma=1.0).config_hash() != RunConfig(lr_match_sigma=2.0).config_hash()


def test_a_ref_that_would_make_the_rate_unbounded_is_refused():
    with pytest.raises(ConfigError, match="would exceed 1000; use a REF nearer sigma"):
        validate(RunConfig(lr=0.1, sigma=100.0, lr_match_sigma=0.1))
    with pytest.raises(ConfigError, match="would exceed"):
        validate(RunConfig(sigma=1.0, lr_match_sigma=1e-300))


@pytest.mark.slow  # a run stopped and resumed, and the run left alone
def test_a_stopped_matched_run_resumes_to_the_bits_of_the_run_left_alone(tracking_uri, tmp_path):
    import signal

    from initmem_core.training.stop_signals import Stopped
    from tests.support.signal_progress import SignalAtStep

    config = {**TINY, "sigma": 2.0, "lr_match_sigma": 1.0, "momentum": 0.9, "schedule": "cosine", "epochs": 3}
    config["checkpoint_every"] = 1
    alone = initmem_core.run(**config, tracking=False)
    with pytest.raises(Stopped):
        initmem_core.run(
            **config, tracking_uri=tracking_uri, checkpoint_dir=str(tmp_path), progress=SignalAtStep(3, signal.SIGTERM)
        )
    resumed = initmem_core.run(**config, tracking_uri=tracking_uri, checkpoint_dir=str(tmp_path), resume=True)
    run = only_run(tracking_uri)
    assert run.info.run_id == resumed.run_id  # continued in the stopped run, from its checkpoint
    for (name, a), (_, b) in zip(alone.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), name
