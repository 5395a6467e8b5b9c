"""A sweep's --dry-run states the disk its checkpoints take: parameters counted on the
meta device, times fp32, times two (the weights and W0) plus the optimizer's state per parameter (read
off the optimizer its plugin builds), times what each cell keeps."""

from __future__ import annotations

from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.config import RunConfig
from initmem_core.sweep.disk import BYTES_PER_VALUE, NOMINAL, checkpoint_bytes, estimate_disk, values_per_parameter
from initmem_core.training.plan import plan_run


def test_parameters_are_counted_as_the_built_model_has_them(registry):
    model = registry.build("architecture", "resnet20", **NOMINAL)
    assert values_per_parameter(plan_run(RunConfig(), registry))[0] == sum(p.numel() for p in model.parameters())


def test_a_checkpoint_holds_the_weights_w0_and_the_optimizers_state(registry):
    def size(**values):
        return checkpoint_bytes(plan_run(RunConfig(**values), registry))

    weights = values_per_parameter(plan_run(RunConfig(), registry))[0] * BYTES_PER_VALUE
    assert size(opt="sgd") == 2 * weights  # the weights and W0, the memory metrics' reference
    assert size(opt="sgd", momentum=0.9) == 3 * weights  # the momentum buffer
    assert size(opt="adam") == size(opt="adamw") == 4 * weights  # two moments
    assert size(opt="timm:lion") == 3 * weights  # one moment: read off the optimizer the plugin builds
    # Muon: one buffer on its kernels, AdamW's two on the rest (biases, norms, the head)
    assert 3 * weights < size(opt="muon") < 3.1 * weights
    # --eval-size: the selected checkpoint's weights too, scored on the whole test split at the end
    assert size(opt="sgd", momentum=0.9, eval_size=500) == 4 * weights


def test_the_estimate_is_what_a_checkpoint_takes(registry, tmp_path):
    """A run's own checkpoint against the estimate (the estimate counts a nominal 3-channel input
    and leaves out BatchNorm's buffers and the run's history: a few per cent)."""
    from initmem_core.training.runner import run

    config = RunConfig(opt="adamw", data="digits", train_size=64, batch_size=32, epochs=1, threads=1)
    run(config.replace(checkpoint_dir=str(tmp_path)), tracking=False)
    [saved] = [path for path in tmp_path.rglob("*") if path.is_file() and path.stat().st_size > 10_000]
    estimate = checkpoint_bytes(plan_run(config, registry))
    assert 0.9 < saved.stat().st_size / estimate < 1.1, (saved.stat().st_size, estimate)


def test_the_estimate_follows_keep_checkpoints_and_the_workers(registry):
    def plans(*configs):
        return [plan_run(config, registry) for config in configs]

    cells = plans(*(RunConfig(opt="sgd", sigma=s, epochs=4) for s in (0.5, 1.0, 2.0)))
    one = checkpoint_bytes(cells[0])
    found = estimate_disk(cells, workers=2)
    assert found.kept == 3 * one and found.peak == 2 * 2 * one + 3 * one
    assert estimate_disk(plans(RunConfig(epochs=4, keep_checkpoints="none"))).kept == 0
    assert estimate_disk(plans(RunConfig(epochs=4, keep_checkpoints="all"))).kept == 4 * one


def test_a_dry_run_states_the_disk():
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["sweep", "--sigma", "0.5,1", "--opt", "sgd,adam", "--epochs", "2", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert "disk: checkpoints about" in result.output and "initmem clean" in result.output
