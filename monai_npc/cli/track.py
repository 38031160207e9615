"""``monai-npc track``: carry a label through a 4-D short-axis cine; volumes, EF and LV mass.

The label (ACDC's 0 bg, 1 RV, 2 myocardium, 3 LV; another numbering, M&Ms' LV 1 and RV 3 say, is recognised by the
label prior or given with --structures lv=1,myo=2,rv=3) belongs to one frame: --label-frame (0-based),
by default, with an ACDC Info.cfg beside the cine, the frame the label file names
(patient090_frame11_gt.nii.gz: frame 10) or else Info.cfg's ED (ED: n -> frame n - 1), else frame 0.
Writes into --out, all at once (it may only hold a previous run's files): labels_4d.nii.gz (the
tracked labels with the cine's geometry), volumes.csv (mL per frame), function.json (LV/RV EDV,
ESV, SV, EF, LV mass at 1.05 g/mL, ED/ES found from the LV volume curve and those of Info.cfg, the
request: inputs, frame, scheme, settings) and function.png (volume curve, ED/ES, frames with
contours). See docs/tracking.md.

--batch COHORT_CSV tracks many studies (columns cine,label[,label_frame][,out][,name]) into
--out/<name> and writes one --out/cohort.csv (name, status, error, ED/ES, LV/RV EDV/ESV/SV/EF,
LV mass, seconds). Studies whose folder holds a complete function.json of the same request are
skipped, so rerunning resumes (a changed row or setting is tracked again); a bad study is reported
and the others go on (--strict: stop). Under
`torchrun --nproc_per_node N -m monai_npc.cli.main track --batch ...` the N processes share the
studies (torch.distributed, gloo on CPU, nccl on GPU: --device cuda is each process's own GPU),
each writes its studies' folders and rank 0 writes the merged cohort.csv.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict, Optional


def add_parser(sub) -> argparse.ArgumentParser:
    from monai_npc.cli.main import add_runtime_options
    from monai_npc.apps.tracking.schemes import DEFAULT_SCHEME, SCHEMES

    p = sub.add_parser("track", help="track a label through a 4-D cine; volume curve, EF, LV mass",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cine", help="4-D cine: NIfTI (X, Y, Z, T) such as ACDC's *_4d.nii.gz, or a cine DICOM folder")
    p.add_argument("--label", help="label map of one frame (3-D, on the frame grid), e.g. patientNNN_frame01_gt.nii.gz")
    p.add_argument("--label-frame", type=int, default=None, metavar="K",
                   help="0-based frame of --label (default, with an ACDC Info.cfg beside the cine: the frame the label file names, "
                   "else Info.cfg's ED; else 0)")
    p.add_argument("--scheme", choices=SCHEMES, default=DEFAULT_SCHEME, help=f"tracking scheme (default: {DEFAULT_SCHEME})")
    p.add_argument("--model", default="acdc", help="registration model as for monai-npc register (default: acdc); a stack network's "
                   "weights (architecture slice_context) track through the plane (docs/tracking.md)")
    p.add_argument("--refine", type=int, default=None, metavar="N",
                   help="test-time refinement steps of each registration (default: register's, 30 for acdc, for the default "
                   "direct scheme; 10 between consecutive frames of the chained schemes; docs/tracking.md, Speed); for the "
                   "anchored scheme the steps of each frame's correction against the reference frame (default 6)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="learned ODE steps of each registration (default: register's, 6 for acdc, for direct; 4 between "
                   "consecutive frames of the chained schemes)")
    p.add_argument("--out", required=True, help="output folder (--batch: where cohort.csv and, by default, each study's folder go)")
    p.add_argument("--batch", metavar="COHORT_CSV",
                   help="track many studies: a CSV with columns cine,label[,label_frame][,out][,name] (relative paths from "
                   "its folder); studies already done are skipped; one merged OUT/cohort.csv. Under torchrun "
                   "--nproc_per_node N the studies are shared between the N processes (gloo on CPU, nccl on GPU)")
    p.add_argument("--strict", action="store_true", help="--batch: stop at the first bad study (default: report it in cohort.csv and go on)")
    p.add_argument("--label-guidance", type=float, default=None, metavar="W",
                   help="weight of the refinement's label-guided term. Default: registrations from the reference frame (every one of "
                   "the direct scheme) get the reference label with register's own settings (label-guided refinement and label prior), "
                   "the others none; W > 0: every registration gets its moving frame's label (carried by the chain) at weight W; "
                   "0: none (docs/tracking.md; the anchored scheme's correction against the reference frame always uses the "
                   "reference label)")
    p.add_argument("--structures", type=_structures, default=None, metavar="NAME=VALUE[,NAME=VALUE]",
                   help="which label value is which structure, e.g. lv=1,myo=2,rv=3 (M&Ms) or rv=10,myo=20,lv=30: the volumes, EF, "
                   "basal rules and strain read them (the tracked labels keep the label's values). Default: as the label prior "
                   "finds it on the labelled frame (a label of another convention is recognised), else the model's training labels "
                   "(acdc: rv=1,myo=2,lv=3; camus: lv=1,myo=2)")
    p.add_argument("--no-basal-descent", action="store_true",
                   help="keep every slice of the in-plane result (default: from an ED label clear the basal RV slices the base leaves in systole, "
                   "from an ES label fill the basal slices the structures re-enter in diastole; docs/tracking.md)")
    p.add_argument("--strain", action="store_true",
                   help="also the myocardial strain of the motion: strain.csv (per frame, global and 16 AHA segments, circumferential "
                   "and radial), strain.json (peaks, time to peak, per segment, units), strain_curves.png, strain_bullseye.png "
                   "(docs/strain.md); --batch: the peaks in cohort.csv")
    p.add_argument("--frame-ms", type=float, default=None, metavar="MS",
                   help="time between two frames in ms, for the strain's time to peak (ms) and strain rate (1/s); default: in frames")
    p.add_argument("--device", default=None,
                   help="torch device as for monai-npc register (cpu, cuda, cuda:1); default: cpu for one study; with --batch, "
                   "cuda when available (under torchrun: each process's own GPU, cuda:LOCAL_RANK), else cpu")
    p.add_argument("--no-figure", action="store_true", help="do not write function.png (nor the strain figures)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_runtime_options(p, argparse.SUPPRESS)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from monai_npc.apps.tracking.outputs import track_to_folder
    from monai_npc.runtime import rank_device

    if args.batch:
        return run_batch(args)
    missing = [f"--{k}" for k in ("cine", "label") if not getattr(args, k)]
    if missing:
        raise ValueError("missing " + ", ".join(missing) + " (or use --batch COHORT_CSV)")
    quiet = getattr(args, "quiet", False)
    device = {} if args.device is None else {"device": rank_device(args.device)}  # a CUDA device without CUDA: one line, before any work
    result, files = track_to_folder(args.cine, args.label, args.out, args.label_frame, args.scheme, args.model, figure=not args.no_figure,
                                    progress=not (args.no_progress or quiet), refine_iterations=args.refine, num_steps=args.steps, threads=getattr(args, "threads", None),
                                    basal_descent=False if args.no_basal_descent else None, label_guidance=args.label_guidance,
                                    strain=args.strain, frame_ms=args.frame_ms, structures=args.structures, **device)
    frame = result.reference_frame
    if not quiet:
        f = result.function
        print(f"tracked {args.cine} from frame {frame} ({args.scheme}, {len(result.cine)} frames, {result.seconds_per_frame:.1f} s/frame): "
              f"ED {f['ed_frame']}, ES {f['es_frame']}; LV EDV {f['lv_edv']:.1f} mL, ESV {f['lv_esv']:.1f} mL, EF {f['lv_ef']:.1f} %; "
              f"RV EF {f['rv_ef']:.1f} %; LV mass {f['lv_mass_g']:.1f} g"
              + (f"; peak strain circumferential {result.strain.peak['circumferential']:.1f} %, radial {result.strain.peak['radial']:.1f} %"
                 if args.strain else "")
              + _prior_line(result.settings.get("label")) + _numbering_line(result.settings.get("structures"))
              + f"; wrote {len(files)} files to {args.out}")
    return 0


def _prior_line(label: Optional[Dict[str, Any]]) -> str:
    """``"; label prior X acted on A of N frames"`` from a tracking's ``settings["label"]`` ("" without a prior)."""
    if not label or not label.get("label_prior"):
        return ""
    acted, idle = label["prior_acted_on_frames"], label["prior_did_not_act_on_frames"]
    return f"; label prior {', '.join(label['label_prior'])} acted on {len(acted)} of {len(acted) + len(idle)} frames"


def _numbering_line(numbering: Optional[Dict[str, Any]]) -> str:
    """``"; structures lv=1, myo=2, rv=3 (from ...)"`` when the label is not numbered as ACDC's ("" when it is)."""
    from monai_npc.cardiac.function import ACDC_STRUCTURES

    if not numbering or numbering.get("values") == ACDC_STRUCTURES:
        return ""
    values = ", ".join(f"{k}={v}" for k, v in sorted(numbering["values"].items(), key=lambda kv: kv[1]))
    return f"; structures {values} ({numbering['from']})"


def _structures(text: str) -> Dict[str, int]:
    """``--structures lv=1,myo=2,rv=3`` -> ``{"lv": 1, "myo": 2, "rv": 3}`` (checked by ``track``)."""
    from monai_npc.apps.tracking.structures import parse_structures

    try:
        return parse_structures(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def run_batch(args: argparse.Namespace) -> int:
    """``--batch``: :func:`monai_npc.apps.tracking.cohort.track_cohort`; a one-line tally (rank 0); 1 when a study failed."""
    from monai_npc.apps.tracking.cohort import COHORT_FILE, track_cohort

    if args.cine or args.label or args.label_frame is not None:
        raise ValueError("use either --batch or --cine/--label/--label-frame, not both")
    quiet = getattr(args, "quiet", False)
    rows = track_cohort(args.batch, args.out, args.model, args.scheme, refine_iterations=args.refine, num_steps=args.steps, strict=args.strict,
                        figure=not args.no_figure, progress=not (args.no_progress or quiet), threads=getattr(args, "threads", None),
                        basal_descent=False if args.no_basal_descent else None, label_guidance=args.label_guidance,
                        strain=args.strain, frame_ms=args.frame_ms, device=args.device, structures=args.structures)
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "skipped", "failed")}
    if not quiet and int(os.environ.get("RANK", "0")) == 0:
        print(f"tracked {len(rows)} studies: {counts['ok']} ok, {counts['skipped']} skipped (already done), {counts['failed']} failed; "
              f"wrote {os.path.join(args.out, COHORT_FILE)}")
        for r in rows:
            if r["status"] == "failed":
                print(f"  {r['name']}: {r['error']}")
    return 1 if counts["failed"] else 0
