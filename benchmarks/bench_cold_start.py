"""Cold start of ``monai-npc register`` from the shell: one 128 x 128 pair, all outputs written.

    python benchmarks/bench_cold_start.py [--repeats 5] [--pythonpath OTHER_CHECKOUT]

Each repeat is a fresh process (``monai-npc register --moving m.nii.gz --fixed f.nii.gz --out o``
with the shipped ``acdc`` weights, overview included), timed from the shell's point of view; the
same number of ``python -c "import torch"`` processes run interleaved as the floor no torch
program can beat. ``--pythonpath`` times another checkout (e.g. the code before a change) in the
same loop, so that both see the same machine load. Prints medians (s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _pair(folder: Path) -> None:
    import numpy as np
    import SimpleITK as sitk

    from monai_npc.data.phantoms import cardiac_pair

    p = cardiac_pair(128, seed=3)
    for key in ("moving", "fixed"):
        image = sitk.GetImageFromArray((p[key] * 300).astype(np.float32))
        image.SetSpacing((1.5, 1.5))
        sitk.WriteImage(image, str(folder / f"{key}.nii.gz"))


def _time(cmd, env, cwd) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pythonpath", default=None, help="another checkout to time in the same loop (e.g. before a change)")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parents[1])
    runs = {"this checkout": here}
    if args.pythonpath:
        runs["--pythonpath"] = str(Path(args.pythonpath).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        _pair(tmp)
        times = {name: [] for name in list(runs) + ["import torch"]}
        for k in range(args.repeats):
            for name, path in runs.items():
                env = dict(os.environ, PYTHONPATH=path)
                cmd = [sys.executable, "-c", "import sys; from monai_npc.cli.main import main; sys.exit(main())", "register",
                       "--moving", str(tmp / "moving.nii.gz"), "--fixed", str(tmp / "fixed.nii.gz"), "--out", str(tmp / f"out{k}{len(name)}")]
                times[name].append(_time(cmd, env, tmp))  # cwd: not a checkout, so PYTHONPATH decides
            times["import torch"].append(_time([sys.executable, "-c", "import torch"], dict(os.environ), tmp))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"monai-npc register, one 128 x 128 pair, acdc, all outputs; {args.repeats} fresh processes each; load {load:.1f}")
    for name, values in times.items():
        print(f"{name:>16}: median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})")


if __name__ == "__main__":
    main()
