"""``monai-npc verify-weights`` and ``monai-npc convert-weights``: weights are data, never code.

``verify-weights PATH...`` checks the weights of each PATH (a shipped name, a weights file or a
MONAI bundle folder) against the SHA-256 recorded for them (``meta["weights_sha256"]`` of a
``save_pretrained`` file, ``weights_sha256`` of a bundle's ``configs/metadata.json``) and prints
``OK``, ``MISMATCH`` or ``NO CHECKSUM`` with the hash of the tensors. It exits with 1 when any
check fails. Files are only read with ``torch.load(weights_only=True)``. ``--record`` writes the
current hash instead (after retraining a bundle on purpose).

``convert-weights --i-trust-this-file OLD NEW`` rewrites a file written by an earlier release
(that holds, e.g., numpy values in its metadata) as a data-only file. It fully unpickles OLD, which
can run code: run it only on a file you made or whose source you trust.
"""

from __future__ import annotations

import argparse

#: what ``verify-weights`` prints for each status, and whether the status fails the command
_STATUS = {"ok": ("OK", False), "mismatch": ("MISMATCH", True), "no checksum": ("NO CHECKSUM", False)}


def add_parser(sub) -> argparse.ArgumentParser:
    verify = sub.add_parser(
        "verify-weights",
        help="check weights files or bundles against their recorded SHA-256 (exit 1 on a mismatch)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("paths", nargs="+", metavar="PATH", help="shipped name, weights file or MONAI bundle folder")
    verify.add_argument("--record", action="store_true", help="record the current hash (bundle metadata.json / file meta)")
    verify.set_defaults(func=run_verify)
    convert = sub.add_parser(
        "convert-weights",
        help="one-off: rewrite a trusted weights file of an earlier release as data only",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    convert.add_argument("src", help="the old file (fully unpickled: it must be a file you trust)")
    convert.add_argument("dst", help="the data-only file to write")
    convert.add_argument("--i-trust-this-file", dest="trusted", action="store_true",
                         help="confirm that SRC comes from a trusted source (required)")
    convert.set_defaults(func=run_convert)
    return verify


def run_verify(args: argparse.Namespace) -> int:
    """Print one line per PATH; 1 if any weights do not match their recorded checksum."""
    from monai_npc.networks.nets import check_weights, record_checksum

    failed = False
    for spec in args.paths:
        check = record_checksum(spec) if args.record else check_weights(spec)
        label, bad = _STATUS[check.status]
        failed = failed or bad
        print(f"{label}: {check.path} sha256 {check.actual}")
        if bad or check.status == "no checksum":
            print(f"  {check.message}")
    return 1 if failed else 0


def run_convert(args: argparse.Namespace) -> int:
    """Convert SRC to DST after the user confirmed trusting SRC."""
    if not args.trusted:
        raise ValueError(
            f"converting {args.src} unpickles it completely, which can run code hidden in it; "
            "pass --i-trust-this-file if you made it or trust its source."
        )
    from monai_npc.serialization import convert_trusted

    out = convert_trusted(args.src, args.dst)
    print(f"wrote {out} (data only: loads with torch.load(weights_only=True))")
    return 0
