"""Where a run's numbers go: the tracking store, the MLflow tracker, writes kept for `initmem sync`,
sweep cells and their records."""
