"""The recipe card: a run's recipe beside the paper's, field by field.

A preset named after a paper carries a `paper:` node (conf/experiment/*.yaml): its title, its
official code, the top-1 it reports, the official values (`card`, in the fields below; each
one's source line is in tests/data/recipe_cards.toml, which tests/test_recipes.py holds the
node to), and its deviations (`deviations`, nested as the card: a field, its reason). `ours`
reads the same fields from the planned run itself (what SpikingJelly's loop will be given: the
TrainingConfig, the data option, the model as its builder makes it), so the dry run shows every
field where this run differs from the paper, and whether the preset says why.

Fields (flat, dotted): dataset.{name, split, image_size[, split_by, frames_trained]},
time_steps, global_batch, epochs, optimizer.{name, lr, weight_decay, weight_decay_exempt,
betas, eps | momentum, nesterov}, schedule.{name, stepping, <its arguments>}, augment.{...},
mixup.{alpha[, cutmix_alpha, prob, switch_prob, mode, off_epoch]}, loss.{name,
label_smoothing}, neuron.{name[, tau], v_threshold, v_reset, detach_reset, surrogate,
surrogate_alpha}, model.{architecture, <its dimensions>}. TOML has no null: an unset value
reads "none".
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

from experiments.errors import ConfigError

# A paper preset's `paper` node: the keys it must have.
PAPER_KEYS = ("title", "code", "top1", "top1_source", "card", "deviations", "other_deviations")
# Scheduler arguments a card compares, by class name (the rest of the class's keep defaults
# that do not change a single-cycle schedule); another class shows every argument given.
SCHEDULE_ARGUMENTS = {
    "CosineLRScheduler": (
        "t_initial",
        "lr_min",
        "warmup_t",
        "warmup_lr_init",
        "warmup_prefix",
        "cycle_limit",
    ),
    "CosineAnnealingLR": ("T_max", "eta_min"),
    "StepLR": ("step_size", "gamma"),
}
# Model dimensions a card compares, by the config class (any class of its MRO) that has them.
ARCHITECTURES = {
    "SpikformerDimsConfig": (
        "Spikformer",
        (
            "depths",
            "embed_dims",
            "num_heads",
            "patch_size",
            "mlp_ratio",
            "attention_scale",
            "attention_v_threshold",
            "in_channels",
        ),
    ),
    "SEWDVSConfig": ("SEW-ResNet DVS", ("stage_channels", "connection", "in_channels")),
    "SEWResNetConfig": ("SEW-ResNet", ("depth", "connection", "in_channels")),
    "SEWResNet34Config": ("SEW-ResNet", ("connection", "in_channels")),  # depth 34, its class
}
CROSS_ENTROPY = "torch.nn.functional.cross_entropy"
_NEURONS: dict[str, dict[str, Any]] = {}  # _neuron's, by model config
WIDEST = 34  # the paper's column; a longer value pushes this run's right
NONE = "none"


def flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested card as dotted fields (`optimizer.lr`); lists and scalars are leaves."""
    if not isinstance(node, dict):
        return {prefix: node}
    fields: dict[str, Any] = {}
    for key, value in node.items():
        fields.update(flat(value, f"{prefix}{key}."))
    return {key.rstrip("."): value for key, value in fields.items()}


def same(paper: Any, ours: Any) -> bool:
    """Equal as the card means it: numbers by value (1e-3 == 0.001, 4 == 4.0), lists item by
    item, tuples as lists."""
    if isinstance(paper, (list, tuple)) and isinstance(ours, (list, tuple)):
        return len(paper) == len(ours) and all(same(a, b) for a, b in zip(paper, ours, strict=True))
    numbers = (int, float)
    if isinstance(paper, numbers) and isinstance(ours, numbers):
        if isinstance(paper, bool) or isinstance(ours, bool):
            return paper is ours
        return abs(float(paper) - float(ours)) <= 1e-12 * max(1.0, abs(float(paper)))
    return paper == ours


def checked_paper(paper: Any) -> dict[str, Any] | None:
    """The `paper` node of a preset, its shape checked (None: not a paper's preset)."""
    if paper is None:
        return None
    if not isinstance(paper, dict):
        raise ConfigError("paper", paper, "null, or a preset's node with " + ", ".join(PAPER_KEYS))
    for key in PAPER_KEYS:
        if key not in paper:
            raise ConfigError(f"paper.{key}", None, f"required in a paper's node ({PAPER_KEYS})")
    fields = flat(paper["card"])
    for field, reason in flat(paper["deviations"] or {}).items():
        if field not in fields:
            raise ConfigError(
                f"paper.deviations.{field}",
                reason,
                "a field of paper.card (" + ", ".join(sorted(fields)) + ")",
            )
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(f"paper.deviations.{field}", reason, "the reason, in words")
    return paper


# ------------------------------------------------------------------ ours, from the planned run


def ours(values: dict[str, Any], plan: Any) -> dict[str, Any]:
    """This run's recipe in the card's fields (see the module docstring)."""
    config = plan.training_config
    card = {
        **_dataset(values["data"]),
        "time_steps": plan.model_config.time_steps,
        "global_batch": plan.global_batch,
        "epochs": config.epochs,
        **_optimizer(config.optimizer, config.optimizer_kwargs),
        **_schedule(config.scheduler, config.scheduler_kwargs),
        **_augment(values["data"]),
        **_mixup(config.mixup_alpha, plan.trainer),
        **_loss(config.loss_function, config.loss_kwargs, config.mixup_alpha),
        **_neuron(plan.model_config),
        **_model(plan.model_config),
    }
    return card


def _dataset(data: dict[str, Any]) -> dict[str, Any]:
    if "train_ratio" in data:
        order = "shuffled" if data.get("random_split") else "in file order"
        split = f"first {data['train_ratio']} of each class, {order}"
        if data.get("random_split"):
            split = f"{data['train_ratio']} of each class, shuffled (seed {data.get('split_seed')})"
    elif data["name"] == "imagefolder":
        train = data.get("train_subdirectory", "train")
        if data.get("val_fraction"):
            split = f"{data['val_fraction']} of {train}/ held out"
        else:
            split = f"{train}/ and {data.get('validation_subdirectory', 'val')}/ folders"
    else:
        split = "the dataset's own train/test"
    card = {"dataset.name": data["name"], "dataset.split": split}
    card["dataset.image_size"] = data["image_size"]
    if "split_by" in data:  # event frames
        card["dataset.split_by"] = data["split_by"]
        card["dataset.frames_trained"] = "all"  # SpikingJelly's loop feeds every frame
    return card


def _arguments(cls: Any, given: dict[str, Any], names: tuple[str, ...] | None) -> dict[str, Any]:
    """`names` of cls's constructor (all given ones when None), given or its defaults."""
    if names is None:
        return dict(given)
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(cls.__init__).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    return {name: given.get(name, defaults.get(name)) for name in names}


def _optimizer(path: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    import torch

    from experiments.data import import_object

    cls = import_object(path, "optimizer.name")
    library = next(c for c in cls.__mro__ if c.__module__.startswith("torch.optim"))
    names = ("lr", "weight_decay")
    family = ("betas", "eps") if issubclass(cls, (torch.optim.Adam, torch.optim.AdamW)) else ()
    if issubclass(cls, torch.optim.SGD):
        family = ("momentum", "nesterov")
    values = _arguments(cls, kwargs, (*names, *family))
    card = {f"optimizer.{name}": value for name, value in values.items()}
    if "optimizer.betas" in card:
        card["optimizer.betas"] = list(card["optimizer.betas"])
    return {
        "optimizer.name": library.__name__,
        **card,
        "optimizer.weight_decay_exempt": getattr(cls, "exempt", NONE),
    }


def _schedule(path: str | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    from experiments.data import import_object
    from experiments.snn.epoch_schedule import EpochSchedule

    if path is None:
        return {"schedule.name": NONE}
    cls = import_object(path, "trainer.scheduler")
    stepping = "step"
    given = dict(kwargs)
    if cls is EpochSchedule:
        path = given.pop("schedule")
        given.pop("steps_per_epoch", None)
        cls = import_object(path, "trainer.scheduler_kwargs.schedule")
        stepping = "step" if given.get("t_in_epochs") is False else "epoch"
    values = _arguments(cls, given, SCHEDULE_ARGUMENTS.get(cls.__name__))
    return {
        "schedule.name": path,
        "schedule.stepping": stepping,
        **{f"schedule.{name}": value for name, value in values.items()},
    }


def _augment(data: dict[str, Any]) -> dict[str, Any]:
    node = data.get("augment")
    if "split_by" in data:  # event frames: data/event_augment.py
        node = node or {}
        return {
            "augment.hflip": node.get("hflip", 0.0),
            "augment.policy": node.get("policy") or NONE,
        }
    if node is None:
        return {}
    from dataclasses import asdict

    from experiments.data.augment import Augment

    augment = {**asdict(Augment()), **node}
    card: dict[str, Any] = {"augment.crop": augment["crop"]}
    if augment["crop"] == "random_crop":
        card["augment.padding"] = augment["padding"]
    if augment["crop"] == "random_resized_crop":
        card["augment.scale"] = list(augment["scale"])
        card["augment.ratio"] = list(augment["ratio"])
    card["augment.hflip"] = augment["hflip"]
    card["augment.vflip"] = augment["vflip"]
    card["augment.auto_augment"] = augment["auto_augment"] or NONE
    if augment["auto_augment"]:
        ops = augment["auto_augment_ops"]
        card["augment.auto_augment_ops"] = (
            list(ops) if ops else f"timm's for {augment['auto_augment']}"
        )
    else:
        card["augment.color_jitter"] = augment["color_jitter"] or NONE
    card["augment.re_prob"] = augment["re_prob"]
    if augment["re_prob"]:
        card["augment.re_mode"] = augment["re_mode"]
        card["augment.re_count"] = augment["re_count"]
    for key in ("interpolation", "mean", "std", "crop_pct"):
        value = augment[key]
        card[f"augment.{key}"] = list(value) if isinstance(value, (list, tuple)) else value
    return card


def _mixup(alpha: float, trainer: dict[str, Any]) -> dict[str, Any]:
    """SpikingJelly's mixup_alpha, and the keys of timm's Mixup in its place (snn/mixup.py)."""
    card: dict[str, Any] = {"mixup.alpha": alpha}
    if alpha:
        off = trainer["mixup_off_epoch"]
        card.update(
            {
                "mixup.cutmix_alpha": trainer["cutmix_alpha"],
                "mixup.prob": trainer["mixup_prob"],
                "mixup.switch_prob": trainer["mixup_switch_prob"],
                "mixup.mode": trainer["mixup_mode"],
                "mixup.off_epoch": "never" if off is None else off,
            }
        )
    return card


def _loss(path: str, kwargs: dict[str, Any], mixup_alpha: float) -> dict[str, Any]:
    name = path
    if path == CROSS_ENTROPY:  # on mixed targets: class probabilities (snn/mixup.py)
        name = "soft-target cross-entropy" if mixup_alpha else "cross-entropy"
    return {"loss.name": name, "loss.label_smoothing": kwargs.get("label_smoothing", 0.0)}


def _neuron(model_config: Any) -> dict[str, Any]:
    """The neuron most of the model's layers are, as its builder makes them (built on the
    meta device: no memory, no initialisation); once per config in a process (a sweep plans
    every point before it launches them)."""
    key = f"{type(model_config).__module__}.{type(model_config).__qualname__}:{model_config!r}"
    if key not in _NEURONS:
        _NEURONS[key] = _built_neuron(model_config)
    return dict(_NEURONS[key])


def _built_neuron(model_config: Any) -> dict[str, Any]:
    from spikingjelly.activation_based import neuron as neurons

    built = [m for m in _meta_model(model_config).modules() if isinstance(m, neurons.BaseNode)]
    if not built:
        return {"neuron.name": NONE}
    kinds = Counter((type(m).__name__, float(m.v_threshold)) for m in built)
    (name, threshold), _ = kinds.most_common(1)[0]
    node = next(m for m in built if (type(m).__name__, float(m.v_threshold)) == (name, threshold))
    card: dict[str, Any] = {"neuron.name": name}
    if isinstance(node, neurons.ParametricLIFNode):
        card["neuron.tau"] = _initial_tau(model_config)
    elif hasattr(node, "tau"):
        card["neuron.tau"] = float(node.tau)
    surrogate = node.surrogate_function
    return {
        **card,
        "neuron.v_threshold": threshold,
        "neuron.v_reset": node.v_reset,
        "neuron.detach_reset": bool(node.detach_reset),
        "neuron.surrogate": type(surrogate).__name__,
        "neuron.surrogate_alpha": float(surrogate.alpha),
    }


def _meta_model(model_config: Any) -> Any:
    """The whole model as its builder makes it, on the meta device (as parameter_count)."""
    import torch

    from experiments.snn.models import _NoRandomInitOnMeta

    builder = model_config.get_builder_cls()(model_config)
    with torch.device("meta"), _NoRandomInitOnMeta():
        return builder._build_canonical_model()


def _initial_tau(model_config: Any) -> float:
    """A ParametricLIFNode's learnable tau at initialisation (its parameter is on the meta
    device): the neuron config's init_tau, or the class's default."""
    from spikingjelly.activation_based import neuron as neurons

    neuron_config = getattr(model_config, "neuron_config", None)
    given = dict(getattr(neuron_config, "kwargs", None) or {})
    default = inspect.signature(neurons.ParametricLIFNode.__init__).parameters["init_tau"].default
    return float(given.get("init_tau", default))


def _model(model_config: Any) -> dict[str, Any]:
    names = [cls.__name__ for cls in type(model_config).__mro__]
    for class_name, (architecture, dimensions) in ARCHITECTURES.items():
        if class_name in names:
            card = {"model.architecture": architecture}
            if class_name == "SEWResNet34Config" and "SEWResNetConfig" not in names:
                card["model.depth"] = 34
            for key in dimensions:
                value = getattr(model_config, key)
                card[f"model.{key}"] = list(value) if isinstance(value, (list, tuple)) else value
            return card
    return {"model.architecture": type(model_config).__name__}


# ------------------------------------------------------------------ the card, as printed


def rows(paper: dict[str, Any], card: dict[str, Any]) -> list[tuple[str, str, Any, Any, str]]:
    """(mark, field, paper's, ours, note) for every field of either card: mark " " the same,
    "~" a listed deviation (note: its reason), "!" a difference the preset does not list."""
    official = flat(paper["card"])
    deviations = flat(paper.get("deviations") or {})
    table = []
    for field in [*official, *(f for f in card if f not in official)]:
        theirs, mine = official.get(field, "-"), card.get(field, "-")
        if same(theirs, mine):
            table.append((" ", field, theirs, mine, ""))
        elif field in deviations:
            table.append(("~", field, theirs, mine, deviations[field]))
        else:
            table.append(("!", field, theirs, mine, "not a listed deviation"))
    return table


def as_text(paper: dict[str, Any], card: dict[str, Any]) -> list[str]:
    table = rows(paper, card)
    width = min(WIDEST, max(len(_shown(row[2])) for row in table))
    lines = [
        f"  paper      {paper['title']}",
        f"  code       {paper['code']}",
        f"  top-1      {paper['top1']} ({paper['top1_source']})",
        "  recipe card (~ a deviation the preset lists, with its reason; ! one it does not):",
        f"      {'field':<30}  {'paper':<{width}}  this run",
    ]
    for mark, field, theirs, mine, note in table:
        shown = f"{_shown(theirs):<{width}}  {_shown(mine)}"
        lines.append(f"    {mark} {field:<30}  {shown}" + (f"  ({note})" if note else ""))
    others = paper.get("other_deviations") or []
    if others:
        lines.append("  other deviations (not on the card):")
        lines += [f"    - {text}" for text in others]
    return lines


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
