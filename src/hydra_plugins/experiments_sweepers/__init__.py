"""Hydra plugins of the experiments package (Hydra loads plugin classes only from hydra_plugins)."""
