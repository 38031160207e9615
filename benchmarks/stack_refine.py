"""A stack network's 3-D test-time refinement against the shipped 2-D ``acdc`` path, on the validation patients.

    OMP_NUM_THREADS=1 python benchmarks/stack_refine.py --out runs/stack_refine              # the 6 'val' patients
    OMP_NUM_THREADS=1 python benchmarks/stack_refine.py --patients 2 --methods 2d-label,3d-label

Pairs: the ``val`` patients of ``bundles/npc_acdc/configs/acdc70_split.json`` only (SSL4MIS whole stacks, read as
``benchmarks/results_table.py`` reads them: :func:`localisation.read_stack`, 10 mm slices assumed), ED->ES and
ES->ED; only the moving label is ever given. Rows (``--methods``), each the label carried by the written transform
(ITK label-linear, the weights' ``label_sigma``) scored as 3-D Dice per structure against the fixed expert label
(:func:`results_table.dice3`), and seconds per pair (``--threads``, default 1):

- ``2d-label``: ``register(moving, fixed, model="acdc", moving_label=...)``, the shipped defaults (2-D refinement with
  the label-guided term and the label prior, flip ensemble 2); ``2d-images``: the same without the label
  (``label_guidance=0``);
- ``3d-label``: ``SliceContextNPC.from_npc(acdc configured by register's settings)`` (zero through-plane heads: the
  2-D network's in-plane field, the same ODE steps and refinement settings) with its 3-D refinement
  (:meth:`~monai_npc.networks.blocks.InstanceRefinement.refine_stack`), the label term and the prior; ``3d-images``:
  the same with ``label_guidance=0`` (both refine all three channels, ``through_plane=True``); ``3d-label-inplane``:
  ``3d-label`` with the through-plane channel held at the network's (0 here; ``register``'s default); ``3d-label-imagez``: ``3d-label`` with the label term moving the in-plane channels only (the
  through-plane one follows the images and the regulariser).

Writes ``OUT/rows.jsonl`` (reruns skip what is there) and prints the table.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
METHODS = ("2d-label", "2d-images", "3d-label", "3d-images", "3d-label-inplane", "3d-label-imagez")


def stack_network(through_plane: bool = True, label_through_plane: bool = True):
    """The slice-context network of the ``acdc`` weights as ``register`` configures them (its refinement settings kept)."""
    from monai_npc.apps.registration.models import resolve_model
    from monai_npc.networks.nets import SliceContextNPC

    net = SliceContextNPC.from_npc(resolve_model("acdc")[0]).eval()
    net.refiner.refine_stack = functools.partial(net.refiner.refine_stack, through_plane=through_plane,
                                                 label_through_plane=label_through_plane)
    return net


def run(method: str, nets, moving, fixed, moving_label, threads: int):
    """``(label on the fixed grid (Z, H, W), seconds, summary)``."""
    import SimpleITK as sitk

    import monai_npc
    from monai_npc.interop.label_resample import resample_label

    model = "acdc" if method.startswith("2d") else nets[method.rsplit("-", 1)[-1] if method.endswith(("inplane", "imagez")) else "3d"]
    images = method.endswith("images")
    t0 = time.perf_counter()
    reg = monai_npc.register(moving, fixed, model=model, moving_label=moving_label, threads=threads,
                             **({"label_guidance": 0.0} if images else {}))
    label = reg.warped_label if not images else resample_label(moving_label, fixed, reg.transform, reg.label_sigma)
    return sitk.GetArrayFromImage(label), time.perf_counter() - t0, reg.summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "stack_refine")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--patients", type=int, default=None, help="the first N 'val' patients")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import SimpleITK as sitk

    from localisation import SPLIT, as_sitk, read_stack
    from results_table import DEFAULT_DATA, dice3
    from monai_npc.runtime import silence_third_party

    silence_third_party()
    methods = [m for m in args.methods.split(",") if m]
    patients = json.loads(SPLIT.read_text())["val"][: args.patients]
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "rows.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    done = {(r["patient"], r["direction"], r["method"]) for r in rows}
    nets = {"3d": stack_network(True), "inplane": stack_network(False), "imagez": stack_network(True, False)}
    data = DEFAULT_DATA / "data"
    for pt in patients:
        (ed, edl), (es, esl) = read_stack(data, pt, 1), read_stack(data, pt, 2)
        for direction, (m, ml, f, fl) in (("ED->ES", (ed, edl, es, esl)), ("ES->ED", (es, esl, ed, edl))):
            for method in methods:
                if (pt, direction, method) in done:
                    continue
                label, seconds, summary = run(method, nets, as_sitk(m), as_sitk(f), sitk.Cast(as_sitk(ml), sitk.sitkInt32), args.threads)
                row = {"patient": pt, "direction": direction, "method": method, "dice": dice3(label, fl), "seconds": seconds,
                       "label_prior": {k: v for k, v in (summary.get("label_prior") or {}).items() if k in ("weight", "aside", "dropped")},
                       "folding_percent": summary.get("folding_percent")}
                rows.append(row)
                with log.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(pt, direction, method, [round(d, 3) for d in row["dice"]], f"{seconds:.1f}s", flush=True)
    print("| method | RV | Myo | LV | mean | s / pair | pairs |\n|---|---|---|---|---|---|---|")
    for method in methods:
        x = [r for r in rows if r["method"] == method and r["patient"] in patients]
        if x:
            d = np.array([r["dice"] for r in x])
            print(f"| `{method}` | " + " | ".join(f"{v:.3f}" for v in d.mean(0)) + f" | {d.mean():.3f} | "
                  f"{np.mean([r['seconds'] for r in x]):.1f} | {len(x)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
