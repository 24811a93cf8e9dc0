"""The toy family's engine: `train(plan, recorder)` as every engine's, records per step."""

from __future__ import annotations

from typing import Any


def train(plan: Any, recorder: Any) -> dict[str, Any]:
    score = 0.0
    for step in range(1, plan.steps + 1):
        score += plan.rate
        recorder.log_metrics({"step": step, "score": score})
    return {"score": score, "steps": plan.steps}
