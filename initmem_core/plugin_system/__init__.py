"""Finding components: hook specs' registry, plugin loader, API version, hook reference, scaffold and
contract checks."""
