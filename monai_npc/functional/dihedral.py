"""The 8 symmetries of the square (flips / transposes) for 2D images and displacement fields."""

from __future__ import annotations

from typing import List

import torch

__all__ = ["DIHEDRAL_INVERSE", "dihedral", "dihedral_field"]

#: ``DIHEDRAL_INVERSE[k]``: the code that undoes :func:`dihedral` ``k`` (flip then transpose is undone by
#: transpose then the other flip, so codes 5 and 6 are each other's inverse; the others are involutions)
DIHEDRAL_INVERSE: List[int] = [0, 1, 2, 3, 4, 6, 5, 7]


def dihedral(x: torch.Tensor, code: int) -> torch.Tensor:
    """Symmetry ``code`` (0..7) of the last two axes: bit 0 flips axis -2 (rows), bit 1 flips axis -1
    (columns), bit 2 then transposes them; ``0`` is the identity."""
    if code & 1:
        x = x.flip(-2)
    if code & 2:
        x = x.flip(-1)
    if code & 4:
        x = x.transpose(-1, -2)
    return x


def dihedral_field(ddf: torch.Tensor, code: int) -> torch.Tensor:
    """A displacement ``(B, 2, H, W)`` (component ``k`` along axis ``k``) carried by symmetry ``code``:
    the grid as :func:`dihedral`, and the components negated (flips) and swapped (transpose), so
    ``moving(x + ddf(x)) = fixed(x)`` holds for the transformed images. ``dihedral_field(.,
    DIHEDRAL_INVERSE[code])`` maps a field found on transformed images back."""
    if code & 1:
        ddf = torch.stack([-ddf[:, 0], ddf[:, 1]], 1).flip(-2)
    if code & 2:
        ddf = torch.stack([ddf[:, 0], -ddf[:, 1]], 1).flip(-1)
    if code & 4:
        ddf = torch.stack([ddf[:, 1], ddf[:, 0]], 1).transpose(-1, -2)
    return ddf
