# Quick start: `make train` (set up + main job), `make test` (set up + whole test suite).
# GANs need MMGeneration on mmcv-full, a 20-30 minute build the first time (the wheel is then
# cached in ~/.cache/experiments/wheels): `make setup-gan`. SNN-only users never wait for it;
# `make test` installs everything because the suite covers both families.
.PHONY: setup setup-gan setup-loggers setup-dashboard train test check lint bench mutants

setup:
	./scripts/setup.sh

setup-gan: setup
	./scripts/gan/install_gan.sh .venv

# MLflow and W&B for logger=mlflow|wandb (optional: TensorBoard and CSV need nothing more).
# The list is pyproject's `loggers` extra (installing ".[loggers]" would rebuild the package).
setup-loggers: setup
	.venv/bin/python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['loggers'], sep='\n')" \
		| xargs -d '\n' .venv/bin/python -m pip install --quiet

# Optuna's web dashboard (optional): `experiments-report SWEEP --dashboard` serves a search's
# study in it (docs/sweeps.md). The list is pyproject's `dashboard` extra.
setup-dashboard: setup
	.venv/bin/python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['dashboard'], sep='\n')" \
		| xargs -d '\n' .venv/bin/python -m pip install --quiet

# The main job is the named recipe conf/experiment/digits_sew_resnet18.yaml; ARGS add overrides.
train: setup
	.venv/bin/experiments-train experiment=digits_sew_resnet18 $(ARGS)

# Three pytest-xdist workers on two cores, a file at a time, the longest files first
# (tests/conftest.py): much of a file's time is spent waiting (Slurm's scheduler, a rendezvous,
# a poll), so a third file keeps both cores busy (measured 2026-12-02 in a clean clone at
# calibration 0.3x: 27.4 min against 29.3 with two workers, the same 2135 tests).
XDIST = -n 3 --dist loadfile --no-loadscope-reorder
# `make check` is CPU-bound in-process work (composes and plans): two workers, one a core
# (measured the same day: 200 s with two, 221 s with three).
CHECK_XDIST = -n 2 --dist loadfile --no-loadscope-reorder

test: setup-gan setup-loggers setup-dashboard
	.venv/bin/python -m pytest $(XDIST) --durations=20 $(PYTEST_ARGS)

# The inner loop (~3.5 min on a fast day): config validation, the whole config matrix, one tiny
# real run per family (tests marked `smoke`). CI still runs `make test`.
check: setup-gan setup-loggers setup-dashboard
	.venv/bin/python -m pytest $(CHECK_XDIST) -m "not slow or smoke" --durations=10 $(PYTEST_ARGS)

lint: setup
	.venv/bin/ruff check src tests bench && .venv/bin/ruff format --check src tests bench

bench: setup-gan
	.venv/bin/python -m bench.run_all $(ARGS)

# Every kept breakage of tests/mutants/*.toml, each in a scratch copy of the working tree, its
# test(s) run against it: caught/survived per mutant (not part of `make test`; see docs/contributing.md).
# `make mutants MUTANTS=gan` runs the mutants whose name or file matches. Needs `make setup`
# once (it installs nothing itself).
mutants:
	.venv/bin/python scripts/mutants.py "$(MUTANTS)"
