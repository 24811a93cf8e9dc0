"""The plan of an SNN run: model x data x topology x launcher -> engine, mesh, SpikingJelly's
TrainingConfig, command.

`experiments.plan.build_plan` checks the keys every family shares and hands SNN models here;
every failure is a ConfigError naming the key, the bad value and a valid choice.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from spikingjelly.activation_based.distributed.vision import ModelConfig, TrainingConfig
from spikingjelly.activation_based.precision import PrecisionConfig

from experiments import data as data_group
from experiments import optimizer as optimizer_group
from experiments import validation as check
from experiments.composition import (
    ROOT_PLACEHOLDER,
    _resolve,
    _with_data_value,
    launch_lines,
    user_overrides,
)
from experiments.errors import ConfigError
from experiments.launchers import launch_notes, launcher_module
from experiments.snn import (
    classify_plan,
    mixup,
    model_input,
    neurons,
    recipe_card,
    schedule,
    sj_errors,
    spikes,
)
from experiments.snn import trainer as snn_trainer
from experiments.snn.family import OBJECTIVE
from experiments.snn.models import capabilities, instantiate_model_config, parameter_count
from experiments.topology import ParallelDims, parallel_dims

CHECKPOINT_DIRNAME = "checkpoints"
DERIVED = ("accumulation_steps", "derivation")  # batch keys of a derived batch (derive_batch)
LIBRARY_LOSS = TrainingConfig.__dataclass_fields__["loss_function"].default


@dataclass
class SNNPlan:
    """A validated run: everything a launcher or engine needs, nothing it must re-derive."""

    choices: dict[str, str]
    run_dir: Path
    overrides: list[str]
    model_config: ModelConfig
    parameters: int
    dims: ParallelDims
    engine: str
    device: str
    backend: str
    training_config: TrainingConfig
    launch_command: list[str]
    resume: str | None
    trainer: dict[str, Any] = field(default_factory=dict)
    # "key: old -> new" for each key this launch raises on a recorded run (run/recorded_config.py)
    extensions: list[str] = field(default_factory=list)
    # what the launcher asks for, in words (launchers.launch_notes: Slurm's resources)
    launch_notes: list[str] = field(default_factory=list)
    # model.neuron_implementation checked: the neuron type and the kernel bound (neurons.py)
    neuron: dict[str, Any] = field(default_factory=dict)
    # trainer=classify: SpikingJelly's train_classify.Trainer command line (classify_plan.py)
    trainer_args: list[str] = field(default_factory=list)
    # trainer.spikes checked: the spike and energy measurement at each evaluation (spikes.py)
    spikes: Any = None
    # a paper's preset: its `paper` node and this run's recipe in the card's fields
    # (recipe_card.py), printed side by side by the dry run
    paper: dict[str, Any] | None = None
    card: dict[str, Any] = field(default_factory=dict)

    objective: str = OBJECTIVE  # the metric a sweep optimises and a re-run reports

    @property
    def seed(self) -> int:
        return self.training_config.seed

    @property
    def process_environment(self) -> dict[str, str]:
        """Set before the run's processes start (train.py): SpikingJelly reads its neuron
        kernel pin from the environment when its kernels are first imported."""
        return neurons.environment(self.neuron.get("requested", "auto"), self.neuron.get("type"))

    @property
    def global_batch(self) -> int:
        return self.training_config.batch_size * self.dims.data_parallel_size

    def as_dict(self) -> dict[str, Any]:
        config = self.training_config
        return {
            "model": self.choices.get("model"),
            "model_class": type(self.model_config).__name__,
            "parameters": self.parameters,
            "data": self.choices.get("data"),
            "topology": self.choices.get("topology"),
            "launcher": self.choices.get("launcher"),
            "engine": self.engine,
            "device": self.device,
            "backend": self.backend,
            "world_size": self.dims.world_size,
            "mesh": self.dims.as_dict(),
            "batch": {
                "per_rank": config.batch_size,
                "global": self.global_batch,
                "micro": config.batch_size // self.dims.pipeline_microbatches,
                **({k: self.trainer[k] for k in DERIVED} if "derivation" in self.trainer else {}),
            },
            "run_dir": str(self.run_dir),
            "resume": self.resume,
            "command": self.launch_command,
            "neuron": self.neuron,
            **({"spikes": dataclasses.asdict(self.spikes)} if self.spikes is not None else {}),
            "library_config": config.as_dict(),
            **({"recipe": {"paper": self.paper, "this_run": self.card}} if self.paper else {}),
            **({"trainer_args": self.trainer_args} if self.trainer_args else {}),
        }

    def mixup(self) -> str | None:
        """Which mixup the loop runs, if any (snn/mixup.py); trainer=classify mixes in its own
        collate."""
        if self.engine != "spikingjelly":
            return None
        return mixup.describe(self.trainer, self.training_config.input_layout)

    def stop_bound(self) -> str:
        """What a stop loses on SpikingJelly's loop (engines/spikingjelly_loop.py)."""
        interval = self.training_config.checkpoint_interval
        killed = (
            f"at most {2 * interval} step(s) (a checkpoint every trainer.checkpoint_interval="
            f"{interval} steps, each written in the background while the next steps train)"
            if interval
            else "every step since the start (trainer.checkpoint_interval=0)"
        )
        return (
            "SIGTERM/SIGUSR2 in a Slurm task (requeue, preemption, time limit; Ctrl-C at a "
            "local sweep point): a checkpoint of the step the signal came in, then the run "
            "ends interrupted (nothing lost); a "
            f"killed rank loses {killed}; the last step is always saved"
        )

    def as_text(self) -> str:
        plan = self.as_dict()
        dims = self.dims
        lines = [
            "Run plan (dry run: nothing was trained or written)",
            f"  model      {plan['model']} ({plan['model_class']}, "
            f"{self.parameters / 1e6:.2f} M parameters, T={self.model_config.time_steps})",
            f"  data       {plan['data']}",
            f"  engine     {self.engine} on {self.device} (backend {self.backend})",
            f"  neurons    {self.neuron.get('type')}: {self.neuron.get('implementation')} "
            f"(model.neuron_implementation={self.neuron.get('requested')})",
            f"  topology   {plan['topology']}: world size {dims.world_size}, mesh {dims.describe()}"
            + (
                f", {dims.pipeline_microbatches} micro-batches"
                if dims.pipeline_parallel_size > 1
                else ""
            ),
            f"  batch      {plan['batch']['per_rank']} per data-parallel rank, "
            f"{plan['batch']['global']} global"
            + (f" ({plan['batch']['derivation']})" if "derivation" in plan["batch"] else ""),
            *([f"  schedule   {self.trainer['schedule']}"] if "schedule" in self.trainer else []),
            *([f"  mixup      {mixing}"] if (mixing := self.mixup()) else []),
            f"  run dir    {self.run_dir}",
            f"  launcher   {plan['launcher']}; it would execute:",
        ]
        lines += launch_lines(plan["launcher"], self.launch_command)
        lines += [f"  {line}" for line in self.launch_notes]
        if self.engine == "spikingjelly":
            lines.append(f"  on a stop  {self.stop_bound()}")
        if self.spikes is not None:
            lines.append(f"  spikes     {self.spikes.describe()}")
        if self.trainer_args:
            lines.append("  SpikingJelly train_classify.Trainer arguments (get_args_parser()):")
            lines += [f"    {argument}" for argument in self.trainer_args]
        if self.paper is not None:
            lines += recipe_card.as_text(self.paper, self.card)
        lines.append("  library config (SpikingJelly TrainingConfig.as_dict()):")
        lines += [
            f"    {line}" for line in json.dumps(plan["library_config"], indent=2).splitlines()
        ]
        return "\n".join(lines)


def _folder_classes(cfg: DictConfig, data: dict[str, Any]) -> DictConfig:
    """The class count of an image folder is read from its class folders; a data.num_classes
    that disagrees would crash mid-run (IndexError) or train a 1000-way head on 3 classes."""
    from experiments.data.image_folder import class_names

    root = Path(str(data["root"]))
    train = root / str(data.get("train_subdirectory", "train"))
    if data["root"] == ROOT_PLACEHOLDER or not train.is_dir():
        return cfg  # a dry run's placeholder, or a missing folder that _check_data names
    names = class_names(train)
    if not names:
        raise ConfigError(
            "data.root", str(root), f"{train} has no class folders; expected {train}/<class>/*.jpg"
        )
    given = data.get("num_classes")
    if given is not None and given != len(names):
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise ConfigError(
            "data.num_classes",
            given,
            f"{train} has {len(names)} class folders ({shown}); set data.num_classes="
            f"{len(names)} or leave it null to read it from the folders",
        )
    return _with_data_value(cfg, "num_classes", len(names))


def _resume(value: Any) -> str | None:
    if value is None or value == "auto":
        return value
    if not isinstance(value, str) or not Path(value).exists():
        raise ConfigError("resume", value, "auto, null, or an existing checkpoint directory")
    return value


def _check_data(data: dict[str, Any]) -> None:
    if data.get("time_steps") is not None:
        check.integer(data["time_steps"], "data.time_steps", minimum=1)
    if data["name"] in ("digits", "digits_sequence"):
        from experiments.data.digits import DIGITS_TOTAL

        check.integer(data["val_size"], "data.val_size", minimum=1, maximum=DIGITS_TOTAL - 1)
        if data["num_classes"] != 10:
            raise ConfigError("data.num_classes", data["num_classes"], "digits has 10 classes")
    if data["name"] == "synthetic":
        check.integer(data["train_size"], "data.train_size", minimum=1)
        check.integer(data["val_size"], "data.val_size", minimum=1)
    # the option's own checks (data/__init__.py): its keys, and what its data.root must hold
    data_group.check(data, on_disk=data.get("root") not in (None, ROOT_PLACEHOLDER))
    if data["num_classes"] is None and data.get("root") == ROOT_PLACEHOLDER:
        raise ConfigError(
            "data.num_classes",
            None,
            "a number of classes for this dry run (a real run with data.root=<folder> reads "
            "it from the class folders)",
        )
    check.integer(data["num_classes"], "data.num_classes", minimum=2)
    check.integer(data["image_size"], "data.image_size", minimum=1)


def _check_model_against_data(
    config: ModelConfig, data: dict[str, Any], caps: Any, name: str
) -> None:
    if config.num_classes != data["num_classes"]:
        raise ConfigError(
            "model.num_classes",
            config.num_classes,
            f"data={data['name']} has {data['num_classes']} classes; "
            "leave model.num_classes at ${data.num_classes}",
        )
    model_input.check(config, data, caps, name)  # channels and frame size
    # data that yields frame sequences ([N, T, C, H, W]): digits_sequence's time_steps, an
    # event dataset's frames_number
    key = "time_steps" if data.get("time_steps") is not None else "frames_number"
    frames = data.get(key)
    if frames is not None and config.time_steps != frames:
        raise ConfigError(
            "model.time_steps",
            config.time_steps,
            f"data={data['name']} yields {frames} frames a sample; the model must run as many "
            f"time steps: set model.time_steps={frames} (or data.{key})",
        )


def input_layout(data: dict[str, Any]) -> str:
    """SpikingJelly's TrainingConfig.input_layout, declared by the data builder itself
    (`builder.input_layout = "NTCHW"` for [N, T, C, H, W] sequences; static images otherwise),
    so a user's own sequence builder needs no key of ours."""
    builder = data_group.import_object(str(data["builder"]), "data.builder")
    return str(getattr(builder, "input_layout", "NCHW"))


def _check_validation_split(data: dict[str, Any], dims: ParallelDims, batch_size: int) -> None:
    # SpikingJelly's loaders shard the validation set evenly, in whole batches under PP.
    multiple = dims.data_parallel_size * (batch_size if dims.pipeline_parallel_size > 1 else 1)
    under_pp = " x batch size under PP" if dims.pipeline_parallel_size > 1 else ""
    why = f"data-parallel size{under_pp}"
    val_size = data.get("val_size")
    if val_size is not None and val_size % multiple:
        raise ConfigError("data.val_size", val_size, f"must be divisible by {multiple} ({why})")
    sizes = data_group.split_sizes(data) if val_size is None else None
    if sizes is not None and sizes[1] % multiple:
        raise ConfigError(
            "data.root",
            data.get("root"),
            f"its {sizes[1]} validation samples are not divisible by {multiple} ({why}): "
            "SpikingJelly's loop shards them evenly; choose a data-parallel size that divides "
            f"{sizes[1]}",
        )


def timing_warmup_steps(trainer: dict[str, Any]) -> int:
    """Steps the library leaves out of images/s: compilation (compile) and graph capture
    (cuda_graph, after its warm-up steps) would otherwise count as training time. Kept below
    max_steps (TrainingConfig requires it)."""
    mode = trainer.get("execution_mode", "eager")
    graph_warmup = TrainingConfig.__dataclass_fields__["cuda_graph_warmup_steps"].default
    steps = {"eager": 0, "compile": 3, "cuda_graph": graph_warmup + 1}.get(mode, 0)
    if trainer.get("max_steps") is not None:
        steps = min(steps, int(trainer["max_steps"]) - 1)
    return max(steps, 0)


def _training_config(
    model_config: ModelConfig,
    values: dict[str, Any],
    trainer: dict[str, Any],
    optimizer: tuple[str, dict[str, Any]],
    data_kwargs: dict[str, Any],
    dims: ParallelDims,
    run_dir: Path,
    resume: str | None,
) -> TrainingConfig:
    try:
        return TrainingConfig(
            model=model_config,
            dataset_builder=values["data"]["builder"],
            dataset_kwargs=data_kwargs,
            input_layout=input_layout(values["data"]),
            epochs=trainer["epochs"],
            batch_size=trainer["batch_size"],
            workers=trainer["workers"],
            scheduler=trainer["scheduler"],
            execution_mode=trainer["execution_mode"],
            memopt_level=trainer["memopt_level"],
            max_steps=trainer["max_steps"],
            checkpoint_interval=trainer["checkpoint_interval"],
            tensor_parallel_size=dims.tensor_parallel_size,
            pipeline_parallel_size=dims.pipeline_parallel_size,
            pipeline_microbatches=dims.pipeline_microbatches,
            data_parallel=dims.data_parallel,
            optimizer=optimizer[0],  # (name, keyword arguments): optimizer_group.checked
            optimizer_kwargs=optimizer[1],
            scheduler_kwargs=trainer["scheduler_kwargs"] or {},
            # trainer=classify has none of the loss keys (its Trainer's own label_smoothing)
            loss_function=trainer.get("loss_function", LIBRARY_LOSS),
            loss_kwargs=dict(trainer.get("loss_kwargs") or {}),
            mixup_alpha=float(trainer.get("mixup_alpha", 0.0)),
            precision=PrecisionConfig(
                mode=trainer["precision"], fp8_recipe=trainer.get("fp8_recipe", "auto")
            ),
            memopt_checkpoint_budget=trainer.get("memopt_checkpoint_budget", "memory"),
            memopt_compress_inputs=bool(trainer.get("memopt_compress_inputs", True)),
            timing_warmup_steps=timing_warmup_steps(trainer),
            checkpoint_dir=run_dir / CHECKPOINT_DIRNAME,
            resume=Path(resume) if resume not in (None, "auto") else None,
            seed=values["seed"],
        )
    except (TypeError, ValueError) as error:  # SpikingJelly's own rules: under our keys
        raise sj_errors.refusal(error, _sj_values(model_config, trainer, dims)) from None


def _sj_values(model_config: ModelConfig, trainer: dict[str, Any], dims: ParallelDims) -> dict:
    """Our keys' values as SpikingJelly's TrainingConfig got them (sj_errors.refusal)."""
    tp, pp = dims.tensor_parallel_size, dims.pipeline_parallel_size
    return {
        "trainer.batch_size": trainer["batch_size"],
        "trainer.precision": trainer["precision"],
        "trainer.execution_mode": trainer["execution_mode"],
        "trainer.memopt_level": trainer["memopt_level"],
        "trainer.memopt_checkpoint_budget": trainer.get("memopt_checkpoint_budget", "memory"),
        "topology.pipeline_microbatches": dims.pipeline_microbatches,
        "topology.pipeline_parallel_size": dims.pipeline_parallel_size,
        "topology.data_parallel": dims.data_parallel,
        "model.step_mode": model_config.step_mode,
        "topology": f"{dims.data_parallel}, tp={tp}, pp={pp}",
        "trainer": f"{dims.describe()}, precision={trainer['precision']}",
    }


def _checked_trainer(values: dict[str, Any]) -> tuple[bool, Any, dict[str, Any]]:
    """(classic, resume, trainer checked): SpikingJelly's classic Trainer (trainer=classify)
    or its train_classification; MMGen's resume keys refused for an SNN."""
    for key in ("resume_from", "load_from"):
        if values.get(key) is not None:
            raise ConfigError(
                key,
                values[key],
                "null: MMGen's resume_from/load_from apply to GAN models; an SNN run resumes "
                "with resume=auto (its own checkpoints) or resume=<checkpoint directory>",
            )
    if classify_plan.is_classify(values["trainer"]):
        classify_plan.check_resume(values.get("resume"), values["trainer"].get("test_only"))
        return True, values.get("resume"), classify_plan.as_default_trainer(values["trainer"])
    return False, _resume(values.get("resume")), snn_trainer.checked(values["trainer"])


def _layout(
    values: dict[str, Any],
    trainer: dict[str, Any],
    world_size: int,
    caps: Any,
    model_name: str,
    classic: bool,
) -> tuple[ParallelDims, dict[str, Any]]:
    """The mesh, and the trainer with a global batch derived over its data-parallel ranks
    (the pipeline's micro-batches then checked against the derived batch)."""
    dims = parallel_dims(values["topology"], world_size, caps, model_name, trainer["batch_size"])
    if not classic and trainer.get("global_batch_size") is not None:
        trainer = {**trainer, **snn_trainer.derive_batch(trainer, dims)}
        dims = parallel_dims(
            values["topology"], world_size, caps, model_name, trainer["batch_size"]
        )
    return dims, trainer


def _engine_and_device(
    classic: bool,
    trainer: dict[str, Any],
    dims: ParallelDims,
    has_cuda: bool,
    launcher: str,
    values: dict[str, Any],
    model_config: Any,
    extensions: list[str],
) -> tuple[str, str]:
    """Which loop trains it on which device, with each loop's own rules checked."""
    if classic:
        classify_plan.check_extension(trainer, extensions)
        return "classify", classify_plan.check_run(
            trainer,
            dims=dims,
            has_cuda=has_cuda,
            launcher=launcher,
            data=values["data"],
            step_mode=model_config.step_mode,
            input_layout=input_layout(values["data"]),
        )
    engine, device = snn_trainer.engine_and_device(trainer, has_cuda, launcher)
    snn_trainer.check_cuda_graph(trainer, dims)
    snn_trainer.check_accumulation(trainer, dims)
    return engine, device


def _check_reshard(
    run_dir: Path,
    extensions: list[str],
    engine: str,
    dims: ParallelDims,
    trainer: dict[str, Any],
    resume: Any,
    model_config: Any,
) -> None:
    """A recorded run continued under another layout: what its checkpoints can be resharded
    to (snn/reshard.py), refused in one line otherwise."""
    from experiments.snn import reshard

    reshard.check(
        run_dir,
        extensions,
        engine,
        dims,
        trainer["batch_size"],
        bool(trainer.get("allow_global_batch_change", False)),
        resume,
        can_resplit=hasattr(model_config.get_builder_cls(), "merge_state_dicts"),
    )


def build_snn_plan(
    cfg: DictConfig,
    values: dict[str, Any],
    run_dir: Path,
    overrides: list[str],
    choices: dict[str, str],
    extensions: list[str],
) -> SNNPlan:
    """The SNN half of `experiments.plan.build_plan`: the keys every family shares are
    already checked."""
    if values["data"].get("name") == "imagefolder" and "root" in values["data"]:
        cfg = _folder_classes(cfg, values["data"])
        values = _resolve(cfg)
    classic, resume, trainer = _checked_trainer(values)
    optimizer = optimizer_group.checked(values["optimizer"])  # (name, keyword arguments)

    data_kwargs, model_config, caps, model_name = _model_on_its_data(cfg, values, choices)

    launcher = values["launcher"]
    module = launcher_module(launcher["name"])
    dims, trainer = _layout(values, trainer, module.world_size(launcher), caps, model_name, classic)
    _check_validation_split(values["data"], dims, trainer["batch_size"])
    if not classic:  # the classic Trainer steps its own lr_scheduler once per epoch
        trainer = schedule.follow_the_run(trainer, values["data"], dims)
    spike_settings = spikes.resolved(spikes.settings(trainer), dims, trainer["batch_size"])

    engine, device = _engine_and_device(
        classic,
        trainer,
        dims,
        module.has_cuda(launcher),
        launcher["name"],
        values,
        model_config,
        extensions,
    )
    training_config = _training_config(  # SpikingJelly's rules, its errors under our keys
        model_config,
        values,
        classify_plan.training_view(trainer) if classic else trainer,
        optimizer,
        data_kwargs,
        dims,
        run_dir,
        resume,
    )
    neuron = _checked_neuron(values["model"], trainer, model_config, caps, device, model_name)
    _check_reshard(run_dir, extensions, engine, dims, trainer, resume, model_config)
    return _with_recipe_card(
        SNNPlan(
            choices=dict(choices),
            run_dir=run_dir,
            overrides=list(overrides),
            model_config=model_config,
            parameters=parameter_count(model_config),
            dims=dims,
            engine=engine,
            device=device,
            backend="nccl" if device == "cuda" else "gloo",
            training_config=training_config,
            launch_command=module.command(launcher, user_overrides(overrides), str(run_dir)),
            launch_notes=launch_notes(launcher, "snn"),
            resume=resume,
            trainer=trainer,
            extensions=extensions,
            spikes=spike_settings,
            neuron=neuron,
            trainer_args=_classic_arguments(
                classic,
                trainer,
                device,
                optimizer,
                values["seed"],
                run_dir,
                model_name,
            ),
        ),
        values,
        classic,
    )


def _model_on_its_data(
    cfg: DictConfig, values: dict[str, Any], choices: dict[str, str]
) -> tuple[dict[str, Any], ModelConfig, Any, str]:
    """The builder's data keys, checked, and the model's config checked against what the
    data gives (channels, input size, classes): with the model's capabilities and name."""
    data_kwargs = data_group.dataset_kwargs(cfg.data)
    _check_data(values["data"])
    model_config = instantiate_model_config(cfg.model)
    caps = capabilities(model_config)
    model_name = choices.get("model", type(model_config).__name__)
    _check_model_against_data(model_config, values["data"], caps, model_name)
    return data_kwargs, model_config, caps, model_name


def _checked_neuron(
    model: dict[str, Any],
    trainer: dict[str, Any],
    model_config: ModelConfig,
    caps: Any,
    device: str,
    model_name: str,
) -> Any:
    """The neuron implementation this device and execution mode run, and memopt only where
    the model has a memopt split."""
    execution = "compile" if trainer.get("execution_mode") == "compile" else "eager"
    neuron = neurons.checked(
        model.get("neuron_implementation", "auto"), model_config, device, execution
    )
    if trainer.get("memopt_level") and not caps.memopt:
        raise ConfigError(
            "trainer.memopt_level", trainer["memopt_level"], f"0: {model_name} has no memopt split"
        )
    return neuron


def _classic_arguments(
    classic: bool,
    trainer: dict[str, Any],
    device: str,
    optimizer: tuple[str, dict[str, Any]],
    seed: int,
    run_dir: Path,
    model_name: str,
) -> list[str]:
    """The classic Trainer's command line (trainer=classify); SpikingJelly's loop has none."""
    if not classic:
        return []
    name, kwargs = optimizer
    return classify_plan.arguments(
        trainer,
        device=device,
        optimizer=name,
        optimizer_kwargs=kwargs,
        seed=seed,
        run_dir=run_dir,
        model=model_name,
    )


def _with_recipe_card(plan: SNNPlan, values: dict[str, Any], classic: bool) -> SNNPlan:
    """A paper's preset (its `paper` node): this run's recipe in the card's fields beside it
    (recipe_card.py). The card reads SpikingJelly's TrainingConfig, which trainer=classify
    only describes."""
    paper = recipe_card.checked_paper(values.get("paper"))
    if paper is not None and not classic:
        plan.paper, plan.card = paper, recipe_card.ours(values, plan)
    return plan
