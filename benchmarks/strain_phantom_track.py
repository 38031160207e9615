"""Strain of the analytic strain phantom through ``monai_npc.track`` against the truth (docs/strain.md, "Through track").

    OMP_NUM_THREADS=1 python benchmarks/strain_phantom_track.py [--frames 10 --size 128 --slices 6] [--model acdc]

Prints the tracked and true global circumferential / radial curves and peaks, the largest error of a segment's peak, the end-point error of the
tracked field inside the reference myocardium per frame, and the carried myocardium's voxel count per frame
relative to the reference frame.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import monai_npc
from monai_npc.data.strain_phantom import strain_phantom
from monai_npc.runtime import use_threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--slices", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", default="acdc", help="track's model: a shipped name or a save_pretrained file")
    args = ap.parse_args()
    use_threads(args.threads)
    ph = strain_phantom(frames=args.frames, size=args.size, slices=args.slices)
    t0 = time.perf_counter()
    tracking = monai_npc.track(ph.images, ph.labels[0], reference_frame=0, spacing=ph.spacing, progress=False, basal_descent=False,
                               model=args.model)
    print(f"track: {time.perf_counter() - t0:.1f} s for {args.frames} frames")
    st = tracking.strain
    for k in ("circumferential", "radial"):
        truth = ph.true_global[k]
        true_peak = truth.min() if k == "circumferential" else truth.max()
        print(f"{k}: peak tracked {st.peak[k]:.2f} %, true {true_peak:.2f} %; max error over frames "
              f"{np.nanmax(np.abs(st.curves[k] - truth)):.2f} points")
        print("  tracked", np.round(st.curves[k], 1).tolist())
        print("  true   ", np.round(truth, 1).tolist())
    for k, sign in (("circumferential", -1.0), ("radial", 1.0)):
        true_peaks = sign * np.nanmax(sign * ph.true_segments[k], axis=0)  # (16,) the peak of each true segment's curve
        tracked = np.array([st.segments[s + 1][k] if st.segments.get(s + 1) else np.nan for s in range(16)], float)
        err = np.abs(tracked - true_peaks)
        print(f"{k} segment peaks: max error {np.nanmax(err):.2f} points (segment {int(np.nanargmax(err)) + 1}), mean {np.nanmean(err):.2f}")
    myo = ph.labels[0] == 2
    error = (tracking.ddf[:, -2:] - torch.as_tensor(ph.ddf)[:, -2:]).norm(dim=1).numpy()
    print("field error in the myocardium (voxels) per frame", [round(float(e[myo].mean()), 2) for e in error])
    counts = np.array([(lab == 2).sum() for lab in tracking.labels], float)
    print("carried myocardium / reference, per frame", np.round(counts / counts[0], 3).tolist())


if __name__ == "__main__":
    main()
