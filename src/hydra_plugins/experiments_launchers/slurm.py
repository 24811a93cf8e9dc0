"""hydra-submitit-launcher's Slurm launcher as a Hydra plugin (Hydra instantiates launchers
only from the hydra_plugins namespace), with each job's end read as that point's outcome.

The upstream launcher returns `[job.results()[0] for job in jobs]`: one job that fails (a rank
that died, a task killed by the time limit, a run that stopped without a requeue left) raises
in the login process with a traceback, and the other points' results are lost. Here a job's
end is recorded in its run directory (experiments.launchers.slurm_jobs) and the sweep goes on;
its exit status is decided by the report, as for a local sweep. Hydra imports this module at
every start-up: it stays cheap (submitit is imported when a sweep launches)."""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher


class ExperimentsSlurmLauncher(SlurmLauncher):
    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from experiments.launchers import slurm_jobs

        assert self.config is not None
        return slurm_jobs.launch(self, self.config, job_overrides, initial_job_idx)
