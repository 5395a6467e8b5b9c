"""Tests of ``initmem_core.training``: a run's plan, loop, clocks, checkpoints, stops and resumes."""
