"""The bundles' data arguments: ``dataset`` / ``dataset_dir`` / ``phantom_dir`` -> a data folder and pair items.

:func:`prepare_dataset_dir` returns ``dataset_dir``, or writes phantom patients of the dataset
on first use when none is given (so that every bundle config runs out of the box);
:func:`load_pairs` builds the pair items of one split. Both find the dataset in the registry
(:mod:`monai_npc.data.datasets`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from monai_npc.runtime import on_rank_zero

from .datasets import dataset_spec

__all__ = ["prepare_dataset_dir", "load_pairs"]

logger = logging.getLogger(__name__)


def prepare_dataset_dir(
    dataset_dir: Optional[Union[str, Path]],
    dataset: str = "acdc",
    phantom_dir: Optional[Union[str, Path]] = None,
    patients: int = 12,
    first_id: int = 1,
    seed: int = 0,
    max_slices: Optional[int] = None,
) -> Path:
    """The data folder a bundle reads: ``dataset_dir`` when given, else phantom patients.

    Args:
        dataset_dir: folder in a supported layout of ``dataset`` (see ``docs/data.md``); ``None``
            or ``""`` selects the phantom fallback.
        dataset: a name of :data:`~monai_npc.data.datasets.DATASETS` (``"acdc"``, ``"camus"``).
        phantom_dir: parent folder of the phantom cache; the phantoms go to
            ``phantom_dir/{dataset}_seed{seed}_patients{first}-{last}[_slices{max_slices}]`` and are
            written once (a ``.complete`` marker records them) and reused afterwards.
        patients, first_id, seed, max_slices: phantom patients ``first_id .. first_id+patients-1``
            (the dataset's phantom writer, :func:`~monai_npc.data.write_acdc_phantom` /
            :func:`~monai_npc.data.write_camus_phantom`); ``max_slices`` caps the slices per patient
            where the writer takes it (ACDC; quick runs).

    Raises:
        FileNotFoundError: ``dataset_dir`` is given but is not a folder.
        ValueError: unknown ``dataset``, or no ``dataset_dir`` and no ``phantom_dir`` (or no phantom
            writer for ``dataset``).
    """
    spec = dataset_spec(dataset)
    if dataset_dir not in (None, ""):
        path = Path(str(dataset_dir)).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(
                f"dataset_dir={str(dataset_dir)!r} is not a folder; pass --dataset_dir pointing to the {dataset.upper()} "
                f"data (see docs/README.md of the bundle), or leave it unset to use phantom data."
            )
        return path
    if phantom_dir in (None, ""):
        raise ValueError("no dataset_dir given and no phantom_dir to write phantom data to.")
    if spec.phantom is None:
        raise ValueError(f"no dataset_dir given and dataset {dataset!r} has no phantom data to fall back on.")
    patients, first_id = int(patients), int(first_id)
    name = f"{dataset}_seed{int(seed)}_patients{first_id}-{first_id + patients - 1}"
    if max_slices is not None and spec.phantom_max_slices:
        name += f"_slices{int(max_slices)}"
    out = Path(str(phantom_dir)).expanduser() / name
    marker = out / ".complete"

    def write() -> None:
        if marker.is_file():
            return
        logger.info("dataset_dir not set: writing %d %s phantom patients to %s", patients, dataset.upper(), out)
        out.mkdir(parents=True, exist_ok=True)
        kwargs: Dict[str, Any] = dict(patients=patients, seed=int(seed), first_id=first_id, progress=False)
        if spec.phantom_max_slices and max_slices is not None:
            kwargs["max_slices"] = int(max_slices)
        spec.phantom_writer()(out, **kwargs)
        marker.write_text(json.dumps({"dataset": dataset, **{k: v for k, v in kwargs.items() if k != "progress"}}))

    on_rank_zero(write, f"writing the phantom data to {out}")  # under torchrun only rank 0 writes; the others wait
    return out


def load_pairs(
    dataset: str,
    root: Union[str, Path],
    split: str = "all",
    max_pairs: Optional[int] = None,
    **kwargs: Any,
) -> List[Dict]:
    """Pair items of one split of ``root`` by the pair builder of ``dataset`` in
    :data:`~monai_npc.data.datasets.DATASETS` (:func:`~monai_npc.data.build_acdc_pairs`,
    :func:`~monai_npc.data.build_camus_pairs`), optionally only the first ``max_pairs``.

    ``kwargs`` go to the builder (``roi_size``, ``n_train``, ``n_val``, ``n_test``, ``seed``,
    ``directions``, ...). ``split="all"`` takes every patient of the folder. Errors of the
    builder are re-raised naming ``dataset_dir`` and the split.
    """
    build = dataset_spec(dataset).pair_builder()
    kwargs = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kwargs.items()}
    try:
        pairs = build(root, split=split, **kwargs)
    except (FileNotFoundError, ValueError) as err:
        raise type(err)(f"dataset_dir={str(root)!r} (split {split!r}): {err}") from err
    if max_pairs is not None:
        if int(max_pairs) < 1:
            raise ValueError(f"max_pairs must be >= 1 or None, got {max_pairs}.")
        pairs = pairs[: int(max_pairs)]
    if not pairs:
        raise ValueError(f"dataset_dir={str(root)!r} (split {split!r}) gave no registration pairs.")
    return pairs
