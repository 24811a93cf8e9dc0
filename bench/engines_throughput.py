"""Both SNN engines side by side on CPU: our engine (`trainer.engine=cpu`) and SpikingJelly's
own `train_classification` (`trainer.engine=spikingjelly`, on CPU ranks), same config, same
topology, A/B alternated; images/s from the median seconds per step between steps.jsonl
timestamps (after 2 warm-up gaps), times the global batch.

    python -m bench.engines_throughput --out DIR [--topologies single ddp] [--steps 24]

Writes DIR/engines_throughput.json and DIR/engines_throughput.md. No timing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench.common import logged_times, step_seconds, train

ENGINES = ("cpu", "spikingjelly")
TOPOLOGIES = {
    "single": [],
    "ddp": ["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"],
    "fsdp2": ["topology=fsdp2", "launcher=torchrun", "launcher.nproc_per_node=2"],
    "channel_tp": ["topology=channel_tp", "launcher=torchrun", "launcher.nproc_per_node=2"],
    "pp": ["topology=pp", "launcher=torchrun", "launcher.nproc_per_node=2"],
}
SIZE = {"batch": 16, "time_steps": 2, "image_size": 16}


def config(steps: int) -> list[str]:
    return [
        "data=synthetic",
        "data.train_size=4096",
        "data.val_size=64",
        f"data.image_size={SIZE['image_size']}",
        f"model.time_steps={SIZE['time_steps']}",
        f"trainer.batch_size={SIZE['batch']}",
        "trainer.epochs=1",
        f"trainer.max_steps={steps}",
        "trainer.checkpoint_interval=0",
        "trainer.log_every_n_steps=1",
    ]


def measure(topologies: list[str], steps: int, repeats: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for topology in topologies:
            seconds: dict[str, list[float]] = {engine: [] for engine in ENGINES}
            dp = 1
            for index in range(repeats):
                for engine in ENGINES if index % 2 == 0 else reversed(ENGINES):
                    run_dir = train(
                        [*config(steps), *TOPOLOGIES[topology], f"trainer.engine={engine}"],
                        root / f"{topology}-{engine}-{index}",
                    )
                    summary = json.loads((run_dir / "summary.json").read_text())
                    dp = summary["mesh"]["shape"][0]
                    seconds[engine].append(step_seconds(logged_times(run_dir)))
            per_second = {
                engine: SIZE["batch"] * dp / statistics.median(values)
                for engine, values in seconds.items()
            }
            rows.append(
                {
                    "topology": topology,
                    "images_per_second": per_second,
                    "ratio_ours_to_library": per_second["cpu"] / per_second["spikingjelly"],
                    "runs_per_engine": repeats,
                    "steps": steps,
                }
            )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        f"SEW-ResNet18, T={SIZE['time_steps']}, {SIZE['image_size']}x{SIZE['image_size']}, "
        f"batch {SIZE['batch']} per data-parallel rank, CPU ranks (gloo)",
        "",
        "| topology | ours (cpu) images/s | SpikingJelly's loop images/s | ours / library |",
        "|---|---|---|---|",
    ]
    for r in rows:
        ips = r["images_per_second"]
        lines.append(
            f"| {r['topology']} | {ips['cpu']:.1f} | {ips['spikingjelly']:.1f} | "
            f"{r['ratio_ours_to_library']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--topologies", nargs="+", default=["single", "ddp"],
                        choices=sorted(TOPOLOGIES))  # fmt: skip
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    rows = measure(args.topologies, args.steps, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engines_throughput.json").write_text(json.dumps(rows, indent=2))
    table = markdown(rows)
    (args.out / "engines_throughput.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
