"""Export a MONAI bundle's weights as a named model: ``python examples/export_bundle_weights.py BUNDLE_DIR OUT.pt``.

Reads ``BUNDLE_DIR/configs/inference.json`` (``network_def``) and ``BUNDLE_DIR/models/model.pt`` and
writes a :func:`~monai_npc.networks.nets.save_pretrained` file whose ``meta`` carries the bundle's
name, version, changelog entry and model grid size, plus ``--trained-on`` and any ``--meta KEY=VALUE``.
Shipped this way: ``monai_npc/weights/camus.pt`` from ``bundles/npc_camus``::

    python examples/export_bundle_weights.py --mirror bundles/npc_camus monai_npc/weights/camus.pt \\
        --trained-on "real CAMUS echocardiography (public 224 x 224 copy, 225 training patients), fine-tuned from synthetic echo phantoms"

After replacing the bundle's ``models/model.pt`` (and bumping its version), the same command
refreshes the named model; ``monai-npc register --model camus`` then uses it, and ``--mirror`` makes
the bundle's ``models/model.pt`` a byte-identical copy of it again (``tests/test_bundle_travel.py``
checks that the two agree). Weights a bundle training wrote outside the bundle (``--ckpt_dir runs/x/models``) are exported with
``--weights runs/x/models/model.pt``; the file then works with ``monai-npc register --model OUT.pt``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from monai_npc.networks.nets import export_bundle_weights, load_pretrained


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundle_dir", help="MONAI bundle folder (configs/inference.json, models/model.pt)")
    p.add_argument("out", help="output .pt file (e.g. monai_npc/weights/camus.pt)")
    p.add_argument("--trained-on", default=None, help="what the weights were trained on (stored as meta['trained_on'])")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                   help="extra meta entry (VALUE parsed as JSON when it is valid JSON); repeatable")
    p.add_argument("--weights", default=None, metavar="FILE",
                   help="weights to export instead of BUNDLE_DIR/models/model.pt: a bundle training's model.pt or checkpoint_epoch=N.pt "
                   "written elsewhere (--ckpt_dir / --output_dir), with the bundle's network_def")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--mirror", action="store_true",
                     help="then make the bundle's models/model.pt a byte-identical copy of OUT (git stores the two once; "
                     "the bundle folder can be copied or zipped) and record its checksum: how the shipped bundles are kept")
    how.add_argument("--link", action="store_true",
                     help="then make the bundle's models/model.pt a link to OUT and record its checksum (the bundle then "
                     "works in place only: a copy of its folder has a dangling link)")
    args = p.parse_args(argv)
    meta = {}
    for item in args.meta:
        key, sep, value = item.partition("=")
        if not sep or not key:
            p.error(f"--meta expects KEY=VALUE, got {item!r}")
        try:
            meta[key] = json.loads(value)
        except json.JSONDecodeError:
            meta[key] = value
    if args.trained_on:
        meta["trained_on"] = args.trained_on
    out = export_bundle_weights(args.bundle_dir, args.out, meta, link=args.link, weights=args.weights, mirror=args.mirror)
    net = load_pretrained(out)  # check the file loads back
    print(f"wrote {out}: {sum(p.numel() for p in net.parameters())} parameters, version {net.meta.get('version')}, "
          f"trained on {net.meta.get('trained_on', 'see meta changelog')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
