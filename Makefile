# Quick start: `make train` (set up + main job), `make test` (set up + whole test suite).
.PHONY: setup train test lint bench

setup:
	./scripts/setup.sh

train: setup
	.venv/bin/experiments-train $(ARGS)

test: setup
	.venv/bin/python -m pytest $(PYTEST_ARGS)

lint: setup
	.venv/bin/ruff check src tests bench && .venv/bin/ruff format --check src tests bench

bench: setup
	.venv/bin/python -m bench.run_all $(ARGS)
