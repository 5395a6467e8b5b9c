"""initmem built-in plugins: one package per kind of component."""
