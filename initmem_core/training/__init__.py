"""One run, from config to history: setup, training loop, loaders, schedules, clocks, checkpoints,
stop and divergence."""
