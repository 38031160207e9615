"""Turn the best checkpoint of ``train_acdc_cpu.py`` into the shipped ACDC weights.

    python examples/finalize_acdc_weights.py --weights runs/acdc_cpu/best.pt --data-dir ../shared/data/acdc_ssl4mis \\
        --out monai_npc/weights/acdc.pt --bundle-model bundles/npc_acdc/models/model.pt

Evaluates the model on every held-out pair of the training split (both directions) at ODE 4 (as
trained) and ODE 10 (the paper's setting), records both in ``meta["validation_full"]``, ships the
configuration with ``num_steps`` = the better of the two and ``detach_steps`` off (a training-only
option; outputs are equal), and makes the bundle's ``models/model.pt`` a byte-identical copy of that file (git
stores the two once).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from monai_npc.data.acdc import build_acdc_pairs
from monai_npc.engines import evaluate_pairs
from monai_npc.networks.nets import load_pretrained, mirror_bundle_weights, save_pretrained


def held_out_metrics(net, pairs) -> dict:
    res = evaluate_pairs(net.eval(), pairs, batch_size=16, names=("rv", "myo", "lv"))
    out = {k: float(v) for k, v in res["mean"].items()}
    for direction, key in (("ED->ES", "dice_ed_es"), ("ES->ED", "dice_es_ed")):
        vals = [x for x, p in zip(res["per_pair"]["dice_mean"], pairs) if p["direction"] == direction]
        out[key] = float(sum(vals) / len(vals))
    out["n_pairs"] = len(pairs)
    out["seconds_per_pair"] = float(res.get("seconds_per_pair", float("nan")))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weights", required=True, help="best.pt written by train_acdc_cpu.py")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--out", required=True, help="save_pretrained file to write (e.g. monai_npc/weights/acdc.pt)")
    p.add_argument("--bundle-model", default=None, help="bundle models/model.pt to make a copy of --out (git stores the two once)")
    p.add_argument("--note", default="", help="free text stored in meta['note'] after the generated one")
    args = p.parse_args()

    # detach_steps is a training-only option (outputs are equal); ship it off
    nets = {steps: load_pretrained(args.weights, num_steps=steps, detach_steps=False) for steps in (4, 10)}
    sched = nets[4].meta.get("schedule", {})
    split = dict(n_train=sched.get("n_train", 56), n_val=sched.get("n_val", 14), n_test=0, seed=sched.get("seed", 2023))
    pairs = build_acdc_pairs(args.data_dir, "val", **split)
    full = {}
    for steps, net in nets.items():
        full[f"ode{steps}"] = held_out_metrics(net, pairs)
        print(f"ODE {steps}:", json.dumps({k: round(v, 4) for k, v in full[f'ode{steps}'].items()}), flush=True)
    best = max((4, 10), key=lambda s: full[f"ode{s}"]["dice_mean"])
    final = nets[best]
    meta = dict(final.meta)
    meta["validation_full"] = full
    trained = sched.get("steps", 4)
    meta["note"] = (f"trained with num_steps={trained} (detach_steps); shipped with num_steps={best}, which scored "
                    f"higher on the held-out patients (validation_full)" + (f"; {args.note}" if args.note else ""))
    save_pretrained(final, args.out, meta)
    if args.bundle_model:
        mirror_bundle_weights(Path(args.bundle_model).parent.parent, args.out)
    print(f"wrote {args.out}" + (f" and {args.bundle_model}" if args.bundle_model else "") + f" (num_steps {best})")


if __name__ == "__main__":
    main()
