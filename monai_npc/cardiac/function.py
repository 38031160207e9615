"""Cardiac function from label maps: volumes, ED/ES, EDV, ESV, SV, EF and LV myocardial mass.

Pure numpy functions. Units: spacing in mm, volumes in mL (1 mL = 1000 mm^3), mass in g,
ejection fraction in percent (points). Label maps follow ACDC (:data:`ACDC_STRUCTURES`: 1 RV
cavity, 2 LV myocardium, 3 LV cavity, papillary muscles inside the LV cavity label).
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

__all__ = [
    "ACDC_STRUCTURES",
    "ABSENT_STRUCTURE",
    "structure_values",
    "MYOCARDIUM_DENSITY",
    "voxel_volume_ml",
    "structure_volumes",
    "volume_curves",
    "find_ed_es",
    "stroke_volume",
    "ejection_fraction",
    "myocardial_mass",
    "cardiac_function",
    "agreement",
]

#: structure name -> label value (ACDC)
ACDC_STRUCTURES: Dict[str, int] = {"rv": 1, "myo": 2, "lv": 3}
#: the value of a structure a label does not hold: no voxel has it, so its volume is 0 and no basal rule acts on it
ABSENT_STRUCTURE = -1


def structure_values(named: Optional[Mapping[str, int]]) -> Dict[str, int]:
    """Every name of :data:`ACDC_STRUCTURES` -> its value in a label numbered as ``named`` says (``{"lv": 1, "myo": 2,
    "rv": 3}`` for M&Ms; a name it leaves out: :data:`ABSENT_STRUCTURE`); ``None`` or empty: ACDC's own values."""
    if not named:
        return dict(ACDC_STRUCTURES)
    return {name: int(named.get(name, ABSENT_STRUCTURE)) for name in ACDC_STRUCTURES}

#: myocardial tissue density, g/mL (the value cardiac MRI software uses)
MYOCARDIUM_DENSITY = 1.05


def voxel_volume_ml(spacing: Sequence[float]) -> float:
    """Volume of one voxel in mL from its spacing in mm (any order; the product is used)."""
    sp = np.asarray(spacing, dtype=np.float64)
    if sp.size == 0 or (sp <= 0).any() or not np.isfinite(sp).all():
        raise ValueError(f"spacing {tuple(sp.tolist())} mm must be positive and finite.")
    return float(np.prod(sp) / 1000.0)


def structure_volumes(label: np.ndarray, spacing: Sequence[float], structures: Mapping[str, int] = ACDC_STRUCTURES) -> Dict[str, float]:
    """Volume in mL of each structure of one label map.

    Args:
        label: integer label map of any shape (e.g. ``(Z, H, W)``).
        spacing: mm per voxel along each axis of ``label`` (only the product matters).
        structures: name -> label value.
    """
    v = voxel_volume_ml(spacing)
    lab = np.asarray(label)
    return {name: float(np.count_nonzero(lab == value) * v) for name, value in structures.items()}


def volume_curves(labels: np.ndarray, spacing: Sequence[float], structures: Mapping[str, int] = ACDC_STRUCTURES) -> Dict[str, np.ndarray]:
    """Per-frame volumes in mL: ``labels`` ``(T, *S)`` -> ``{name: (T,) float64}``; ``spacing`` mm of ``S``."""
    lab = np.asarray(labels)
    if lab.ndim < 2:
        raise ValueError(f"labels must be (T, *spatial), got shape {lab.shape}.")
    v = voxel_volume_ml(spacing)
    axes = tuple(range(1, lab.ndim))
    return {name: np.count_nonzero(lab == value, axis=axes).astype(np.float64) * v for name, value in structures.items()}


def find_ed_es(lv_volume: Sequence[float]) -> Tuple[int, int]:
    """``(ed, es)`` 0-based frame indices: the largest and the smallest LV cavity volume (first on ties)."""
    v = np.asarray(lv_volume, dtype=np.float64)
    if v.ndim != 1 or v.size < 2:
        raise ValueError(f"the LV volume curve needs >= 2 frames, got shape {v.shape}.")
    return int(np.argmax(v)), int(np.argmin(v))


def stroke_volume(edv: float, esv: float) -> float:
    """SV = EDV - ESV (mL)."""
    return float(edv) - float(esv)


def ejection_fraction(edv: float, esv: float) -> float:
    """EF = 100 (EDV - ESV) / EDV in percent; NaN when EDV is 0."""
    edv = float(edv)
    return float("nan") if edv <= 0 else 100.0 * (edv - float(esv)) / edv


def myocardial_mass(myo_volume_ml: float, density: float = MYOCARDIUM_DENSITY) -> float:
    """LV myocardial mass in g from the myocardium volume in mL (at ED)."""
    return float(myo_volume_ml) * float(density)


def cardiac_function(
    curves: Mapping[str, Sequence[float]], ed: Optional[int] = None, es: Optional[int] = None
) -> Dict[str, float]:
    """The clinical figures from per-frame volumes (mL).

    Args:
        curves: ``{"lv": (T,), "rv": (T,), "myo": (T,)}`` in mL (:func:`volume_curves`); a
            two-frame curve ``[ED, ES]`` with ``ed=0, es=1`` gives the figures of an ED/ES pair.
        ed, es: frame indices; default from the LV curve (:func:`find_ed_es`). RV figures use the
            same ED and ES frames (as ACDC does).

    Returns:
        ``ed_frame``, ``es_frame`` (0-based), ``lv_edv``, ``lv_esv``, ``lv_sv`` (mL), ``lv_ef`` (%),
        the same for ``rv_``, and ``lv_mass_g`` (myocardium at ED x 1.05 g/mL).
    """
    lv = np.asarray(curves["lv"], dtype=np.float64)
    found_ed, found_es = find_ed_es(lv)
    ed = found_ed if ed is None else int(ed)
    es = found_es if es is None else int(es)
    out: Dict[str, float] = {"ed_frame": ed, "es_frame": es}
    for name in ("lv", "rv"):
        if name not in curves:
            continue
        v = np.asarray(curves[name], dtype=np.float64)
        edv, esv = float(v[ed]), float(v[es])
        out.update({f"{name}_edv": edv, f"{name}_esv": esv, f"{name}_sv": stroke_volume(edv, esv), f"{name}_ef": ejection_fraction(edv, esv)})
    if "myo" in curves:
        out["lv_mass_g"] = myocardial_mass(float(np.asarray(curves["myo"], dtype=np.float64)[ed]))
    return out


def agreement(measured: Sequence[float], reference: Sequence[float]) -> Dict[str, float]:
    """Bland-Altman agreement of ``measured`` with ``reference`` (same units, pairs with NaN dropped).

    Returns ``n``, ``mae`` (mean |d|), ``bias`` (mean d), ``loa_low`` / ``loa_high`` (bias -+ 1.96 SD
    of d), ``sd`` and Pearson ``r`` (NaN below 3 pairs or for a constant input), with ``d = measured - reference``.
    """
    m, r = np.asarray(measured, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if m.shape != r.shape:
        raise ValueError(f"measured {m.shape} and reference {r.shape} differ in shape.")
    keep = np.isfinite(m) & np.isfinite(r)
    m, r = m[keep], r[keep]
    n = int(m.size)
    if n == 0:
        return {"n": 0, "mae": float("nan"), "bias": float("nan"), "sd": float("nan"), "loa_low": float("nan"),
                "loa_high": float("nan"), "r": float("nan")}
    d = m - r
    sd = float(d.std(ddof=1)) if n > 1 else float("nan")
    corr = float(np.corrcoef(m, r)[0, 1]) if n > 2 and m.std() > 0 and r.std() > 0 else float("nan")
    bias = float(d.mean())
    return {"n": n, "mae": float(np.abs(d).mean()), "bias": bias, "sd": sd, "loa_low": bias - 1.96 * sd,
            "loa_high": bias + 1.96 * sd, "r": corr}
