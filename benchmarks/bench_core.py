"""NPC core benchmark: parameters, FLOPs and per-pair inference latency on the CPU.

    python benchmarks/bench_core.py [--repeats 5] [--json benchmarks/results/core.json]

ACDC configuration (``NPCNet()`` defaults) at 128 x 128; batch 1 and 8; ODE 4 and 10 steps.
FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` (2 per multiply-add, convolutions
and matrix products only). Latency is the median of ``--repeats`` timed calls after one warm-up,
under ``torch.inference_mode``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from monai_npc.networks.nets import NPCNet


def count_flops(net: torch.nn.Module, x: torch.Tensor) -> int:
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        net(x)
    return int(counter.get_total_flops())


def latency(net: torch.nn.Module, x: torch.Tensor, repeats: int) -> float:
    with torch.inference_mode():
        net(x)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            net(x)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    for steps in (4, 10):
        net = NPCNet(num_steps=steps).eval()
        params = sum(p.numel() for p in net.parameters())
        flops = count_flops(net, torch.rand(1, 2, args.size, args.size))
        for batch in (1, 8):
            x = torch.rand(batch, 2, args.size, args.size)
            sec = latency(net, x, args.repeats)
            rows.append(
                dict(ode_steps=steps, batch=batch, params=params, gflops_per_pair=flops / 1e9,
                     ms_per_pair=1000 * sec / batch, pairs_per_s=batch / sec)
            )
    print(f"NPCNet ACDC configuration, {args.size}x{args.size}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'ODE':>4} {'batch':>6} {'params':>9} {'GFLOP/pair':>11} {'ms/pair':>9} {'pairs/s':>8}")
    for r in rows:
        print(f"{r['ode_steps']:>4} {r['batch']:>6} {r['params']:>9,} {r['gflops_per_pair']:>11.2f} {r['ms_per_pair']:>9.1f} {r['pairs_per_s']:>8.1f}")
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = dict(torch=torch.__version__, threads=torch.get_num_threads(), machine=platform.machine(), processor=platform.processor())
        out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=2))


if __name__ == "__main__":
    main()
