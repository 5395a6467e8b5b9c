"""End-to-end tests: whole ``initmem`` processes across packages (runs and sweeps killed and resumed, the chaos
harness, the README's snippet, MLflow's UI in a browser, the installed wheel)."""
