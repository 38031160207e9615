"""``monai-npc register``: register a moving image onto a fixed image and write ITK/ANTs/Slicer files.

Writes into --out, in the fixed image's physical space (full resolution): warped.nii.gz,
warped_label.nii.gz (with --moving-label), transform.h5 (ITK displacement field transform, LPS mm,
fixed -> moving points; resampling the moving image with it gives warped.nii.gz exactly),
displacement.nii.gz (the same field as an ANTs *Warp.nii.gz), transform_slicer.h5 (2-D inputs:
one-slice 3-D transform for 3D Slicer), jacobian.nii.gz, reliability.nii.gz, overview.png and
summary.json. --out is checked before any work and written all or nothing: every file is flushed
and read back, then the folder replaces a previous run's as a whole (never missing, even after a
kill); a failure (disk full, permission) keeps the previous result and exits 1 with one line. Cine DICOM folders: pick a phase with --moving-select phase=K (or trigger_time=MS,
slice=K, instance=N). See docs/interop.md.
"""

from __future__ import annotations

import argparse
import math
import os


def add_parser(sub) -> argparse.ArgumentParser:
    from monai_npc.cli.main import add_runtime_options

    p = sub.add_parser(
        "register",
        help="register image files (NIfTI, MHD, NRRD, DICOM, PNG/TIFF); write ITK/ANTs/Slicer transforms",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--moving", help="moving image file or DICOM folder")
    p.add_argument("--fixed", help="fixed image file or DICOM folder (defines the output space)")
    p.add_argument("--moving-label", help="label map of the moving image (warped with ITK's label interpolator, sitkLabelLinear)")
    p.add_argument("--fixed-label", help="label map of the fixed image (for Dice in summary.json)")
    for which in ("moving", "fixed"):
        p.add_argument(
            f"--{which}-select", metavar="KEY=VALUE[,KEY=VALUE]",
            help=f"part of the {which} input to use: phase=K (0-based, trigger-time order) or trigger_time=MS of a "
            "cine DICOM folder, slice=K, instance=N (DICOM InstanceNumber), frame=K (multi-frame file), series=UID",
        )
    p.add_argument(
        "--pixel-space", action="store_true",
        help="ignore the moving image's geometry: its pixel (i, j) lies on the fixed image's pixel (i, j) "
        "(e.g. a JPEG against a DICOM frame)",
    )
    p.add_argument(
        "--model", default="acdc",
        help="acdc, camus, sar, brain2d (shipped weights), a file saved by save_pretrained, a MONAI bundle folder "
        "or its models/model.pt, or phase-correlation (default: acdc)",
    )
    p.add_argument(
        "--refine", type=int, default=None, metavar="N",
        help="test-time refinement: N optimiser steps on a smooth residual field after an NPC model "
        "(about 10 ms per step for a 128x128 pair on one thread; default: the model's register setting: 30 for the shipped acdc model, whose step size falls from 0.5 to 0.15 voxels over them, 0 for the others)",
    )
    p.add_argument(
        "--steps", type=int, default=None, metavar="N",
        help="learned ODE steps of an NPC model (default: the model's register setting, 6 for acdc (its weights' own: 10), "
        "else the weights' own)",
    )
    p.add_argument("--out", help="output folder (batch mode: where batch_summary.csv goes)")
    p.add_argument(
        "--batch", metavar="PAIRS_CSV",
        help="register every row of a CSV with columns moving,fixed[,moving_label,fixed_label],out "
        "(relative paths are relative to the CSV's folder); pairs already done are skipped; under torchrun "
        "--nproc_per_node N the pairs are shared between the N processes and rank 0 writes batch_summary.csv",
    )
    p.add_argument("--size", type=int, default=None,
                   help="model grid size in-plane (default: the size the weights were trained at, from their meta; else 128; another size warns: the acdc weights register much worse at some)")
    p.add_argument("--stretch", action="store_true", help="stretch the field of view to the square model grid instead of padding")
    p.add_argument(
        "--field-of-view", choices=("image", "heart", "heart-stack", "image+heart", "image>heart"), default=None,
        help="where the model grid goes: 'heart' (a window at the native pixel size on the region where each slice's "
        "frames differ, found without labels; identity outside it), 'heart-stack' (one such window for the whole stack), "
        "'image' (the whole field of view), or a mix; default: the weights' own ('heart-stack' for acdc pairs, "
        "'image' for the others)",
    )
    p.add_argument(
        "--label-guidance", type=float, default=None, metavar="W",
        help="weight of the refinement's label-guided term (the carried label should cover fixed voxels that look like the "
        "moving image under it; no fixed label used): the --moving-label's, or without one the label prior's segmentation "
        "of the moving image; 0 = off; default 0.05 (docs/interop.md)",
    )
    p.add_argument(
        "--label-prior", type=float, default=None, metavar="W",
        help="weight, within the label-guided term, of a segmentation network's view of the fixed image (each carried label "
        "pays -log p(label) where it lands); without --moving-label the prior also segments the moving image, and that "
        "segmentation is the label the term steers; 0 = off (without a label: the images alone); default: the weights' own "
        "(8 for acdc, with its acdc_heart prior; none for the other models); a cold shell call with it also imports MONAI "
        "(about 3 s)",
    )
    p.add_argument(
        "--label-sigma", type=float, default=None, metavar="VOXELS",
        help="with --moving-label: smooth each label in-plane by this Gaussian width (moving voxels) before warped_label is "
        "resampled; 0 = ITK's label-linear interpolation exactly (what ANTs/Slicer give with transform.h5); default: 1 for acdc and camus, else 0",
    )
    p.add_argument(
        "--align", choices=("auto", "none", "rigid"), default="auto",
        help="rigid in-plane pre-alignment (one turn and shift of the whole moving image, mutual information) before the "
        "network: 'auto' (default) when the two images do not share a grid (two acquisitions), 'rigid' always, 'none' never",
    )
    p.add_argument(
        "--heart-centre", type=float, nargs=2, default=None, metavar=("ROW", "COL"),
        help="centre of the heart window in fixed-image voxels (array order: row, column), the same for every slice; "
        "default: found where the two images differ (use it when that finds the wrong place: overview.png outlines the window on the whole slice)",
    )
    p.add_argument("--device", default="cpu",
                   help="torch device (default: cpu); under torchrun, cuda is each process's own GPU (cuda:LOCAL_RANK)")
    p.add_argument("--no-overview", action="store_true", help="do not write overview.png")
    p.add_argument("--no-progress", action="store_true", help="hide the batch progress bar")
    p.add_argument(
        "--strict", action="store_true",
        help="batch mode: stop at the first bad pair (default: report it in batch_summary.csv and go on)",
    )
    add_runtime_options(p, argparse.SUPPRESS)
    p.set_defaults(func=run)
    return p


def _logged(fn, *args, **kwargs):
    """Call ``fn`` and log the Python warnings it raised as ``monai-npc: WARNING: ...`` (``--quiet`` hides them)."""
    import logging
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn(*args, **kwargs)
        finally:
            for w in caught:
                logging.getLogger("monai_npc.register").warning(str(w.message))


def run(args: argparse.Namespace) -> int:
    from monai_npc.apps.registration.files import register_batch, register_files
    from monai_npc.runtime import rank_device

    if args.size is not None and args.size < 16:
        raise ValueError(f"--size must be at least 16, got {args.size}")
    options = dict(
        size=args.size, keep_aspect=not args.stretch, device=rank_device(args.device), overview=not args.no_overview,
        threads=getattr(args, "threads", None), pixel_space=args.pixel_space,
        moving_select=args.moving_select, fixed_select=args.fixed_select, refine_iterations=args.refine,
        num_steps=args.steps, field_of_view=args.field_of_view, label_guidance=args.label_guidance, label_sigma=args.label_sigma,
        label_prior=args.label_prior, heart_centre=None if args.heart_centre is None else tuple(args.heart_centre), align=args.align,
    )
    if args.batch:
        if args.moving or args.fixed:
            raise ValueError("use either --batch or --moving/--fixed, not both")
        progress = not (args.no_progress or getattr(args, "quiet", False))
        results = _logged(
            register_batch, args.batch, model=args.model, out=args.out, progress=progress, strict=args.strict, **options
        )
        failed = [r for r in results if r.get("status") == "failed"]
        if int(os.environ.get("RANK", "0")) == 0:  # under torchrun: once, by rank 0
            for r in failed:
                print(f"failed: {r['moving']} -> {r['fixed']}: {r['error']}")
            skipped = sum(r.get("status") == "skipped" for r in results)
            print(f"registered {len(results) - len(failed) - skipped} of {len(results)} pair(s)"
                  + (f", {skipped} skipped (already done)" if skipped else ""))
        return 1 if failed else 0
    missing = [name for name in ("moving", "fixed", "out") if not getattr(args, name)]
    if missing:
        raise ValueError("missing " + ", ".join("--" + m for m in missing) + " (or use --batch PAIRS_CSV)")
    s = _logged(
        register_files, args.moving, args.fixed, args.out, args.moving_label, args.fixed_label, model=args.model, **options
    )
    dice = f", Dice {s['dice_mean_initial']:.3f} -> {s['dice_mean']:.3f}" if s.get("dice_mean") is not None else ""
    turn = s.get("alignment", {})
    if turn.get("applied"):
        aligned = f"; moving first turned {turn['angle_deg']:.1f} degrees and shifted {math.hypot(*turn['translation_mm']):.1f} mm"
    elif turn.get("dropped"):
        aligned = f"; not aligned rigidly: {turn['dropped']}"
    else:
        aligned = ""
    prior = s.get("label_prior") or {}
    if prior.get("weight", 0) > 0:
        helped = f"; label prior {prior['name']} acted" + (", fused_label written" if "fused_label" in s["outputs"] else "")
    elif prior.get("aside"):
        helped = f"; label prior {prior['name']} stood aside (summary.json: label_prior.aside)"
    else:
        helped = ""  # not asked for, or dropped with a warning already printed
    if not getattr(args, "quiet", False):
        moving = args.moving + (f" [{args.moving_select}]" if args.moving_select else "")
        fixed = args.fixed + (f" [{args.fixed_select}]" if args.fixed_select else "")
        print(
            f"registered {moving} -> {fixed} with {s['model']} in {s['seconds']:.2f} s: "
            f"folding {s['folding_percent']:.2f} %{dice}{aligned}{helped}; wrote {len(s['outputs'])} files to {args.out}"
        )
    return 0
