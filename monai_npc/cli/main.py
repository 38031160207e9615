"""``monai-npc``: one console entry point, one module per subcommand.

Each module named in :data:`SUBCOMMANDS` lives in ``monai_npc/cli/`` and defines
``add_parser(subparsers) -> argparse.ArgumentParser`` (which sets ``func`` with
``parser.set_defaults(func=run)``) and ``run(args) -> int``. Modules keep heavy imports inside
``run`` so that ``monai-npc --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

#: subcommand modules, in the order ``--help`` lists them
SUBCOMMANDS: List[str] = ["quickstart", "demo", "phantom", "qho", "register", "sar", "brain"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monai-npc", description="Neural Phase Correlation registration for MONAI."
    )
    from monai_npc import __version__

    parser.add_argument("--version", action="version", version=f"monai_npc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"monai_npc.cli.{name}").add_parser(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as err:  # clear message, no traceback, for user errors
        print(f"monai-npc {args.command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
