"""The files of a strain result: ``strain.csv``, ``strain.json``, ``strain_curves.png``, ``strain_bullseye.png``.

- ``strain.csv``: one row per frame: ``frame``, ``time`` (ms, or the frame number), the global
  circumferential and radial strain, then each AHA segment's circumferential
  (``seg01_circumferential`` ... ``seg16_circumferential``) and radial strain (percent, 3
  decimals; empty where a segment has no voxels).
- ``strain.json``: :attr:`~monai_npc.cardiac.strain.Strain.summary` (units, reference frame,
  global peaks, time to peak, peak strain rate and curves, per-segment peaks, the AHA placement).
- ``strain_curves.png``: :func:`~monai_npc.viz.strain.strain_curves_figure`.
- ``strain_bullseye.png``: :func:`~monai_npc.viz.strain.strain_bullseye_figure` of the per-segment peaks.

Every file is written atomically: into an :class:`~monai_npc.io_safety.AtomicFolder` (a tracking
run's folder, committed by its owner) or, given a path, each file on its own into that folder.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Dict, Optional, Union

import numpy as np

from monai_npc.io_safety import AtomicFolder, atomic_write, make_folder

from monai_npc.cardiac.strain import STRAIN_COMPONENTS, Strain

__all__ = ["STRAIN_OUTPUTS", "strain_csv_header", "write_strain"]

#: file names of :func:`write_strain`
STRAIN_OUTPUTS = {"csv": "strain.csv", "json": "strain.json", "curves": "strain_curves.png", "bullseye": "strain_bullseye.png"}


def strain_csv_header() -> list:
    """The columns of ``strain.csv``."""
    return (["frame", "time"] + [f"global_{c}" for c in STRAIN_COMPONENTS]
            + [f"seg{s:02d}_{c}" for c in STRAIN_COMPONENTS for s in range(1, 17)])


def _cell(v: float) -> str:
    return "" if not math.isfinite(v) else f"{v:.3f}"


def _write_csv(strain: Strain, path: Path) -> None:
    times = strain.times
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(strain_csv_header())
        for t in range(strain.frames):
            row = [t, f"{times[t]:g}"] + [_cell(float(strain.curves[c][t])) for c in STRAIN_COMPONENTS]
            row += [_cell(float(strain.segment_curves[c][t, s])) for c in STRAIN_COMPONENTS for s in range(16)]
            w.writerow(row)


def write_strain(strain: Strain, out: Union[str, os.PathLike, AtomicFolder], figures: bool = True, title: Optional[str] = None) -> Dict[str, str]:
    """Write :data:`STRAIN_OUTPUTS` (the figures only with ``figures``) into ``out``; returns ``{key: path}``.

    ``out``: a folder (created if needed; other files in it are left alone) or an
    :class:`~monai_npc.io_safety.AtomicFolder` that the caller commits. ``title``: of the figures.
    """
    folder = out if isinstance(out, AtomicFolder) else None
    base = folder.out if folder is not None else make_folder(Path(out))

    def put(name: str, writer) -> None:
        if folder is not None:
            folder.put(name, writer)
        else:
            atomic_write(base / name, writer)

    names = {k: v for k, v in STRAIN_OUTPUTS.items() if figures or k in ("csv", "json")}
    summary = strain.summary
    summary["outputs"] = names
    put(names["csv"], lambda p: _write_csv(strain, p))
    put(names["json"], lambda p: Path(p).write_text(json.dumps(summary, indent=2, allow_nan=False)))
    if figures:
        from monai_npc.viz.strain import strain_bullseye_figure, strain_curves_figure

        peaks = strain.segments
        label = "time (ms)" if strain.time_unit == "ms" else "frame"
        head = title or (f"{'engineering' if strain.kind == 'engineering' else 'Green-Lagrange'} strain, reference frame "
                         f"{strain.reference_frame}")
        put(names["curves"], lambda p: strain_curves_figure(strain.times, strain.curves, p, strain.segment_curves, strain.reference_frame,
                                                            label, title=head))
        put(names["bullseye"], lambda p: strain_bullseye_figure({c: np.array([peaks[s][c] for s in range(1, 17)]) for c in STRAIN_COMPONENTS},
                                                                p, title=head))
    return {k: str(base / v) for k, v in names.items()}
