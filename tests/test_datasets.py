# ruff: noqa: E501  (the tables of refusals read best one case a line)
"""The papers' datasets on their real on-disk formats (tests/support/datasets.py writes them):
CIFAR's pickled batches read by torchvision with a recipe's augmentation, SpikingJelly's
events_np trees integrated into the same frames SpikingJelly integrates, split as the papers
split them, and every broken root refused before launch in one line."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.data import cifar, events
from experiments.data.event_layout import (
    CIFAR10_DVS,
    DVS128_GESTURE,
    N_CALTECH101,
    N_MNIST,
    cache_folder,
)

from .conftest import DatasetFiles, run_cli_in_process
from .support.datasets import skip_cifar_md5, write_cifar, write_events

SPECS = {
    "dvs128_gesture": DVS128_GESTURE,
    "cifar10_dvs": CIFAR10_DVS,
    "n_mnist": N_MNIST,
    "n_caltech101": N_CALTECH101,
}
# What a test run of each needs beyond its defaults (N-Caltech101's fixture has 2 a class).
EXTRA = {"n_caltech101": {"train_ratio": 0.5}}
SPIKFORMER_OPS = ["Equalize", "Rotate", "ShearX", "TranslateXRel", "TranslateYRel"]


@pytest.fixture
def md5_skipped() -> Iterator[None]:
    with skip_cifar_md5():
        yield


def _builder(name: str) -> Callable:
    return getattr(events, f"build_{name}_datasets")


# ---------------------------------------------------------------- event frames


@pytest.mark.parametrize(
    ("name", "split_by"),
    [
        ("dvs128_gesture", "number"),
        ("cifar10_dvs", "number"),
        ("n_mnist", "number"),
        ("n_mnist", "time"),
        ("n_caltech101", "number"),
    ],
)
def test_event_frames_are_spikingjellys_integration_of_the_same_events(
    name: str, split_by: str, dataset_files: DatasetFiles, tmp_path: Path
) -> None:
    """Each sample equals SpikingJelly's integrate_events_by_fixed_frames_number of its own
    .npz, [T, 2, H, W] at the sensor's size; a DataLoader batch is [N, T, 2, H, W]; where the
    dataset ships no split, the split is the one SpikingJelly's split_to_train_test_set makes
    loading every sample, as the papers' code calls it."""
    from spikingjelly.datasets.utils import (
        integrate_events_by_fixed_frames_number,
        split_to_train_test_set,
    )

    spec = SPECS[name]
    # N-Caltech101's 101 classes of 180x240 frames take seconds to integrate: 3 of them here
    root = (
        write_events(tmp_path, name, classes=3)
        if name == "n_caltech101"
        else dataset_files.events(name)
    )
    height, width = spec.dataset_class().get_H_W()
    side = min(height, width)  # the models take square inputs: 180x240 is resized to 180x180
    train, validation = _builder(name)(
        root, frames_number=2, split_by=split_by, image_size=side, **EXTRA.get(name, {})
    )
    source = train.dataset if isinstance(train, torch.utils.data.Subset) else train
    for index in (0, len(train) - 1):
        frames, label = train[index]
        frames_file = Path(source.samples[_source_index(train, index)][0])
        events_file = root / "events_np" / frames_file.relative_to(cache_folder(root, 2, split_by))
        with np.load(events_file) as loaded:
            integrated = integrate_events_by_fixed_frames_number(
                dict(loaded), split_by, 2, height, width
            )
        expected = torch.from_numpy(integrated.astype(np.float32))
        if (height, width) != (side, side):
            expected = events.resize_frames(expected, side, "bilinear")
        assert frames.shape == (2, 2, side, side) and frames.dtype == torch.float32
        assert torch.equal(frames, expected)
        assert label == source.targets[_source_index(train, index)]
    batch, _ = next(iter(torch.utils.data.DataLoader(validation, batch_size=3)))
    assert batch.shape == (min(3, len(validation)), 2, 2, side, side)
    if not spec.ships_split:  # the papers' split: SpikingJelly's own function on the dataset
        ratio = EXTRA.get(name, {}).get("train_ratio", 0.9)
        sj_train, sj_test = split_to_train_test_set(ratio, source, spec.classes)
        assert train.indices == sj_train.indices and validation.indices == sj_test.indices
    else:
        assert len(validation) == sum(1 for _ in (root / "events_np" / "test").rglob("*.npz"))


def _source_index(dataset: torch.utils.data.Dataset, index: int) -> int:
    return dataset.indices[index] if isinstance(dataset, torch.utils.data.Subset) else index


# ---------------------------------------------------------------- CIFAR and augmentation


SPIKFORMER_CIFAR10 = {  # recipes.md §1.1 (ZK-Zhou/spikformer cifar10/cifar10.yml)
    "crop": "random_resized_crop",
    "scale": [1.0, 1.0],
    "ratio": [1.0, 1.0],
    "auto_augment": "rand-m9-n1-mstd0.4-inc1",
    "auto_augment_ops": SPIKFORMER_OPS,
    "re_prob": 0.25,
    "interpolation": "bicubic",
    "mean": [0.4914, 0.4822, 0.4465],
    "std": [0.2470, 0.2435, 0.2616],
    "crop_pct": 1.0,
}


@pytest.mark.parametrize("variant", ["cifar10", "cifar100"])
def test_cifar_batches_are_read_by_torchvision_with_the_recipes_augmentation(
    variant: str, dataset_files: DatasetFiles, md5_skipped: None
) -> None:
    """torchvision reads the pickled batches; the data option's default recipe (pad 4, crop,
    flip, the dataset's mean/std) and Spikformer's (timm's RandAugment over its five ops, one
    a sample at m9 with std 0.4, each op with p 0.5; erasing 0.25) build as written, and
    validation is the image normalized (crop_pct 1 at 32 px)."""
    from omegaconf import OmegaConf
    from timm.data.auto_augment import RandAugment
    from timm.data.random_erasing import RandomErasing
    from torchvision.datasets import CIFAR10

    root = dataset_files.cifar(variant)
    build = getattr(cifar, f"build_{variant}_datasets")
    defaults = OmegaConf.to_container(OmegaConf.load(f"conf/data/{variant}.yaml").augment)
    train, validation = build(root, augment=defaults)
    classes = 10 if variant == "cifar10" else 100
    assert (len(train), len(validation)) == (2 * classes, classes)
    assert set(train.targets) == set(range(classes))
    image, _ = train[0]
    assert image.shape == (3, 32, 32)
    names = [type(step).__name__ for step in train.transform.transforms]
    assert names == ["RandomCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"]
    assert train.transform.transforms[0].padding == 4
    raw = torch.from_numpy(validation.data[0]).permute(2, 0, 1).float() / 255
    mean, std = (torch.tensor(defaults[key]).view(3, 1, 1) for key in ("mean", "std"))
    assert torch.allclose(validation[0][0], (raw - mean) / std, atol=1e-6)
    if variant == "cifar10":
        assert isinstance(train, CIFAR10)
        paper, _ = build(root, augment=SPIKFORMER_CIFAR10)
        steps = paper.transform.transforms
        (augment,) = [step for step in steps if isinstance(step, RandAugment)]
        assert [op.name for op in augment.ops] == SPIKFORMER_OPS and augment.num_layers == 1
        assert {(op.prob, op.magnitude, op.magnitude_std) for op in augment.ops} == {(0.5, 9, 0.4)}
        (erasing,) = [step for step in steps if isinstance(step, RandomErasing)]
        assert (erasing.probability, erasing.mode, erasing.max_count) == (0.25, "const", 1)
        assert paper[0][0].shape == (3, 32, 32)


def test_randaugment_at_magnitude_10_posterizes_to_black_as_before_pillow_13() -> None:
    """timm's PosterizeIncreasing keeps 0 bits at magnitude 10 (Spikformer's ImageNet
    `rand-m9-mstd0.5-inc1` draws it): Pillow 13 raises there, which would end a run; the
    pipeline gives the black image the papers' Pillow gave."""
    from PIL import Image

    from experiments.data import augment as augmentation

    recipe = augmentation.parse(
        {"auto_augment": "rand-m10-n1-p1.0-inc1", "auto_augment_ops": ["PosterizeIncreasing"]}
    )
    image = Image.new("RGB", (8, 8), (200, 100, 50))
    transform = augmentation._auto_augment(recipe, 8)
    assert transform(image).getextrema() == ((0, 0), (0, 0), (0, 0))


def test_imagefolder_default_augmentation_is_spikingjellys_transforms(imagefolder: Path) -> None:
    """data=imagefolder's default recipe gives the tensors SpikingJelly's
    build_imagefolder_datasets gives: validation exactly, training under the same seed."""
    from omegaconf import OmegaConf
    from spikingjelly.activation_based.distributed.vision import build_imagefolder_datasets

    from experiments.data.image_folder import build_imagefolder_datasets as ours

    defaults = OmegaConf.to_container(OmegaConf.load("conf/data/imagefolder.yaml").augment)
    their_train, their_val = build_imagefolder_datasets(imagefolder, 24)
    our_train, our_val = ours(imagefolder, 24, augment=defaults)
    assert torch.equal(our_val[3][0], their_val[3][0])
    torch.manual_seed(7)
    theirs = their_train[5][0]
    torch.manual_seed(7)
    assert torch.equal(our_train[5][0], theirs)


# ---------------------------------------------------------------- refused before launch


@pytest.fixture(scope="module")
def broken(module_tmp: Callable[[str], Path], dataset_files: DatasetFiles) -> dict[str, Path]:
    """One root per way a dataset folder goes wrong (written once for the module)."""
    base = module_tmp("broken")
    roots = {"missing": base / "not-there", "other": base / "other"}
    (roots["other"] / "cifar-10-python").mkdir(parents=True)  # a near miss of the layout
    roots["no_events"] = base / "no_events"
    roots["no_events"].mkdir()
    gesture = write_events(base / "gesture", "dvs128_gesture", per_class=1, test_per_class=1)
    roots["events_np_itself"] = gesture / "events_np"
    for name in ("events_building", "frames_building", "partial", "ten_classes"):
        roots[name] = base / name
        shutil.copytree(gesture, roots[name])
    (roots["events_building"] / "events_np.building").touch()
    frames = roots["frames_building"] / "frames_number_4_split_by_number"
    frames.mkdir()
    (frames.parent / f"{frames.name}.building").touch()
    partial = roots["partial"] / "frames_number_4_split_by_number" / "train" / "0"
    partial.mkdir(parents=True)
    shutil.copy(next((roots["partial"] / "events_np" / "train" / "0").iterdir()), partial)
    shutil.rmtree(roots["ten_classes"] / "events_np" / "train" / "10")
    roots["cifar_damaged"] = write_cifar(base / "cifar_damaged")
    (roots["cifar_damaged"] / "cifar-10-batches-py" / "test_batch").unlink()
    roots["dvs_split"] = write_events(base / "dvs_split", "cifar10_dvs", per_class=2)
    return roots


GESTURE = ["data=dvs128_gesture", "model.time_steps=4"]
REFUSALS = [  # (id, overrides, root, the line after "error: invalid config: ")
    (
        "cifar10 root missing",
        ["data=cifar10"],
        "missing",
        "data.root='{root}': no such folder; expected {root}/cifar-10-batches-py/{{data_batch_1,data_batch_2,data_batch_3,data_batch_4,data_batch_5,test_batch,batches.meta}} (torchvision's CIFAR10 format)",
    ),
    (
        "cifar10 wrong layout",
        ["data=cifar10"],
        "other",
        "data.root='{root}': no cifar-10-batches-py/ in it (found: cifar-10-python); expected {root}/cifar-10-batches-py/",
    ),
    (
        "cifar10 file missing",
        ["data=cifar10"],
        "cifar_damaged",
        "data.root='{root}': cifar-10-batches-py/test_batch missing; expected {root}/cifar-10-batches-py/",
    ),
    (
        "cifar10 md5",
        ["data=cifar10"],
        "cifar10",
        "data.root='{root}': cifar-10-batches-py/data_batch_1 fails torchvision's md5 check; expected",
    ),
    (
        "event root missing",
        GESTURE,
        "missing",
        "data.root='{root}': no such folder; expected {root}/events_np/{{train,test}}/<class>/*.npz (11 classes)",
    ),
    (
        "no events_np, no archives, no download",
        GESTURE,
        "no_events",
        "data.root='{root}': no events_np/ and {root}/download/ lacks DvsGesture.tar.gz (4 of 4 archives missing): SpikingJelly cannot download it: fetch DvsGesture.tar.gz from https://",
    ),
    (
        "no events_np, would download",
        ["data=cifar10_dvs", "model.time_steps=4"],
        "no_events",
        "data.root='{root}': no events_np/ and {root}/download/ lacks airplane.zip (10 of 10 archives missing): SpikingJelly would download it from https://ndownloader.figshare.com/files/7712788 (a node without internet hangs); put the archives there, or set data.download=true",
    ),
    (
        "root is events_np itself",
        GESTURE,
        "events_np_itself",
        "data.root='{root}': no events_np/ and {root}/download/ lacks DvsGesture.tar.gz … ({root} looks like an events_np/ folder: set data.root to the folder that holds it)",
    ),
    (
        "half-built events_np",
        GESTURE,
        "events_building",
        "data.root='{root}': half-built events_np/ (events_np.building is left from an interrupted preparation): remove {root}/events_np and {root}/events_np.building",
    ),
    (
        "half-built frame cache",
        GESTURE,
        "frames_building",
        "data.root='{root}': half-built frame cache (frames_number_4_split_by_number.building is left from an interrupted integration): remove {root}/frames_number_4_split_by_number and",
    ),
    (
        "partial frame cache",
        GESTURE,
        "partial",
        "data.root='{root}': partial frame cache: {root}/frames_number_4_split_by_number/train holds 1 frame files for the 11 event files of {root}/events_np; remove",
    ),
    (
        "a class folder missing",
        GESTURE,
        "ten_classes",
        "data.root='{root}': {root}/events_np/train has 10 class folders, not 11; expected {root}/events_np/{{train,test}}/<class>/*.npz (11 classes)",
    ),
    (
        "a split that leaves no validation",
        ["data=cifar10_dvs", "model.time_steps=4"],
        "dvs_split",
        "data.train_ratio=0.9: leaves 20 training and 0 validation samples (the smallest class of {root}/events_np has 2: ceil(ratio x n) of each class train); e.g. 0.5",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "root_name", "message"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_a_broken_dataset_root_is_refused_before_launch_naming_the_layout(
    overrides: list[str],
    root_name: str,
    message: str,
    broken: dict[str, Path],
    dataset_files: DatasetFiles,
    tmp_path: Path,
) -> None:
    """One line naming data.root, the bad value and the layout expected, exit 2, nothing
    written (no run directory; the dataset folder unchanged), for a real run."""
    root = dataset_files.cifar() if root_name == "cifar10" else broken[root_name]
    before = sorted(root.rglob("*")) if root.exists() else None
    run_dir = tmp_path / "run"
    # the synthetic batches pass torchvision's md5 check only with it skipped: the damaged
    # folder is refused for its missing file, the shared one (kept) for its checksum
    with skip_cifar_md5() if root_name == "cifar_damaged" else contextlib.nullcontext():
        result = run_cli_in_process(
            [*overrides, f"data.root={root}", f"hydra.run.dir={run_dir}"], cwd=tmp_path
        )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert _reads(lines[0], "error: invalid config: " + message.format(root=root)), lines[0]
    assert not run_dir.exists() and not (tmp_path / "outputs").exists()
    assert (sorted(root.rglob("*")) if root.exists() else None) == before


def _reads(line: str, expected: str) -> bool:
    """`line` starts with `expected`'s first piece and holds the others (split at " … ") in
    order after it."""
    first, *others = expected.split(" … ")
    if not line.startswith(first):
        return False
    position = len(first)
    for piece in others:
        position = line.find(piece, position)
        if position < 0:
            return False
        position += len(piece)
    return True


OPTION_REFUSALS = [  # (the data node's values, the refusal's start)
    (
        {"augment": {"crops": "x"}},
        "data.augment.crops='x': not a key of data.augment; did you mean data.augment.crop?",
    ),
    (
        {"augment": {"crop": "center"}},
        "data.augment.crop='center': one of random_crop, random_resized_crop, resize",
    ),
    (
        {"augment": {"scale": [1.0, 0.5]}},
        "data.augment.scale=[1.0, 0.5]: [low, high] with 0 < low <= high",
    ),
    ({"augment": {"hflip": 2}}, "data.augment.hflip=2: a probability from 0 to 1"),
    ({"augment": {"re_mode": "zeros"}}, "data.augment.re_mode='zeros': one of const, rand, pixel"),
    (
        {"augment": {"auto_augment": "autoaug"}},
        "data.augment.auto_augment='autoaug': null, ta_wide (torchvision's TrivialAugmentWide) or a timm string",
    ),
    (
        {"augment": {"auto_augment": "rand-x9"}},
        "data.augment.auto_augment='rand-x9': timm refuses it (AssertionError",
    ),
    (
        {"augment": {"auto_augment": "original", "auto_augment_ops": ["Rotate"]}},
        "data.augment.auto_augment_ops=['Rotate']: null: an op list is RandAugment's",
    ),
    (
        {"augment": {"auto_augment": "rand-m9", "auto_augment_ops": ["Rotate", "Blur"]}},
        "data.augment.auto_augment_ops=['Rotate', 'Blur']: a list of timm's op names",
    ),
    ({"augment": {"mean": [0.5, 0.5]}}, "data.augment.mean=[0.5, 0.5]: three numbers"),
    ({"augment": {"crop_pct": 0}}, "data.augment.crop_pct=0: a fraction in (0, 1]"),
]
EVENT_OPTION_REFUSALS = [
    ({"split_by": "frames"}, "data.split_by='frames': one of number, time"),
    ({"frames_number": 0}, "data.frames_number=0: an integer >= 1"),
    ({"train_ratio": 1.0}, "data.train_ratio=1.0: a fraction between 0 and 1"),
    ({"augment": {"policy": "trivial"}}, "data.augment.policy='trivial': null or snn_augment_wide"),
    (
        {"augment": {"flip": 0.5}},
        "data.augment.flip=0.5: not a key of data.augment; did you mean data.augment.hflip?",
    ),
]


OPTION_CASES = [
    *[("cifar10", values, message) for values, message in OPTION_REFUSALS],
    *[("cifar10_dvs", values, message) for values, message in EVENT_OPTION_REFUSALS],
]


@pytest.mark.parametrize(("option", "values", "message"), OPTION_CASES)
def test_a_data_option_refuses_a_bad_key_naming_a_valid_one(
    option: str, values: dict, message: str
) -> None:
    """The checks the plan runs on the option's own keys (data/__init__.py check), dry run or
    not: each names the key, the bad value and a valid choice."""
    from omegaconf import OmegaConf

    from experiments import data as data_group
    from experiments.errors import ConfigError

    node = OmegaConf.load(f"conf/data/{option}.yaml")
    node.merge_with({"frames_number": 4, "split_seed": 0} if option == "cifar10_dvs" else {})
    node.merge_with(values)
    with pytest.raises(ConfigError) as refused:
        data_group.check(OmegaConf.to_container(node), on_disk=False)
    assert str(refused.value).startswith(f"invalid config: {message}"), str(refused.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model.in_channels=3"],
            "model.in_channels=3: must equal data.channels=2 (data=dvs128_gesture); leave it at ${{data.channels}}",
        ),
        (
            ["data.frames_number=8"],
            "model.time_steps=4: data=dvs128_gesture yields 8 frames a sample; the model must run as many time steps: set model.time_steps=8 (or data.frames_number)",
        ),
        (
            ["launcher=torchrun", "launcher.nproc_per_node=3", "topology=ddp"],
            "data.root='{root}': its 22 validation samples are not divisible by 3 (data-parallel size)",
        ),
    ],
    ids=["channels", "frames", "validation shards"],
)
def test_the_model_and_topology_must_take_what_the_event_data_gives(
    overrides: list[str], message: str, dataset_files: DatasetFiles, tmp_path: Path
) -> None:
    root = dataset_files.events("dvs128_gesture")
    tiny = ["model=spikformer_tiny", "model.in_channels=2", f"data.root={root}"]
    result = run_cli_in_process([*GESTURE, *tiny, *overrides, "dry_run=true"], cwd=tmp_path)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.strip() == "error: invalid config: " + message.format(root=root) or (
        result.stderr.startswith("error: invalid config: " + message.format(root=root))
    ), result.stderr


@pytest.mark.parametrize("root_name", ["missing", "frames_building"])
def test_a_dry_run_refuses_a_broken_root_as_a_run_does(
    root_name: str, broken: dict[str, Path], tmp_path: Path
) -> None:
    """The checks are the plan's, so `dry_run=true` refuses with the same line."""
    (message,) = [case[3] for case in REFUSALS if case[2] == root_name and case[1] == GESTURE]
    root = broken[root_name]
    result = run_cli_in_process([*GESTURE, f"data.root={root}", "dry_run=true"], cwd=tmp_path)
    assert result.returncode == 2, result.stdout[-1000:] + result.stderr[-2000:]
    assert _reads(result.stderr.strip(), "error: invalid config: " + message.format(root=root))
    assert not result.stdout and not (tmp_path / "outputs").exists()


def test_spikformers_event_augmentation_moves_every_frame_of_a_sample_alike() -> None:
    """Spikformer's CIFAR10-DVS augmentation (flip, then SNNAugmentWide) draws one transform a
    sample and applies it to all T frames: a sample whose frames are equal stays so, its
    shape and dtype kept; over draws it changes the frames (the ops are not all identity)."""
    from experiments.data import event_augment

    augment = event_augment.parse({"hflip": 0.5, "policy": "snn_augment_wide"})
    assert augment is not None
    frame = torch.zeros(2, 16, 16)
    frame[:, 4:9, 3:7] = torch.arange(40, dtype=torch.float32).view(2, 5, 4)
    sample = frame.expand(4, -1, -1, -1).contiguous()  # T=4 equal frames
    torch.manual_seed(0)
    changed = 0
    for _ in range(40):
        out = augment(sample)
        assert out.shape == sample.shape and out.dtype == sample.dtype
        assert all(torch.equal(out[t], out[0]) for t in range(4))
        changed += not torch.equal(out, sample)
    assert changed > 28  # 34 of 40 with this seed; the flip alone changes 24


# ---------------------------------------------------------------- one writer of a frame cache


def test_the_frame_cache_is_built_by_one_process_while_the_others_wait(tmp_path: Path) -> None:
    """Every rank calls the builder: whoever holds the root's lock integrates, the others wait
    for it (SpikingJelly itself refuses a cache another process is still writing). Held here,
    the builder waits and writes nothing; released, it builds; once built, a build takes no
    lock (a read-only root works)."""
    import threading

    import spikingjelly.datasets  # noqa: F401  (imports warm: the builder starts at once)

    from experiments.data.locks import held

    root = write_events(tmp_path / "gesture", "dvs128_gesture", per_class=1, test_per_class=1)
    cache = cache_folder(root, 1, "number")
    built: list[int] = []
    with held(root / events.LOCK):
        worker = threading.Thread(
            target=lambda: built.append(len(_builder("dvs128_gesture")(root, 1)[0]))
        )
        worker.start()
        worker.join(timeout=2)
        assert worker.is_alive() and not cache.exists()  # waiting for the lock
    worker.join(timeout=120)
    assert built == [11] and events.is_built(root, 1, "number")
    with held(root / events.LOCK):  # a finished cache is read without the lock
        assert len(_builder("dvs128_gesture")(root, 1)[1]) == 11


def test_a_download_is_taken_by_one_process_while_the_others_wait(
    tmp_path: Path, md5_skipped: None
) -> None:
    """data.download=true: torchvision's download (a no-op here: the files are there) runs
    under the root's lock, so the ranks of a run never write one folder at once."""
    import threading

    from experiments.data.locks import held

    root = write_cifar(tmp_path / "cifar")
    cifar.build_cifar10_datasets(root)  # imports warm: a build takes milliseconds now
    built: list[int] = []
    with held(root / ".cifar-10-batches-py.lock"):
        worker = threading.Thread(
            target=lambda: built.append(len(cifar.build_cifar10_datasets(root, download=True)[0]))
        )
        worker.start()
        worker.join(timeout=2)
        assert worker.is_alive() and not built  # waiting for the lock
    worker.join(timeout=60)
    assert built == [20]


def test_a_rank_never_starts_spikingjellys_download_unasked(tmp_path: Path) -> None:
    """The CIFAR10-DVS builder asks again in each rank (a Slurm node that does not see the
    login's files): no events_np/ and no archives is refused, never downloaded."""
    from experiments.errors import ConfigError

    with pytest.raises(ConfigError, match="SpikingJelly would download it from https://"):
        events.build_cifar10_dvs_datasets(tmp_path, frames_number=2)
    assert sorted(tmp_path.iterdir()) == []  # no events_np.building, no download/ made
