"""GAN quality metrics: MMGen's SWD and MS-SSIM of a generator against the run's images.

Apart from engine.py because three phases measure with them: training (after training, and
before it with model.eval_untrained=true), evaluate.py (a saved checkpoint) and sample.py
(the same seeding); evaluate and sample must not import the training engine (its MMGen
runner, DDP and hook machinery) to get them.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from experiments.gan import conditional


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Draws from torch, NumPy and random seeded with `seed`, and every generator's state as
    it was afterwards: an evaluation before training leaves the training's draws unchanged."""
    states = (np.random.get_state(), random.getstate())
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(states[0])
            random.setstate(states[1])


@torch.no_grad()
def quality(model: Any, dataset: Any, plan: Any) -> dict[str, Any]:
    """MMGen's SWD (generated vs the run's images; x1e3, lower is better) and MS-SSIM of
    generated pairs (diversity; lower is more diverse), computed without any download.
    Seeded (the same images, noise, patches and directions for every call of a run), so two
    generators of one run are compared on equal terms."""
    with seeded(plan.seed):
        return _quality(model, dataset, plan)


def _quality(model: Any, dataset: Any, plan: Any) -> dict[str, Any]:
    from mmgen.core.evaluation.metrics import MS_SSIM, SWD

    count = min(plan.recipe.eval_images, len(dataset)) // 2 * 2
    if count < 2:
        return {}
    order = torch.randperm(len(dataset))[:count].tolist()
    key = "img" if conditional.num_classes(model) else "real_img"  # MMGen's batch keys
    reals = torch.stack([dataset[i][key] for i in order])
    sampling = conditional.sample_kwargs(model)  # the EMA generator's, where there is one
    fakes = torch.cat(
        [
            model(None, num_batches=min(256, count - start), return_loss=False, **sampling)
            for start in range(0, count, 256)
        ]
    )
    if reals.shape[1] == 1:  # SWD's Laplacian pyramid is defined on 3 channels
        reals, fakes = reals.repeat(1, 3, 1, 1), fakes.repeat(1, 3, 1, 1)
    result: dict[str, Any] = {"eval_images": count}
    if plan.recipe.scale >= 16:
        swd = SWD(num_images=count, image_shape=tuple(reals.shape[1:]))
        swd.prepare()
        swd.feed(reals, "reals")
        swd.feed(fakes, "fakes")
        levels = [float(x) for x in swd.summary()]
        result.update(swd=levels[-1], swd_per_level=levels[:-1])
    for name, images in (("ms_ssim", fakes), ("ms_ssim_real", reals)):
        metric = MS_SSIM(num_images=count)
        metric.prepare()
        metric.feed(images, "reals")  # MS_SSIM scores one set; this only fills its count
        metric.feed(images, "fakes")
        result[name] = float(metric.summary())
    return result
