"""The plan of a GAN run: MMGen's recipe with our groups' values, checked before launch.

plan.build_plan hands a model with `family: gan` here. The same promises hold as for SNN
runs: every failure is a ConfigError naming key, value and a valid choice, raised before any
process, queue slot or file exists.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments import data as data_group
from experiments.data.image_files import check_gan_data, gan_image_root
from experiments.errors import ConfigError
from experiments.gan import ddp as gan_ddp
from experiments.gan.family import OBJECTIVE
from experiments.gan.recipes import GANRecipe, build_config, build_model, configs_root
from experiments.launchers import launch_notes, launcher_module
from experiments.topology import Capabilities, ParallelDims, parallel_dims

GAN_TOPOLOGIES = ("single", "ddp")


@dataclass
class GANPlan:
    """A validated GAN run; mirrors SNNPlan's interface for the launcher and the recorder."""

    choices: dict[str, str]
    run_dir: Path
    overrides: list[str]
    recipe: GANRecipe
    mmgen_config: Any  # mmcv Config: MMGen's recipe with our values
    parameters: dict[str, int]
    dims: ParallelDims
    engine: str
    device: str
    backend: str
    launch_command: list[str]
    resume: str | None
    resume_from: str | None
    load_from: str | None
    seed: int
    image_root: Path
    objective: str = OBJECTIVE
    # MMGen's distributed path (a process group, DDP): more than one rank, or topology=ddp
    # under a launcher that starts ranks even with one (as MMGen's dist_train.sh CONFIG 1).
    distributed: bool = False
    # "key: old -> new" for each key this launch raises on a recorded run (run/recorded_config.py)
    extensions: list[str] = field(default_factory=list)
    # what the launcher asks for, in words (launchers.launch_notes: Slurm's resources)
    launch_notes: list[str] = field(default_factory=list)

    @property
    def global_batch(self) -> int:
        return self.recipe.batch_size * self.dims.data_parallel_size

    def library_config(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.mmgen_config._cfg_dict.to_dict(), default=str))

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.choices.get("model"),
            "model_class": self.recipe.recipe,
            "parameters": sum(self.parameters.values()),
            "parameters_by_module": self.parameters,
            "data": self.choices.get("data"),
            "topology": self.choices.get("topology"),
            "launcher": self.choices.get("launcher"),
            "engine": self.engine,
            "device": self.device,
            "backend": self.backend,
            "world_size": self.dims.world_size,
            "ddp": gan_ddp.configured(self.mmgen_config),
            "distributed": self.distributed,
            "mesh": self.dims.as_dict(),
            "batch": {"per_rank": self.recipe.batch_size, "global": self.global_batch},
            "iters": self.recipe.iters,
            "run_dir": str(self.run_dir),
            "resume": self.resume,
            "resume_from": self.resume_from,
            "load_from": self.load_from,
            "image_root": str(self.image_root),
            "command": self.launch_command,
            "library_config": self.library_config(),
        }

    def as_text(self) -> str:
        from experiments.composition import launch_lines

        plan = self.as_dict()
        counts = ", ".join(f"{k} {v / 1e6:.2f} M" for k, v in self.parameters.items())
        start = (
            f"resume_from {self.resume_from}"
            if self.resume_from
            else f"load_from {self.load_from}"
            if self.load_from
            else "fresh (or its own latest checkpoint)"
            if self.resume == "auto"
            else "fresh"
        )
        lines = [
            "Run plan (dry run: nothing was trained or written)",
            f"  model      {plan['model']}: MMGen recipe {self.recipe.recipe} ({counts})",
            f"  data       {plan['data']} -> {self.image_root}, {self.recipe.scale}x"
            f"{self.recipe.scale}",
            f"  engine     MMGen train_model on {self.device} (backend {self.backend})",
            f"  topology   {plan['topology']}: world size {self.dims.world_size}"
            + (f", {plan['ddp']} DDP (model.ddp)" if self.distributed else ""),
            f"  batch      {self.recipe.batch_size} per rank, {self.global_batch} global; "
            f"{self.recipe.iters} iterations",
            f"  start      {start}",
            f"  run dir    {self.run_dir} (MMGen work_dir)",
            f"  launcher   {plan['launcher']}; it would execute:",
        ]
        lines += launch_lines(plan["launcher"], self.launch_command)
        lines += [f"  {line}" for line in self.launch_notes]
        lines.append("  library config (MMGen recipe, mmcv Config.pretty_text):")
        lines += [f"    {line}" for line in self.mmgen_config.pretty_text.splitlines()]
        return "\n".join(lines)


def plan_run(
    cfg: Any,
    values: dict[str, Any],
    run_dir: Path,
    overrides: list[str],
    choices: dict[str, str],
    extensions: list[str],
) -> GANPlan:
    """The family's planner (experiments/families.py): the keys every family shares are
    already checked."""
    # The option first: an event dataset's frames_number follows model.time_steps, which a GAN
    # has none of, so its keys' types would name that key instead of the data option
    check_gan_data(values["data"]["name"])
    data_group.dataset_kwargs(cfg.data)  # the data keys' types (MMGen's recipe reads few)
    plan = build_gan_plan(values, run_dir, overrides, choices)
    plan.extensions = extensions
    check_reshard(plan, extensions, bool(values["trainer"].get("allow_global_batch_change")))
    _check_pruned_trial(cfg, plan.recipe)
    return plan


def _check_pruned_trial(cfg: Any, recipe: GANRecipe) -> None:
    """A trial of a search with a pruner reports its objective (swd) to the study at every
    log interval (gan/hooks.py): a recipe that never measures it would be pruned on NaN."""
    from experiments.sweepers.search_config import search_pruner

    pruner = search_pruner(cfg)
    if pruner is None:
        return
    why = (
        f"a trial of a search with hydra.sweeper.pruner={pruner} reports its {OBJECTIVE} to the "
        "pruner at every model.log_interval"
    )
    if recipe.eval_images < 2:
        raise ConfigError("model.eval_images", recipe.eval_images, f"an integer >= 2: {why}")
    if recipe.scale < 16:
        raise ConfigError("model.scale", recipe.scale, f">= 16 (SWD's pyramid): {why}")


def build_gan_plan(
    values: dict[str, Any], run_dir: Path, overrides: list[str], choices: dict[str, str]
) -> GANPlan:
    from experiments.composition import user_overrides
    from experiments.gan import mmgen_compat

    recipe = GANRecipe.from_values(values["model"])
    model_name = choices.get("model", recipe.recipe)
    resume, resume_from, load_from = _checkpoints(values)
    _check_trainer(values["trainer"])
    image_root, channels = gan_image_root(values["data"])

    topology = values["topology"]
    if topology["name"] not in GAN_TOPOLOGIES:
        raise ConfigError(
            "topology",
            topology["name"],
            f"{model_name} is a GAN: MMGen trains it with topology=single or topology=ddp "
            "(it has no FSDP2, tensor-parallel or pipeline-parallel path)",
        )
    if topology["data_parallel"] != "ddp":
        raise ConfigError(
            "topology.data_parallel",
            topology["data_parallel"],
            "ddp (MMGen's MMDistributedDataParallel)",
        )
    launcher = values["launcher"]
    module = launcher_module(launcher["name"])
    dims = parallel_dims(
        topology, module.world_size(launcher), Capabilities((1,), 1, "channels"), model_name, 1
    )
    device = "cuda" if module.has_cuda(launcher) else "cpu"
    recipe = _per_rank_batch(recipe, values["trainer"], dims.data_parallel_size)

    configs_root(model_name)  # MMGen is installed, else the message says how to install it
    mmgen_compat.import_mmgen()
    config = build_config(recipe, values["data"], image_root, channels, run_dir, values["seed"])
    distributed = dims.world_size > 1 or (
        topology["name"] == "ddp" and launcher["name"] in ("torchrun", "slurm")
    )
    if not distributed and config.get("runner"):
        # The recipe's dynamic-DDP runner asks the model for a DDP reducer, which a single
        # process (MMDataParallel) has not: MMGen's single-GPU runs set this flag to False.
        config.runner.is_dynamic_ddp = False
    model = build_model(config)
    parameters = {
        name: sum(p.numel() for p in getattr(model, name).parameters())
        for name in ("generator", "discriminator")
        if getattr(model, name, None) is not None
    }
    return GANPlan(
        choices=dict(choices),
        run_dir=run_dir,
        overrides=list(overrides),
        recipe=recipe,
        mmgen_config=config,
        parameters=parameters,
        dims=dims,
        engine="mmgen",
        device=device,
        backend="nccl" if device == "cuda" else "gloo",
        launch_command=module.command(launcher, user_overrides(overrides), str(run_dir)),
        launch_notes=launch_notes(launcher, "gan"),
        resume=resume,
        resume_from=resume_from,
        load_from=load_from,
        seed=values["seed"],
        image_root=image_root,
        distributed=distributed,
    )


def _checkpoints(values: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """MMGen's three notions: the run's own checkpoints (resume=auto), resume_from (whole
    training state), load_from (weights only, iteration 0)."""
    resume = values.get("resume")
    if resume not in ("auto", None):
        raise ConfigError(
            "resume",
            resume,
            "auto or null for a GAN; resume from another run's checkpoint with "
            "resume_from=<.../iter_N.pth>",
        )
    found = {}
    for key in ("resume_from", "load_from"):
        value = values.get(key)
        if value is not None and not Path(str(value)).is_file():
            raise ConfigError(key, value, "null or an existing MMGen checkpoint file (iter_N.pth)")
        found[key] = None if value is None else str(value)
    if found["resume_from"] and found["load_from"]:
        raise ConfigError(
            "load_from",
            found["load_from"],
            f"conflicts with resume_from={found['resume_from']}: resume_from restores the "
            "whole training state, load_from only weights; set one of them",
        )
    return resume, found["resume_from"], found["load_from"]


def _per_rank_batch(recipe: GANRecipe, trainer: dict[str, Any], data_parallel: int) -> GANRecipe:
    """`trainer.global_batch_size` (as for SNN runs): the same images per iteration whatever
    the world size, model.batch_size per rank derived from it. MMGen's train_model has no
    gradient accumulation, so it must divide by the data-parallel size."""
    wanted = trainer.get("global_batch_size")
    if wanted is None:
        return recipe
    if wanted % data_parallel:
        below = wanted - wanted % data_parallel
        near = " or ".join(str(n) for n in sorted({below or data_parallel, below + data_parallel}))
        raise ConfigError(
            "trainer.global_batch_size",
            wanted,
            f"a multiple of the {data_parallel} data-parallel ranks (e.g. {near}): MMGen's "
            "train_model has no gradient accumulation, every rank takes model.batch_size "
            "images an iteration",
        )
    return dataclasses.replace(recipe, batch_size=wanted // data_parallel)


def check_reshard(plan: GANPlan, extensions: list[str], allow_batch_change: bool) -> None:
    """Another world size (or launcher) on a recorded run: MMGen's iter_N.pth holds the
    unwrapped generator, discriminator and both optimizers, the same whatever DDP ran, so it
    resumes under any world size. What must not move silently is the global batch (the
    images each iteration's update sees): refused with the override that keeps it."""
    from experiments.gan.checkpoints import latest_checkpoint
    from experiments.run.record import read_summary
    from experiments.run.reshard import global_batch_refused, resharded

    if not resharded(extensions) or allow_batch_change:
        return
    recorded = (read_summary(plan.run_dir) or {}).get("batch") or {}
    old, per_rank, new = recorded.get("global"), recorded.get("per_rank"), plan.global_batch
    if not isinstance(old, int) or not isinstance(per_rank, int) or old == new:
        return  # the same global batch (or no record of one)
    # Only now the checkpoints (each is read whole to skip torn ones): none, and it starts over.
    checkpoint = latest_checkpoint(plan.run_dir)
    if checkpoint is None:
        return
    ranks = plan.dims.data_parallel_size
    keeps = [f"trainer.global_batch_size={old}"]
    if old % ranks == 0:
        keeps.insert(0, f"model.batch_size={old // ranks}")
    raise global_batch_refused(
        "model.batch_size",
        plan.recipe.batch_size,
        checkpoint,
        old,
        f"{old // per_rank} rank(s) x {per_rank}",
        f"{ranks} rank(s) x {plan.recipe.batch_size}",
        new,
        keeps,
    )


# trainer.spikes as conf/trainer/default.yaml sets it: what a GAN run leaves untouched
SNN_SPIKES = {"images": "auto", "seed": 0, "costs": "fp32", "guard": 3}
# ... and its SNN trainer keys, which a GAN run must leave at these values
SNN_TRAINER = {
    "engine": "auto",
    "precision": "fp32",
    "execution_mode": "eager",
    "memopt_level": 0,
    "fp8_recipe": "auto",
    "memopt_checkpoint_budget": "memory",
    "memopt_compress_inputs": True,
    "profile_steps": 0,
}


def _check_trainer(trainer: dict[str, Any]) -> None:
    if trainer.get("name") is not None:  # trainer=classify: the only named trainer option
        raise ConfigError(
            "trainer",
            trainer["name"],
            "default: GAN runs train with MMGen's train_model; trainer=classify is "
            "SpikingJelly's classic Trainer, for SNN models",
        )
    for key, default in SNN_TRAINER.items():
        if trainer.get(key) != default:
            raise ConfigError(
                f"trainer.{key}",
                trainer.get(key),
                f"{default}: GAN runs train with MMGen's train_model in fp32, eager "
                "(batch and iterations are model.batch_size and model.iters)",
            )
    spikes = trainer.get("spikes") or {}
    for key, default in SNN_SPIKES.items():
        if spikes.get(key, default) != default:
            raise ConfigError(
                f"trainer.spikes.{key}",
                spikes.get(key),
                f"{default}: the spike and energy measurement is for SNN models (a GAN's "
                "generator and discriminator do not spike)",
            )
