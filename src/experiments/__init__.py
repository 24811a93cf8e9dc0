"""Compose, validate, launch and record SpikingJelly and MMGeneration runs."""

from omegaconf import OmegaConf

__version__ = "0.1.0"


def _null_if_zero(value: object) -> object:
    # sbatch must not see --gpus-per-node=0 on a CPU partition: unset means "no GPUs".
    return None if value in (0, "0", None) else value


def _log_name(job_name: str) -> str:
    from experiments import distributed_env

    return f"{job_name}_rank{distributed_env.rank()}" if distributed_env.is_worker() else job_name


OmegaConf.register_new_resolver("experiments.null_if_zero", _null_if_zero, replace=True)
OmegaConf.register_new_resolver("experiments.log_name", _log_name, replace=True)
