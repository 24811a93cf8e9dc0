"""Run directory: record, checkpoints."""
