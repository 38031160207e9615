"""Whole-stack pairs on the device: a packed file (:mod:`monai_npc.data.stack_pack`) loaded once, batches built by
indexing device tensors, so the GPU never waits for a CPU input pipeline.

A batch of ``S`` stacks holds both directions of each pair: the slices of the ``S`` ED -> ES pairs, then those of
the ``S`` ES -> ED pairs, each stack's slices contiguous and in the file's order (basal to apical). ``group``
``(N,)`` says which of the ``2 S`` registrations a slice belongs to: a slice-wise network ignores it, a
slice-context network finds a slice's neighbours with it, the loss sums the 3-D Dice with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch

from monai_npc.data.stack_pack import StackPack
from monai_npc.transforms.stack_augment import RandStackAugment, minmax_per_slice

__all__ = ["StackBatch", "DeviceStacks"]


@dataclass
class StackBatch:
    """Registrations of whole stacks, slice by slice, on one device.

    ``moving``, ``fixed``: ``(N, 1, H, W)`` float32 in ``[0, 1]`` (per slice); ``moving_label``, ``fixed_label``:
    ``(N, 1, H, W)`` float32 label values; ``group``: ``(N,)`` int64 in ``0 .. n_groups - 1``; ``stacks``: the
    packed positions of the ``n_groups // 2`` stacks (ED -> ES pairs first, then ES -> ED in the same order).
    """

    moving: torch.Tensor
    fixed: torch.Tensor
    moving_label: torch.Tensor
    fixed_label: torch.Tensor
    group: torch.Tensor
    n_groups: int
    stacks: List[int]

    @property
    def pair(self) -> torch.Tensor:
        """``(N, 2, H, W)``: moving and fixed as the network's input channels."""
        return torch.cat([self.moving, self.fixed], 1)


class DeviceStacks:
    """Some patients of a pack, as ``uint8`` tensors on ``device`` (a 70-patient 128 x 128 pack: about 43 MB).

    Args:
        pack: the packed file (:func:`~monai_npc.data.stack_pack.load_stack_pack`).
        patients: positions in ``pack`` (e.g. ``pack.indices("train")``).
        device: where the tensors live.
    """

    def __init__(self, pack: StackPack, patients: Sequence[int], device: torch.device) -> None:
        self.patients = [int(p) for p in patients]
        if not self.patients:
            raise ValueError("DeviceStacks needs at least one patient of the pack.")
        self.names = [pack.patients[p] for p in self.patients]
        ranges = [pack.slices(p) for p in self.patients]
        self.counts = [r.stop - r.start for r in ranges]
        self.starts = [0]
        for c in self.counts[:-1]:
            self.starts.append(self.starts[-1] + c)
        index = torch.cat([torch.arange(r.start, r.stop) for r in ranges])

        def take(name: str) -> torch.Tensor:
            return torch.from_numpy(getattr(pack, name))[index]

        self.device = torch.device(device)
        self.images = torch.stack([take("ed_image"), take("es_image")], 1).to(self.device)  # (S, 2, H, W) uint8
        self.labels = torch.stack([take("ed_label"), take("es_label")], 1).to(self.device)
        self._starts = torch.as_tensor(self.starts, dtype=torch.int64).to(self.device)
        self._counts = torch.as_tensor(self.counts, dtype=torch.int64).to(self.device)

    def __len__(self) -> int:
        return len(self.patients)

    @property
    def num_slices(self) -> int:
        return int(self.images.shape[0])

    def positions(self, stacks: Sequence[int]) -> torch.Tensor:
        """``stacks`` as an int64 tensor on the device (upload an epoch's order once, slice it per step)."""
        stacks = [int(s) for s in stacks]
        if not stacks or min(stacks) < 0 or max(stacks) >= len(self):
            raise ValueError(f"stacks must be positions in 0..{len(self) - 1}, got {stacks}.")
        return torch.as_tensor(stacks, dtype=torch.int64).to(self.device)

    def _gather(self, stacks: Sequence[int], on_device: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(index (M,), group (M,))`` of the slices of ``stacks``, computed on the device (no host synchronisation)."""
        total = sum(self.counts[s] for s in stacks)  # host-side: the output size
        counts = self._counts[on_device]
        group = torch.repeat_interleave(torch.arange(len(stacks), device=self.device), counts, output_size=total)
        first = torch.cumsum(counts, 0) - counts  # each stack's first row in the batch
        index = self._starts[on_device][group] + torch.arange(total, device=self.device) - first[group]
        return index, group

    def batch(self, stacks: Sequence[int], augment: Optional[RandStackAugment] = None,
              on_device: Optional[torch.Tensor] = None) -> StackBatch:
        """Both directions of the pairs of ``stacks`` (positions ``0 .. len - 1``; ``on_device`` the same positions as a
        device tensor, e.g. a slice of :meth:`positions` of the epoch's order), augmented when ``augment`` is given
        (else min-maxed per slice only)."""
        stacks = [int(s) for s in stacks]
        if on_device is None:
            on_device = self.positions(stacks)
        index, group = self._gather(stacks, on_device)
        n = len(stacks)
        images = self.images[index].float() / 255.0
        labels = self.labels[index].float()
        if augment is not None:
            ed, es, ed_label, es_label = augment.augment(images[:, :1], images[:, 1:], labels[:, :1], labels[:, 1:], group, n)
        else:
            images = minmax_per_slice(images)
            ed, es, ed_label, es_label = images[:, :1], images[:, 1:], labels[:, :1], labels[:, 1:]
        return StackBatch(moving=torch.cat([ed, es]), fixed=torch.cat([es, ed]), moving_label=torch.cat([ed_label, es_label]),
                          fixed_label=torch.cat([es_label, ed_label]), group=torch.cat([group, group + n]), n_groups=2 * n,
                          stacks=stacks)

    def batches(self, order: Sequence[int], stacks_per_batch: int) -> List[List[int]]:
        """``order`` cut into consecutive batches of ``stacks_per_batch`` stacks (the last one may be smaller)."""
        if stacks_per_batch < 1:
            raise ValueError(f"stacks_per_batch must be >= 1, got {stacks_per_batch}.")
        order = [int(s) for s in order]
        return [order[i : i + stacks_per_batch] for i in range(0, len(order), stacks_per_batch)]
