"""The random state of a training run as a checkpointable object, so that a resumed run is exact."""

from __future__ import annotations

import logging
import random
from typing import Any, Dict, List, Optional

import numpy as np
import torch
from ignite.engine import Engine, Events
from monai.transforms import Randomizable

__all__ = ["TrainerRandomState", "capture_random_state", "restore_random_state", "find_randomizables"]

logger = logging.getLogger(__name__)


def find_randomizables(root: Any) -> List[Randomizable]:
    """Every MONAI ``Randomizable`` reachable from ``root`` (a dataset, a ``Compose``, ...), in a fixed order.

    Walks attributes and lists/tuples the way :func:`monai.data.utils.set_rnd` does (which seeds the
    same objects when a ``DataLoader`` is built), descending into ``Compose`` children too.
    """
    found: List[Randomizable] = []
    seen: set = set()

    def visit(obj: Any) -> None:
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, np.ndarray, torch.Tensor)):
            return
        seen.add(id(obj))
        if isinstance(obj, (list, tuple)):
            for item in obj:
                visit(item)
            return
        if isinstance(obj, Randomizable):
            found.append(obj)
        for key, value in getattr(obj, "__dict__", {}).items():
            if not key.startswith("__"):
                visit(value)

    visit(root)
    return found


def _numpy_state(state: tuple) -> Dict[str, Any]:
    """A ``np.random.RandomState.get_state()`` tuple as tensors and numbers (``torch.load(weights_only=True)`` reads it)."""
    name, keys, pos, has_gauss, cached = state
    return {"name": str(name), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def _numpy_tuple(state: Dict[str, Any]) -> tuple:
    keys = np.asarray(torch.as_tensor(state["keys"]).numpy(), dtype=np.uint32)
    return (state["name"], keys, int(state["pos"]), int(state["has_gauss"]), float(state["cached_gaussian"]))


def _generators(loader: Any) -> List[torch.Generator]:
    """Explicit ``torch.Generator`` objects of a data loader and its sampler (none by default)."""
    out = []
    for obj in (loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
        gen = getattr(obj, "generator", None)
        if isinstance(gen, torch.Generator) and all(gen is not g for g in out):
            out.append(gen)
    return out


def capture_random_state(randomizables: List[Randomizable], generators: List[torch.Generator] = ()) -> Dict[str, Any]:
    """The global torch (CPU and CUDA), NumPy and Python generators plus the given transforms' and generators' states."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    version, internal, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": list(cuda),
        "numpy": _numpy_state(np.random.get_state()),
        "python": {"version": int(version), "state": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
        "transforms": [_numpy_state(t.R.get_state()) for t in randomizables],
        "generators": [g.get_state() for g in generators],
    }


def restore_random_state(state: Dict[str, Any], randomizables: List[Randomizable], generators: List[torch.Generator] = ()) -> None:
    """Set every generator captured by :func:`capture_random_state` back to ``state``."""
    torch.set_rng_state(torch.as_tensor(state["torch"], dtype=torch.uint8))
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    np.random.set_state(_numpy_tuple(state["numpy"]))
    py = state["python"]
    random.setstate((py["version"], tuple(int(v) for v in py["state"].tolist()), py["gauss"]))
    saved = state.get("transforms", [])
    if len(saved) != len(randomizables):
        raise ValueError(
            f"the checkpoint holds the random state of {len(saved)} random transform(s) but the training data "
            f"pipeline has {len(randomizables)}; resume with the same train#preprocessing as the checkpointed run."
        )
    for transform, s in zip(randomizables, saved):
        transform.R.set_state(_numpy_tuple(s))
    for gen, s in zip(generators, state.get("generators", [])):
        gen.set_state(s)


class TrainerRandomState:
    """``state_dict`` / ``load_state_dict`` of all the randomness of a trainer, for exact resume.

    Saved with the other training objects by :class:`~monai_npc.handlers.TrainCheckpoint` (key
    ``"random"``), it holds the global torch/NumPy/Python generators, the ``RandomState`` of
    every random transform of the trainer's dataset (e.g. :class:`~monai_npc.transforms.RandPairFlipd`)
    and explicit generators of its data loader. Because the shuffling sampler draws its order
    when ignite creates a data-loader iterator, which may span several epochs when
    ``epoch_length`` is shorter than the loader, it also records the state at the creation of
    the current iterator and how many batches were drawn from it; on resume the iterator is
    rebuilt from that state and advanced by as many batches before the saved state is restored.
    A resumed run then draws exactly the same batches and flips as one never interrupted.

    Args:
        engine: the trainer (an ignite ``Engine``; ``engine.data_loader`` or its ``state.dataloader``
            is the training loader).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._birth: Optional[Dict[str, Any]] = None
        self._consumed = 0
        setup = getattr(engine, "_setup_dataloader_iter", None)
        if callable(setup):  # record the random state each time ignite creates a data-loader iterator

            def _setup_dataloader_iter() -> None:
                self._birth, self._consumed = self._capture(), 0
                setup()

            engine._setup_dataloader_iter = _setup_dataloader_iter  # type: ignore[method-assign]
        else:  # pragma: no cover - ignite without this hook: exact at whole-loader epochs only
            logger.warning("ignite Engine has no _setup_dataloader_iter: resume is exact only when epochs cover the whole loader.")
        engine.add_event_handler(Events.GET_BATCH_COMPLETED, self._count)

    def _count(self, engine: Engine) -> None:
        self._consumed += 1

    def _loader(self) -> Any:
        return getattr(self.engine, "data_loader", None) or getattr(self.engine.state, "dataloader", None)

    def _objects(self):
        loader = self._loader()
        return find_randomizables(getattr(loader, "dataset", None)), _generators(loader)

    def _capture(self) -> Dict[str, Any]:
        return capture_random_state(*self._objects())

    def state_dict(self) -> Dict[str, Any]:
        return {"current": self._capture(), "loader_birth": self._birth, "loader_consumed": int(self._consumed)}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        transforms, generators = self._objects()
        birth, consumed = state_dict.get("loader_birth"), int(state_dict.get("loader_consumed", 0))
        loader = self._loader()
        try:
            length = len(loader)
        except TypeError:
            length = None
        if birth is not None and consumed > 0 and (length is None or consumed < length):
            # the saved run was part-way through a data-loader iterator: rebuild it at the same place
            restore_random_state(birth, transforms, generators)
            iterator = iter(loader)
            for _ in range(consumed):
                next(iterator)
            self.engine._dataloader_iter = iterator  # ignite uses it instead of creating a new one
            self._birth, self._consumed = birth, consumed
        restore_random_state(state_dict["current"], transforms, generators)
