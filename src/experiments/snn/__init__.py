"""The SNN family: SpikingJelly models (`models/`), the plan that checks an SNN run
(`plan.py`), and the engines that train it (`engines/`)."""
