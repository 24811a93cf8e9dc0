"""The GAN family: MMGeneration recipes (`recipes.py`), the plan that checks a GAN run
(`plan.py`), the engine around MMGen's train_model (`engine.py`) and the shims MMGen 0.7.3
needs on this torch (`mmgen_compat.py`)."""
