"""bench/gpu_check works (issue #25 item 5): its CPU rehearsal runs the GPU check's whole
list at tiny size, with the real console scripts, and writes the report a GPU run writes.

What only CUDA shows (bf16, compile, CUDA graphs) must be reported as skipped, never ok; the
rest must pass at its CPU equivalent: SpikingJelly's own loop (main job, resume from its own
checkpoint, experiments-eval of its checkpoint), the classic Trainer, a dcgan run with
experiments-eval and experiments-sample, the one-rank DDP GAN under torchrun (gloo for NCCL),
and both throughput paths (experiments-train vs train_classification called directly)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import gpu_check

from .conftest import MAX_TIMEOUT, REPO, cli_env, plan_for
from .support import processes

pytestmark = [pytest.mark.slow, pytest.mark.gan]

CUDA_ONLY = {"bf16", "compile", "cuda_graph", "classify_sync_bn"}
CUDA_ONLY |= {f"neuron_{name}" for name in ("cuda", "triton", "torch")}  # kernels, memopt:
CUDA_ONLY |= {f"memopt_{level}" for level in (1, 2, 3, 4)}  # GPU figures only


@pytest.fixture(scope="module")
def rehearsal(module_tmp: Callable[[str], Path]) -> tuple[Path, dict]:
    out = module_tmp("gpu_check")
    proc = processes.run(  # the whole tree dies with the test, on timeout too
        [sys.executable, "-m", "bench.gpu_check", "--out", str(out), "--cpu-rehearsal"],
        cwd=REPO,
        env=cli_env(),
        timeout=MAX_TIMEOUT,
    )
    report = json.loads((out / "gpu_check.json").read_text())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, report


def test_rehearsal_runs_every_check_and_skips_only_cuda_features(rehearsal):
    out, report = rehearsal
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == [c.name for c in gpu_check.CHECKS]
    assert report["mode"] == "cpu-rehearsal"
    for name, check in checks.items():
        assert set(check) >= {"name", "ok", "seconds", "figures"}
        if name in CUDA_ONLY:
            assert check["ok"] is False and check["skipped"].startswith("needs CUDA"), check
        else:
            assert check["ok"] is True, check
    table = (out / "gpu_check.md").read_text()
    assert "| check | ok | seconds | figures |" in table
    assert all(f"| {name} |" in table for name in checks)


def test_rehearsal_figures_show_the_paths_it_took(rehearsal):
    _, report = rehearsal
    checks = {c["name"]: c["figures"] for c in report["checks"]}
    assert checks["main_job"]["engine"] == "spikingjelly"
    assert checks["main_job"]["device"] == "cpu"
    resume = checks["resume"]
    assert resume["resumed_from"] and resume["steps"] > resume["steps_before"]
    assert checks["classify_amp"]["engine"] == "classify"
    assert list(checks["gan_ddp_torchrun"]) == ["dynamic"]  # static: test_gan_distributed
    for mode in ("dynamic",):
        gan = checks["gan_ddp_torchrun"][mode]
        assert gan["ddp"] == mode and gan["world_size"] == 1 and gan["backend"] == "gloo"
        assert gan["replica_max_diff"] == 0.0
    assert checks["eval_snn"]["eval_val_accuracy"] is not None
    assert checks["sample_gan"]["bytes"] > 0
    for name in ("throughput_sew_resnet34", "throughput_spikformer_s"):
        figures = checks[name]
        assert figures["engine"] == "spikingjelly"
        assert figures["ours_images_per_second"] > 0 and figures["direct_images_per_second"] > 0
        assert figures["ratio"] == pytest.approx(
            figures["ours_images_per_second"] / figures["direct_images_per_second"], rel=1e-2
        )


def test_without_cuda_the_gpu_check_refuses_in_one_line(tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--cpu-rehearsal" in err
    assert not (tmp_path / "gpu_check.json").exists()
    assert gpu_check.main(["--out", str(tmp_path), "--cpu-rehearsal", "--only", "nope"]) == 2
    assert "--only nope: not a check" in capsys.readouterr().err


def test_the_cuda_command_lines_plan_here_or_are_refused_for_cuda_only(tmp_path):
    """Every experiments-train command line the check runs on CUDA composes and plans on
    this machine, except where validation refuses a CUDA feature (and says so): a typo in a
    line only a GPU runs would otherwise first show on the GPU."""
    from experiments.errors import ConfigError

    lines = gpu_check.command_lines(gpu_check.Context(out=tmp_path, cuda=True, gpus=2))
    refused = {}
    for name, args in lines.items():
        try:
            plan_for(args, run_dir=str(tmp_path / name))
        except ConfigError as error:
            refused[name] = str(error)
    assert all("cuda" in message.lower() for message in refused.values()), refused
    assert set(refused) >= {"bf16", "cuda_graph", "classify_amp", "classify_sync_bn"}
    # a pinned CUDA kernel and memopt need CUDA here; SpikingJelly's torch kernel does not
    assert set(refused) >= {"neuron_cuda", "neuron_triton", *(f"memopt_{n}" for n in range(1, 5))}
    planned = set(lines) - set(refused)
    assert planned >= {"main_job", "resume", "dcgan", "gan_ddp_dynamic", "gan_ddp_static"}
    assert "neuron_torch" in planned
