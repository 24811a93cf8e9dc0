"""A third model family that lives outside the experiments package: what a user adds to
train something that is neither an SNN nor a GAN. Its whole registration is this module's
`FAMILY` and one entry point (toy_family-0.1.dist-info/entry_points.txt); its model option
comes through a Hydra search-path plugin (hydra_plugins/, toy_family/conf/model/toy.yaml).
tests/test_family_seam.py runs it through the real command line: plan, refusal, dry run, a
sweep of two runs, the report, experiments-status."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError
from experiments.families import Curve, Family


@dataclass
class ParallelDims:
    world_size: int = 1


@dataclass
class ToyPlan:
    """What the shared code reads from a plan (launch, record, report)."""

    choices: dict[str, str]
    run_dir: Path
    overrides: list[str]
    seed: int
    resume: Any
    rate: float
    steps: int
    extensions: list[str] = field(default_factory=list)
    engine: str = "toy"
    objective: str = "score"
    dims: ParallelDims = field(default_factory=ParallelDims)

    @property
    def launch_command(self) -> list[str]:
        return ["python", "-m", "experiments.train", *self.overrides]

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.choices.get("model"),
            "data": self.choices.get("data"),
            "topology": self.choices.get("topology"),
            "launcher": self.choices.get("launcher"),
            "engine": self.engine,
            "device": "cpu",
            "backend": None,
            "world_size": 1,
            "mesh": {},
            "batch": None,
            "parameters": 1,
            "run_dir": str(self.run_dir),
            "toy": {"rate": self.rate, "steps": self.steps},
        }

    def as_text(self) -> str:
        return f"toy plan: {self.steps} steps at rate {self.rate} -> {self.run_dir}"


def plan_run(cfg, values, run_dir, overrides, choices, extensions) -> ToyPlan:
    model = values["model"]
    rate = model.get("rate")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0:
        raise ConfigError("model.rate", rate, "a number > 0, e.g. 0.5")
    if choices.get("topology") != "single" or choices.get("launcher") != "local":
        raise ConfigError("topology", choices.get("topology"), "single (launcher=local)")
    return ToyPlan(
        choices=choices,
        run_dir=Path(run_dir),
        overrides=overrides,
        seed=values["seed"],
        resume=values.get("resume"),
        rate=float(rate),
        steps=int(model.get("steps", 3)),
        extensions=extensions,
    )


def completed_lines(plan: ToyPlan, summary: dict[str, Any]) -> str:
    return f"\nToy run completed: score {summary['metrics']['score']:.3f} in {plan.run_dir}"


FAMILY = Family(
    name="toy",
    owns=lambda model: model.get("family") == "toy",
    engines={"toy": "toy_family.engine"},
    planner="toy_family:plan_run",
    objective="score",
    higher_is_better=True,
    metrics=("score", "steps"),
    curves=(
        Curve("metrics.jsonl", "step", "score", "step", "Score"),
        Curve("metrics.jsonl", "step", "score", "step", "Score again"),
    ),
    monitored=("score",),
    monitored_source="a toy run scores",
    completed_lines=completed_lines,
)
