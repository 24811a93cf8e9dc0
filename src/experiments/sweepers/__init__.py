"""Sweepers of our own: an Optuna search that keeps its study in the sweep directory."""
