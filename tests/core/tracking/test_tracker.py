"""MLflow writes are batched in time: a short epoch does not cost a database transaction."""

from __future__ import annotations

import time

import initmem_core
from initmem_core.tracking.tracker import MlflowTracker


def count_batches(tracker: MlflowTracker) -> list[dict]:
    """Record what each ``log_batch`` call carries, and still write it."""
    calls, write = [], tracker.client.log_batch

    def log_batch(run_id, metrics=(), params=(), tags=()):
        calls.append({"metrics": len(metrics), "params": len(params), "tags": len(tags)})
        return write(run_id, metrics=metrics, params=params, tags=tags)

    tracker.client.log_batch = log_batch
    return calls


def stored(tracker: MlflowTracker, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in tracker.client.get_metric_history(tracker.run_id, key))


def test_metrics_wait_for_the_interval_then_go_in_one_write(tracking_uri):
    tracker = MlflowTracker(tracking_uri, flush_every_s=3600)
    tracker.start_run("batched", {"lr": 0.1}, {})
    calls = count_batches(tracker)
    for step in range(5):
        tracker.log_metrics({"loss": 1.0 / (step + 1), "acc": step / 10}, step)
    tracker.set_tags({"note": "x"})
    assert calls == [] and stored(tracker, "loss") == []  # nothing written yet

    tracker.last_flush = time.monotonic() - 3600  # the interval has passed
    tracker.log_metrics({"loss": 0.1, "acc": 0.9}, 5)
    assert calls == [{"metrics": 12, "params": 0, "tags": 0}, {"metrics": 0, "params": 0, "tags": 1}]
    assert stored(tracker, "loss") == [(step, 1.0 / (step + 1)) for step in range(5)] + [(5, 0.1)]

    tracker.log_metrics({"loss": 0.05}, 6)
    tracker.end_run()  # the end of a run writes whatever waits, at once
    assert calls[-1] == {"metrics": 1, "params": 0, "tags": 0} and stored(tracker, "loss")[-1] == (6, 0.05)
    assert tracker.client.get_run(tracker.run_id).info.status == "FINISHED"


def test_a_run_shorter_than_the_interval_writes_its_metrics_once_at_the_end(tracking_uri):
    tracker = MlflowTracker(tracking_uri, flush_every_s=60)
    calls = count_batches(tracker)
    result = initmem_core.run(tracker=tracker, epochs=3, train_size=64, batch_size=32, threads=1)
    metric_writes = [call for call in calls if call["metrics"]]
    assert len(metric_writes) == 1  # 4 epochs of figures and the summary, in one transaction
    assert stored(tracker, "val_acc") == [(row["epoch"], row["val_acc"]) for row in result.history]
