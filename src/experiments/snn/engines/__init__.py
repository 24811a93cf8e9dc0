"""SNN engines: `cpu` (ours, over SpikingJelly's builders) and `spikingjelly` (its
train_classification, CUDA + NCCL)."""
