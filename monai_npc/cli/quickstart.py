"""``monai-npc quickstart``: register cardiac cine phantoms with the shipped ``acdc`` model, in seconds.

The main job of the package, end to end and without data: it writes cardiac MRI-like phantom
pairs (end-diastole -> end-systole frames with their labels, 1.5 mm pixels) as NIfTI files,
registers each pair with a shipped model exactly as ``monai-npc register`` does (warped image and
label, ITK / ANTs / Slicer transforms, Jacobian, reliability, summary), and writes
``OUT/metrics.json`` (Dice before -> after per pair and on average, folding, seconds) and
``OUT/overview.png`` (the first pair: moving, fixed, warped with label contours, difference,
deformed grid). Every file is written all or nothing (a temporary name, flushed and read back, then
renamed); the previous run's ``metrics.json`` is removed first, so a failed run leaves none.
"""

from __future__ import annotations

import argparse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "quickstart",
        help="register generated cardiac phantom pairs with a shipped model and write a figure (seconds, no data)",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out", default="quickstart_out", help="output folder")
    p.add_argument("--pairs", type=int, default=8, help="phantom pairs to write and register")
    p.add_argument("--model", default="acdc", help="model argument of monai-npc register (shipped name, file or bundle)")
    p.add_argument("--seed", type=int, default=0, help="phantom seed (pair i uses seed + i)")
    p.set_defaults(func=run)
    return p


def write_phantom_pair(folder, name: str, seed: int, spacing: float = 1.5):
    """Write one cardiac phantom pair as NIfTI files ``{name}_ED.nii.gz``, ``{name}_ES.nii.gz`` and their ``_gt`` labels.

    Returns the four paths ``(moving, fixed, moving_label, fixed_label)``: ED is the moving frame.
    """
    from pathlib import Path

    import SimpleITK as sitk

    from monai_npc.data.phantoms import cardiac_pair
    from monai_npc.io_safety import atomic_write

    pair = cardiac_pair(128, seed=seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, suffix, pixel in (
        ("moving", "ED", sitk.sitkFloat32), ("fixed", "ES", sitk.sitkFloat32),
        ("moving_label", "ED_gt", sitk.sitkUInt8), ("fixed_label", "ES_gt", sitk.sitkUInt8),
    ):
        image = sitk.Cast(sitk.GetImageFromArray(pair[key]), pixel)
        image.SetSpacing((spacing, spacing))
        path = folder / f"{name}_{suffix}.nii.gz"
        atomic_write(path, lambda tmp, image=image: sitk.WriteImage(image, str(tmp)))
        paths.append(path)
    return tuple(paths)


def run(args: argparse.Namespace) -> int:
    import json
    import time

    import numpy as np

    from monai_npc.apps.registration.files import register_files
    from monai_npc.apps.registration.models import resolve_model
    from monai_npc.io_safety import atomic_copy, atomic_write_text, make_folder, remove_stale

    if args.pairs < 1:
        raise ValueError(f"--pairs must be >= 1, got {args.pairs}.")
    start = time.perf_counter()
    out = make_folder(args.out)
    remove_stale([out / "metrics.json", out / "overview.png"])  # a failed run leaves none as if current
    net, name = resolve_model(args.model)  # loaded once for all pairs
    rows = []
    for i in range(args.pairs):
        pair = f"pair{i:02d}"
        moving, fixed, moving_label, fixed_label = write_phantom_pair(out / "data", pair, args.seed + i)
        s = register_files(
            moving, fixed, out / "registered" / pair, moving_label, fixed_label, model=net, model_name=name,
            overview=i == 0,
        )
        rows.append({"pair": pair, "dice_initial": s["dice_mean_initial"], "dice": s["dice_mean"],
                     "folding_percent": s["folding_percent"], "seconds": s["seconds"]})
    atomic_copy(out / "registered" / "pair00" / "overview.png", out / "overview.png")
    metrics = {
        "model": name,
        "n_pairs": len(rows),
        "dice_mean_initial": float(np.mean([r["dice_initial"] for r in rows])),
        "dice_mean": float(np.mean([r["dice"] for r in rows])),
        "folding_percent": float(np.mean([r["folding_percent"] for r in rows])),
        "seconds_per_pair": float(np.mean([r["seconds"] for r in rows])),
        "seconds_total": time.perf_counter() - start,
        "pairs": rows,
        "data": "cardiac cine MRI phantoms (monai_npc.data.phantoms.cardiac_pair, 128 x 128, 1.5 mm), ED -> ES",
    }
    atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2))
    print(
        f"registered {len(rows)} phantom ED -> ES pairs with {name}: Dice {metrics['dice_mean_initial']:.3f} -> "
        f"{metrics['dice_mean']:.3f}, folding {metrics['folding_percent']:.3f} %, {metrics['seconds_per_pair']:.2f} s/pair; "
        f"wrote {out / 'overview.png'}, {out / 'metrics.json'} and each pair's files under {out / 'registered'}"
    )
    return 0
