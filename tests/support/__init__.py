"""Test-only helpers (never imported by the package)."""
