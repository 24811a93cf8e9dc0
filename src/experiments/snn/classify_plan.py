"""`trainer=classify`, planning side: the classic Trainer's keys, what it can run, its
command line (parsed by its own `get_args_parser()`), and where its checkpoints lie.

Apart from the engine (`snn/engines/classify.py`) because a plan (and `--dry-run`, status,
evaluation's checkpoint look-up) must not pay for importing SpikingJelly's Trainer and
torch's training machinery: the library and torch are imported lazily, inside functions.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError

NAME = "classify"
CHECKPOINTS = "checkpoints"  # <run>/checkpoints: the Trainer's --output-dir
TB_NAME = "classify"  # the Trainer's log-dir name: events in <output>/classify, .pth in pt/classify
LATEST = "checkpoint_latest.pth"
# Our optimizer classes under the Trainer's --opt names (recorded in its args; the optimizer
# itself is built from our group by set_optimizer, with every argument the group gives).
OPT_NAMES = {
    "torch.optim.SGD": "sgd",
    "torch.optim.AdamW": "adamw",
    "torch.optim.RMSprop": "rmsprop",
}
# What the default trainer's keys mean for the shared parts of the plan (TrainingConfig):
# the classic Trainer has no step limit, step-interval checkpoints or memopt.
NEUTRAL_KEYS = {
    "max_steps": None,
    "checkpoint_interval": 0,
    "keep_checkpoints": 1,
    "log_every_n_steps": 1,
    "profile_steps": 0,
    "engine": NAME,
    "memopt_level": 0,
    "scheduler": None,
    "scheduler_kwargs": {},
}


def is_classify(trainer: dict[str, Any]) -> bool:
    return trainer.get("name") == NAME


# --------------------------------------------------------------------------- planning


def as_default_trainer(trainer: dict[str, Any]) -> dict[str, Any]:
    """The trainer dict with the default trainer's keys set to what the Trainer does (for the
    shared plan code); its own keys' types, ranges and rules are its schema's
    (schemas/trainer.py)."""
    return {**trainer, **NEUTRAL_KEYS}


def training_view(trainer: dict[str, Any]) -> dict[str, Any]:
    """The keys SpikingJelly's TrainingConfig (the plan's description of model, data, batch
    and optimizer) takes: the Trainer's AMP and CUDA graphs are its own, not the config's."""
    return {**trainer, "precision": "fp32", "execution_mode": "eager"}


def check_run(
    trainer: dict[str, Any],
    *,
    dims: Any,
    has_cuda: bool,
    launcher: str,
    data: dict[str, Any],
    step_mode: str,
    input_layout: str,
) -> str:
    """What the Trainer can run here; returns the device ("cpu" or "cuda")."""
    if (
        dims.tensor_parallel_size > 1
        or dims.pipeline_parallel_size > 1
        or (dims.data_parallel == "fsdp2" and dims.data_parallel_size > 1)
    ):
        raise ConfigError(
            "topology",
            dims.describe(),
            "single or ddp: the classic Trainer wraps the whole model in DDP; FSDP2, channel TP "
            "and pipeline stages are SpikingJelly's distributed.vision topologies (the default "
            "trainer=default runs them)",
        )
    device = trainer["device"]
    if device == "auto":
        device = "cuda" if has_cuda else "cpu"
    if device == "cuda" and not has_cuda:
        where = "launcher.gpus_per_node is 0" if launcher == "slurm" else "this machine has none"
        raise ConfigError("trainer.device", "cuda", f"cpu or auto: CUDA is needed but {where}")
    if device == "cpu":
        for key, value, default in (
            ("precision", trainer["precision"], "fp32"),
            ("execution_mode", trainer["execution_mode"], "eager"),
        ):
            if value == default or (key == "execution_mode" and value == "compile"):
                continue
            raise ConfigError(
                f"trainer.{key}", value, f"{default} on CPU: the Trainer's {value} needs CUDA"
            )
    if trainer["execution_mode"] == "cuda_graph" and dims.world_size > 1:
        raise ConfigError(
            "trainer.execution_mode",
            "cuda_graph",
            "eager or compile: the Trainer captures CUDA graphs in a single process only",
        )
    if trainer["sync_bn"]:
        if dims.world_size == 1:
            raise ConfigError(
                "trainer.sync_bn",
                True,
                "false on one process: SyncBatchNorm needs DDP ranks (topology=ddp, "
                "launcher=torchrun)",
            )
        if device == "cpu":
            raise ConfigError(
                "trainer.sync_bn",
                True,
                "false on CPU ranks: torch's SyncBatchNorm synchronises CUDA tensors only",
            )
    if step_mode != "m":
        raise ConfigError(
            "model.step_mode",
            step_mode,
            "m: the classic Trainer calls the model once on the whole [T, N, C, H, W] sequence",
        )
    if input_layout != "NCHW":
        for key in ("mixup_alpha", "cutmix_alpha"):
            if trainer[key]:
                raise ConfigError(
                    f"trainer.{key}",
                    trainer[key],
                    f"0: the Trainer's RandomMixup/RandomCutmix take [N, C, H, W] images, and "
                    f"data={data['name']} yields [N, T, C, H, W] sequences",
                )
    return device


def check_extension(trainer: dict[str, Any], extensions: list[str]) -> None:
    """More epochs on a recorded run resume the Trainer's scheduler as saved: a cosine
    schedule has annealed to lr 0 at its old end and would train every added epoch at 0."""
    raised = [e for e in extensions if e.startswith("trainer.epochs:")]
    if raised and trainer["lr_scheduler"] == "cosa":
        raise ConfigError(
            "trainer.epochs",
            trainer["epochs"],
            f"the recorded epochs ({raised[0].split(': ', 1)[1]}): the Trainer resumes its "
            "cosine schedule as saved, which ended at lr 0; train a new run (another "
            "hydra.run.dir), or extend a run trained with trainer.lr_scheduler=step or exp",
        )


# trainer keys passed as --key-name=value, in the command line's order
PASSED_AS_GIVEN = (
    "label_smoothing",
    "mixup_alpha",
    "cutmix_alpha",
    "lr_scheduler",
    "lr_warmup_epochs",
    "lr_warmup_method",
    "lr_warmup_decay",
    "lr_step_size",
    "lr_gamma",
    "model_ema_steps",
    "model_ema_decay",
    "execution_mode",
)
PASSED_UNLESS_NULL = ("norm_weight_decay", "clip_grad_norm")


def arguments(
    trainer: dict[str, Any],
    *,
    device: str,
    optimizer: str,
    optimizer_kwargs: dict[str, Any],
    seed: int,
    run_dir: Path,
    model: str,
) -> list[str]:
    """The Trainer's command line for this run. Parsed here by its own parser, so an argument
    it would refuse is a ConfigError before launch. `--resume` is added at run time (which
    checkpoint exists then)."""

    def passed(*keys: str) -> list[str]:
        return [f"--{key.replace('_', '-')}={trainer[key]}" for key in keys]

    argv = [
        f"--model={model}",
        f"--device={device}",
        *passed("batch_size", "epochs", "workers"),
        f"--opt={OPT_NAMES.get(optimizer, optimizer.rsplit('.', 1)[-1].lower())}",
        f"--lr={optimizer_kwargs['lr']}",
        f"--momentum={optimizer_kwargs.get('momentum', 0.0)}",
        f"--weight-decay={optimizer_kwargs.get('weight_decay', 0.0)}",
        *passed(*PASSED_AS_GIVEN),
        f"--seed={seed}",
        f"--output-dir={run_dir / CHECKPOINTS}",
    ]
    argv += passed(*(key for key in PASSED_UNLESS_NULL if trainer[key] is not None))
    flags = {
        "--model-ema": trainer["model_ema"],
        "--sync-bn": trainer["sync_bn"],
        "--test-only": trainer["test_only"],
        "--disable-amp": trainer["precision"] != "amp",
        "--disable-uda": not trainer["deterministic"],
        "--disable-pinmemory": device == "cpu",  # nothing to pin on CPU ranks
    }
    argv += [flag for flag, on in flags.items() if on]
    parse_arguments(argv)
    return argv


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    from spikingjelly.activation_based.examples.common import train_classify

    parser = train_classify.Trainer().get_args_parser(add_help=False)
    parser.exit_on_error = False
    try:
        return parser.parse_args(argv)
    except (argparse.ArgumentError, SystemExit) as error:
        raise ConfigError(
            "trainer", " ".join(argv), f"the Trainer's get_args_parser() rejects it: {error}"
        ) from None


def check_resume(value: Any, test_only: Any) -> None:
    """resume=<path>: a .pth the Trainer wrote, or a run / checkpoints directory holding one.
    test_only evaluates such a checkpoint: without one it would score a random model."""
    if value is None or value == "auto":
        if test_only is True:
            raise ConfigError(
                "resume",
                value,
                "a trained checkpoint with trainer.test_only=true, e.g. resume=<run dir> of a "
                "trainer=classify run (test_only evaluates it instead of training)",
            )
        return
    if not isinstance(value, str) or resume_file(Path(value)) is None:
        raise ConfigError(
            "resume",
            value,
            f"auto, null, or a checkpoint of trainer=classify (<run>/{CHECKPOINTS}/pt/"
            f"{TB_NAME}/{LATEST}, or its run directory)",
        )


def checkpoint_dir(run_dir: Path) -> Path:
    """Where the Trainer writes its .pth files (its `pt_dir` for our --output-dir)."""
    return run_dir / CHECKPOINTS / "pt" / TB_NAME


def resume_file(path: Path) -> Path | None:
    if path.is_file():
        return path
    for candidate in (path / LATEST, path / "pt" / TB_NAME / LATEST, checkpoint_dir(path) / LATEST):
        if candidate.is_file():
            return candidate
    return None


# --------------------------------------------------------------------------- checkpoints


def load_checkpoint(path: Path | str) -> tuple[dict[str, Any], int]:
    """(model state dict, optimizer step) of a checkpoint this engine wrote, for evaluation.

    `path`: a .pth file, or a run / checkpoints directory (its checkpoint_latest.pth). The
    state dict is `checkpoint["model"]`, the unwrapped model's own (keys as the ModelConfig's
    builder names them; DDP's `module.` never appears). The step is the number of optimizer
    steps trained when it was saved: (epoch + 1) x steps per epoch (recorded in its args)."""

    found = resume_file(Path(path))
    if found is None:
        raise FileNotFoundError(f"no {LATEST} (or .pth file) at {path}")
    checkpoint = _torch_load(found)
    steps = int(getattr(checkpoint["args"], "steps_per_epoch", 0) or 0)
    return checkpoint["model"], (int(checkpoint["epoch"]) + 1) * steps


def _torch_load(path: Path) -> dict[str, Any]:
    """torch's weights-only load, letting through the argparse.Namespace the Trainer stores."""
    import torch

    with torch.serialization.safe_globals([argparse.Namespace]):
        return torch.load(path, map_location="cpu", weights_only=True)
