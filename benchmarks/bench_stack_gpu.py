"""Seconds per whole heart-window stack in the network, each stack ONE batch, on a GPU (or the CPU).

    python benchmarks/bench_stack_gpu.py --pack .cache/acdc70_stacks.npz [--model acdc] [--device cuda] [--bf16]
    OMP_NUM_THREADS=1 python benchmarks/bench_stack_gpu.py --pack .cache/acdc70_stacks.npz --device cpu --stacks 2

What ``register`` computes on a whole short-axis stack once it has cut the heart window, without the file reading,
resampling and writing around it (SimpleITK, the CPU's part; the GPU image of our device machines has no SimpleITK,
so this runs beside the training with only the pack of ``examples/train_stacks_gpu.py pack`` carried): the network
configured as ``register`` configures it (:func:`monai_npc.apps.registration.models.resolve_model`: for ``acdc`` 6
ODE steps, the 180-degree flip ensemble, 30 refinement steps of 0.5 falling to 0.15 voxels), all Z slices of one ED -> ES stack (128 x 128) in one
call, with and without the moving label in the refinement (``label_guidance``; no label prior here). A stack network
(``stack_network = True``) gets the stack as one ``(Z, 2, h, w)`` call, then its 3-D refinement
(``refine_stack``). Stacks: the pack's ``val`` stacks (images
only; their labels only as the refinement's moving label). One warm-up stack, then ``--repeats`` passes over
``--stacks`` stacks; prints the median / min / max seconds per stack, slices per stack and the device's peak memory,
and with ``--json F`` writes them. Issue 51's GPU target: <= 0.2 s per stack on an H100 or H200.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def val_stacks(pack: Path, count: int) -> List[Dict[str, torch.Tensor]]:
    """The first ``count`` validation stacks of a pack: ``{"moving", "fixed", "moving_label"}`` each ``(Z, 1, h, w)``
    float32 (images min-maxed per slice to [0, 1] as ``register`` does in its window; the label as values 0..3)."""
    with np.load(pack) as z:
        offsets, split = z["offsets"], z["split"]
        picks = [i for i in range(len(split)) if split[i] == "val"][:count]
        if not picks:
            raise ValueError(f"--pack {pack}: no 'val' stacks in its split")
        out = []
        for i in picks:
            s = slice(int(offsets[i]), int(offsets[i + 1]))
            m, f = (torch.from_numpy(z[k][s].astype(np.float32))[:, None] for k in ("ed_image", "es_image"))
            out.append({"moving": _minmax(m), "fixed": _minmax(f),
                        "moving_label": torch.from_numpy(z["ed_label"][s].astype(np.float32))[:, None]})
    return out


def _minmax(x: torch.Tensor) -> torch.Tensor:
    lo = x.amin(dim=(1, 2, 3), keepdim=True)
    return (x - lo) / (x.amax(dim=(1, 2, 3), keepdim=True) - lo).clamp_min(1e-6)


def stack_call(net: torch.nn.Module, guided: bool, guidance: float) -> Callable[[Dict[str, torch.Tensor]], torch.Tensor]:
    """One whole stack through ``net`` as ``register`` runs it: ``stack -> ddf``."""
    from monai_npc.apps.registration.models import is_stack_network

    if is_stack_network(net):  # the network on the whole stack, then its 3-D refinement, as register runs it
        def stack_network(s: Dict[str, torch.Tensor]) -> torch.Tensor:
            ddf = net(torch.cat([s["moving"], s["fixed"]], 1)).float()
            refiner = getattr(net, "refiner", None)
            if getattr(refiner, "iterations", 0) > 0:
                ddf = refiner.refine_stack(s["moving"], s["fixed"], ddf, s["moving_label"] if guided else None,
                                           guidance if guided else 0.0)
            return ddf

        return stack_network
    if guided:
        return lambda s: net.register(s["moving"], s["fixed"], moving_label=s["moving_label"], lambda_label=guidance)[1]
    return lambda s: net.register(s["moving"], s["fixed"])[1]


def time_stacks(call: Callable, stacks: List[Dict[str, torch.Tensor]], device: torch.device, repeats: int,
                bf16: bool) -> List[float]:
    """Seconds per stack (device synchronised), after one warm-up stack."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    on_device = [{k: v.to(device) for k, v in s.items()} for s in stacks]
    times = []
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        call(on_device[0])
        sync()
        for _ in range(repeats):
            for s in on_device:
                t0 = time.perf_counter()
                call(s)
                sync()
                times.append(time.perf_counter() - t0)
    return times


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pack", type=Path, required=True, help="the stacks pack (examples/train_stacks_gpu.py pack)")
    p.add_argument("--model", default="acdc", help="shipped name or save_pretrained file")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--stacks", type=int, default=6, help="validation stacks timed")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (CUDA)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not args.pack.is_file():
        p.error(f"--pack {args.pack}: no such file (make it with examples/train_stacks_gpu.py pack)")
    from monai_npc.apps.registration.models import resolve_model
    from monai_npc.apps.registration.settings import LABEL_GUIDANCE

    device = torch.device(args.device)
    net, name = resolve_model(args.model, device)
    stacks = val_stacks(args.pack, args.stacks)
    record = {"model": name, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "threads": torch.get_num_threads(), "bf16": args.bf16, "stacks": len(stacks),
              "slices_per_stack": statistics.mean(s["moving"].shape[0] for s in stacks)}
    with torch.inference_mode():
        for guided in (False, True):
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            t = time_stacks(stack_call(net, guided, LABEL_GUIDANCE), stacks, device, args.repeats, args.bf16)
            key = "with_label" if guided else "images_only"
            record[key] = {"median_s": statistics.median(t), "min_s": min(t), "max_s": max(t),
                           "peak_gib": torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else None}
            print(f"{name} on {record['device']}, {key}: median {record[key]['median_s']:.3f} s per stack "
                  f"(min {min(t):.3f}, max {max(t):.3f}; {record['slices_per_stack']:.1f} slices of 128 x 128, one batch)")
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
