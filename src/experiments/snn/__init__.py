"""The SNN family: SpikingJelly models (`models/`), the plan that checks an SNN run
(`plan.py`; the classic Trainer's part in `classify_plan.py`), the engines that train it
(`engines/`), and `family.py`, what the shared code knows of it (experiments/families.py)."""

from experiments.snn import hub_import

hub_import.install()  # before any SpikingJelly zoo module is imported (snn/hub_import.py)
