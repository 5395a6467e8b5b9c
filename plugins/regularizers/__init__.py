"""Built-in regularizers."""
