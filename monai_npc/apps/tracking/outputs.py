"""The files of a tracking run (``monai-npc track``), each written atomically.

Into a folder: ``labels_4d.nii.gz`` (the tracked labels, uint8, the cine's own 4-D geometry),
``volumes.csv`` (frame, LV / RV cavity and myocardium volumes in mL, ED / ES flags),
``function.json`` (:attr:`~monai_npc.apps.tracking.track.Tracking.summary`: EDV, ESV, SV, EF, LV mass,
ED / ES found and, when known, the ED / ES of ``Info.cfg``) and ``function.png`` (volume curve
with ED / ES and a strip of frames with contours). The files go into a temporary folder beside
``out`` that replaces it as a whole when every file is complete
(:class:`monai_npc.io_safety.RunFolder`): a reader never sees half a file, and no file of an
earlier run (a ``function.png`` after ``--no-figure``) survives. ``function.json`` records what
was asked (``request``: inputs, frame, scheme, model, settings) so that a cohort run can tell a
finished study from one whose row changed. With ``strain``, the myocardial strain of the motion is
written beside them (:data:`~monai_npc.apps.tracking.strain_outputs.STRAIN_OUTPUTS`: ``strain.csv``,
``strain.json``, ``strain_curves.png``, ``strain_bullseye.png``) and its global peaks go into
``function.json`` (``strain``).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

import SimpleITK as sitk

from monai_npc.io_safety import RunFolder
from monai_npc.utils import as_json

from .strain_outputs import STRAIN_OUTPUTS
from .track import Tracking

if TYPE_CHECKING:
    from monai_npc.cardiac.strain import Strain

__all__ = ["TRACK_OUTPUTS", "ALL_OUTPUTS", "strain_peaks", "tracking_request", "write_tracking", "track_to_folder"]


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


#: every file a tracking folder may hold (a previous run's files are replaced as a whole)
ALL_OUTPUTS = tuple(TRACK_OUTPUTS.values()) + tuple(STRAIN_OUTPUTS.values())


def strain_peaks(st: "Strain") -> Dict[str, Any]:
    """The global figures of a :class:`~monai_npc.cardiac.strain.Strain` that ``function.json`` and a cohort row
    carry: peak circumferential / radial strain (%), their frames and times to peak."""
    glob = st.summary["global"]
    out: Dict[str, Any] = {"units": {"strain": "%", "time": st.time_unit}}
    for k in st.peak:
        out[k] = {"peak": glob[k]["peak"], "peak_frame": st.peak_frame[k], "time_to_peak": glob[k]["time_to_peak"]}
    return out


#: ``track`` keywords that do not change the result, left out of :func:`tracking_request`
_NOT_SETTINGS = ("device", "threads", "progress", "model_name")


def tracking_request(cine: Any, label: Any, label_frame: int, scheme: str, model: Any, strain: bool = False,
                     frame_ms: Optional[float] = None, **track_kwargs: Any) -> Dict[str, Any]:
    """What a tracking run was asked for, JSON-ready: the inputs (absolute paths, or how an in-memory
    input is named), the label's frame, the scheme, the model and the settings that change the result
    (not ``device``, ``threads`` or ``progress``; ``strain`` and ``frame_ms`` when strain is asked for).
    ``function.json`` records it as ``request``; a
    cohort study is done only when its folder holds the same request
    (:func:`~monai_npc.apps.tracking.cohort.study_done`)."""
    from monai_npc.interop.inputs import describe_input

    def name(x: Any) -> Optional[str]:
        return os.path.abspath(x) if isinstance(x, (str, os.PathLike)) else describe_input(x)

    settings = {k: v for k, v in track_kwargs.items() if k not in _NOT_SETTINGS}
    if strain:
        settings.update(strain=True, frame_ms=frame_ms)
    model_name = model if isinstance(model, str) and not os.path.exists(model) else track_kwargs.get("model_name") or name(model)
    request = {"cine": name(cine), "label": name(label), "label_frame": int(label_frame), "scheme": scheme, "model": model_name,
               "settings": settings}
    return as_json(request)  # as it reads back from function.json


def write_tracking(tracking: Tracking, out: Union[str, os.PathLike, RunFolder], info: Optional[Dict[str, int]] = None,
                   figure: bool = True, request: Optional[Dict[str, Any]] = None, strain: bool = False,
                   frame_ms: Optional[float] = None) -> Dict[str, str]:
    """Write :data:`TRACK_OUTPUTS` into ``out`` all at once (:class:`~monai_npc.io_safety.RunFolder`:
    ``out`` may only hold a previous run's files and is replaced as a whole); returns ``{key: path}``.

    ``info``: ``{"ed": k, "es": k}`` 0-based frames from ``Info.cfg`` (recorded in ``function.json``
    beside the frames found from the volume curve); ``request``: :func:`tracking_request`, recorded
    as ``request``. ``strain``: also the strain files (their figures with ``figure``); ``frame_ms``: time
    between frames in ms for their times (else frames).
    """
    folder = out if isinstance(out, RunFolder) else RunFolder(out, ALL_OUTPUTS)
    try:
        folder.put(TRACK_OUTPUTS["labels"], lambda p: sitk.WriteImage(tracking.label_image, str(p), True))
        folder.put(TRACK_OUTPUTS["volumes"], lambda p: _write_csv(tracking, p))
        summary = tracking.summary
        if request is not None:
            summary["request"] = request
        if info:
            summary["info_cfg"] = {**info, "ed_matches": info.get("ed") == tracking.function["ed_frame"],
                                   "es_matches": info.get("es") == tracking.function["es_frame"]}
        names = {k: v for k, v in TRACK_OUTPUTS.items() if figure or k != "figure"}
        if strain:
            from .strain import strain as strain_of
            from .strain_outputs import write_strain

            result = tracking.strain if frame_ms is None else strain_of(tracking, frame_ms=frame_ms)
            summary["strain"] = strain_peaks(result)
            names.update({f"strain_{k}": v for k, v in write_strain(result, folder, figures=figure).items()})
            names = {k: os.path.basename(v) for k, v in names.items()}
        summary["outputs"] = names
        folder.put(TRACK_OUTPUTS["function"], lambda p: p.write_text(json.dumps(summary, indent=2)))
        if figure:
            from .figures import function_figure

            f = tracking.function
            title = (f"LV EF {f['lv_ef']:.1f} %, RV EF {f['rv_ef']:.1f} %, LV mass {f['lv_mass_g']:.0f} g "
                     f"({tracking.scheme}, reference frame {tracking.reference_frame})")
            folder.put(TRACK_OUTPUTS["figure"], lambda p: function_figure(tracking.volumes, f["ed_frame"], f["es_frame"],
                                                                          tracking.cine.arrays(), tracking.labels, p, title=title,
                                                                          structures=tracking.structures))
        folder.commit()
    except BaseException:
        folder.discard()
        raise
    return {k: str(folder.out / v) for k, v in names.items()}


def track_to_folder(
    cine: Any, label: Any, out: Union[str, os.PathLike], label_frame: Optional[int] = None, scheme: Optional[str] = None,
    model: Any = "acdc", *, figure: bool = True, progress: bool = True, strain: bool = False, frame_ms: Optional[float] = None,
    **track_kwargs: Any,
) -> Tuple[Tracking, Dict[str, str]]:
    """:func:`~monai_npc.apps.tracking.track.track` one study and :func:`write_tracking` it into ``out``
    (what ``monai-npc track`` and each study of a cohort do); returns ``(tracking, {key: path})``.

    ``out`` is checked before any work (an existing file, or a folder holding files other than a
    previous run's, is a ``ValueError``). ``label_frame`` ``None``: the frame an ACDC label file
    names, else ED of an ACDC ``Info.cfg`` beside ``cine`` (``ED: n`` -> frame ``n - 1``), else 0
    (:func:`~monai_npc.apps.tracking.cine.label_frame`). ``scheme`` ``None``: the default. ``strain``,
    ``frame_ms``: as :func:`write_tracking`.
    """
    from .cine import info_frames
    from .schemes import DEFAULT_SCHEME
    from .track import track

    if cine is None or label is None:
        raise ValueError(f"tracking needs a cine and the label of one of its frames; got cine={cine!r}, label={label!r}.")
    folder = RunFolder(out, ALL_OUTPUTS)
    try:
        info = info_frames(str(cine)) if isinstance(cine, (str, os.PathLike)) else None
        scheme = scheme or DEFAULT_SCHEME
        result = track(cine, label, label_frame, scheme, model, progress=progress, **track_kwargs)
        request = tracking_request(cine, label, result.reference_frame, scheme, model, strain, frame_ms, **track_kwargs)
    except BaseException:
        folder.discard()
        raise
    return result, write_tracking(result, folder, info, figure=figure, request=request, strain=strain, frame_ms=frame_ms)
