"""Process settings for the command line and the in-memory API: CPU threads and log noise.

Light on purpose (standard library only at import): :mod:`monai_npc.cli.main` imports it before
torch, so that :func:`prefer_passive_waits` can still reach OpenMP.

Ranks. :func:`distributed` starts (or joins) the ``torch.distributed`` group of a ``torchrun`` job;
:func:`shard` gives each rank its share of a cohort (items ``rank, rank + N, ...``) and
:func:`gather_shards` puts every rank's results back in the cohort's order; :func:`rank_device` is a
rank's device. One set of helpers for ``monai-npc register --batch``, ``monai-npc track --batch`` and
the bundles' stack inference and evaluation (docs/tracking.md, "Cohorts on several processes").

Threads. PyTorch uses one OpenMP thread per core by default, and GNU OpenMP (the runtime of the
Linux CPU wheels) keeps idle threads spinning after each parallel region. On a machine shared
with another job this costs more than it gains: both processes spin on the same cores and each
runs slower (docs/design_notes.md, "runtime.py"). :func:`default_threads`
picks at most :data:`MAX_DEFAULT_THREADS` threads and no more than the cores the load average
leaves free; :func:`prefer_passive_waits` sets ``OMP_WAIT_POLICY=PASSIVE`` (sleeping, not
spinning, waits) unless the user set it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "MAX_DEFAULT_THREADS",
    "available_cores",
    "default_threads",
    "prefer_passive_waits",
    "use_threads",
    "set_default_threads",
    "lazy_exports",
    "configure_logging",
    "silence_third_party",
    "shard",
    "unshard",
    "rank_and_world",
    "distributed",
    "gather_shards",
    "barrier",
    "on_rank_zero",
    "rank_device",
    "rank_desc",
]

#: upper bound of :func:`default_threads`: batch-1 2-D registration gains little beyond it
MAX_DEFAULT_THREADS = 4

#: loggers of other libraries whose warnings are noise for our users (level raised to ERROR)
NOISY_LOGGERS = (
    "monai.data.nvimgcodec_pydicom_plugin",  # "nvImageCodec is not available ..." once per image read
)

#: Python warnings of other libraries that are noise for our users: (message regex, category)
NOISY_WARNINGS = (
    (r"monai\.\S+.* has been deprecated since version", FutureWarning),  # MONAI's deprecated-argument notices
)


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_threads(max_threads: int = MAX_DEFAULT_THREADS) -> int:
    """Threads for a new torch job: ``min(max_threads, free cores)``, at least 1.

    Free cores = available cores minus the 1-minute load average (rounded to the nearest
    integer), so that a machine already running a job on every core gets 1 thread. Honours
    ``OMP_NUM_THREADS`` when the user set it.
    """
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = available_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - Windows
        load = 0.0
    free = int(round(cores - load))
    return max(1, min(max_threads, cores, free))


def prefer_passive_waits() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless set; ``True`` when it can still take effect (torch not imported)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return "torch" not in sys.modules


#: :func:`use_threads` blocks running now (in any thread of the process, in the order they entered) and the
#: settings the first one found
_ACTIVE: Dict[str, Any] = {"blocks": [], "saved": (0, 0)}
_ACTIVE_LOCK = threading.Lock()


@contextlib.contextmanager
def use_threads(threads: Optional[int] = None) -> Iterator[int]:
    """Run a block with ``threads`` torch and SimpleITK threads (``None``: :func:`default_threads`); restores both after.

    The counts are process-wide: when a block ends while others run (nested, or in other threads of
    a server), the count of the newest block still running is set again; when the last ends, the
    settings found by the first are restored (never those of another block)."""
    import SimpleITK as sitk
    import torch

    n = default_threads() if threads is None else int(threads)
    if n < 1:
        raise ValueError(f"threads must be >= 1, got {threads}.")
    block = [n]  # its identity marks this block in the list
    with _ACTIVE_LOCK:
        if not _ACTIVE["blocks"]:
            _ACTIVE["saved"] = (torch.get_num_threads(), sitk.ProcessObject.GetGlobalDefaultNumberOfThreads())
        _ACTIVE["blocks"].append(block)
        torch.set_num_threads(n)
        sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(n)
    try:
        yield n
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE["blocks"] = [b for b in _ACTIVE["blocks"] if b is not block]
            t, k = (_ACTIVE["blocks"][-1][0],) * 2 if _ACTIVE["blocks"] else _ACTIVE["saved"]
            torch.set_num_threads(t)
            sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(k)


def set_default_threads(threads: Optional[int] = None) -> int:
    """Set torch's and SimpleITK's threads for the rest of the process (``None``: :func:`default_threads`).

    For your own programs (the bundles pass ``threads`` to their functions instead): torch's own default
    (one spinning thread per core) is much slower than one thread on a machine running another job
    (docs/design_notes.md, "runtime.py").
    Returns the number set.
    """
    import SimpleITK as sitk
    import torch

    n = default_threads() if threads is None else int(threads)
    if n < 1:
        raise ValueError(f"threads must be >= 1, got {threads}.")
    torch.set_num_threads(n)
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(n)
    return n


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> Tuple[Callable[[str], Any], list]:
    """``(__getattr__, __all__)`` for a package whose names live in submodules imported on first use.

    ``exports`` maps a submodule to the names it provides: ``__getattr__ = ...`` at package level
    then imports ``package.submodule`` only when one of its names is asked for (PEP 562).
    """
    import importlib

    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__, sorted(where)


class _StderrHandler(logging.StreamHandler):
    """Writes to the current ``sys.stderr`` (not the one at creation: test captures, redirections)."""

    _monai_npc = True

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def silence_third_party() -> None:
    """Raise the level of :data:`NOISY_LOGGERS` to ERROR and ignore :data:`NOISY_WARNINGS`."""
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    for message, category in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


def configure_logging(level: str = "WARNING", quiet: bool = False) -> int:
    """Log ``monai_npc`` messages and Python warnings to stderr as ``monai-npc: LEVEL: message``.

    ``quiet`` keeps errors only. Returns the numeric level. Known third-party noise is silenced
    (:func:`silence_third_party`).
    """
    numeric = logging.ERROR if quiet else logging.getLevelName(str(level).upper())
    if not isinstance(numeric, int):
        raise ValueError(f"--log-level must be one of DEBUG, INFO, WARNING, ERROR, got {level!r}.")
    logging.captureWarnings(True)
    warnings.formatwarning = lambda message, category, *args, **kwargs: f"{message}"  # no file:line for users
    for name in ("monai_npc", "py.warnings"):
        logger = logging.getLogger(name)
        logger.setLevel(numeric)
        logger.propagate = False
        if not any(getattr(h, "_monai_npc", False) for h in logger.handlers):
            handler = _StderrHandler()
            handler.setFormatter(logging.Formatter("monai-npc: %(levelname)s: %(message)s"))
            logger.addHandler(handler)
    silence_third_party()
    return numeric


def shard(items: Sequence[Any], rank: int, world_size: int) -> List[Any]:
    """Rank ``rank``'s share of ``items`` out of ``world_size`` ranks: items ``rank, rank + world_size, ...``
    (as MONAI's ``DistributedSampler`` without shuffling and ``even_divisible=False``)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size}).")
    return list(items[rank::world_size])


def unshard(parts: Sequence[Sequence[Any]]) -> List[Any]:
    """The inverse of :func:`shard`: ``parts[r]`` is rank ``r``'s share (or its first items, when a
    rank stopped early); returns the items in their original order."""
    out: List[Any] = []
    for j in range(max((len(p) for p in parts), default=0)):
        out.extend(p[j] for p in parts if j < len(p))
    return out


def rank_and_world() -> Tuple[int, int]:
    """``(rank, world_size)`` of the initialised ``torch.distributed`` group, else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@contextlib.contextmanager
def distributed() -> Iterator[Tuple[int, int]]:
    """``(rank, world_size)`` of the job. Under ``torchrun`` (``WORLD_SIZE`` > 1) the process group is
    started (nccl with CUDA, else gloo, as the bundles' ``configs/multi_gpu_*.json``) and, on leaving,
    a barrier and ``destroy_process_group``. An already initialised group (a bundle's
    ``multi_gpu_inference.json``) is used as it is and left alone; without ``torchrun``: ``(0, 1)``."""
    import torch
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        yield dist.get_rank(), dist.get_world_size()
        return
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or not dist.is_available():
        yield 0, 1
        return
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    try:
        yield dist.get_rank(), dist.get_world_size()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def gather_shards(items: List[Any], world_size: int) -> List[Any]:
    """Every rank's ``items`` (its :func:`shard` of a cohort, in order) in the cohort's order, on every
    rank (``all_gather_object``); ``items`` itself when ``world_size`` is 1."""
    if world_size <= 1:
        return list(items)
    import torch.distributed as dist

    parts: List[Any] = [None] * world_size
    dist.all_gather_object(parts, items)
    return unshard(parts)


def barrier() -> None:
    """``torch.distributed.barrier()`` when a group is initialised, else nothing."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def on_rank_zero(work: Callable[[], Any], what: str) -> Any:
    """``work()`` on rank 0 of an initialised ``torch.distributed`` group, the other ranks waiting for it (files that
    every rank then reads: phantom data, a training pack); returns its result on every rank (it must pickle).
    Without a group: ``work()`` itself, its errors as they are.

    Raises:
        RuntimeError: on every rank, when ``work`` failed on rank 0 (naming ``what`` and the cause), instead of
            the other ranks waiting for rank 0 forever.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return work()
    outcome: List[Any] = [None, None]  # (failure, result)
    if dist.get_rank() == 0:
        try:
            outcome[1] = work()
        except Exception as err:  # noqa: BLE001 - told to the other ranks, then raised
            outcome[0] = f"{type(err).__name__}: {err}"
    dist.broadcast_object_list(outcome, src=0)
    if outcome[0] is not None:
        raise RuntimeError(f"{what} failed on rank 0: {outcome[0]}")
    return outcome[1]


def rank_device(device: Optional[Union[str, Any]] = None) -> Any:
    """This rank's torch device: ``None`` -> ``cuda:LOCAL_RANK`` when CUDA is available, else ``cpu``;
    ``"cuda"`` (no index) -> ``cuda:LOCAL_RANK`` (under ``torchrun`` each process its own GPU;
    ``cuda:0`` without it); anything else as given.

    Raises:
        ValueError: ``device`` names CUDA on a machine without it (naming ``device``).
    """
    import torch

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        return f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r}: CUDA is not available on this machine (use --device cpu, device='cpu').")
    return f"cuda:{local}" if str(device) == "cuda" else device


def rank_desc(desc: str, rank: int, world_size: int) -> str:
    """A progress bar's label: ``desc``, with ``" (rank r/N)"`` when ``world_size`` > 1."""
    return desc + (f" (rank {rank}/{world_size})" if world_size > 1 else "")
