"""Built-in initializers."""
