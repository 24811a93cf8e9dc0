# ruff: noqa: E501  (the table reads best one case a line)
"""Mistakes that used to pass validation and fail (or be ignored) after the run directory
existed: each is refused through the real CLI, one line naming the key, exit 2, nothing
written."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import run_cli

CASES = [
    (["+trainer.epoch=3"], "trainer.epoch=3: not a key of trainer=default; did you mean trainer.epochs?"),
    (["+seeed=3"], "seeed=3: not a key of the run config; did you mean seed?"),
    (["+topology.tensor_parallel=2"], "topology.tensor_parallel=2: not a key of topology=single; did you mean topology.tensor_parallel_size?"),
    (["+launcher.nodes=2"], "launcher.nodes=2: not a key of launcher=local"),
    (["+optimizer.momentum=0.9"], "optimizer.momentum=0.9: not an argument of AdamW"),
    (["optimizer=sgd", "+optimizer.nesterv=true"], "optimizer.nesterv=True: not an argument of SGD; did you mean optimizer.nesterov?"),
    (["trainer.scheduler=torch.optim.lr_scheduler.CosineAnnealingLR"], "trainer.scheduler_kwargs.T_max=None: required by CosineAnnealingLR"),
    (["trainer.scheduler=torch.optim.lr_scheduler.StepLR", "+trainer.scheduler_kwargs.step_sze=3"], "trainer.scheduler_kwargs.step_sze=3: not an argument of StepLR; did you mean trainer.scheduler_kwargs.step_size?"),
    (["+trainer.scheduler_kwargs.gamma=0.5"], "trainer.scheduler_kwargs={'gamma': 0.5}: {} without trainer.scheduler"),
    (["model.time_steps=abc"], "model.time_steps='abc': an integer >= 1"),
    (["model.time_steps=0"], "model.time_steps=0: an integer >= 1"),
    (["model.tau=fast"], "model.tau='fast': a number"),
    (["model.detach_reset=3"], "model.detach_reset=3: true or false"),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "message"), CASES, ids=[" ".join(o) for o, _ in CASES])
def test_refused_before_launch_naming_the_key(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    result = run_cli([*overrides, "data=synthetic", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 2, result.stdout[-1000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == f"error: invalid config: {message}" or lines[0].startswith(
        f"error: invalid config: {message}"
    ), lines[0]
    assert not run_dir.exists()
    assert not (tmp_path / "outputs").exists()


def test_adding_a_real_optional_argument_still_plans(tmp_path: Path) -> None:
    """The checks refuse what the class cannot take, not what our yaml does not list."""
    result = run_cli(
        ["optimizer=sgd", "+optimizer.nesterov=true", "trainer.scheduler=torch.optim.lr_scheduler.StepLR",
         "+trainer.scheduler_kwargs.step_size=3", "dry_run=json"],
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"nesterov": true' in result.stdout
