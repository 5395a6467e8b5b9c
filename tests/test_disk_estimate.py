"""A sweep's --dry-run states the disk its checkpoints take (issue 39): parameters counted on the
meta device, times fp32, times one plus the optimizer's state per parameter, times what each cell keeps."""

from __future__ import annotations

from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.config import RunConfig
from initmem_core.sweep.disk import BYTES_PER_VALUE, NOMINAL, checkpoint_bytes, estimate_disk, parameter_count
from initmem_core.training.plan import plan_run


def test_parameters_are_counted_as_the_built_model_has_them(registry):
    model = registry.build("architecture", "resnet20", **NOMINAL)
    assert parameter_count(plan_run(RunConfig(), registry)) == sum(p.numel() for p in model.parameters())


def test_a_checkpoint_holds_the_weights_and_the_optimizers_state(registry):
    def size(**values):
        return checkpoint_bytes(plan_run(RunConfig(**values), registry))

    weights = parameter_count(plan_run(RunConfig(), registry)) * BYTES_PER_VALUE
    assert size(opt="sgd") == weights
    assert size(opt="sgd", momentum=0.9) == 2 * weights
    assert size(opt="adam") == 3 * weights
    assert size(opt="timm:lion") == 3 * weights  # adaptive by its family's declared clock: an upper bound
    # --eval-size: the selected checkpoint's weights too, scored on the whole test split at the end
    assert size(opt="sgd", momentum=0.9, eval_size=500) == 3 * weights


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
