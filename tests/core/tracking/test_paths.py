"""Names that become paths (tracking/paths.py): an experiment's name keeps its artifacts beside the store."""

from __future__ import annotations

from pathlib import Path

import pytest

import initmem_core
from tests.support.cli_processes import TINY


@pytest.mark.parametrize("experiment", ["../../outside", "/tmp/initmem-outside-abs"])
def test_an_experiment_name_keeps_artifacts_beside_the_store(tracking_uri, tmp_path, experiment):
    result = initmem_core.run(tracking_uri=tracking_uri, experiment=experiment, checkpoint_every=0, **TINY)
    from mlflow.tracking import MlflowClient

    location = MlflowClient(tracking_uri).get_run(result.run_id).info.artifact_uri
    assert location.startswith((tmp_path / "mlartifacts").as_uri())
    assert (tmp_path / "mlartifacts").is_dir() and not Path("/tmp/initmem-outside-abs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "initmem-leases",
        "mlartifacts",
        "mlflow.db",
        "mlflow.db.lock",
    ]
