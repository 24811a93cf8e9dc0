"""SpikingJelly's `train_classification` on CPU ranks over gloo, unmodified on disk.

`distributed/vision/training.py` (SpikingJelly 2.0.0) asks for CUDA in a handful of places
(listed below). Inside our rank processes only, and only while the library's
loop runs, those names are mapped to their CPU equivalents:

- the module's own `torch` name becomes a view of torch (`view_of_torch`) whose `cuda`
  answers for the CPU: `is_available()` is True, `set_device` / `synchronize` /
  `reset_peak_memory_stats` do nothing, the "CUDA" RNG state is the CPU generator's (saved
  and restored with the same value), peak memory is 0 (our summary reads the process's
  peak RSS instead); `torch.device("cuda", i)` is the CPU device; `GradScaler("cuda")` is
  a CPU scaler (disabled, as the library asks for in fp32);
- `init_device_mesh("cuda", ...)` builds the same mesh on "cpu";
- DDP gets `device_ids=None` (the library passes `[device.index]`, i.e. `[None]` on a CPU
  device, which DDP refuses);
- pipeline stages infer their boundary shapes at run time: with the static
  `input_args`/`output_args` the library passes, gloo delivers `None` output gradients to
  stage 0 (measured with torch 2.14.1). The shapes are the same; only who states them differs.

The process group itself (gloo here, NCCL on CUDA) is initialised by the engine before the
library's loop starts (engines/spikingjelly.py), so the library neither creates nor destroys
it. Everything is restored on exit.
"""

from __future__ import annotations

import contextlib
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

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
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
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


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


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
    """A CPU rank's allocator keeps the memory a training step frees for the next step,
    instead of handing it back to the system and faulting it in again: glibc's mmap threshold
    fixed at its ceiling (32 MB) and its trim threshold at 1 GB. The process's peak memory is
    unchanged; what changes is that memory stays mapped between steps.

    Why: measured on this project's 2-core x86_64 machines (torch 2.14.1, SEW-ResNet34, T=2,
    32 px, batch 8), SpikingJelly's loop in a fresh process took 28,000 minor page faults a
    step (a hand-written loop 4,600) and 0.211 s a step; with these two settings, 0 faults and
    0.178 s (BENCHMARKS.md). PyTorch's CPU tuning guide gives the same advice (an allocator that
    reuses memory). Only glibc is tuned (where `mallopt` exists); elsewhere nothing changes."""
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

    ddp = torch.nn.parallel.DistributedDataParallel

    class CPUDistributedDataParallel(ddp):  # type: ignore[misc, valid-type]
        """DDP of a CPU module takes no device_ids; the library passes [device.index]."""

        def __init__(self, module: Any, device_ids: Any = None, *rest: Any, **kwargs: Any):
            if device_ids == [None]:
                device_ids = None
            super().__init__(module, device_ids, *rest, **kwargs)

    with contextlib.ExitStack() as stack:
        stack.enter_context(
            _patched(device_mesh, "init_device_mesh", _mesh_on_cpu(device_mesh.init_device_mesh))
        )
        stack.enter_context(
            _patched(
                pipelining, "PipelineStage", _stage_with_inferred_shapes(pipelining.PipelineStage)
            )
        )
        stack.enter_context(
            _patched(torch.nn.parallel, "DistributedDataParallel", CPUDistributedDataParallel)
        )
        yield
