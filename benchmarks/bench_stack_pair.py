"""Seconds per whole-stack pair through ``monai_npc.register`` + ``Registration.save``, by setting.

    OMP_NUM_THREADS=1 python benchmarks/bench_stack_pair.py [--patient DIR] [--repeats 3] [--model acdc]
    OMP_NUM_THREADS=1 python benchmarks/bench_stack_pair.py --patient ../shared/data/acdc_cine_example/patient090 \
        --model acdc_through_plane

One real ED -> ES pair of the official ACDC layout (default
``../shared/data/acdc_official_test/testing/patient101``: 10 slices of 232 x 256, the ED label as
the moving label, no label on the fixed frame), shipped ``acdc`` weights (``--model``: another shipped name or
weights file, e.g. ``acdc_through_plane``, with its register settings), every output file
written to a temporary folder. After one warm-up call (the first call of a process also loads
the weights), each setting runs ``--repeats`` times, the settings interleaved so that they see the
same machine load; prints the median, min and max seconds and the load average. To compare with
another checkout, run the same command with ``PYTHONPATH=OTHER`` right after.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "data" / "acdc_official_test" / "testing" / "patient101"

SETTINGS = {
    "defaults (acdc's: 6 ODE steps, 30 refinement steps of 0.5 falling to 0.15 voxels on an 8-voxel grid, one heart window per stack, label guidance with the label prior, label sigma 1)": {},
    "--label-prior 0 (no segmentation prior)": {"label_prior": 0.0},
    "--label-sigma 0 (ITK's label-linear)": {"label_sigma": 0.0},
    "--steps 10 --refine 50 (the weights' steps)": {"num_steps": 10, "refine_iterations": 50},
    "--refine 25": {"refine_iterations": 25},
    "--label-guidance 0": {"label_guidance": 0.0},
    "--refine 0": {"refine_iterations": 0},
    "images only (no moving label: the prior segments the moving frame)": {"moving_label": None},
    "images only, --label-prior 0 (the images alone)": {"moving_label": None, "label_prior": 0.0},
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--patient", type=Path, default=DEFAULT, help="official-layout patient folder (patientNNN_frameFF.nii.gz + _gt)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--model", default="acdc", help="a shipped model name or weights file (register's model)")
    args = p.parse_args(argv)
    frames = sorted(f for f in glob.glob(str(args.patient / "*_frame??.nii.gz")))
    if len(frames) != 2:
        raise SystemExit(f"{args.patient}: expected two *_frameFF.nii.gz files (ED, ES), found {len(frames)}")
    label = frames[0].replace(".nii.gz", "_gt.nii.gz")
    if not os.path.exists(label):
        raise SystemExit(f"{args.patient}: no ED label {label}")

    import torch

    import monai_npc

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    kwargs = dict(model=args.model, moving_label=label, threads=torch.get_num_threads())
    monai_npc.register(frames[0], frames[1], **kwargs)  # warm-up: weights, first-call allocations
    times = {name: [] for name in SETTINGS}
    for _ in range(args.repeats):
        for name, setting in SETTINGS.items():
            t0 = time.perf_counter()
            reg = monai_npc.register(frames[0], frames[1], **{**kwargs, **setting})
            with tempfile.TemporaryDirectory() as out:
                reg.save(out)
            times[name].append(time.perf_counter() - t0)
    print(f"{args.patient.name}, model {args.model}, {torch.get_num_threads()} thread(s), load average {os.getloadavg()[0]:.1f}, "
          f"{args.repeats} repeats; seconds per pair (register + save)")
    for name, t in times.items():
        print(f"  {name:62s} median {statistics.median(t):.2f}  min {min(t):.2f}  max {max(t):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
