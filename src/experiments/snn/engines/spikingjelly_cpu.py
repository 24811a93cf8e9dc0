"""SpikingJelly's `train_classification` on CPU ranks over gloo, unmodified on disk.

`distributed/vision/training.py` (SpikingJelly 2.0.0) asks for CUDA in a handful of places;
inside our rank processes only, while its loop runs, those names answer for the CPU.
Pipeline stages infer their boundary shapes at run time because with the static
`input_args`/`output_args` the library passes, gloo delivers `None` output gradients to
stage 0 (measured with torch 2.14.1). DDP gets `device_ids=None`: the library passes
`[None]` on a CPU device, which DDP refuses.
"""

from __future__ import annotations

import contextlib
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch

CPU = torch.device("cpu")
# The library's loaders always ask for pinned memory; there is nothing to pin on a CPU rank.
warnings.filterwarnings("ignore", message=".*'pin_memory' argument is set as true.*")


class CudaOnCPU:
    """`torch.cuda` as the library's loop uses it, answered for a CPU rank."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def set_device(device: Any = None) -> None:
        """The rank's device is the CPU already."""

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """CPU work is done when the call returns: nothing to wait for."""

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        """No CUDA allocator on a CPU rank: no peak to reset."""

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        """No CUDA allocator on a CPU rank: the loop's memory line reads 0."""
        return 0

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"torch.cuda.{name} has no CPU mapping (SpikingJelly's loop called it on a CPU "
            "rank; experiments/snn/engines/spikingjelly_cpu.py maps the calls it makes)"
        )


def _cpu_device(*args: Any, **kwargs: Any) -> torch.device:
    if args and isinstance(args[0], str) and args[0].startswith("cuda"):
        return CPU
    return torch.device(*args, **kwargs)


class _AmpOnCPU:
    """`torch.amp` whose GradScaler("cuda", ...) is a CPU scaler."""

    @staticmethod
    def GradScaler(device: str = "cuda", **kwargs: Any) -> torch.amp.GradScaler:
        return torch.amp.GradScaler("cpu" if device == "cuda" else device, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.amp, name)


class TorchView(types.SimpleNamespace):
    """torch, with some attributes answered otherwise (the library module's `torch` name)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def view_of_torch(cuda: Any, on_cpu: bool) -> TorchView:
    """The `torch` the library's module sees: `cuda` as given (the CPU mapping, or the real
    one wrapped for our step hook); on CPU also `device` and `amp` mapped."""
    if on_cpu:
        return TorchView(cuda=cuda, device=_cpu_device, amp=_AmpOnCPU())
    return TorchView(cuda=cuda)


class CPUDistributedDataParallel(torch.nn.parallel.DistributedDataParallel):
    """DDP of a CPU module takes no device_ids; SpikingJelly's loop passes [device.index] and
    the classic Trainer [args.gpu], both [None] on CPU ranks."""

    def __init__(self, module: Any, device_ids: Any = None, *rest: Any, **kwargs: Any):
        if device_ids == [None]:
            device_ids = None
        super().__init__(module, device_ids, *rest, **kwargs)


def _mesh_on_cpu(original: Callable[..., Any]) -> Callable[..., Any]:
    def init_device_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
        return original("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    return init_device_mesh


def _stage_with_inferred_shapes(original: Callable[..., Any]) -> Callable[..., Any]:
    def pipeline_stage(*args: Any, input_args: Any = None, output_args: Any = None, **kw: Any):
        return original(*args, **kw)

    return pipeline_stage


# glibc's mallopt parameters (malloc.h): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold
TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Keep the memory a CPU training step frees mapped for the next step (glibc only): without
    it SpikingJelly's loop took 28,000 page faults and 0.211 s a step, with it 0 and 0.178 s
    (BENCHMARKS.md)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):
        return False
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


@contextlib.contextmanager
def cpu_mapping() -> Iterator[None]:
    """The global names the library's loop looks up at call time, mapped for CPU ranks.
    (Its module's own `torch` name is replaced by the engine: `view_of_torch`.)"""
    import torch.distributed.device_mesh as device_mesh
    import torch.distributed.pipelining as pipelining

    with (
        mock.patch.object(
            device_mesh, "init_device_mesh", _mesh_on_cpu(device_mesh.init_device_mesh)
        ),
        mock.patch.object(
            pipelining, "PipelineStage", _stage_with_inferred_shapes(pipelining.PipelineStage)
        ),
        mock.patch.object(torch.nn.parallel, "DistributedDataParallel", CPUDistributedDataParallel),
    ):
        yield
