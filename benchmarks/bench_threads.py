"""Batch-1 ACDC inference beside another torch job: torch's default threads against ``--threads`` defaults.

    python benchmarks/bench_threads.py [--pairs 30]

Starts a background process that keeps every core busy with torch matrix products (torch's
default threads, as a training job would), then times ``NPCNet.register`` on one 128 x 128 pair
(shipped ``acdc`` weights) in fresh processes under three settings: torch's defaults (one thread
per core, GNU OpenMP spinning waits), ``monai_npc.runtime.default_threads()`` with
``OMP_WAIT_POLICY=PASSIVE`` (what ``monai-npc`` does), one thread, and two threads with passive waits. Also reports each
setting without the extra job ("alone"; the machine may still be loaded by others: the load
average is printed). Prints the median ms per pair.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

CHILD = r"""
import os, statistics, sys, time, torch
from monai_npc import runtime
if sys.argv[1] == "monai-npc":
    torch.set_num_threads(runtime.default_threads())
from monai_npc.networks.nets import load_pretrained
net = load_pretrained("acdc").eval()
torch.manual_seed(0)
m, f = torch.rand(1, 1, 128, 128), torch.rand(1, 1, 128, 128)
times = []
with torch.inference_mode():
    net.register(m, f)
    for _ in range(int(sys.argv[2])):
        t0 = time.perf_counter(); net.register(m, f); times.append(time.perf_counter() - t0)
print(torch.get_num_threads(), 1000 * statistics.median(times))
"""

LOAD = r"""
import torch, time
a = torch.rand(768, 768)
t_end = time.time() + float(__import__("sys").argv[1])
while time.time() < t_end:
    a = (a @ a).clamp_(-1, 1)
"""

SETTINGS = {
    "torch defaults": ("default", {"OMP_WAIT_POLICY": None, "OMP_NUM_THREADS": None}),
    "monai-npc defaults": ("monai-npc", {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": None}),
    "1 thread": ("default", {"OMP_WAIT_POLICY": None, "OMP_NUM_THREADS": "1"}),
    "2 threads, passive": ("default", {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "2"}),
}


def _env(changes):
    env = dict(os.environ)
    for key, value in changes.items():
        env.pop(key, None)
        if value is not None:
            env[key] = value
    return env


def _run(mode, changes, pairs):
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(pairs)], env=_env(changes), capture_output=True, text=True, check=True)
    threads, ms = out.stdout.split()
    return int(threads), float(ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=30)
    args = parser.parse_args()
    rows = {}
    for name, (mode, changes) in SETTINGS.items():
        rows[name] = [_run(mode, changes, args.pairs)]
    load = subprocess.Popen([sys.executable, "-c", LOAD, "600"], env=_env({"OMP_NUM_THREADS": None, "OMP_WAIT_POLICY": None}))
    try:
        time.sleep(3)
        for name, (mode, changes) in SETTINGS.items():
            rows[name].append(_run(mode, changes, args.pairs))
    finally:
        load.kill()
    print(f"NPCNet acdc, batch 1, 128 x 128, median of {args.pairs}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
    print(f"{'setting':>20} {'threads':>8} {'alone ms':>9} {'threads':>8} {'beside a torch job ms':>22}")
    for name, ((t0, idle), (t1, busy)) in rows.items():
        print(f"{name:>20} {t0:>8} {idle:>9.1f} {t1:>8} {busy:>22.1f}")


if __name__ == "__main__":
    main()
