"""GPU inventory: the data model, the probes (NVML, declared file) and their loaders."""
