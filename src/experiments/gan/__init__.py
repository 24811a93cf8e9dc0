"""The GAN family: MMGeneration recipes (`recipes.py`), the plan that checks a GAN run
(`plan.py`), the engine around MMGen's train_model (`engine.py`), its quality metrics
(`quality.py`), the shims MMGen 0.7.3 needs on this torch (`mmgen_compat.py`), and
`family.py`, what the shared code knows of it (experiments/families.py)."""

import logging

# mmcv imports torch.utils.cpp_extension, which logs "No CUDA runtime is found, using
# CUDA_HOME=..." on every CPU machine: noise ahead of a refusal's one line (GAN CLIs read
# the recipe through mmcv before they can refuse). A CUDA build's real errors still show.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
