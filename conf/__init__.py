"""Config groups, installed as the package experiments.conf so Hydra finds them anywhere."""
