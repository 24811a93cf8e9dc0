"""SNN engines, one module each, named in snn/family.py: `cpu` (ours, over SpikingJelly's
builders and config objects), `spikingjelly` (its own train_classification: CUDA + NCCL on
GPUs, CPU ranks over gloo elsewhere, its CUDA-only calls mapped in our processes) and
`classify` (its classic train_classify.Trainer). Each has `train(plan, recorder)`."""
