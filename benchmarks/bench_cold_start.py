"""Cold start of ``monai-npc register`` from the shell: one 128 x 128 pair, all outputs written.

    python benchmarks/bench_cold_start.py [--repeats 5] [--pythonpath OTHER_CHECKOUT] [--stack]

``--stack``: the real ACDC whole stack of ``../shared/data/acdc_cine_example`` (patient090 ED -> ES, 7 slices at
native spacing) with its ED label, one thread (``--threads 1``): what a clinician's first call costs; the
in-process part (reading, registering, writing) is read from ``summary.json`` (``seconds``, ``seconds_network``).

Each repeat is a fresh process (``monai-npc register --moving m.nii.gz --fixed f.nii.gz --out o``
with the shipped ``acdc`` weights, overview included), timed from the shell's point of view; the
same number of ``python -c "import torch"`` processes run interleaved as the floor no torch
program can beat. ``--pythonpath`` times another checkout (e.g. the code before a change) in the
same loop, so that both see the same machine load. Prints medians (s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CINE = Path(__file__).resolve().parents[2] / "shared" / "data" / "acdc_cine_example" / "patient090"


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
    parser.add_argument("--stack", action="store_true", help="patient090's whole ED -> ES stack with its label, one thread")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parents[1])
    runs = {"this checkout": here}
    if args.pythonpath:
        runs["--pythonpath"] = str(Path(args.pythonpath).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.stack:
            if not CINE.is_dir():
                raise SystemExit(f"--stack needs {CINE}")
            inputs = ["--moving", str(CINE / "patient090_frame04.nii.gz"), "--fixed", str(CINE / "patient090_frame11.nii.gz"),
                      "--moving-label", str(CINE / "patient090_frame04_gt.nii.gz"), "--threads", "1"]
        else:
            _pair(tmp)
            inputs = ["--moving", str(tmp / "moving.nii.gz"), "--fixed", str(tmp / "fixed.nii.gz")]
        times = {name: [] for name in list(runs) + ["import torch"]}
        inside = {name: [] for name in runs}
        for k in range(args.repeats):
            for name, path in runs.items():
                env = dict(os.environ, PYTHONPATH=path)
                out = tmp / f"out{k}{len(name)}"
                cmd = [sys.executable, "-c", "import sys; from monai_npc.cli.main import main; sys.exit(main())", "register",
                       *inputs, "--out", str(out)]
                times[name].append(_time(cmd, dict(env, OMP_NUM_THREADS="1") if args.stack else env, tmp))  # cwd: not a checkout
                summary = json.loads((out / "summary.json").read_text())
                inside[name].append((summary["seconds"], summary["seconds_network"]))
            times["import torch"].append(_time([sys.executable, "-c", "import torch"], dict(os.environ), tmp))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    what = "patient090 ED -> ES whole stack with its label, one thread" if args.stack else "one 128 x 128 pair"
    print(f"monai-npc register, {what}, acdc, all outputs; {args.repeats} fresh processes each; load {load:.1f}")
    for name, values in times.items():
        line = f"{name:>16}: median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"
        if name in inside:
            line += (f"; in summary.json: register + write {statistics.median([a for a, _ in inside[name]]):.2f} s, "
                     f"network {statistics.median([b for _, b in inside[name]]):.2f} s")
        print(line)


if __name__ == "__main__":
    main()
