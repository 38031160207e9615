"""Whole-stack ``monai_npc.register`` (shipped ``acdc``, 50 refinement steps) under three thread settings.

    python benchmarks/bench_threads_stack.py [--patient DIR]

Each setting runs in a fresh process on one real ED/ES stack pair of the official ACDC test
layout (default ``../shared/data/acdc_official_test/testing/patient101``; a warm-up call, then the
mean of two): torch's own default (one OpenMP thread per core, spinning waits), ``register``'s
default (:func:`monai_npc.runtime.default_threads`: at most the free cores, passive waits) and one
thread. Prints seconds per pair and the 1-minute load average; run it beside the machine's usual
work, which is what the defaults are for.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import glob, os, sys, time, torch
import monai_npc
from monai_npc import runtime
mode, folder = sys.argv[1], sys.argv[2]
ed, es = sorted(glob.glob(os.path.join(folder, "*_frame??.nii.gz")))[:2]
kw = {"torch-default": {"threads": torch.get_num_threads()}, "one": {"threads": 1}}.get(mode, {})
monai_npc.register(ed, es, model="acdc", refine_iterations=0, **kw)  # warm-up
t = time.perf_counter()
for _ in range(2):
    monai_npc.register(ed, es, model="acdc", **kw)
print(f"{mode:18s} threads {kw.get('threads', runtime.default_threads())}: {(time.perf_counter() - t) / 2:.2f} s per pair "
      f"(load average {os.getloadavg()[0]:.1f})")
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patient", default=str(ROOT.parent / "shared" / "data" / "acdc_official_test" / "testing" / "patient101"))
    args = parser.parse_args(argv)
    for mode in ("torch-default", "register-default", "one"):
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
        if mode != "torch-default":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        out = subprocess.run([sys.executable, "-c", CHILD, mode, args.patient], capture_output=True, text=True, env=env)
        print(out.stdout.strip() or out.stderr.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
