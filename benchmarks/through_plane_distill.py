"""Can a slice-context head learn the base's through-plane motion when shown it? Heads-only training with the loss's own
through-plane fit as a direct target (labels in training only; images only at inference).

    OMP_NUM_THREADS=1 python benchmarks/through_plane_distill.py --pack .cache/acdc70_stacks.npz --train-stacks 8 --steps 40

A feasibility check for issue 51 (docs/training_gpu.md, "What the loss asks of the through-plane channel"): the
first ``--train-stacks`` training stacks of the pack, two per batch, both directions, no augmentation; for each batch
the target is :func:`through_plane_oracle.fit` ``"through"`` (the through-plane component that the training loss,
fixed labels included, asks for on top of the ``acdc`` network's in-plane field; fitted once). Then a
:class:`~monai_npc.networks.nets.SliceContextNPC` from ``acdc`` trains only its heads (Adam, ``--lr``) on
``StackRegistrationLoss`` + ``--target-weight`` x the mean squared difference of its through-plane component from the
target over the voxels labelled in either frame, ``--steps`` steps on random batches (seed ``--seed``). Printed: the
trainer's validation (6 ``val`` stacks, both directions) and, per validation registration, the network's through-plane
component from the base (mean over labelled voxels, :func:`through_plane_oracle.base_profile`), to compare with the
fits' signs (ED -> ES negative at the base, ES -> ED positive).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monai_npc.data.stack_pack import load_stack_pack  # noqa: E402
from monai_npc.engines.stack_data import DeviceStacks  # noqa: E402
from monai_npc.engines.stack_training import StackTrainingConfig, build_network, predict, validate_stacks  # noqa: E402
from monai_npc.losses.stack import StackRegistrationLoss  # noqa: E402
from monai_npc.networks.nets import load_pretrained  # noqa: E402

_SPEC = importlib.util.spec_from_file_location("through_plane_oracle", Path(__file__).with_name("through_plane_oracle.py"))
oracle = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(oracle)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pack", default=str(ROOT / ".cache" / "acdc70_stacks.npz"))
    parser.add_argument("--train-stacks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam rate of the heads")
    parser.add_argument("--target-weight", type=float, default=1.0)
    parser.add_argument("--fit-steps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the validation and the profiles here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    pack = load_stack_pack(args.pack)
    train = DeviceStacks(pack, pack.indices("train")[: args.train_stacks], torch.device("cpu"))
    val = DeviceStacks(pack, pack.indices("val"), torch.device("cpu"))
    loss = StackRegistrationLoss("acdc", label_weight=3.0)
    in_plane_net = load_pretrained("acdc", refine_iterations=0).eval()  # as the trainer runs it
    batches = [list(b) for b in train.batches(range(len(train)), 2)]
    targets = []
    for stacks in batches:
        batch = train.batch(stacks)
        with torch.no_grad():
            in_plane = predict(in_plane_net, batch)
        targets.append(oracle.fit(batch, in_plane, loss, "through", args.fit_steps, 0.05)[:, :1])
    # the trainer's slice-context network from acdc (its training settings: detach_steps), its heads only learning
    model = build_network(StackTrainingConfig(pack=args.pack, out_dir="", init="acdc", architecture="slice_context")).train()
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("context"))
    optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    pick = torch.Generator().manual_seed(args.seed)
    for step in range(args.steps):
        k = int(torch.randint(len(batches), (1,), generator=pick))
        batch = train.batch(batches[k])
        ddf = predict(model, batch)
        terms = loss(batch.moving, batch.fixed, batch.moving_label, batch.fixed_label, ddf, batch.group, batch.n_groups)
        heart = ((batch.fixed_label > 0) | (batch.moving_label > 0)).to(ddf.dtype)
        target_term = (((ddf[:, :1] - targets[k]) ** 2) * heart).sum() / heart.sum().clamp(min=1)
        optimiser.zero_grad()
        (terms["loss"] + args.target_weight * target_term).backward()
        optimiser.step()
        print(f"step {step}: loss {float(terms['loss']):.4f}, target term {float(target_term):.4f}", flush=True)
    model.eval()
    result = {"settings": vars(args), "validation": validate_stacks(model, val), "from_base": []}
    print(result["validation"])
    with torch.no_grad():
        for stacks in val.batches(range(len(val)), 3):
            batch = val.batch(stacks)
            ddf = predict(model, batch)
            n = len(stacks)
            for g in range(batch.n_groups):
                rows = (batch.group == g).nonzero().flatten()
                ed_label = (batch.moving_label if g < n else batch.fixed_label)[rows, 0].numpy()
                profile = oracle.base_profile(batch, ddf, g, ed_label)
                direction = "ED->ES" if g < n else "ES->ED"
                result["from_base"].append({"patient": val.names[stacks[g % n]], "direction": direction, "profile": profile})
                print(f"{val.names[stacks[g % n]]} {direction}: " + " ".join(f"{v:+.3f}" for v in profile), flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
