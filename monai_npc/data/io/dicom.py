"""DICOM: recognising DICOM files and reading one series, phase, slice or instance of a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from .formats import PathLike
from .selection import parse_select
from .sitk_file import itk_error_line, read_sitk_file, to_grayscale

__all__ = ["is_dicom_file", "dicom_headers", "position_along_normal", "read_dicom_folder"]


def is_dicom_file(path: Path) -> bool:
    """Whether ``path`` is a DICOM file: a ``.dcm`` ending or a DICOM preamble (``False`` when unreadable)."""
    if path.suffix.lower() == ".dcm":
        return True
    try:
        import pydicom.misc

        return bool(pydicom.misc.is_dicom(str(path)))
    except Exception:  # pragma: no cover - unreadable header: let the reader report it
        return False


def dicom_headers(folder: Path) -> List[Tuple[Path, Any]]:
    """``(file, pydicom dataset without pixels)`` for every DICOM file directly in ``folder``."""
    import pydicom
    from pydicom.errors import InvalidDicomError

    out = []
    for f in sorted(p for p in folder.iterdir() if p.is_file()):
        try:
            ds = pydicom.dcmread(str(f), stop_before_pixels=True)
        except (InvalidDicomError, OSError, EOFError, ValueError):
            continue
        if "PixelData" in ds or getattr(ds, "Rows", None):
            out.append((f, ds))
    return out


def position_along_normal(ds) -> Optional[float]:
    """A DICOM image's position along its slice normal (mm; ``ImagePositionPatient`` projected on the
    cross product of ``ImageOrientationPatient``'s row and column), or ``None`` when either tag is absent."""
    iop, ipp = getattr(ds, "ImageOrientationPatient", None), getattr(ds, "ImagePositionPatient", None)
    if iop is None or ipp is None:
        return None
    normal = np.cross(np.asarray(iop[:3], float), np.asarray(iop[3:], float))
    return float(np.dot(normal, np.asarray(ipp, float)))


def _phase_key(ds) -> Tuple[float, int]:
    trigger = getattr(ds, "TriggerTime", None)
    return (float(trigger) if trigger not in (None, "") else float("nan"), int(getattr(ds, "InstanceNumber", 0) or 0))


def read_dicom_folder(folder: PathLike, select: Union[None, str, Mapping[str, Any]] = None, what: str = "image"):
    """Read a DICOM folder with SimpleITK, picking one series, phase, slice or instance.

    A plain series (one file per slice position) is read as a volume ``(x, y, slice)``, slices
    sorted along the slice normal. A cine series (several files per position: cardiac phases,
    as scanners store short-axis cines in one series) must be narrowed with ``select``:
    ``phase=K`` (0-based, trigger-time order) or ``trigger_time=MS`` -> the volume of that phase;
    add ``slice=K`` for one slice; ``instance=N`` -> the one file with that InstanceNumber. A
    single file or slice is a one-slice 3-D image at its position.

    Raises:
        FileNotFoundError: an empty folder or one without DICOM files.
        ValueError: several series without ``series=UID``, a cine without a phase, positions
            that are not equally spaced, a selection that matches nothing; each names the folder
            and lists what it holds.
    """
    import SimpleITK as sitk

    folder = Path(folder)
    select = parse_select(select)
    where = f"{what} {folder}"
    files = dicom_headers(folder)
    if not files:
        raise FileNotFoundError(f"{where}: the folder holds no DICOM image files.")
    series: Dict[str, List[Tuple[Path, Any]]] = {}
    for f, ds in files:
        series.setdefault(str(getattr(ds, "SeriesInstanceUID", "")), []).append((f, ds))
    if "series" in select:
        if select["series"] not in series:
            raise ValueError(f"{where} has no series {select['series']}; it holds {sorted(series)}.")
        files = series[select["series"]]
    elif len(series) > 1:
        listing = "; ".join(
            f"{uid} ({len(v)} files, {getattr(v[0][1], 'SeriesDescription', '') or 'no description'})" for uid, v in series.items()
        )
        raise ValueError(f"{where} holds {len(series)} series: {listing}. Pick one with series=UID.")
    if "frame" in select:
        raise ValueError(f"{where}: frame=K applies to a file; in a folder use phase=K, slice=K or instance=N.")
    if "instance" in select:
        match = [f for f, ds in files if int(getattr(ds, "InstanceNumber", -1) or -1) == select["instance"]]
        if len(match) != 1:
            numbers = sorted(int(getattr(ds, "InstanceNumber", 0) or 0) for _, ds in files)
            raise ValueError(
                f"{where}: {len(match)} files have InstanceNumber {select['instance']} "
                f"(it holds instance numbers {numbers[0]}..{numbers[-1]})."
            )
        return to_grayscale(read_sitk_file(match[0], what))
    # group by slice position; within a position, files are phases in trigger-time order
    positions: Dict[float, List[Tuple[Path, Any]]] = {}
    for f, ds in files:
        z = position_along_normal(ds)
        if z is None:
            raise ValueError(f"{where}: {f.name} lacks ImagePositionPatient/ImageOrientationPatient; pick a file with instance=N.")
        positions.setdefault(round(z, 3), []).append((f, ds))
    zs = sorted(positions)
    for z in zs:
        positions[z].sort(key=lambda item: _phase_key(item[1]))
    phases = {len(v) for v in positions.values()}
    n_phases = max(phases)
    if n_phases > 1:
        if len(phases) > 1:
            raise ValueError(f"{where}: slice positions hold different numbers of files ({sorted(phases)}); pick one with instance=N.")
        times = [_phase_key(ds)[0] for _, ds in positions[zs[0]]]
        if "phase" in select:
            k = select["phase"]
            if not 0 <= k < n_phases:
                raise ValueError(f"{where}: phase={k} is out of range; the cine has {n_phases} phases (0..{n_phases - 1}).")
        elif "trigger_time" in select:
            if np.isnan(times).all():
                raise ValueError(f"{where}: its files carry no TriggerTime; use phase=K or instance=N.")
            k = int(np.nanargmin(np.abs(np.asarray(times) - select["trigger_time"])))
        else:
            span = f"trigger times {np.nanmin(times):g}..{np.nanmax(times):g} ms" if not np.isnan(times).all() else "no trigger times"
            raise ValueError(
                f"{where} holds a cine series: {n_phases} phases x {len(zs)} slice position(s) in one series ({span}). "
                f"Pick one phase with phase=K (0..{n_phases - 1}) or trigger_time=MS, optionally slice=K "
                f"(0..{len(zs) - 1}), or one file with instance=N (command line: --moving-select / --fixed-select)."
            )
        chosen = [positions[z][k] for z in zs]
    else:
        if "phase" in select and select["phase"] != 0 or "trigger_time" in select:
            raise ValueError(f"{where} is not a cine series (one file per slice position); drop phase/trigger_time.")
        chosen = [positions[z][0] for z in zs]
    if "slice" in select:
        k = select["slice"]
        if not 0 <= k < len(chosen):
            raise ValueError(f"{where}: slice={k} is out of range; it has {len(chosen)} slice position(s) (0..{len(chosen) - 1}).")
        chosen = [chosen[k]]
    if len(chosen) == 1:
        return to_grayscale(read_sitk_file(chosen[0][0], what))
    gaps = np.diff(sorted(positions))
    if np.ptp(gaps) > 1e-2 * max(abs(float(gaps.mean())), 1e-6):
        raise ValueError(
            f"{where}: slice positions are not equally spaced (gaps {', '.join(f'{g:.2f}' for g in gaps)} mm): "
            f"missing slices? Pick one slice with slice=K."
        )
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames([str(f) for f, _ in chosen])
    try:
        return reader.Execute()
    except RuntimeError as err:
        raise ValueError(f"cannot read {where}: {itk_error_line(err)}") from None
