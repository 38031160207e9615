"""In-plane deformation gradient and Lagrangian strain from a displacement field.

Conventions. A displacement ``ddf`` ``(B, 2, H, W)`` is in voxels, channel ``k`` along spatial
axis ``k`` (row ``H``, then column ``W``), MONAI ``Warp`` convention: ``warped(x) = moving(x + u(x))``.
``spacing`` ``(2,)`` is mm per voxel along ``(H, W)``; every matrix and direction below is in mm
(physical) coordinates, ordered ``(row, column)``, so anisotropic pixels are handled: with
``S = diag(spacing)``, the gradient in mm is ``S (I + grad_vox u) S^-1``.

Two conventions of a field between a reference frame and a frame ``t``:

- ``"to_reference"`` (``monai_npc.track``'s ``ddf``): ``u_t`` maps a point ``x`` of frame ``t``
  to its reference point ``X = x + u_t(x)`` (``label_t(x) = label_ref(x + u_t(x))``). The motion
  of the tissue, reference -> frame ``t``, is the inverse map ``psi(X) = y`` with
  ``y + u_t(y) = X``; its deformation gradient at the reference point ``X`` is
  ``F(X) = (I + grad u_t(y))^-1``, evaluated at the frame point ``y = psi(X)`` (found by damped
  Newton steps on ``y + u_t(y) - X``, :func:`invert_points`).
- ``"from_reference"``: ``w_t`` maps a reference point to its frame point, ``psi(X) = X + w_t(X)``,
  and ``F(X) = I + grad w_t(X)``.

Strain along a unit direction ``e`` of the reference configuration (mm coordinates):
``"engineering"`` (Lagrangian engineering strain, stretch - 1 = ``|F e| - 1``, the change of
length of a material line over its reference length, what feature tracking reports) or ``"green"``
(Green-Lagrange, ``e^T E e`` with ``E = (F^T F - I) / 2``). Both are dimensionless (fractions).
Derivatives are central differences (one-sided at the border, ``torch.gradient``), values
between voxels bilinear.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from .warp import identity_grid, sample_at

__all__ = [
    "STRAIN_KINDS",
    "FIELD_CONVENTIONS",
    "spacing_tensor",
    "deformation_gradient",
    "invert_points",
    "invert_displacement",
    "reference_deformation_gradient",
    "green_lagrange",
    "normal_strain",
    "polar_directions",
]

#: what :func:`normal_strain` computes
STRAIN_KINDS = ("engineering", "green")
#: what a displacement maps (module docstring)
FIELD_CONVENTIONS = ("to_reference", "from_reference")


def spacing_tensor(spacing: Sequence[float], like: torch.Tensor) -> torch.Tensor:
    """``spacing`` ``(2,)`` mm as a tensor on ``like``'s device and dtype; checked positive and finite."""
    sp = torch.as_tensor([float(s) for s in spacing], dtype=like.dtype, device=like.device)
    if sp.numel() != 2 or not bool(torch.isfinite(sp).all()) or bool((sp <= 0).any()):
        raise ValueError(f"spacing must be 2 positive finite values (mm along H, W), got {list(spacing)}.")
    return sp


def _check_ddf(ddf: torch.Tensor, name: str = "ddf") -> None:
    if ddf.dim() != 4 or ddf.shape[1] != 2:
        raise ValueError(f"{name} must be (B, 2, H, W) in-plane voxels, got shape {tuple(ddf.shape)}.")


def _voxel_jacobian(ddf: torch.Tensor) -> torch.Tensor:
    """``(B, H, W, 2, 2)`` gradient of ``x -> x + u(x)`` in voxels per voxel (``[..., i, j] = d(x_i + u_i) / dx_j``)."""
    grads = torch.gradient(ddf, dim=[2, 3])  # grads[j][:, i] = d u_i / d x_j
    jac = torch.stack([torch.stack([grads[j][:, i] for j in range(2)], -1) for i in range(2)], -2)
    return jac + torch.eye(2, dtype=ddf.dtype, device=ddf.device)


def _to_mm(jac: torch.Tensor, spacing: Sequence[float]) -> torch.Tensor:
    """A voxel Jacobian ``(..., 2, 2)`` in mm per mm: ``S J S^-1``."""
    sp = spacing_tensor(spacing, jac)
    return jac * (sp.view(2, 1) / sp.view(1, 2))


def deformation_gradient(ddf: torch.Tensor, spacing: Sequence[float]) -> torch.Tensor:
    """Gradient of ``x -> x + u(x)`` in mm per mm on the grid of ``ddf``.

    Args:
        ddf: ``(B, 2, H, W)`` voxels (channel 0 along ``H``, 1 along ``W``).
        spacing: ``(2,)`` mm per voxel along ``(H, W)``.

    Returns:
        ``(B, H, W, 2, 2)``: ``[..., i, j] = d(x_i + u_i) / dx_j`` in mm coordinates.
    """
    _check_ddf(ddf)
    return _to_mm(_voxel_jacobian(ddf), spacing)


def _solve_damped(j: torch.Tensor, r: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """``(J^T J + lam I)^-1 J^T r`` for ``j`` ``(..., 2, 2)``, ``r`` ``(..., 2)``, ``lam`` ``(...)`` (closed-form 2 x 2)."""
    jt_r = (j.transpose(-1, -2) @ r.unsqueeze(-1)).squeeze(-1)
    a = (j[..., 0, 0] ** 2 + j[..., 1, 0] ** 2) + lam
    b = j[..., 0, 0] * j[..., 0, 1] + j[..., 1, 0] * j[..., 1, 1]
    d = (j[..., 0, 1] ** 2 + j[..., 1, 1] ** 2) + lam
    det = a * d - b * b
    return torch.stack([d * jt_r[..., 0] - b * jt_r[..., 1], a * jt_r[..., 1] - b * jt_r[..., 0]], -1) / det.unsqueeze(-1)


def invert_points(
    ddf: torch.Tensor, points: torch.Tensor, iterations: int = 50, tol: float = 1e-4, jacobian: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The points ``y`` with ``y + u(y) = points``: one fixed-point step ``y = points - u(points)``, then
    damped Newton (Levenberg-Marquardt) steps on ``r(y) = y + u(y) - points`` with the Jacobian
    ``I + grad u`` (a step is taken only where it lowers ``|r|``; the damping falls after a taken
    step and rises after a refused one).

    Unlike the plain fixed-point iteration ``y <- points - u(y)``, this converges where the field
    is steep (``|grad u| > 1``, as registration fields can be at the myocardium) as long as the map
    is invertible there. Where it folds (``det(I + grad u) <= 0``) or no frame point reaches a
    point, ``y`` is the nearest miss and its residual says so. ``u`` and its Jacobian are sampled
    bilinearly, border values outside the grid.

    Args:
        ddf: ``(B, 2, H, W)`` voxels.
        points: ``(B, 2, *P)`` voxel coordinates (channel ``k`` along axis ``k``).
        iterations: at most this many Newton steps.
        tol: stop when every residual is below this (voxels).
        jacobian: ``(B, H, W, 2, 2)`` voxel Jacobian of ``x -> x + u(x)`` if already computed.

    Returns:
        ``(y (B, 2, *P) voxels, residual (B, *P))``: ``residual`` = ``|y + u(y) - points|`` in voxels.
    """
    _check_ddf(ddf)
    if points.dim() < 3 or points.shape[0] != ddf.shape[0] or points.shape[1] != 2:
        raise ValueError(f"points must be (B, 2, *P) with B = {ddf.shape[0]}, got shape {tuple(points.shape)}.")
    shape = points.shape
    flat = points.reshape(shape[0], 2, 1, -1)  # any P as a 1 x N grid
    comps = (_voxel_jacobian(ddf) if jacobian is None else jacobian).flatten(-2).permute(0, 3, 1, 2)  # (B, 4, H, W)
    y = flat - sample_at(ddf, flat)
    r = y + sample_at(ddf, y) - flat
    err = torch.linalg.vector_norm(r, dim=1)  # (B, 1, N)
    lam = torch.full_like(err, 1e-3)
    for _ in range(iterations):
        if not err.numel() or float(err.max()) < tol:
            break
        j = sample_at(comps, y).movedim(1, -1).unflatten(-1, (2, 2))  # (B, 1, N, 2, 2)
        cand = y - _solve_damped(j, r.movedim(1, -1), lam).movedim(-1, 1)
        r_cand = cand + sample_at(ddf, cand) - flat
        err_cand = torch.linalg.vector_norm(r_cand, dim=1)
        better = err_cand < err
        y = torch.where(better.unsqueeze(1), cand, y)
        r = torch.where(better.unsqueeze(1), r_cand, r)
        err = torch.where(better, err_cand, err)
        lam = torch.where(better, lam / 3.0, lam * 10.0).clamp(1e-6, 1e6)
    return y.reshape(shape), err.reshape(shape[0], *shape[2:])


def invert_displacement(ddf: torch.Tensor, iterations: int = 50, tol: float = 1e-4) -> torch.Tensor:
    """The inverse field ``v`` ``(B, 2, H, W)`` voxels of ``u`` = ``ddf``: ``X + v(X)`` is the point
    ``y`` with ``y + u(y) = X`` (:func:`invert_points` on every voxel), so ``v`` of a
    ``"to_reference"`` field is the ``"from_reference"`` field of the same motion and vice versa."""
    _check_ddf(ddf)
    grid = identity_grid(list(ddf.shape[2:]), ddf.device, ddf.dtype).unsqueeze(0).expand(ddf.shape[0], -1, -1, -1)
    y, _ = invert_points(ddf, grid, iterations, tol)
    return y - grid


def reference_deformation_gradient(
    ddf: torch.Tensor, spacing: Sequence[float], points: Optional[torch.Tensor] = None, convention: str = "to_reference",
    iterations: int = 50, tol: float = 1e-4,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Deformation gradient ``F`` of the motion reference -> frame at reference points (module docstring).

    Args:
        ddf: ``(B, 2, H, W)`` voxels between the reference and one frame (``B``: slices).
        spacing: ``(2,)`` mm per voxel along ``(H, W)``.
        points: ``(B, 2, *P)`` reference voxel coordinates where ``F`` is wanted; ``None``: every voxel
            (``P = (H, W)``).
        convention: ``"to_reference"`` (``ddf`` maps frame points to reference points, as
            ``monai_npc.track``'s) or ``"from_reference"`` (reference points to frame points).
        iterations, tol: of :func:`invert_points` (``"to_reference"`` only).

    Returns:
        ``(F (B, *P, 2, 2) mm per mm, residual (B, *P))``: ``residual`` is :func:`invert_points`'
        (voxels; where it is not small the frame point was not found and ``F`` is unreliable; 0 for
        ``"from_reference"``).
    """
    _check_ddf(ddf)
    if convention not in FIELD_CONVENTIONS:
        raise ValueError(f"convention must be one of {FIELD_CONVENTIONS}, got {convention!r}.")
    if points is None:
        points = identity_grid(list(ddf.shape[2:]), ddf.device, ddf.dtype).unsqueeze(0).expand(ddf.shape[0], -1, -1, -1)
    jac = _voxel_jacobian(ddf)  # (B, H, W, 2, 2)
    where = points
    residual = torch.zeros(points.shape[:1] + points.shape[2:], dtype=ddf.dtype, device=ddf.device)
    if convention == "to_reference":
        where, residual = invert_points(ddf, points, iterations, tol, jac)
    flat = where.reshape(where.shape[0], 2, 1, -1)
    sampled = sample_at(jac.flatten(-2).permute(0, 3, 1, 2), flat)  # (B, 4, 1, N)
    mats = sampled.movedim(1, -1).reshape(*where.shape[:1], *where.shape[2:], 2, 2)
    if convention == "to_reference":
        mats = torch.linalg.inv(mats)
    return _to_mm(mats, spacing), residual


def green_lagrange(f: torch.Tensor) -> torch.Tensor:
    """Green-Lagrange strain ``E = (F^T F - I) / 2`` of deformation gradients ``(..., 2, 2)``."""
    return 0.5 * (f.transpose(-1, -2) @ f - torch.eye(f.shape[-1], dtype=f.dtype, device=f.device))


def normal_strain(f: torch.Tensor, directions: torch.Tensor, kind: str = "engineering") -> torch.Tensor:
    """Strain of the material line along ``directions`` under ``F``.

    Args:
        f: ``(..., 2, 2)`` deformation gradients (mm per mm).
        directions: ``(..., 2)`` unit vectors of the reference configuration (mm coordinates).
        kind: ``"engineering"`` (``|F e| - 1``) or ``"green"`` (``e^T E e``).

    Returns:
        ``(...)`` dimensionless (0.1 = 10 % lengthening).
    """
    if kind not in STRAIN_KINDS:
        raise ValueError(f"kind must be one of {STRAIN_KINDS}, got {kind!r}.")
    fe = (f @ directions.unsqueeze(-1)).squeeze(-1)
    if kind == "engineering":
        return torch.linalg.vector_norm(fe, dim=-1) - 1.0
    return 0.5 * ((fe * fe).sum(-1) - (directions * directions).sum(-1))


def polar_directions(points: torch.Tensor, centre: torch.Tensor, spacing: Sequence[float]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Unit radial and circumferential directions (mm coordinates) around a centre per batch item.

    Args:
        points: ``(B, 2, *P)`` voxel coordinates.
        centre: ``(B, 2)`` voxel coordinates of each item's centre (the LV centre of a slice).
        spacing: ``(2,)`` mm per voxel along ``(H, W)``.

    Returns:
        ``(radial, circumferential)``, each ``(B, *P, 2)`` ``(row, column)`` components in mm
        coordinates: radial points away from the centre; circumferential is radial turned by
        90 degrees, counterclockwise on a display with rows going down (zero vectors at the centre).
    """
    sp = spacing_tensor(spacing, points)
    shape = (points.shape[0], 2) + (1,) * (points.dim() - 2)
    d = ((points - centre.to(points.dtype).view(shape)) * sp.view(1, 2, *shape[2:])).movedim(1, -1)  # (B, *P, 2) mm
    norm = torch.linalg.vector_norm(d, dim=-1, keepdim=True)
    radial = torch.where(norm > 0, d / norm.clamp_min(1e-12), torch.zeros_like(d))
    # (row, col) -> (-col, row) turns by +90 degrees on a display with rows down: (0, 1) (right) -> (-1, 0) (up)
    circumferential = torch.stack([-radial[..., 1], radial[..., 0]], -1)
    return radial, circumferential
