"""Training augmentation of the brain slices: small random affine + elastic perturbations of each image.

Each image of a pair is resampled independently through ``x -> A x + t + e(x)`` (rotation,
isotropic scale, translation about the image centre, plus a smooth random field ``e``), so the
pair's deformation becomes the inter-subject one composed with two random perturbations; flips
are left to the training loop (:func:`monai_npc.engines.train_pairs`, identical for both images).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from monai_npc.functional.warp import identity_grid, warp_image

__all__ = ["random_perturbation", "perturb", "augmented_pairs"]


def random_perturbation(
    rng: np.random.Generator,
    size: int,
    rotate_deg: float = 6.0,
    scale: float = 0.06,
    translate: float = 4.0,
    elastic: float = 2.0,
    control_points: int = 6,
) -> torch.Tensor:
    """Random displacement ``(2, size, size)`` (pixels): affine about the centre plus a smooth elastic part.

    Rotation uniform in ``+-rotate_deg`` degrees, scale ``1 + U(+-scale)``, translation uniform in
    ``+-translate`` pixels per axis, elastic field of peak magnitude ``U(0, elastic)`` pixels
    (bicubic interpolation of a ``control_points^2`` Gaussian grid).
    """
    grid = identity_grid([size, size], torch.device("cpu"), torch.float64)  # (2, H, W)
    c = (size - 1) / 2.0
    theta = np.deg2rad(rng.uniform(-rotate_deg, rotate_deg))
    s = 1.0 + rng.uniform(-scale, scale)
    a = s * torch.tensor([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]], dtype=torch.float64)
    rel = grid - c
    affine = torch.einsum("ij,jhw->ihw", a, rel) - rel + torch.from_numpy(rng.uniform(-translate, translate, (2, 1, 1)))
    coarse = torch.from_numpy(rng.standard_normal((1, 2, control_points, control_points)))
    field = F.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=True)[0]
    peak = float(field.norm(dim=0).max())
    field = field * (rng.uniform(0.0, elastic) / peak if peak > 0 else 0.0)
    return (affine + field).float()


def perturb(image: np.ndarray, rng: np.random.Generator, **kwargs) -> np.ndarray:
    """``image`` ``(H, W)`` resampled through :func:`random_perturbation` (bilinear, zero outside); float32."""
    img = torch.as_tensor(np.asarray(image), dtype=torch.float32)[None, None]
    ddf = random_perturbation(rng, img.shape[-1], **kwargs)[None]
    return warp_image(img, ddf, "bilinear", "zeros")[0, 0].numpy()


def augmented_pairs(
    slices: Dict[str, np.ndarray], pairs: Sequence[Tuple[str, str]], copies: int = 8, seed: int = 0, **kwargs
) -> List[Dict[str, np.ndarray]]:
    """Training pairs: every ``(a, b)`` of ``pairs`` as is, plus ``copies`` independently perturbed versions.

    Both orders are covered by the bidirectional loss, so each unordered pair appears once per copy.
    """
    rng = np.random.default_rng(seed)
    out: List[Dict[str, np.ndarray]] = []
    for a, b in pairs:
        out.append({"moving": slices[a], "fixed": slices[b]})
        for _ in range(copies):
            out.append({"moving": perturb(slices[a], rng, **kwargs), "fixed": perturb(slices[b], rng, **kwargs)})
    return out
