"""``monai-npc``: one console entry point, one module per subcommand.

Each module named in :data:`SUBCOMMANDS` lives in ``monai_npc/cli/`` and defines
``add_parser(subparsers) -> argparse.ArgumentParser`` (which sets ``func`` with
``parser.set_defaults(func=run)``) and ``run(args) -> int``. Modules keep heavy imports inside
``run`` so that ``monai-npc --help`` stays fast.

Options common to every subcommand (given before it: ``monai-npc --threads 1 register ...``):
``--threads`` (torch/SimpleITK threads; default :func:`monai_npc.runtime.default_threads`: at
most 4 and no more than the cores the load average leaves free), ``--quiet`` and ``--log-level``.
OpenMP waits are made passive (``OMP_WAIT_POLICY=PASSIVE`` unless set) before torch loads.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

from monai_npc import runtime

#: subcommand modules, in the order ``--help`` lists them
SUBCOMMANDS: List[str] = ["quickstart", "demo", "phantom", "qho", "register", "track", "sar", "brain", "weights"]


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_runtime_options(parser: argparse.ArgumentParser, default=None) -> None:
    """``--threads``, ``--quiet``, ``--log-level`` (on the main parser; subcommands may repeat them)."""
    parser.add_argument(
        "--threads", type=_positive_int, default=default,
        help="CPU threads for torch and SimpleITK (default: min(4, free cores), 1 on a busy machine; "
        "OMP_NUM_THREADS if set)",
    )
    parser.add_argument("--quiet", action="store_true", default=default, help="print errors only (no warnings; register --batch: no progress bar)")
    parser.add_argument(
        "--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper, default=default,
        help="messages to print (default: WARNING)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monai-npc", description="Neural Phase Correlation registration for MONAI."
    )
    from monai_npc import __version__

    parser.add_argument("--version", action="version", version=f"monai_npc {__version__}")
    add_runtime_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"monai_npc.cli.{name}").add_parser(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    runtime.prefer_passive_waits()  # before torch loads: idle OpenMP threads sleep instead of spinning
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        runtime.configure_logging(getattr(args, "log_level", None) or "WARNING", bool(getattr(args, "quiet", False)))
        import torch

        args.threads = getattr(args, "threads", None) or runtime.default_threads()
        torch.set_num_threads(args.threads)
        return int(args.func(args) or 0)
    except (ValueError, OSError) as err:  # clear message, no traceback, for user errors and failed writes
        print(f"monai-npc {args.command}: error: {error_line(err)}", file=sys.stderr)
        return 1


def error_line(err: BaseException) -> str:
    """One line for a user-facing error: an operating-system error with a path gets the path and its
    cause (:func:`monai_npc.io_safety.describe_os_error`: disk full, permission...), any other
    error its message; line breaks become spaces."""
    if isinstance(err, OSError) and err.errno is not None and err.filename:
        from monai_npc.io_safety import describe_os_error

        text = f"{err.filename}: {describe_os_error(err)}"
    else:
        text = str(err) or type(err).__name__
    return " ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def entry_point() -> None:
    """The ``monai-npc`` console script: :func:`main`, then exit. Before exiting, every object is moved out of the
    garbage collector's reach (``gc.freeze``): the interpreter's last collection over torch's objects costs a
    command about 0.4 s and frees nothing the exit would not free anyway (atexit handlers and flushing still run)."""
    import gc

    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry_point()
