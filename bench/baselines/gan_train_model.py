"""Baseline for bench/gan_overhead.py: MMGen's own `train_model` called directly on the exact
config our run handed it (<run dir>/mmgen_config.py), with only a timing hook added that
records (iteration, time.time()) every --log-every iterations and at the last one, as our
record hook does (same priority). Same seed, same torch thread count (torch's default)."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import mmcv
from mmcv.runner import HOOKS, Hook

# The PyPI mmgen 0.7.x releases lack mmgen/models/architectures/stylegan/ada/, which
# stylegan's v2 module imports; without this import hook `import mmgen.models` (and so
# mmgen.apis) fails with ModuleNotFoundError. It only supplies that missing package.
from experiments.gan.mmgen_compat import install_ada_stub

install_ada_stub()

from mmgen.apis import set_random_seed, train_model  # noqa: E402
from mmgen.datasets import build_dataset  # noqa: E402
from mmgen.models import build_model  # noqa: E402
from mmgen.utils import get_root_logger  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True, help="mmgen_config.py dumped by our run")
parser.add_argument("--log-every", type=int, required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()

TIMES: list[tuple[int, float]] = []


@HOOKS.register_module()
class BenchTimingHook(Hook):
    def __init__(self, interval: int) -> None:
        self.interval = interval

    def after_train_iter(self, runner) -> None:  # type: ignore[no-untyped-def]
        done = runner.iter + 1  # mmcv counts the iteration after its hooks
        if done % self.interval == 0 or done == runner.max_iters:
            TIMES.append((done, time.time()))


cfg = mmcv.Config.fromfile(args.config)
with tempfile.TemporaryDirectory() as work_dir:
    cfg.work_dir = work_dir
    cfg.custom_hooks = [
        *cfg.custom_hooks,
        dict(type="BenchTimingHook", interval=args.log_every, priority="VERY_LOW"),
    ]
    timestamp = time.strftime("%Y%m%d_%H%M%S")
    get_root_logger(log_file=str(Path(work_dir) / f"{timestamp}.log"), log_level=cfg.log_level)
    set_random_seed(cfg.seed, use_rank_shift=False)
    model = build_model(cfg.model, train_cfg=cfg.train_cfg, test_cfg=cfg.test_cfg)
    dataset = build_dataset(cfg.data.train)
    meta = dict(seed=cfg.seed, exp_name=Path(work_dir).name)
    train_model(
        model, dataset, cfg, distributed=False, validate=False, timestamp=timestamp, meta=meta
    )
with open(args.out, "w") as handle:
    json.dump(TIMES, handle)
