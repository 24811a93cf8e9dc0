"""What a process that plans a SEW-ResNet run imports: neither torchvision nor torch._dynamo.

Every launching CLI (torchrun, Slurm, a sweep), and every rank and Slurm task before it trains,
plans the run. SpikingJelly's zoo modules import torchvision for torch.hub's
`load_state_dict_from_url` (snn/hub_import.py maps it in process), and counting parameters on
the meta device would run torch's Python reference kernels for the random init, which import
torch._dynamo (snn/models/__init__.py skips that init). Together 1.5-1.9 s of CPU per
launching process, measured idle on 2 cores (2026-12-04): a torchrun dry run 3.9 s -> 2.1 s.

Meanwhile Python's garbage collector makes no full collection: our package raises its first
threshold as it is imported (src/experiments/garbage_collection.py; the engines restore it when
the library's loop starts, tests/support/gc_records.py).
"""

from __future__ import annotations

import json
import sys

from experiments import garbage_collection

from .support import processes

# A fresh interpreter: the test process itself has imported torchvision long ago.
PROBE = r"""
import gc, json, sys
pythons = gc.get_threshold()
import experiments  # as every console script and `python -m experiments.train` starts
full_collections = gc.get_stats()[2]["collections"]
from hydra import compose, initialize_config_module
from experiments.plan import build_plan

overrides = ["model=sew_resnet18", "topology=ddp", "launcher=torchrun",
             "launcher.nproc_per_node=2"]
with initialize_config_module("experiments.conf", version_base="1.3"):
    cfg = compose("train", overrides=overrides, return_hydra_config=True)
from hydra.core.hydra_config import HydraConfig
HydraConfig.instance().set_config(cfg)
plan = build_plan(cfg, "/tmp/experiments-probe", overrides, dict(cfg.hydra.runtime.choices))
planned = {name: name in sys.modules for name in ("torchvision", "torch._dynamo")}
collector = {
    "pythons": pythons,
    "planning": gc.get_threshold(),
    "full_collections": gc.get_stats()[2]["collections"] - full_collections,
    "torch": "torch" in sys.modules,
}

# The count on the meta device (random init skipped) is the count of the model built on CPU.
builder = plan.model_config.get_builder_cls()(plan.model_config)
built = sum(p.numel() for p in builder._build_canonical_model().parameters())

# torchvision imports for real afterwards, and SpikingJelly's name is the one it re-exports.
import torch.hub
import torchvision
import torchvision._internally_replaced_utils as replaced
from spikingjelly.activation_based.model import sew_resnet, spiking_resnet, spiking_vgg
print(json.dumps({
    "planned": planned,
    "collector": collector,
    "parameters": plan.parameters,
    "built": built,
    "real_torchvision": hasattr(torchvision, "datasets") and hasattr(torchvision, "ops"),
    "same_function": [
        m.load_state_dict_from_url is replaced.load_state_dict_from_url
        is torch.hub.load_state_dict_from_url
        for m in (sew_resnet, spiking_resnet, spiking_vgg)
    ],
}))
"""


def test_planning_a_sew_resnet_imports_no_torchvision_nor_dynamo_nor_collects_fully() -> None:
    result = processes.run([sys.executable, "-c", PROBE], timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["planned"] == {"torchvision": False, "torch._dynamo": False}, seen
    # Planning imported torch without one full collection of the garbage collector: the first
    # threshold raised while the process starts, the older generations' Python's own.
    collector = seen["collector"]
    assert collector["torch"] and collector["full_collections"] == 0, collector
    assert collector["pythons"] == [700, 10, 10], collector
    assert collector["planning"] == [garbage_collection.START_UP_THRESHOLD, 10, 10], collector
    assert seen["parameters"] == seen["built"] == 11_181_642
    assert seen["real_torchvision"]
    assert seen["same_function"] == [True, True, True]
