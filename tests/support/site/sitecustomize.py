"""Test-only fault injection. Python imports this module at start-up when a test puts this
folder on a child's PYTHONPATH; the package itself reads no fault switch.

EXPERIMENTS_TEST_KILL_DURING_SAVE=N: the process SIGKILLs itself while saving the step-N
checkpoint, after its shard is on disk in the hidden `.step_N.partial` folder and before the
checkpoint is sealed (meta.json, rename): a crash in the middle of a save.
"""

import os

_KILL_DURING_SAVE = os.environ.get("EXPERIMENTS_TEST_KILL_DURING_SAVE")


def _kill_during_save(kill_step: int) -> None:
    import functools
    import signal
    from pathlib import Path

    from experiments.run import checkpoint

    original = checkpoint.save

    @functools.wraps(original)
    def save(root, step, state, meta, *, barrier, shard, **kwargs):
        if step != kill_step:
            return original(root, step, state, meta, barrier=barrier, shard=shard, **kwargs)
        written = Path(root) / f".{checkpoint.step_dir(root, step).name}.partial" / shard

        def barrier_or_die() -> None:
            # The first barrier after this rank's shard landed in the partial folder: the
            # checkpoint is half written and not sealed.
            if written.is_file():
                os.kill(os.getpid(), signal.SIGKILL)
            barrier()

        return original(root, step, state, meta, barrier=barrier_or_die, shard=shard, **kwargs)

    checkpoint.save = save


if _KILL_DURING_SAVE:
    _kill_during_save(int(_KILL_DURING_SAVE))
