"""Fingerprint the package's outputs on a fixed set of inputs, to check that a refactoring changes nothing.

Runs ``monai_npc.register`` (phantom pairs; the real ACDC patient090 ED->ES with and without its moving
label; a label-free 2-D pair) and ``monai_npc.track`` (patient090's whole cine) on one thread and writes
one SHA-256 per output array (and the summaries without timings) to a JSON file. Two runs of the same
code give the same file; compare the file of a commit before and after a move::

    OMP_NUM_THREADS=1 python benchmarks/fingerprint.py --out before.json
    OMP_NUM_THREADS=1 python benchmarks/fingerprint.py --out after.json && diff before.json after.json

The ACDC cases skip when ``../shared/data/acdc_cine_example`` is absent.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any, Dict

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CINE = ROOT.parent / "shared" / "data" / "acdc_cine_example" / "patient090"


def _digest(x: Any) -> str:
    """SHA-256 of an array's dtype, shape and bytes (a SimpleITK image, tensor or array)."""
    import SimpleITK as sitk
    import torch

    if isinstance(x, sitk.Image):
        x = sitk.GetArrayFromImage(x)
    elif isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.ascontiguousarray(x)
    h = hashlib.sha256(f"{x.dtype}{x.shape}".encode())
    h.update(x.tobytes())
    return h.hexdigest()[:16]


def _clean(summary: Any) -> Any:
    """The summary without wall-clock times (which differ between two runs of the same code)."""
    if isinstance(summary, dict):
        return {k: _clean(v) for k, v in summary.items() if "second" not in k and "time" not in k}
    if isinstance(summary, (list, tuple)):
        return [_clean(v) for v in summary]
    if isinstance(summary, float):
        return round(summary, 10)
    return summary


def _registration(reg: Any) -> Dict[str, Any]:
    out = {"warped": _digest(reg.warped), "ddf": _digest(reg.ddf), "jacobian": _digest(reg.jacobian), "summary": _clean(reg.summary)}
    if getattr(reg, "warped_label", None) is not None:
        out["warped_label"] = _digest(reg.warped_label)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args()

    import monai_npc
    from monai_npc.data.phantoms import cardiac_pair
    from monai_npc.runtime import use_threads

    use_threads(1)
    result: Dict[str, Any] = {}
    for seed in (0, 1):
        pair = cardiac_pair(128, seed=seed)
        reg = monai_npc.register(pair["moving"], pair["fixed"], "acdc", moving_label=pair["moving_label"], spacing=(1.5, 1.5))
        result[f"phantom{seed}"] = _registration(reg)
        reg = monai_npc.register(pair["moving"], pair["fixed"], "acdc", spacing=(1.5, 1.5))
        result[f"phantom{seed}_nolabel"] = _registration(reg)
    if CINE.is_dir():
        ed, es = CINE / "patient090_frame04.nii.gz", CINE / "patient090_frame11.nii.gz"
        ed_gt = CINE / "patient090_frame04_gt.nii.gz"
        result["p090_label"] = _registration(monai_npc.register(ed, es, "acdc", moving_label=ed_gt))
        result["p090_nolabel"] = _registration(monai_npc.register(ed, es, "acdc"))
        result["p090_noprior"] = _registration(monai_npc.register(ed, es, "acdc", moving_label=ed_gt, label_prior=0))
        with tempfile.TemporaryDirectory() as tmp:
            reg = monai_npc.register(ed, es, "acdc", moving_label=ed_gt)
            reg.save(tmp, overview=False)
            result["p090_files"] = sorted(p.name for p in Path(tmp).iterdir())
        tracking = monai_npc.track(CINE / "patient090_4d.nii.gz", ed_gt, progress=False)
        result["p090_track"] = {
            "labels": _digest(tracking.labels),
            "volumes": {k: _digest(v) for k, v in tracking.volumes.items()},
        }
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    print(f"wrote {args.out}: {len(result)} cases")


if __name__ == "__main__":
    main()
