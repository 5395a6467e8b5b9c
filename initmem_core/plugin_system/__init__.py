"""Finding components: hook specs' registry, plugin loader, API version, hook reference and scaffold (the
contract checks are in ``initmem_core.testing``)."""
