"""4-D short-axis cines as a list of 3-D frames on one grid, and 4-D images back in their geometry.

Accepted inputs (:func:`read_cine`):

- a 4-D image file (NIfTI ``*_4d.nii.gz`` ``(X, Y, Z, T)``, MHA/NRRD) or a 4-D ``sitk.Image``;
- a cine DICOM series folder (several phases per slice position, trigger-time order), read phase
  by phase with :func:`monai_npc.data.io.read_dicom_folder`;
- a sequence of 3-D frames (``sitk.Image`` or paths) on one grid;
- a MONAI ``LoadImage`` ``MetaTensor`` or a nibabel image of a 4-D NIfTI, ``(X, Y, Z, T)`` in index
  order (each frame keeps the geometry :func:`monai_npc.register` reads from it);
- a numpy array / plain torch tensor ``(T, Z, H, W)`` in array order with ``spacing`` ``(Z, H, W)``
  mm (origin 0, identity direction).

Frames are float32 ``sitk.Image`` (LPS mm); labels are checked against the frame grid.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import SimpleITK as sitk
import torch

__all__ = ["Cine", "read_cine", "read_frame_label", "info_frames", "named_frame", "label_frame"]

logger = logging.getLogger(__name__)

CineLike = Union[str, os.PathLike, sitk.Image, np.ndarray, torch.Tensor, Sequence[Any]]


@dataclass
class Cine:
    """``T`` 3-D frames on one grid.

    Attributes:
        frames: ``T`` float32 ``sitk.Image`` ``(X, Y, Z)`` sharing size, spacing, origin, direction.
        source: how errors and summaries name the input.
        geometry4d: ``{"spacing", "origin", "direction"}`` of a 4-D input (4 / 4 / 16 values), so
            that 4-D outputs reproduce its header; ``None`` for other inputs (time spacing 1).
    """

    frames: List[sitk.Image]
    source: str
    geometry4d: Optional[Dict[str, tuple]] = field(default=None)

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def spacing(self) -> tuple:
        """mm per voxel in array order ``(Z, H, W)``."""
        return tuple(float(s) for s in self.frames[0].GetSpacing()[::-1])

    def arrays(self) -> np.ndarray:
        """``(T, Z, H, W)`` float32 intensities."""
        return np.stack([sitk.GetArrayFromImage(f) for f in self.frames]).astype(np.float32)

    def to_4d(self, arrays: np.ndarray) -> sitk.Image:
        """``(T, Z, H, W)`` values as a 4-D ``sitk.Image`` ``(X, Y, Z, T)`` with the cine's geometry."""
        arr = np.asarray(arrays)
        if arr.shape[0] != len(self) or arr.shape[1:] != sitk.GetArrayFromImage(self.frames[0]).shape:
            raise ValueError(f"arrays of shape {arr.shape} do not fit {self.source}: {len(self)} frames of {self.frames[0].GetSize()[::-1]}.")
        frames = []
        for a in arr:
            img = sitk.GetImageFromArray(np.ascontiguousarray(a))
            img.CopyInformation(self.frames[0])
            frames.append(img)
        out = sitk.JoinSeries(frames)
        if self.geometry4d is not None:
            out.SetSpacing(self.geometry4d["spacing"])
            out.SetOrigin(self.geometry4d["origin"])
            out.SetDirection(self.geometry4d["direction"])
        return out


def _frames_of_4d(image: sitk.Image) -> List[sitk.Image]:
    size = list(image.GetSize())
    return [sitk.Cast(sitk.Extract(image, size[:3] + [0], [0, 0, 0, t]), sitk.sitkFloat32) for t in range(size[3])]


def _dicom_phases(folder: Path) -> int:
    """Number of cardiac phases of a cine DICOM series folder (files per slice position)."""
    from monai_npc.data.io import dicom_headers, position_along_normal

    counts: Dict[float, int] = {}
    for _, ds in dicom_headers(folder):
        z = position_along_normal(ds)
        key = round(z, 3) if z is not None else float("nan")
        counts[key] = counts.get(key, 0) + 1
    return max(counts.values()) if counts else 0


def _check_grid(frames: List[sitk.Image], source: str) -> None:
    from monai_npc.interop.images import grid_mismatch

    if len(frames) < 2:
        raise ValueError(f"cine {source} has {len(frames)} frame(s); tracking needs at least 2.")
    for t, f in enumerate(frames):
        if f.GetDimension() != 3:
            raise ValueError(f"cine {source}: frame {t} is {f.GetDimension()}-D; frames must be 3-D (X, Y, Z) stacks.")
        problem = grid_mismatch(f, frames[0])
        if problem is not None:
            raise ValueError(f"cine {source}: frame {t} is not on frame 0's grid ({problem}).")


def read_cine(cine: CineLike, spacing: Optional[Sequence[float]] = None, what: str = "cine") -> Cine:
    """Read a 4-D cine (see the module docstring) as :class:`Cine`.

    Raises:
        FileNotFoundError: a missing file or folder.
        ValueError: a 3-D (or 5-D) input, frames on different grids, fewer than 2 frames.
    """
    from monai_npc.interop.inputs import as_image, describe_input

    geometry4d = None
    if isinstance(cine, (str, os.PathLike)):
        path = Path(cine)
        source = str(path)
        if not path.exists():
            raise FileNotFoundError(f"{what} {path} does not exist.")
        if path.is_dir():
            from monai_npc.data.io import read_dicom_folder

            n = _dicom_phases(path)
            if n < 2:
                raise ValueError(f"{what} {path}: not a cine DICOM series (one file per slice position); a 4-D cine is needed.")
            frames = [sitk.Cast(read_dicom_folder(path, {"phase": k}, what), sitk.sitkFloat32) for k in range(n)]
        else:
            from monai_npc.data.io import read_sitk_file

            image = read_sitk_file(path, what)
            if image.GetDimension() != 4:
                raise ValueError(
                    f"{what} {path} is {image.GetDimension()}-D (size {image.GetSize()}); a cine must be 4-D (X, Y, Z, T), "
                    "e.g. ACDC's patientNNN_4d.nii.gz. For one frame use monai_npc.register."
                )
            geometry4d = {"spacing": image.GetSpacing(), "origin": image.GetOrigin(), "direction": image.GetDirection()}
            frames = _frames_of_4d(image)
    elif isinstance(cine, sitk.Image):
        source = f"<in-memory {cine.GetDimension()}-D sitk.Image>"
        if cine.GetDimension() != 4:
            raise ValueError(f"{what} {source} (size {cine.GetSize()}) must be 4-D (X, Y, Z, T).")
        geometry4d = {"spacing": cine.GetSpacing(), "origin": cine.GetOrigin(), "direction": cine.GetDirection()}
        frames = _frames_of_4d(cine)
    elif isinstance(cine, torch.Tensor) and getattr(cine, "affine", None) is not None:  # MONAI LoadImage MetaTensor
        mt = cine[0] if cine.ndim == 5 and cine.shape[0] == 1 else cine  # channel-first (1, X, Y, Z, T)
        source = f"{describe_input(cine)[:-1]} {tuple(mt.shape)}>"
        if mt.ndim != 4:
            raise ValueError(f"{what} {source} must be 4-D (X, Y, Z, T), as MONAI LoadImage reads a 4-D NIfTI.")
        frames = [as_image(mt[..., t], f"{what} frame {t}") for t in range(mt.shape[-1])]
    elif hasattr(cine, "affine") and hasattr(cine, "slicer") and hasattr(cine, "dataobj"):  # nibabel image
        source = f"{describe_input(cine)[:-1]} {tuple(cine.shape)}>"
        if len(cine.shape) != 4:
            raise ValueError(f"{what} {source} must be 4-D (X, Y, Z, T).")
        frames = [as_image(cine.slicer[..., t], f"{what} frame {t}") for t in range(cine.shape[3])]
    elif isinstance(cine, (np.ndarray, torch.Tensor)):
        arr = cine.detach().cpu().numpy() if isinstance(cine, torch.Tensor) else np.asarray(cine)
        source = f"<in-memory array {tuple(arr.shape)}>"
        if arr.ndim != 4:
            raise ValueError(f"{what}: expected a 4-D array (T, Z, H, W), got shape {arr.shape}.")
        frames = [as_image(a, f"{what} frame {t}", spacing) for t, a in enumerate(arr)]
    elif isinstance(cine, Sequence):
        source = f"<{len(cine)} frames>"
        frames = [as_image(f, f"{what} frame {t}", spacing) for t, f in enumerate(cine)]
    else:
        raise TypeError(f"{what}: expected a 4-D file, a DICOM folder, a 4-D sitk.Image, a (T, Z, H, W) array or a list of frames, got {type(cine).__name__}.")
    _check_grid(frames, source)
    return Cine(frames, source, geometry4d)


def read_frame_label(label: Any, cine: Cine, frame: int) -> np.ndarray:
    """The label map of frame ``frame`` as ``(Z, H, W)`` int32, checked against the cine's grid.

    ``label``: a 3-D file / ``sitk.Image`` on the frame grid, a ``(Z, H, W)`` array (given the
    frame's geometry), or a 4-D one with the cine's frames (its frame ``frame`` is used).
    """
    from monai_npc.interop.inputs import as_image, describe_input
    from monai_npc.interop.images import check_label

    if not 0 <= frame < len(cine):
        raise ValueError(f"label frame {frame} is out of range: cine {cine.source} has {len(cine)} frames (0..{len(cine) - 1}).")
    name = describe_input(label)
    if isinstance(label, (str, os.PathLike)) and Path(label).is_file():
        from monai_npc.data.io import read_sitk_file

        img = read_sitk_file(Path(label), "label")
        label = _frames_of_4d(img)[frame] if img.GetDimension() == 4 else img  # read once
    elif isinstance(label, sitk.Image) and label.GetDimension() == 4:
        label = _frames_of_4d(label)[frame]
    elif isinstance(label, torch.Tensor) and getattr(label, "affine", None) is not None:  # MONAI LoadImage MetaTensor
        mt = label[0] if label.ndim in (4, 5) and label.shape[0] == 1 else label  # channel-first
        label = mt[..., frame] if mt.ndim == 4 else mt  # (X, Y, Z, T): that frame; as_image keeps its geometry
    elif isinstance(label, (np.ndarray, torch.Tensor)) and np.ndim(label) == 4:
        label = np.asarray(label)[frame]
    if isinstance(label, (np.ndarray, torch.Tensor)) and getattr(label, "affine", None) is None:  # array order (Z, H, W): the frame's own geometry
        arr = label.detach().cpu().numpy() if isinstance(label, torch.Tensor) else np.asarray(label)
        shape = sitk.GetArrayFromImage(cine.frames[frame]).shape
        if arr.shape != shape:
            raise ValueError(f"label {name} has shape {arr.shape}; frame {frame} of cine {cine.source} has (Z, H, W) = {shape}.")
        image = sitk.GetImageFromArray(np.ascontiguousarray(arr, dtype=np.float32))
        image.CopyInformation(cine.frames[frame])
    else:
        image = as_image(label, "label")
    return sitk.GetArrayFromImage(check_label(image, cine.frames[frame], f"label {name}", f"frame {frame} of cine {cine.source}"))


def info_frames(cine: str) -> Optional[Dict[str, int]]:
    """``{"ed", "es"}`` 0-based frames from an ACDC ``Info.cfg`` beside (or in) ``cine``, else ``None``."""
    from monai_npc.data.layout import cfg_frame, read_cfg

    path = Path(cine)
    cfg = (path if path.is_dir() else path.parent) / "Info.cfg"
    if not cfg.is_file():
        return None
    info = read_cfg(cfg)
    try:
        return {"ed": cfg_frame(info, "ED", cfg) - 1, "es": cfg_frame(info, "ES", cfg) - 1}
    except ValueError:
        return None


#: an ACDC label file's frame, 1-based: ``patient090_frame04_gt.nii.gz`` is frame 3 (``..._frameNN_gt.<ext>`` only)
_ACDC_FRAME = re.compile(r"_frame(\d+)_gt\.", re.IGNORECASE)


def _number_in_name(label: Any) -> Optional[int]:
    """The frame number (from 1) in an ACDC label file's name (``..._frameNN_gt.<ext>``), else ``None``."""
    match = _ACDC_FRAME.search(Path(label).name) if isinstance(label, (str, os.PathLike)) else None
    return int(match.group(1)) if match else None


def _info(cine: Any) -> Optional[Dict[str, int]]:
    return info_frames(str(cine)) if isinstance(cine, (str, os.PathLike)) else None


def named_frame(label: Any, cine: Any) -> Optional[int]:
    """The 0-based frame an ACDC-layout label file names (``..._frameNN_gt...``: ``NN - 1``), when
    ``cine`` is an ACDC cine (an ``Info.cfg`` beside it); else ``None``."""
    number = _number_in_name(label)
    return number - 1 if number is not None and _info(cine) is not None else None


def label_frame(cine: Any, label: Any, frame: Optional[int] = None) -> Tuple[int, str]:
    """The 0-based frame ``label`` belongs to, and why: ``frame`` when given, else the frame an ACDC
    label file names (:func:`named_frame`), else ED of an ACDC ``Info.cfg`` beside ``cine``
    (:func:`info_frames`), else 0. A given ``frame`` that differs from the one the file names is
    kept, with a warning naming both; so is frame 0 for an ACDC-style name without an ``Info.cfg``."""
    info, number = _info(cine), _number_in_name(label)
    named = number - 1 if number is not None and info is not None else None
    if frame is not None:
        if named is not None and named != int(frame):
            logger.warning("label %s is named for frame %d (0-based; ACDC numbers frames from 1) but is used as frame %d, as asked.",
                           label, named, int(frame))
        return int(frame), "given"
    if named is not None:
        return named, f"named by the label file (ACDC frame {number})"
    if info is not None:
        return info["ed"], "ED of Info.cfg"
    if number is not None:  # an ACDC-style name, but no Info.cfg says the cine numbers frames as ACDC does
        logger.warning("label %s is named for frame %02d, but there is no Info.cfg beside the cine to confirm ACDC's numbering "
                       "(from 1): it is used as frame 0; give the frame (--label-frame / reference_frame) if it belongs to another.",
                       label, number)
    return 0, "default (frame 0)"
