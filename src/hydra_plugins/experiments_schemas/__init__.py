"""Our config groups' schemas (experiments/schemas/) in Hydra's ConfigStore, where the yaml
options' defaults lists find them: Hydra imports every module of the hydra_plugins namespace
when it starts, before it composes (so this stays cheap: dataclasses, no torch)."""

from experiments.schemas import register

register()
