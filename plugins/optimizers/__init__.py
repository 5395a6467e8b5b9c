"""Built-in optimizers."""
