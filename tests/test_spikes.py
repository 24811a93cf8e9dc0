"""What SNN papers report (snn/spikes.py): its settings checked before launch, the health
guard stopping a network that went silent, rank 0's combining of what each rank counted, the
Pareto front of a sweep, and a two-objective Optuna search over accuracy and energy. The
measurement itself is read on runs the suite already makes: the main job
(test_main_job.py), every topology (test_topologies.py), experiments-eval (test_eval.py)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from experiments.errors import ConfigError
from experiments.snn import spikes, spikes_file

from .conftest import BIN, cli_env, plan_for, run_cli, run_cli_in_process
from .support import processes
from .support.studies import only_study

pytestmark = pytest.mark.slow

SILENT = [  # SpikingJelly's zoo SEW-ResNet18 whose LIF neurons can never reach their threshold
    "model=zoo_sew_resnet18",
    "+model.neuron.v_threshold=1e9",
    "data=synthetic",
    "data.train_size=16",
    "data.val_size=16",
    "model.time_steps=1",
    "trainer.batch_size=16",
    "logger=none",
]


@pytest.mark.parametrize(
    ("overrides", "key", "said"),
    [
        (["trainer.spikes.images=-1"], "trainer.spikes.images", "an integer >= 0 or auto"),
        (["trainer.spikes.costs=fp64"], "trainer.spikes.costs", "one of fp32, fp16, int8"),
        (["trainer.spikes.guard=0"], "trainer.spikes.guard", "or null: off"),
        (
            ["+trainer.spikes.layers=4"],
            "trainer.spikes.layers",
            "trainer.spikes.layers=4: not a key of trainer.spikes; valid keys: "
            "trainer.spikes.costs, trainer.spikes.guard, trainer.spikes.images, "
            "trainer.spikes.seed",
        ),
        (
            [
                "topology=ddp",
                "launcher=torchrun",
                "launcher.nproc_per_node=4",
                "trainer.spikes.images=50",
            ],
            "trainer.spikes.images",
            "a multiple of 4 (data-parallel size, so each rank measures an equal share), "
            "e.g. trainer.spikes.images=48",
        ),
        (
            ["model=dcgan", "data=digits", "trainer.spikes.images=32"],
            "trainer.spikes.images",
            "auto: the spike and energy measurement is for SNN models",
        ),
        (
            ["model=dcgan", "data=digits", "trainer.spikes.guard=null"],
            "trainer.spikes.guard",
            "3: the spike and energy measurement is for SNN models",
        ),
    ],
)
def test_spike_settings_are_checked_before_launch(overrides: list[str], key: str, said: str):
    with pytest.raises(ConfigError) as refused:
        plan_for(["data=synthetic", *overrides] if "data=digits" not in overrides else overrides)
    assert refused.value.key == key and said in str(refused.value), str(refused.value)


def test_auto_is_32_images_rounded_to_what_the_topology_divides() -> None:
    assert plan_for(["data=synthetic"]).spikes.images == 32
    pp = ["topology=pp", "launcher=torchrun", "launcher.nproc_per_node=2", "trainer.batch_size=48"]
    assert plan_for(["data=synthetic", "data.val_size=96", *pp]).spikes.images == 48
    assert not plan_for(["data=synthetic", "trainer.spikes.images=0"]).spikes.active
    assert (
        "spikes     32 validation images each evaluation" in plan_for(["data=synthetic"]).as_text()
    )


@pytest.mark.parametrize("engine", [[], ["trainer=classify"]], ids=["spikingjelly", "classify"])
def test_a_network_that_goes_silent_is_stopped_by_the_guard(tmp_path: Path, engine) -> None:
    """A network that cannot fire, trainer.spikes.guard=2, on SpikingJelly's loop and on the
    classic Trainer: after its second evaluation the run stops `failed`, one line naming the
    layer, its rate and the evaluation, no traceback; spikes.json holds the two evaluations
    it measured, and spikes.png their figure."""
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            *engine,
            *SILENT,
            "trainer.epochs=4",
            "trainer.spikes.guard=2",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line == (
        "error: layer sn1 silent (firing rate 0.0000) for 2 evaluation(s) in a row, the last at "
        "step 2 (evaluation 2); trainer.spikes.guard=null turns the guard off"
    )
    assert "Traceback" not in result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == line.removeprefix("error: ")
    measured = spikes_file.read(run_dir)
    assert [e["step"] for e in measured] == [1, 2]
    assert all(
        layer["firing_rate"] == 0 and layer["silent"] == 1 for layer in measured[-1]["layers"]
    )
    # the figure follows the run (redrawn after each evaluation by the figure child), so a run
    # stopped short keeps the figure of its last evaluation: every layer grey (silent)
    figure = run_dir / "spikes.png"
    deadline = time.monotonic() + 120
    while not figure.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert figure.stat().st_size > 10_000


def test_the_guard_counts_evaluations_in_a_row_and_can_be_off() -> None:
    def evaluation(step: int, rate: float) -> dict:
        return {
            "step": step,
            "layers": [{"layer": "sn1", "firing_rate": rate}, {"layer": "sn2", "firing_rate": 0.2}],
        }

    guard = spikes.Guard(3)
    guard.replay([evaluation(1, 0.0), evaluation(2, 0.0)])  # a resumed run goes on counting
    assert guard.after(evaluation(3, 0.5), raise_error=False) is None  # fired: count reset
    for step in (4, 5):
        assert guard.after(evaluation(step, 0.995), raise_error=False) is None
    with pytest.raises(spikes.DeadLayer, match=r"sn1 saturated \(firing rate 0.9950\) for 3"):
        guard.after(evaluation(6, 0.995))
    off = spikes.Guard(None)
    assert all(off.after(evaluation(s, 0.0), raise_error=False) is None for s in range(9))


def test_rank_0_sums_shards_and_takes_replicated_work_once() -> None:
    """Two TP ranks: layer a split between them (each half of its neurons), layer b whole on
    both; the operations each counted, split into those under a TP shard and the rest."""

    def summary(spiked: int, macs: int) -> dict:
        return {
            "images": 4,
            "layers": {
                "a": {
                    "spikes": spiked,
                    "steps": 80,
                    "neurons": 10,
                    "silent": 2,
                    "saturated": 1,
                    "sharded": True,
                },
                "b": {
                    "spikes": 30,
                    "steps": 160,
                    "neurons": 20,
                    "silent": 4,
                    "saturated": 0,
                    "sharded": False,
                },
            },
            "ops": {"mac": macs + 100, "ac": 40, "synop": 8, "memory_bytes": 0},
            "sharded_ops": {"mac": macs, "ac": 10, "synop": 8},
        }

    settings = spikes.Settings(4, 0, "fp32", None)
    record = spikes.combine(
        [(0, summary(16, 50)), (1, summary(24, 70))], settings, ["a", "b"], step=7, epoch=1
    )
    a, b = record["layers"]
    assert (a["layer"], a["neurons"], a["firing_rate"], a["silent"]) == ("a", 20, 40 / 160, 0.2)
    assert (b["layer"], b["neurons"], b["firing_rate"], b["silent"]) == ("b", 20, 30 / 160, 0.2)
    assert record["macs_per_image"] == (50 + 70 + 100) / 4  # shards summed, the rest once
    assert record["acs_per_image"] == (10 + 10 + 30) / 4
    assert record["synops_per_image"] == 16 / 4
    assert record["firing_rate"] == (40 + 30) / (160 + 160)
    assert record["energy_with_memory_per_image_mj"] is None  # not comparable under TP


def test_the_pareto_front_keeps_the_points_no_other_beats() -> None:
    from experiments.families import all_families
    from experiments.report.figures import pareto_points

    snn = next(f for f in all_families() if f.name == "snn")

    def point(name: str, accuracy: float, energy: float, status: str = "completed") -> dict:
        return {
            "point": name,
            "overrides": {},
            "summary": {
                "status": status,
                "metrics": {"val_accuracy": accuracy, "energy_per_image_mj": energy},
            },
        }

    points = [
        point("0", 0.9, 2.0),
        point("1", 0.8, 1.0),
        point("2", 0.7, 1.5),
        point("3", 0.95, 3.0),
        point("4", 0.99, 0.5, "failed"),
    ]
    assert [p["point"] for p, _, _ in pareto_points(points, snn)] == ["1", "0", "3"]


def two_objective_search_args() -> list[str]:
    return [
        "hparams_search=digits_lr",
        "objective=[val_accuracy,energy_per_image_mj]",
        "hydra.sweeper.direction=[maximize,minimize]",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.seed=3",
        "hydra.sweeper.params={optimizer.lr:'choice(0.001,0.01)'}",
        *SILENT[2:],
        "trainer.epochs=1",
    ]


@pytest.fixture(scope="module")
def two_objective_search(module_tmp: Callable[[str], Path]) -> dict:
    """A finished two-objective search (accuracy and energy), for the study's tests and the
    dashboard's."""
    root = module_tmp("two_objectives")
    sweep_dir = root / "search"
    result = run_cli([*two_objective_search_args(), f"hydra.sweep.dir={sweep_dir}"], cwd=root)
    return {"dir": sweep_dir, "root": root, "result": result}


def test_a_two_objective_search_over_accuracy_and_energy(two_objective_search: dict) -> None:
    """objective=[val_accuracy,energy_per_image_mj]: an Optuna multi-objective study
    (maximise, minimise); each trial is told both of its run's values; the sweep report
    draws accuracy against energy and lists the Pareto front. A pruner, which Optuna's
    multi-objective studies do not take, and a direction that is not the objectives' are
    refused before the search."""
    sweep_dir, tmp_path = two_objective_search["dir"], two_objective_search["root"]
    search = two_objective_search_args()
    result = two_objective_search["result"]
    assert result.returncode == 0, result.stderr[-3000:]
    study = only_study(sweep_dir)
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    for trial in study.trials:
        metrics = json.loads((sweep_dir / str(trial.number) / "summary.json").read_text())[
            "metrics"
        ]
        assert trial.values == [metrics["val_accuracy"], metrics["energy_per_image_mj"]]
        assert all(math.isfinite(v) for v in trial.values)
    report = (sweep_dir / "report.md").read_text()
    assert "## Pareto front: val_accuracy vs energy_per_image_mj" in report
    assert "(accuracy_vs_energy.png)" in report
    assert (sweep_dir / "accuracy_vs_energy.png").stat().st_size > 10_000
    with open(sweep_dir / "report.csv") as handle:
        header = handle.readline().strip().split(",")
    assert {"firing_rate", "energy_per_image_mj"} <= set(header)

    refused = run_cli_in_process(
        [*search, "hydra.sweeper.pruner=median", f"hydra.sweep.dir={tmp_path / 'other'}"],
        cwd=tmp_path,
    )
    assert refused.returncode == 2
    assert "hydra.sweeper.pruner='median': none: a study of 2 objectives" in refused.stderr
    wrong = [a.replace("[maximize,minimize]", "[maximize,maximize]") for a in search]
    refused = run_cli_in_process([*wrong, f"hydra.sweep.dir={tmp_path / 'wrong'}"], cwd=tmp_path)
    assert (
        refused.returncode == 2
        and "[maximize,minimize]: each trial returns its val_accuracy" in (refused.stderr)
    )


def test_the_dashboard_serves_the_finished_search_from_its_journal(
    two_objective_search: dict,
) -> None:
    """`experiments-report SWEEP --dashboard` starts optuna-dashboard's server on the search's
    journal; its HTTP API gives back the study, its trials and the Pareto front the journal
    holds."""
    import socket
    import urllib.request

    sweep_dir = two_objective_search["dir"]
    assert two_objective_search["result"].returncode == 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = two_objective_search["root"] / "dashboard.log"
    with open(log, "w") as output:
        server = processes.spawn(
            [str(BIN / "experiments-report"), str(sweep_dir), "--dashboard", "--port", str(port)],
            env=cli_env(),
            stdout=output,
            stderr=output,
        )

    def get(path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
            return json.loads(response.read())

    deadline = time.monotonic() + 120
    while True:
        try:
            studies = get("/api/studies")["study_summaries"]
            break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    study = only_study(sweep_dir)
    (served,) = studies
    assert (served["study_name"], served["directions"]) == ("digits_lr", ["maximize", "minimize"])
    detail = get(f"/api/studies/{served['study_id']}?after=0")
    trials = {t["number"]: t for t in detail["trials"]}
    assert sorted(trials) == [t.number for t in study.trials] == [0, 1]
    for trial in study.trials:
        assert trials[trial.number]["state"] == "Complete"
        assert trials[trial.number]["values"] == trial.values
        (param,) = trials[trial.number]["params"]
        assert float(param["param_external_value"]) == trial.params["optimizer.lr"]
    front = sorted(t["number"] for t in detail["best_trials"])
    assert front == sorted(t.number for t in study.best_trials)  # the Pareto front
    assert f"Optuna dashboard of {sweep_dir / 'optuna.journal'} at http://127.0.0.1:{port}/" in (
        log.read_text()
    )
    # `optuna-dashboard <sweep>/optuna.journal` by hand: the dashboard's own reading of a path
    # (its WSGI app, as its command builds it) opens the journal as it is
    import wsgiref.util

    from optuna_dashboard import wsgi

    statuses: list[str] = []

    def start_response(status: str, headers: list, exc_info: object = None) -> None:
        statuses.append(status)

    app = wsgi(str(sweep_dir / "optuna.journal"))
    environ = {"PATH_INFO": "/api/studies", "REQUEST_METHOD": "GET"}
    wsgiref.util.setup_testing_defaults(environ)
    body = b"".join(app(environ, start_response))
    assert statuses == ["200 OK"]
    assert json.loads(body)["study_summaries"] == studies


def test_a_spikformer_is_measured_like_a_resnet() -> None:
    """The suite trains SEW-ResNets; a Spikformer (spiking self-attention, its LIF neurons in
    SpikingJelly's own modules) goes through the same measurement: every spiking layer found
    and counted, and the op counter sees its matrix work (MACs) and its spike-driven work."""
    import torch

    from experiments.snn.evaluate import _spikes
    from experiments.snn.models import build_single_process_model

    plan = plan_for(
        [
            "model=spikformer_tiny",
            "data=synthetic",
            "data.val_size=8",
            "data.image_size=16",
            "model.time_steps=2",
            "trainer.spikes.images=4",
        ]
    )
    torch.manual_seed(0)
    model = build_single_process_model(plan.training_config.model, torch.device("cpu"), 4)
    # untrained, evaluated with its BatchNorms' initial statistics, it would not fire at all:
    # small running variances amplify its inputs as a trained network's statistics do
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.running_var.fill_(1e-3)
    measured = _spikes(plan, model, step=0)
    assert measured["images"] == 4
    assert len(measured["layers"]) == len(spikes.spiking_layers(model))
    assert len(measured["layers"]) >= 20
    assert all(0 <= layer["firing_rate"] <= 1 for layer in measured["layers"])
    assert measured["firing_rate"] > 0 and measured["synops_per_image"] > 0
    assert measured["macs_per_image"] > 0 and measured["energy_per_image_mj"] > 0
    assert (
        measured["cost_constants_pj"]["e_mac_pj"],
        measured["cost_constants_pj"]["e_ac_pj"],
    ) == (
        4.6,
        0.9,
    )
