"""The spike and energy measurement (snn/spikes.py) inside a library's loop: at each of its
evaluations, on every rank alike, through the loop's own evaluation forward (or, under a
pipeline, its evaluation schedule), the counts combined on rank 0 into the run's record.
It reads the loop's frame (spikingjelly_loop.py's EVALUATION_LOCALS); the classic Trainer
(engines/classify.py) hands the same names from its `evaluate`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from experiments import collectives
from experiments.snn import spikes, spikes_file
from experiments.snn.spikes_figure import FigureProcess

log = logging.getLogger(__name__)


class LoopSpikes:
    def __init__(self, settings: spikes.Settings, plan: Any, records: list[dict[str, Any]]) -> None:
        self.settings = settings
        self.plan = plan
        self.records = records  # rank 0's: this run's evaluations so far (resumed ones kept)
        self._names: tuple[dict[str, str], list[str]] | None = None
        self.figure = FigureProcess()  # rank 0's: draws spikes.png after each evaluation
        self.resume(records)

    def resume(self, records: list[dict[str, Any]]) -> None:
        """A resumed run's evaluations so far (rank 0): kept in spikes.json, replayed into
        the guard (its count of evaluations in a row goes on)."""
        self.records[:] = records
        self.guard = spikes.Guard(self.settings.guard)
        self.guard.replay(records)

    def after_evaluation(
        self, scope: dict[str, Any], step: int, epoch: int
    ) -> tuple[dict[str, Any] | None, str | None]:
        """This evaluation's measurement: every rank measures; rank 0 gets the record (None
        elsewhere), and every rank the health guard's verdict (why the run must stop, or
        None)."""
        dims = self.plan.dims
        dp_rank, pp_rank, tp_rank = dims.coordinates(collectives.rank())
        model = scope["model"]
        tree = (
            model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
        )
        names, order = self._canonical(tree, pp_rank)
        config = scope["config"]
        dataset = scope["validation_loader"].dataset
        indices = spikes.slice_indices(len(dataset), self.settings.images, self.settings.seed)
        whole = dims.data_parallel_size * (
            config.batch_size if dims.pipeline_parallel_size > 1 else 1
        )  # equal shares: a validation set smaller than the slice cuts it to what divides
        indices = indices[: len(indices) - len(indices) % whole]
        share = indices[dp_rank :: dims.data_parallel_size]
        # one forward for the whole share (no gradients kept: less memory than a training
        # step's) where a pipeline's schedule does not fix the batch: SpikingJelly's op
        # counter costs per operation dispatched, not per image
        batch = config.batch_size if dims.pipeline_parallel_size > 1 else max(len(share), 1)
        batches = list(spikes.batches_of(dataset, share, batch))
        training = model.training
        model.eval()  # the DDP wrapper too: the evaluation forward reads the wrapper's mode
        try:
            counts = spikes.measure(
                tree,
                batches,
                self._forward(scope, pp_rank),
                self.settings,
                names=lambda name: names.get(name, name),
                tensor_parallel=dims.tensor_parallel_size > 1,
            )
        finally:
            model.train(training)
        spikes.reduce_data_parallel(counts, scope["dp_group"], dims.data_parallel_size)
        gathered = collectives.gather((dp_rank, tp_rank, spikes.local_summary(counts)))
        record = None
        if collectives.rank() == 0:
            positions = [(tp, summary) for dp, tp, summary in gathered if dp == 0]
            record = spikes.combine(positions, self.settings, order, step, epoch)
            self.records.append(record)
            spikes.write(self.plan.run_dir, self.settings, self.records)
            self.figure.request(self.plan.run_dir)  # drawn while the run goes on
        verdict = self.guard.after(record, raise_error=False) if record is not None else None
        return record, collectives.broadcast_from_rank0(verdict)

    def log(self, recorder: Any, measured: dict[str, Any], step: int) -> None:
        """The measurement to the loggers: the network's figures and each layer's rate as
        scalars, the layers' rates as one histogram (TensorBoard)."""
        recorder.scalars(spikes.scalars(measured), step)
        rates = [layer["firing_rate"] for layer in measured["layers"]]
        recorder.histogram("spikes/layer_firing_rates", rates, step)

    def draw(self, recorder: Any) -> None:
        """The run's figure (rank 0, at the end): each layer's rate across evaluations."""
        if not self.records:
            return
        figure = self.figure.finish(self.plan.run_dir)
        if figure is not None:
            recorder.artifact(figure)

    def close(self) -> None:
        """A run that ended short: its figure child finishes on its own."""
        self.figure.close()

    def _forward(self, scope: dict[str, Any], pp_rank: int) -> Any:
        if self.plan.dims.pipeline_parallel_size == 1:
            return scope["evaluation_step"]  # the library's own evaluation forward
        from spikingjelly.activation_based.distributed.vision.execution import (
            _classification_sequence,
        )

        schedule, precision, config = (
            scope["evaluation_schedule"],
            scope["precision"],
            scope["config"],
        )

        def through_the_pipeline(images: torch.Tensor) -> None:
            with precision.autocast_context(group=scope["dp_group"]):
                if pp_rank == 0:
                    sequence = _classification_sequence(
                        images, config.model.time_steps, config.input_layout, batch_first=True
                    )
                    schedule.step(sequence)
                else:
                    schedule.step()

        return through_the_pipeline

    def _canonical(self, tree: torch.nn.Module, pp_rank: int) -> tuple[dict[str, str], list[str]]:
        """This rank's module names -> the single-process model's, and the single-process
        model's spiking layers in order. A pipeline stage renames its modules (an
        nn.Sequential of the model's pieces): the same split is made of the builder's
        canonical model (on the meta device: nothing allocated) and names matched by object."""
        if self._names is not None:
            return self._names
        local = spikes.spiking_layers(tree)
        if self.plan.dims.pipeline_parallel_size == 1:
            self._names = ({name: name for name in local}, local)
            return self._names
        model_config = self.plan.training_config.model
        builder = model_config.get_builder_cls()(model_config)
        with torch.device("meta"):
            canonical = builder._build_canonical_model()
        named = {id(module): name for name, module in canonical.named_modules()}
        order = spikes.spiking_layers(canonical)
        stage = builder._pipeline_stage(canonical, pp_rank, self.plan.dims.pipeline_parallel_size)
        mapping = {name: named.get(id(module), name) for name, module in stage.named_modules()}
        self._names = (mapping, order)
        return self._names


def records_up_to(run_dir: Path, step: int) -> list[dict[str, Any]]:
    """spikes.json's evaluations kept on a resume from `step` (the later ones are redone)."""
    return [record for record in spikes_file.read(run_dir) if int(record.get("step", 0)) <= step]
