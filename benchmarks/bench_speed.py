"""Speed and accuracy side by side on the CPU: NPC (fp32 / bf16), its peers, and the machine's matmul rates.

    python benchmarks/bench_speed.py [--pairs 16] [--json benchmarks/results/speed.json] [--model acdc]

Pairs: the ACDC validation patients of ``examples/train_acdc_cpu.py``'s split when
``../shared/data/acdc_ssl4mis`` exists (both directions), otherwise cardiac phantoms. Every
method registers the same pairs; Dice (RV/Myo/LV mean of the warped moving labels against the
fixed labels) is printed next to every time, so no speed is read without its accuracy.

Rows (128 x 128):
- NPC, ACDC configuration, the shipped or given weights (``--model``; untrained when none exist):
  batch-1 latency at ODE 4 and 10, fp32 and bf16 autocast; batch-32 throughput; training
  throughput (pairs/s, forward + backward of the full bidirectional loss, batch 16 pairs);
- MONAI VoxelMorph 2-D (same size and batch; untrained unless ``--voxelmorph PATH``, so its Dice
  is only a placeholder for speed);
- SimpleITK symmetric-forces demons (100 iterations, smoothing sigma 1.5);
- ANTsPy SyN (when antspyx is installed);
- global phase correlation.
Each NPC/VoxelMorph figure is also given as achieved GFLOP/s over the measured fp32 (or bf16)
matmul rate. Times are medians; ``torch.get_num_threads()`` threads.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from monai_npc.engines import stack_pairs
from monai_npc.functional import warp_image
from monai_npc.losses import RegistrationLoss, bidirectional_loss
from monai_npc.metrics import dice_per_structure
from monai_npc.networks.nets import DemonsNet, NPCNet, PhaseCorrelationNet, VoxelMorphNet, available_models, load_pretrained

ACDC_TRAIN_PAIRS = 385  # ED/ES slice pairs of the 56 training patients (examples/train_acdc_cpu.py), each in both directions
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "acdc_ssl4mis"


def timed(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_rate(dtype: torch.dtype, n: int = 1024) -> float:
    a, b = torch.rand(n, n).to(dtype), torch.rand(n, n).to(dtype)
    sec = timed(lambda: torch.mm(a, b), 5)
    return 2 * n**3 / sec / 1e9


def flops(net: torch.nn.Module, x: torch.Tensor) -> float:
    with torch.inference_mode(), FlopCounterMode(display=False) as c:
        net(x)
    return float(c.get_total_flops())


def load_pairs(n: int):
    if SHARED.is_dir():
        from monai_npc.data.acdc import build_acdc_pairs

        pairs = build_acdc_pairs(SHARED, "val", n_train=56, n_val=14, n_test=0)
        return pairs[:n], "ACDC validation patients (examples/train_acdc_cpu.py split)"
    from monai_npc.data.phantoms import cardiac_pair

    return [cardiac_pair(128, seed=90_000 + i) for i in range(n)], "cardiac phantoms"


def dice_of(ddf: torch.Tensor, pairs) -> float:
    ml, fl = stack_pairs(pairs, "moving_label"), stack_pairs(pairs, "fixed_label")
    return float(torch.nanmean(dice_per_structure(warp_image(ml, ddf, "nearest"), fl)))


def net_rows(name, net, pairs, rates, repeats):
    m, f = stack_pairs(pairs, "moving"), stack_pairs(pairs, "fixed")
    x = torch.cat([m, f], 1)
    rows = []
    with torch.inference_mode():
        ddf = torch.cat([net(x[i : i + 8]) for i in range(0, len(pairs), 8)])
    dice = dice_of(ddf, pairs)
    gflop = flops(net, x[:1]) / 1e9
    for dtype in ("fp32", "bf16"):
        ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bf16" else torch.no_grad
        with torch.inference_mode(), ctx():
            b1 = timed(lambda: net(x[:1]), repeats)
            xb = x.repeat((32 + len(x) - 1) // len(x), 1, 1, 1)[:32]
            b32 = timed(lambda: net(xb), max(1, repeats // 2))
            if dtype == "bf16":
                d = torch.cat([net(x[i : i + 8]).float() for i in range(0, len(pairs), 8)])
                dice_bf16 = dice_of(d, pairs)
        rate = rates[dtype]
        rows.append(dict(method=name, dtype=dtype, dice=dice if dtype == "fp32" else dice_bf16, ms_batch1=1000 * b1,
                         pairs_per_s_batch32=32 / b32, gflop_per_pair=gflop,
                         roofline_batch1=gflop / b1 / rate, roofline_batch32=gflop * 32 / b32 / rate))
    return rows


def train_row(name, net, pairs, rates):
    m, f = stack_pairs(pairs, "moving"), stack_pairs(pairs, "fixed")
    idx = torch.arange(16) % len(pairs)
    loss = RegistrationLoss("acdc")
    net.train()

    def step():
        out = bidirectional_loss(net, loss, m[idx], f[idx])
        out["loss"].backward()

    sec = timed(step, 2)
    net.eval()
    return dict(method=name, train_pairs_per_s=16 / sec, seconds_per_iteration=sec)


def classical_rows(pairs, repeats):
    rows = []
    m, f = stack_pairs(pairs, "moving"), stack_pairs(pairs, "fixed")
    x = torch.cat([m, f], 1)
    demons = DemonsNet()
    t0 = time.perf_counter()
    ddf = torch.cat([demons(x[i : i + 1]) for i in range(len(pairs))])
    rows.append(dict(method="SimpleITK symmetric-forces demons", dtype="fp32", dice=dice_of(ddf, pairs),
                     ms_batch1=1000 * (time.perf_counter() - t0) / len(pairs)))
    try:
        import ants

        def syn(i):
            fx, mv = ants.from_numpy(f[i, 0].numpy()), ants.from_numpy(m[i, 0].numpy())
            reg = ants.registration(fx, mv, "SyN")
            out = ants.apply_transforms(fx, ants.from_numpy(stack_pairs([pairs[i]], "moving_label")[0, 0].numpy()), reg["fwdtransforms"], interpolator="nearestNeighbor")
            return torch.from_numpy(out.numpy())[None, None]

        t0 = time.perf_counter()
        warped = torch.cat([syn(i) for i in range(len(pairs))])
        sec = (time.perf_counter() - t0) / len(pairs)
        d = float(torch.nanmean(dice_per_structure(warped, stack_pairs(pairs, "fixed_label"))))
        rows.append(dict(method="ANTsPy SyN", dtype="fp64", dice=d, ms_batch1=1000 * sec))
    except ImportError:
        rows.append(dict(method="ANTsPy SyN", dtype="-", dice=None, ms_batch1=None, note="antspyx not installed"))
    pc = PhaseCorrelationNet(window=0.25)
    sec = timed(lambda: pc(x[:1]), repeats)
    rows.append(dict(method="global phase correlation (Tukey 0.25)", dtype="fp64", dice=dice_of(pc(x), pairs), ms_batch1=1000 * sec))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--model", default="acdc" if "acdc" in available_models() else None)
    p.add_argument("--voxelmorph", default=None, help="state dict of a trained VoxelMorphNet")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    pairs, source = load_pairs(args.pairs)
    rates = {"fp32": matmul_rate(torch.float32), "bf16": matmul_rate(torch.bfloat16)}
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = []
    for steps in (4, 10):
        net = load_pretrained(args.model, num_steps=steps) if args.model else NPCNet(num_steps=steps).eval()
        rows += net_rows(f"NPC ODE {steps}" + ("" if args.model else " (untrained)"), net, pairs, rates, args.repeats)
    vxm = VoxelMorphNet().eval()
    if args.voxelmorph:
        vxm.load_state_dict(torch.load(args.voxelmorph, map_location="cpu", weights_only=True))
    rows += net_rows("VoxelMorph 2-D" + ("" if args.voxelmorph else " (untrained)"), vxm, pairs, rates, args.repeats)
    training = [train_row("NPC ODE 4 (detach_steps)", NPCNet(num_steps=4, detach_steps=True), pairs, rates),
                train_row("NPC ODE 10", NPCNet(num_steps=10), pairs, rates),
                train_row("VoxelMorph 2-D", VoxelMorphNet(), pairs, rates)]
    rows += classical_rows(pairs, args.repeats)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{len(pairs)} pairs: {source}; torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    print(f"matmul 1024^3: fp32 {rates['fp32']:.1f} GFLOP/s, bf16 {rates['bf16']:.1f} GFLOP/s; peak RSS {peak_mb:.0f} MB (from {rss0 / 1024:.0f} MB)")
    print(f"{'method':36s} {'dtype':5s} {'Dice':>6s} {'ms b1':>8s} {'pairs/s b32':>12s} {'GFLOP':>6s} {'roof b1':>8s} {'roof b32':>9s}")
    for r in rows:
        fmt = lambda k, spec: (format(r[k], spec) if r.get(k) is not None else "-")
        print(f"{r['method']:36s} {r['dtype']:5s} {fmt('dice', '6.3f'):>6s} {fmt('ms_batch1', '8.1f'):>8s} {fmt('pairs_per_s_batch32', '12.1f'):>12s} "
              f"{fmt('gflop_per_pair', '6.2f'):>6s} {fmt('roofline_batch1', '8.1%'):>8s} {fmt('roofline_batch32', '9.1%'):>9s}")
    print("training (batch 16 pairs, both directions, full loss):")
    for r in training:
        r["hours_per_100_acdc_epochs"] = 100 * ACDC_TRAIN_PAIRS / r["train_pairs_per_s"] / 3600
        print(f"  {r['method']:34s} {r['train_pairs_per_s']:6.2f} pairs/s  ({r['seconds_per_iteration']:.2f} s per iteration; "
              f"100 ACDC epochs of {ACDC_TRAIN_PAIRS} pairs: {r['hours_per_100_acdc_epochs']:.1f} h)")
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(dict(source=source, rates=rates, peak_rss_mb=peak_mb, rows=rows, training=training,
                                       threads=torch.get_num_threads(), torch=torch.__version__), indent=2))


if __name__ == "__main__":
    main()
