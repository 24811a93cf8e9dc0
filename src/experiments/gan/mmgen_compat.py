"""MMGeneration 0.7.x (PyPI) on this stack without editing files on disk.

Every mmgen 0.7.x release on PyPI omits the package
``mmgen/models/architectures/stylegan/ada/`` while
``stylegan/generator_discriminator_v2.py`` imports ``.ada.augment.AugmentPipe`` and
``.ada.misc.constant``; so ``import mmgen.models`` fails with ModuleNotFoundError.
``install_ada_stub()`` appends a finder to ``sys.meta_path`` (consulted only after the normal
finders found nothing, so a real ``ada`` package always wins) that provides stand-in modules.
Everything else in mmgen imports and works; StyleGAN2-ADA fails loudly when used.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from pathlib import Path

# mmcv 1.7's import-time notice about its 2.0 renaming: not actionable for a user of 1.7.2.
warnings.filterwarnings("ignore", message="On January 1, 2023, MMCV will release v2.0.0")

_ADA_PKG = "mmgen.models.architectures.stylegan.ada"
ADA_MESSAGE = (
    "StyleGAN2-ADA is unavailable: the mmgen 0.7.x releases on PyPI omit "
    "mmgen/models/architectures/stylegan/ada/ (AugmentPipe, constant). ADA (ADAAug, "
    "ADAStyleGAN2Discriminator with data_aug) needs mmgen from a source checkout of "
    "github.com/open-mmlab/mmgeneration that has this folder (e.g. pip install -e <clone>)."
)


class ADAUnavailableError(RuntimeError):
    """Raised when StyleGAN2-ADA code of mmgen 0.7.x (PyPI) is actually used."""


def _unavailable(*args, **kwargs):  # mmgen calls AugmentPipe(**aug) and constant(...)
    raise ADAUnavailableError(ADA_MESSAGE)


class _AdaStubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None  # default module creation

    def exec_module(self, module):
        name = module.__name__
        if name == _ADA_PKG:
            module.__path__ = []  # a package, so that .augment / .misc resolve through us
        elif name == _ADA_PKG + ".augment":
            module.AugmentPipe = _unavailable
        elif name == _ADA_PKG + ".misc":
            module.constant = _unavailable

        def __getattr__(attr, _name=name):
            if attr.startswith("__"):
                raise AttributeError(attr)
            raise ADAUnavailableError(f"{_name}.{attr}: {ADA_MESSAGE}")

        module.__getattr__ = __getattr__
        module.__mmgen_ada_stub__ = True


class _AdaStubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != _ADA_PKG and not fullname.startswith(_ADA_PKG + "."):
            return None
        return importlib.machinery.ModuleSpec(
            fullname, _AdaStubLoader(), is_package=(fullname == _ADA_PKG)
        )


def install_ada_stub():
    """Idempotent. Call before the first ``import mmgen.models`` / ``mmgen.apis``."""
    if not any(isinstance(f, _AdaStubFinder) for f in sys.meta_path):
        sys.meta_path.append(_AdaStubFinder())  # last: only when the real package is missing


def mmgen_root() -> Path | None:
    """The installed mmgen package's folder (None: not installed)."""
    spec = importlib.util.find_spec("mmgen")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def ada_available() -> bool:
    """Whether a real stylegan/ada package is installed (a source checkout of mmgen)."""
    root = mmgen_root()
    return root is not None and (root / "models" / "architectures" / "stylegan" / "ada").is_dir()


def uses_ada(value: object) -> bool:
    """Whether a recipe (an mmcv Config, as plain dicts) builds an ADA module."""
    if isinstance(value, dict):
        kind = value.get("type")
        if isinstance(kind, str) and kind.startswith("ADA"):
            return True
        return any(uses_ada(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(uses_ada(item) for item in value)
    return False


def import_mmgen() -> None:
    """Import mmgen's models and APIs once, with the ADA stand-in, mmcv/torch fixes and the
    faster sort in SWD (gan/sliced_wasserstein.py)."""
    install_ada_stub()
    import mmgen.apis
    import mmgen.core.evaluation.metrics
    import mmgen.models

    from experiments.gan import sliced_wasserstein

    sliced_wasserstein.install(mmgen.core.evaluation.metrics)
    _register_hooks()


def _register_hooks() -> None:
    from mmcv.runner import HOOKS, Hook

    if "CPUResumeHook" in HOOKS.module_dict:
        return

    @HOOKS.register_module()
    class CPUResumeHook(Hook):
        """Full resume (weights, both optimizers, iteration) mapped to the CPU: cfg.resume_from's
        map_location 'default' asks torch.cuda.current_device(), "Found no NVIDIA driver" on a
        CPU machine. Priority HIGHEST, so the timer and logger hooks see the restored iteration.
        """

        def __init__(self, checkpoint: str, map_location: str = "cpu") -> None:
            self.checkpoint = checkpoint
            self.map_location = map_location

        def before_run(self, runner) -> None:  # type: ignore[no-untyped-def]
            runner.resume(self.checkpoint, map_location=self.map_location)
