"""Baseline for bench/snn_overhead.py: the loop a user would write by hand around
SpikingJelly's builder, with the same model, data, batch, optimizer and logging interval."""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from spikingjelly.activation_based import functional
from torch.utils.data import DataLoader

from experiments.data.synthetic import build_synthetic_datasets
from experiments.snn.models.sew_resnet import SEWResNetBuilder, SEWResNetConfig

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--time-steps", type=int, default=2)
parser.add_argument("--image-size", type=int, default=16)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--out", required=True)
args = parser.parse_args()

torch.manual_seed(1234)
config = SEWResNetConfig(
    depth=18, num_classes=10, image_size=args.image_size, time_steps=args.time_steps
)
model = SEWResNetBuilder(config).build(
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
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
train, _ = build_synthetic_datasets(image_size=args.image_size, train_size=4096, val_size=64)
loader = DataLoader(train, batch_size=args.batch_size, shuffle=True)
times = []
model.train()
for step, (images, targets) in enumerate(loader, start=1):
    sequence = images.unsqueeze(0).repeat(args.time_steps, 1, 1, 1, 1)
    loss = F.cross_entropy(model(sequence).mean(0), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    functional.reset_net(model)
    loss.item()
    if step % args.log_every == 0:
        times.append((step, time.time()))
    if step == args.steps:
        break
with open(args.out, "w") as handle:
    json.dump(times, handle)
