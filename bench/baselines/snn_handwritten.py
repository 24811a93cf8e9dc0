"""Baseline for bench/snn_overhead.py: the loop a user would write by hand around
SpikingJelly's builder, with the same model, data loading, batch, optimizer, seed and logging
interval as the `experiments-train` run it is compared with.

Same data loading: SpikingJelly's own loaders for the run's TrainingConfig (the synthetic
builder of conf/data/synthetic.yaml, its DistributedSampler and DataLoader), so that only the
framework differs. At every `--log-every` steps the loss is read (a host sync, as a logged
step's is) and the time recorded.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from spikingjelly.activation_based import functional
from spikingjelly.activation_based.distributed.vision import TrainingConfig
from spikingjelly.activation_based.distributed.vision import training as sj_training
from spikingjelly.activation_based.precision import PrecisionConfig

from experiments.snn.models.sew_resnet import SEWResNetConfig

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--depth", type=int, default=34)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--time-steps", type=int, default=2)
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--train-size", type=int, default=4096)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--seed", type=int, default=1234)
parser.add_argument("--out", required=True)
args = parser.parse_args()

# The model config conf/model/sew_resnet<depth>.yaml composes: SpikingJelly's own config class
# for depth 34, ours (experiments.snn.models.sew_resnet) for 18.
if args.depth == 34:
    from spikingjelly.activation_based.model.sew_resnet import SEWResNet34Config

    model_config = SEWResNet34Config(
        num_classes=10,
        image_size=args.image_size,
        time_steps=args.time_steps,
        tau=2.0,
        detach_reset=True,
    )
else:
    model_config = SEWResNetConfig(
        depth=args.depth, num_classes=10, image_size=args.image_size, time_steps=args.time_steps
    )
config = TrainingConfig(
    model=model_config,
    dataset_builder="experiments.data.synthetic.build_synthetic_datasets",
    dataset_kwargs={
        "num_classes": 10,
        "image_size": args.image_size,
        "train_size": args.train_size,
        "val_size": 64,
    },
    batch_size=args.batch_size,
    workers=0,  # trainer.workers' default: the data loaded in the training process
    optimizer="torch.optim.AdamW",
    optimizer_kwargs={"lr": 1e-3, "weight_decay": 0.0},
    precision=PrecisionConfig(mode="fp32"),
    epochs=1,
    seed=args.seed,
)
torch.manual_seed(config.seed)
model = model_config.get_builder_cls()(model_config).build(
    process_group=None,
    memopt_process_group=None,
    pipeline_rank=0,
    pipeline_size=1,
    pipeline_microbatches=1,
    device=torch.device("cpu"),
    micro_batch_size=args.batch_size,
    memopt_level=0,
    memopt_compress_inputs=False,
    memopt_checkpoint_budget="memory",
)[0]
functional.set_step_mode(model, "m")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
loader, _, sampler, _ = sj_training._build_loaders(config, dp_size=1, dp_rank=0)
sampler.set_epoch(0)
times = []
model.train()
for step, (images, targets) in enumerate(loader, start=1):
    sequence = images.unsqueeze(0).expand(args.time_steps, *images.shape).contiguous()
    loss = F.cross_entropy(model(sequence).mean(0), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    functional.reset_net(model)
    if step % args.log_every == 0:
        loss.item()
        times.append((step, time.time()))
    if step == args.steps:
        break
with open(args.out, "w") as handle:
    json.dump(times, handle)
