"""A grid of runs: the grid and its plan, the launch of its cells under one parent run, presets, executors."""
