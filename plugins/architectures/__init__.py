"""Built-in architectures."""
