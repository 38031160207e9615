"""``monai-npc track``: carry a label through a 4-D short-axis cine; volumes, EF and LV mass.

The label (0 bg, 1 RV, 2 myocardium, 3 LV, as ACDC) belongs to one frame: --label-frame (0-based),
by default ED from an ACDC Info.cfg beside the cine (ED: n -> frame n - 1), else frame 0. Writes
into --out: labels_4d.nii.gz (the tracked labels with the cine's geometry), volumes.csv (mL per
frame), function.json (LV/RV EDV, ESV, SV, EF, LV mass at 1.05 g/mL, ED/ES found from the LV
volume curve and those of Info.cfg) and function.png (volume curve, ED/ES, frames with contours).
Each file is written under a temporary name and renamed when complete. See docs/tracking.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, Optional


def add_parser(sub) -> argparse.ArgumentParser:
    from monai_npc.cli.main import add_runtime_options
    from monai_npc.tracking.schemes import DEFAULT_SCHEME, SCHEMES

    p = sub.add_parser("track", help="track a label through a 4-D cine; volume curve, EF, LV mass",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cine", required=True, help="4-D cine: NIfTI (X, Y, Z, T) such as ACDC's *_4d.nii.gz, or a cine DICOM folder")
    p.add_argument("--label", required=True, help="label map of one frame (3-D, on the frame grid), e.g. patientNNN_frame01_gt.nii.gz")
    p.add_argument("--label-frame", type=int, default=None, metavar="K",
                   help="0-based frame of --label (default: ED of an Info.cfg beside the cine, else 0)")
    p.add_argument("--scheme", choices=SCHEMES, default=DEFAULT_SCHEME, help=f"tracking scheme (default: {DEFAULT_SCHEME})")
    p.add_argument("--model", default="acdc", help="registration model as for monai-npc register (default: acdc)")
    p.add_argument("--refine", type=int, default=None, metavar="N", help="test-time refinement steps (default: the weights' setting)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--no-figure", action="store_true", help="do not write function.png")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_runtime_options(p, argparse.SUPPRESS)
    p.set_defaults(func=run)
    return p


def info_frames(cine: str) -> Optional[Dict[str, int]]:
    """``{"ed", "es"}`` 0-based frames from an ACDC ``Info.cfg`` beside (or in) ``cine``, else ``None``."""
    from monai_npc.data.layout import read_cfg

    path = Path(cine)
    cfg = (path if path.is_dir() else path.parent) / "Info.cfg"
    if not cfg.is_file():
        return None
    info = read_cfg(cfg)
    try:
        return {"ed": int(float(info["ED"])) - 1, "es": int(float(info["ES"])) - 1}
    except (KeyError, ValueError):
        return None


def run(args: argparse.Namespace) -> int:
    from monai_npc.tracking.outputs import write_tracking
    from monai_npc.tracking.track import track

    info = info_frames(args.cine)
    frame = args.label_frame if args.label_frame is not None else (info["ed"] if info else 0)
    quiet = getattr(args, "quiet", False)
    result = track(args.cine, args.label, frame, args.scheme, args.model, refine_iterations=args.refine,
                   threads=getattr(args, "threads", None), progress=not (args.no_progress or quiet))
    files = write_tracking(result, args.out, info, figure=not args.no_figure)
    if not quiet:
        f = result.function
        print(f"tracked {args.cine} from frame {frame} ({args.scheme}, {len(result.cine)} frames, {result.seconds_per_frame:.1f} s/frame): "
              f"ED {f['ed_frame']}, ES {f['es_frame']}; LV EDV {f['lv_edv']:.1f} mL, ESV {f['lv_esv']:.1f} mL, EF {f['lv_ef']:.1f} %; "
              f"RV EF {f['rv_ef']:.1f} %; LV mass {f['lv_mass_g']:.1f} g; wrote {len(files)} files to {args.out}")
    return 0
