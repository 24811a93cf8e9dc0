"""A search's space, read from Hydra overrides as hydra-optuna-sweeper read it, in Optuna's
current distributions: `hydra.sweeper.params` and the command line's sweeps
(`choice(a,b)`, `a,b`, `range(lo,hi,step)`, `interval(lo,hi)`, `tag(log, interval(lo,hi))`)
are searched; plain `key=value` overrides are fixed, and each trial carries them as user
attributes.
"""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override, RangeSweep, Transformer

from experiments.errors import ConfigError


def from_overrides(arguments: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(searched: name -> Optuna distribution, fixed: name -> value as written). A key both
    searched and fixed (the preset searches it, the command line fixes it) is fixed."""
    parsed = OverridesParser.create().parse_overrides(arguments)
    searched: dict[str, Any] = {}
    fixed: dict[str, str] = {}
    for override in parsed:
        name = override.get_key_element()
        if override.is_sweep_override():
            searched[name] = distribution(override)
        else:
            fixed[name] = override.get_value_element_as_str()
    for name in fixed:
        searched.pop(name, None)
    return searched, fixed


def distribution(override: Override) -> Any:
    """The Optuna distribution of one sweep override."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    value = override.value()
    if override.is_choice_sweep() or (isinstance(value, RangeSweep) and value.shuffle):
        return CategoricalDistribution(_choices(override))
    if isinstance(value, RangeSweep):
        # hydra-optuna-sweeper's reading: the range's stop is the distribution's high
        assert value.start is not None and value.stop is not None
        if any(isinstance(v, float) for v in (value.start, value.stop, value.step)):
            return FloatDistribution(value.start, value.stop, step=value.step)
        return IntDistribution(int(value.start), int(value.stop), step=int(value.step))
    if isinstance(value, IntervalSweep):
        assert value.start is not None and value.end is not None
        log = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log)
        return FloatDistribution(value.start, value.end, log=log)
    raise NotImplementedError(f"{override.input_line}: not a sweep an Optuna search takes")


def _choices(override: Override) -> list[Any]:
    choices = list(override.sweep_iterator(transformer=Transformer.encode))
    for choice in choices:
        if not isinstance(choice, str | int | float | bool | type(None)):
            raise ValueError(f"{override.input_line}: a choice of {type(choice).__name__}")
    return choices


def grid_choices(name: str, distribution: Any) -> list[Any]:
    """The points of one parameter of a grid search (hydra-optuna-sweeper's: a range's stop
    is not among them); GridSampler takes only discrete parameters."""
    from optuna.distributions import CategoricalDistribution

    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    step = getattr(distribution, "step", None)
    if step is None or getattr(distribution, "log", False):
        interval = f"interval({distribution.low}, {distribution.high})"
        raise ConfigError(
            name,
            f"tag(log, {interval})" if distribution.log else interval,
            "an interval has no grid points; use choice(...) or range(...) with "
            "hydra/sweeper/sampler=grid",
        )
    count = int((distribution.high - distribution.low) // step)
    return [distribution.low + i * step for i in range(count)]
