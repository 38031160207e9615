"""Whole-stack training on several processes (``torchrun``, one per GPU): DistributedDataParallel with each rank
training its share of every step's stacks.

A step of ``W`` ranks with ``stacks_per_batch`` ``S`` is the step one process takes with ``W x S`` stacks: every
rank reads the same epoch order (one seed), builds and augments the whole step's batch of ``W x S`` stacks with the
same random stream (a few milliseconds on a GPU; so the augmentation, the random streams and a checkpoint do not
depend on ``W``), and trains on its :func:`~monai_npc.runtime.shard` of the step's stacks (``r, r + W, ...``).
Its loss terms are scaled so that DDP's mean of the ranks' gradients is the gradient of the whole step's loss:
the image terms (means over slices) by ``W x`` its share of the step's slices, the Dice and volume terms (means over
stacks and structures) by ``W x`` its share of the step's stacks (exact when every stack holds every structure,
as ACDC's do). A rank left without a stack (a last step of fewer than ``W`` stacks) trains on the step's first
stack with weight 0, so that every rank takes part in every gradient reduction.

Decisions that end a loop (the wall-time budget) are rank 0's, broadcast over a CPU (gloo) group, so every rank
stops at the same step without a device synchronisation; validation and files are rank 0's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

from monai_npc.runtime import rank_and_world, shard

from .stack_data import StackBatch

__all__ = ["stack_forward", "StackForward", "StepShare", "EpochShares", "RankGroup"]


def stack_forward(model: nn.Module, pair: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``ddf`` of a batch of stacks: ``model.forward_stacks(pair, group, n_groups)`` for a network that reads its
    neighbours (a slice-context network), else ``model(pair)`` slice by slice."""
    if hasattr(model, "forward_stacks"):
        return model.forward_stacks(pair, group, n_groups)
    return model(pair)


class StackForward(nn.Module):
    """:func:`stack_forward` of ``model`` as a module: what DistributedDataParallel wraps, so that its forward hooks
    see every call."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pair: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
        return stack_forward(self.model, pair, group, n_groups)


@dataclass(frozen=True)
class StepShare:
    """One rank's part of one step: ``stacks`` (positions in the step's batch; a weight-0 stand-in when the rank has
    none), the scales of its image and Dice terms, and its rows ``start:stop`` of :class:`EpochShares`' tensors."""

    stacks: Tuple[int, ...]
    image_scale: float
    label_scale: float
    start: int
    stop: int


class EpochShares:
    """This rank's share of every step of an epoch, its slice indices and stack numbers uploaded to ``device`` once.

    Args:
        steps: the epoch's steps, each the ``stacks`` (dataset positions) of the whole step.
        counts: slices of every dataset position.
        rank, world_size: this process's place in the job.
        device: where the batches are.
    """

    def __init__(self, steps: Sequence[Sequence[int]], counts: Sequence[int], rank: int, world_size: int,
                 device: torch.device) -> None:
        self.shares: List[StepShare] = []
        rows: List[int] = []
        groups: List[int] = []
        for stacks in steps:
            sizes = [int(counts[s]) for s in stacks]
            mine = shard(range(len(stacks)), rank, world_size)
            weight = 1.0 if mine else 0.0
            mine = mine or [0]
            firsts = [sum(sizes[:j]) for j in range(len(sizes))]
            half, taken = sum(sizes), sum(sizes[j] for j in mine)
            start = len(rows)
            for direction in (0, 1):  # ED -> ES slices first, then ES -> ED (StackBatch's order)
                for k, j in enumerate(mine):
                    rows.extend(range(direction * half + firsts[j], direction * half + firsts[j] + sizes[j]))
                    groups.extend([direction * len(mine) + k] * sizes[j])
            self.shares.append(StepShare(tuple(mine), weight * world_size * taken / half,
                                         weight * world_size * len(mine) / len(stacks), start, len(rows)))
        self.rows = torch.as_tensor(rows, dtype=torch.int64).to(device)
        self.groups = torch.as_tensor(groups, dtype=torch.int64).to(device)

    def take(self, step: int, batch: StackBatch) -> Tuple[StackBatch, Tuple[float, float]]:
        """This rank's part of ``batch`` (the whole step ``step``) and its ``(image, label)`` loss scales."""
        share = self.shares[step]
        rows = self.rows[share.start : share.stop]
        part = StackBatch(moving=batch.moving[rows], fixed=batch.fixed[rows], moving_label=batch.moving_label[rows],
                          fixed_label=batch.fixed_label[rows], group=self.groups[share.start : share.stop],
                          n_groups=2 * len(share.stacks), stacks=[batch.stacks[j] for j in share.stacks])
        return part, (share.image_scale, share.label_scale)


class RankGroup:
    """This process's place in a ``torchrun`` job (``rank``, ``world_size``; ``(0, 1)`` without one: every method is
    then the single-process behaviour) and the collectives the training loop needs."""

    def __init__(self) -> None:
        self.rank, self.world_size = rank_and_world()
        self._cpu_group = None
        if self.active:
            import torch.distributed as dist

            self._cpu_group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")

    @property
    def active(self) -> bool:
        """Several processes."""
        return self.world_size > 1

    @property
    def main(self) -> bool:
        """Rank 0: validates, logs and writes the files."""
        return self.rank == 0

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        """``model`` itself, or with several processes ``DistributedDataParallel(StackForward(model))`` (the ranks'
        gradients averaged; rank 0's parameters broadcast at the start)."""
        if not self.active:
            return model
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(StackForward(model), device_ids=[device] if device.type == "cuda" else None)

    def agree(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (a CPU broadcast: no device synchronisation)."""
        if not self.active:
            return flag
        import torch.distributed as dist

        value = torch.tensor([1 if flag else 0], dtype=torch.int64)
        dist.broadcast(value, src=0, group=self._cpu_group)
        return bool(value.item())

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The ranks' mean of ``values`` (the same shape on every rank; on the batches' device)."""
        if not self.active:
            return values
        import torch.distributed as dist

        values = values.clone()
        dist.all_reduce(values)
        return values / self.world_size

    def shares(self, steps: Sequence[Sequence[int]], counts: Sequence[int], device: torch.device) -> Optional[EpochShares]:
        """This rank's :class:`EpochShares` of an epoch's ``steps``; ``None`` for a single process (it trains whole steps)."""
        return EpochShares(steps, counts, self.rank, self.world_size, device) if self.active else None
