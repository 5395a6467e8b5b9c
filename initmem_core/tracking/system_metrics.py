"""``--system-metrics``: MLflow's own monitor of the machine (``mlflow.system_metrics``) on a run.

MLflow samples CPU, memory, disk and network use through psutil (a dependency of initmem), and
NVIDIA GPUs through ``nvidia-ml-py`` (the ``gpu-metrics`` extra), every ``SAMPLING_INTERVAL_S``
seconds (MLflow's ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` overrides it), and logs them as
``system/...`` metrics from a thread of the process that writes the run: ``initmem run``'s
tracking helper, or the sweep process for a sweep's parent run (the figures are the machine's,
not a cell's: one monitor, not one per cell running side by side).
"""

from __future__ import annotations

import logging
from typing import Any

from initmem_core.errors import ConfigError

#: Seconds between two samples: training epochs here last seconds to minutes.
SAMPLING_INTERVAL_S = 5.0


class SystemMetrics:
    """MLflow's ``SystemMetricsMonitor`` on run ``run_id`` of store ``uri``, started at once."""

    def __init__(self, uri: str, run_id: str, resume: bool = False):
        require_psutil()
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        # MLflow says at INFO level that it starts and stops, and that it skips GPUs it cannot read.
        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
        self._monitor: Any = SystemMetricsMonitor(
            run_id, sampling_interval=SAMPLING_INTERVAL_S, resume_logging=resume, tracking_uri=uri
        )
        self._monitor.start()

    def finish(self) -> None:
        """Stop sampling and write what is left (before the run is ended: MLflow's monitor stops
        by itself once the run is no longer RUNNING)."""
        self._monitor.finish()


def require_psutil() -> None:
    """MLflow's monitor reads the machine through psutil: without it, one line."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        raise ConfigError("--system-metrics needs psutil: pip install psutil") from None
