"""Finding components: the plugin loader, the registry and the API version (the contract checks are in
``initmem_core.testing``; the scaffold is the built-in command plugin ``new-plugin``)."""
