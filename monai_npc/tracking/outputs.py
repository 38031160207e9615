"""The files of a tracking run (``monai-npc track``), each written atomically.

Into a folder: ``labels_4d.nii.gz`` (the tracked labels, uint8, the cine's own 4-D geometry),
``volumes.csv`` (frame, LV / RV cavity and myocardium volumes in mL, ED / ES flags),
``function.json`` (:attr:`~monai_npc.tracking.track.Tracking.summary`: EDV, ESV, SV, EF, LV mass,
ED / ES found and, when known, the ED / ES of ``Info.cfg``) and ``function.png`` (volume curve
with ED / ES and a strip of frames with contours). Every file is first written under a temporary
name in the same folder and renamed when complete (:func:`monai_npc.io_safety.atomic_write`), so
a reader never sees half a file.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import SimpleITK as sitk

from monai_npc.io_safety import atomic_write, make_folder

from .track import Tracking

__all__ = ["TRACK_OUTPUTS", "write_tracking", "track_to_folder"]

#: file names of :func:`write_tracking`
TRACK_OUTPUTS = {"labels": "labels_4d.nii.gz", "volumes": "volumes.csv", "function": "function.json", "figure": "function.png"}


def _write_csv(tracking: Tracking, path: Path) -> None:
    ed, es = tracking.function["ed_frame"], tracking.function["es_frame"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["frame", "lv_ml", "rv_ml", "myo_ml", "phase"])
        for t in range(len(tracking.cine)):
            phase = "ED" if t == ed else "ES" if t == es else ""
            w.writerow([t] + [f"{tracking.volumes[k][t]:.3f}" for k in ("lv", "rv", "myo")] + [phase])


def write_tracking(tracking: Tracking, out: Union[str, os.PathLike], info: Optional[Dict[str, int]] = None,
                   figure: bool = True) -> Dict[str, str]:
    """Write :data:`TRACK_OUTPUTS` into ``out`` (created); returns ``{key: path}``.

    ``info``: ``{"ed": k, "es": k}`` 0-based frames from ``Info.cfg`` (recorded in ``function.json``
    beside the frames found from the volume curve).
    """
    out = make_folder(out)
    paths = {k: out / v for k, v in TRACK_OUTPUTS.items()}
    atomic_write(paths["labels"], lambda p: sitk.WriteImage(tracking.label_image, str(p), True))
    atomic_write(paths["volumes"], lambda p: _write_csv(tracking, p))
    summary = tracking.summary
    if info:
        summary["info_cfg"] = {**info, "ed_matches": info.get("ed") == tracking.function["ed_frame"],
                               "es_matches": info.get("es") == tracking.function["es_frame"]}
    summary["outputs"] = {k: v.name for k, v in paths.items() if figure or k != "figure"}
    atomic_write(paths["function"], lambda p: p.write_text(json.dumps(summary, indent=2)))
    if figure:
        from .figures import function_figure

        f = tracking.function
        title = (f"LV EF {f['lv_ef']:.1f} %, RV EF {f['rv_ef']:.1f} %, LV mass {f['lv_mass_g']:.0f} g "
                 f"({tracking.scheme}, reference frame {tracking.reference_frame})")
        atomic_write(paths["figure"], lambda p: function_figure(tracking.volumes, f["ed_frame"], f["es_frame"],
                                                                 tracking.cine.arrays(), tracking.labels, p, title=title))
    else:
        del paths["figure"]
    return {k: str(v) for k, v in paths.items()}


def track_to_folder(
    cine: Any, label: Any, out: Union[str, os.PathLike], label_frame: Optional[int] = None, scheme: Optional[str] = None,
    model: Any = "acdc", *, figure: bool = True, progress: bool = True, **track_kwargs: Any,
) -> Tuple[Tracking, Dict[str, str]]:
    """:func:`~monai_npc.tracking.track.track` one study and :func:`write_tracking` it into ``out``
    (what ``monai-npc track`` and each study of a cohort do); returns ``(tracking, {key: path})``.

    ``label_frame`` ``None``: ED of an ACDC ``Info.cfg`` beside ``cine`` (``ED: n`` -> frame
    ``n - 1``, :func:`~monai_npc.tracking.cine.info_frames`), else frame 0. ``scheme`` ``None``: the default.
    """
    from .cine import info_frames
    from .schemes import DEFAULT_SCHEME
    from .track import track

    if cine is None or label is None:
        raise ValueError(f"tracking needs a cine and the label of one of its frames; got cine={cine!r}, label={label!r}.")
    info = info_frames(str(cine)) if isinstance(cine, (str, os.PathLike)) else None
    frame = label_frame if label_frame is not None else (info["ed"] if info else 0)
    result = track(cine, label, frame, scheme or DEFAULT_SCHEME, model, progress=progress, **track_kwargs)
    return result, write_tracking(result, out, info, figure=figure)
