"""Warp-ODE block: integrate ``d phi / dt = M(x o phi(t), y)`` re-evaluating the model on the warped image."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from monai_npc.functional.phase_correlation import phase_correlation
from monai_npc.functional.polarity import contrast_polarity, signed
from monai_npc.functional.similarity import global_ncc
from monai_npc.functional.warp import warp_image

__all__ = ["WarpODE", "split_steps", "PHASE_INIT_WHITENING", "candidate_shifts", "select_shift"]

#: cross-power normalisation exponent of the ``phase_init`` phase correlation (1 = classical): slightly
#: less than full whitening keeps the shift when much of the fixed crop is unrelated content
#: (docs/design_notes.md, "networks/blocks/warp_ode.py")
PHASE_INIT_WHITENING = 0.8


def _shift_field(shift: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Constant field ``(B, D, *S)`` of ``shift`` ``(B, D)`` on the grid of ``like`` ``(B, 1, *S)``."""
    shape = (like.shape[0], like.dim() - 2) + like.shape[2:]
    return shift.to(like.dtype).view(shift.shape + (1,) * (like.dim() - 2)).expand(shape).contiguous()


def candidate_shifts(
    moving: torch.Tensor, fixed: torch.Tensor, window: float, gains: Sequence[float] = (0.0,),
    whitening: float = PHASE_INIT_WHITENING, upsample_factor: int = 10, max_shift: Optional[float] = None,
) -> torch.Tensor:
    """Global phase-correlation shifts ``(B, G, D)`` (voxels, ``moving(x + s) ~ fixed(x)``), one per gain.

    For gain ``g``, :func:`~monai_npc.functional.phase_correlation` (Tukey ``window``, ``whitening``) runs
    on ``exp(g * image)``; ``g = 0`` means the images as given. For inputs that are a normalised
    log-amplitude in ``[0, 1]`` (SAR ``sar_normalize``), ``exp(g * x)`` with ``g`` about the image's
    log-amplitude span (1st-99th percentile: 1.7-3 on the real training scenes) is the linear amplitude
    up to a factor (bright stable scatterers dominate its spectrum; distributed texture, e.g. sea,
    dominates the log's).

    Args:
        moving, fixed: ``(B, 1, *S)`` images.
        max_shift: bound (voxels, per axis) of every candidate's peak search (``phase_correlation(max_shift=)``).
    """
    if len(gains) == 0:
        raise ValueError("candidate_shifts needs at least one gain.")
    out = []
    for g in gains:
        m, f = (moving, fixed) if g == 0 else (torch.exp(g * moving), torch.exp(g * fixed))
        out.append(phase_correlation(m, f, upsample_factor=upsample_factor, window=window, whitening=whitening, max_shift=max_shift))
    return torch.stack(out, 1)


def select_shift(moving: torch.Tensor, fixed: torch.Tensor, candidates: torch.Tensor, score_gain: float = 3.0) -> torch.Tensor:
    """The candidate ``(B, D)`` of ``candidates`` ``(B, G, D)`` with the highest NCC of ``exp(score_gain * image)``.

    Each candidate warps ``moving`` (constant field, bilinear, border padding); the normalised
    cross-correlation with ``fixed`` is taken over the interior (``3 / 32`` of each size dropped per
    side, 24 voxels at 256), where any plausible shift has data. ``score_gain = 0``: NCC of the images
    as given.
    """
    b, n = candidates.shape[:2]
    if n == 1:
        return candidates[:, 0]
    margin = [max(1, 3 * int(s) // 32) for s in moving.shape[2:]]
    inner = (slice(None), slice(None)) + tuple(slice(m, int(s) - m) for m, s in zip(margin, moving.shape[2:]))
    f = (fixed if score_gain == 0 else torch.exp(score_gain * fixed))[inner]
    scores = []
    for k in range(n):
        w = warp_image(moving, _shift_field(candidates[:, k], moving), "bilinear", "border")
        scores.append(global_ncc((w if score_gain == 0 else torch.exp(score_gain * w))[inner], f))
    best = torch.stack(scores, 1).argmax(1)  # (B,)
    return candidates[torch.arange(b, device=candidates.device), best]


def split_steps(num_steps: int, num_stages: int) -> List[int]:
    """Split ``num_steps`` explicit steps over ``num_stages`` consecutive stages, earlier stages first."""
    if num_steps < num_stages:
        raise ValueError(f"num_steps ({num_steps}) must be >= number of stages ({num_stages}).")
    base, extra = divmod(num_steps, num_stages)
    return [base + (1 if i < extra else 0) for i in range(num_stages)]


class WarpODE(nn.Module):
    """Explicit Euler integration of the paper's Eq. (ode) over ``t in [0, 1]``.

    ``ddf(0) = 0`` (or a global phase-correlation shift, ``phase_init``); at step ``i`` the moving image is warped by the current ``ddf``, the active
    stage's model is evaluated against the fixed image, and ``ddf += dt * velocity`` with
    ``dt = 1 / n_t``. A cascade runs its stages one after the other within the same integration
    (e.g. a coarse stage for the first half of the steps, a fine stage after).

    Args:
        stages: models with ``prepare(fixed)`` and
            ``forward(moving, *context, threshold) -> (velocity, residual, mask, threshold)``
            (:class:`~monai_npc.networks.blocks.NPCStage`).
        num_steps: total ``n_t`` (split evenly over the stages) or one count per stage.
        padding_mode: warp padding (``"border"``).
        detach_steps: stop gradients from flowing into a step through the warped image it sees
            (the field is still the sum of every step's update, and every update still gets its
            gradient). Saves the costly input gradient of the filter convolution, as RAFT does
            between its refinement iterations; outputs are unchanged.
        phase_init: Tukey ``alpha`` of a global phase-correlation initialisation
            (:func:`~monai_npc.functional.phase_correlation`, mean removed, windowed, 1/10 voxel,
            whitening :data:`PHASE_INIT_WHITENING`):
            ``ddf(0)`` is the constant shift it finds between ``moving`` and ``fixed`` instead of 0, so
            the learned steps only refine what remains (capture range of global shifts: that of
            phase correlation). ``None`` (default): ``ddf(0) = 0``. No gradient flows through it.
        phase_init_gains: with ``phase_init``, one phase-correlation candidate per gain ``g`` on
            ``exp(g * image)`` (:func:`candidate_shifts`; ``0`` = the images as given, the default ``(0,)``
            is the single classical start); with several, the start is the candidate whose warped moving
            image has the highest NCC with the fixed one (:func:`select_shift`, on ``exp(score_gain * image)``).
        phase_init_score_gain: the gain of that NCC score.
        phase_init_max_shift: bound (voxels, per axis) of the start's peak search (:func:`candidate_shifts`):
            a prior on the plausible global misalignment, so that a spurious peak far out cannot be the
            start. ``None`` (default): unbounded (any shift with enough overlap).
        match_polarity: compare the images with one contrast: where one image's contrast is the other's inverted
            (:func:`~monai_npc.functional.polarity.contrast_polarity` of the unwarped pair, per batch item), every
            stage's fixed responses are negated, so the pair gets the field of the uninverted pair (default).
            ``False``: the interaction as the paper writes it.

    ``forward(moving, fixed)`` with ``(B, 1, *S)`` images returns the displacement ``(B, D, *S)``
    (voxels, MONAI ``Warp`` convention). :meth:`integrate` also returns per-step diagnostics.
    """

    def __init__(
        self,
        stages: Sequence[nn.Module],
        num_steps: Union[int, Sequence[int]] = 10,
        padding_mode: str = "border",
        detach_steps: bool = False,
        phase_init: Optional[float] = None,
        phase_init_gains: Sequence[float] = (0.0,),
        phase_init_score_gain: float = 3.0,
        phase_init_max_shift: Optional[float] = None,
        match_polarity: bool = True,
    ) -> None:
        super().__init__()
        if len(phase_init_gains) == 0:
            raise ValueError("phase_init_gains must hold at least one gain (0 = the images as given).")
        self.stages = nn.ModuleList(stages)
        self.steps_per_stage: List[int] = []
        self.num_steps: int = 0
        self.set_steps(num_steps)
        self.padding_mode = padding_mode
        self.detach_steps = detach_steps
        self.phase_init = phase_init
        self.phase_init_gains: List[float] = [float(g) for g in phase_init_gains]
        self.phase_init_score_gain = float(phase_init_score_gain)
        if phase_init_max_shift is not None and phase_init_max_shift < 0:
            raise ValueError(f"phase_init_max_shift must be >= 0 or None, got {phase_init_max_shift}.")
        self.phase_init_max_shift = None if phase_init_max_shift is None else float(phase_init_max_shift)
        self.match_polarity = bool(match_polarity)

    def set_steps(self, num_steps: Union[int, Sequence[int]]) -> None:
        """Set ``n_t``: a total split evenly over the stages, or one count per stage (each >= 1).

        ``dt = 1 / n_t``: fewer steps integrate the same learned velocity more coarsely (cheaper;
        enough for small motions such as consecutive cine frames, docs/tracking.md).
        """
        steps = split_steps(int(num_steps), len(self.stages)) if isinstance(num_steps, int) else [int(n) for n in num_steps]
        if len(steps) != len(self.stages) or min(steps) < 1:
            raise ValueError(f"num_steps {num_steps} does not give >= 1 step to each of {len(self.stages)} stages.")
        self.steps_per_stage = steps
        self.num_steps = sum(steps)

    def initial_field(self, moving: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        """``ddf(0)`` ``(B, D, *S)``: zero, or the global phase-correlation shift with ``phase_init``
        (the best-scoring candidate of ``phase_init_gains``)."""
        if self.phase_init is None:
            shape = (moving.shape[0], moving.dim() - 2) + moving.shape[2:]
            return torch.zeros(shape, dtype=moving.dtype, device=moving.device)
        with torch.no_grad():
            moving, fixed = moving.detach(), fixed.detach()
            candidates = candidate_shifts(moving, fixed, self.phase_init, self.phase_init_gains, max_shift=self.phase_init_max_shift)
            shift = select_shift(moving, fixed, candidates.to(moving.dtype), self.phase_init_score_gain)
        return _shift_field(shift, moving)

    def integrate(
        self, moving: torch.Tensor, fixed: torch.Tensor, keep_diagnostics: bool = False
    ) -> Tuple[torch.Tensor, List[Dict[str, torch.Tensor]]]:
        """Return ``(ddf, diagnostics)``; ``diagnostics`` has one dict per step when ``keep_diagnostics``.

        Each dict holds ``residual`` and ``mask`` ``(B, C, *grid)``, ``ddf`` ``(B, D, *S)`` after the
        step, and ``stage`` (0-d integer tensor).
        """
        ddf = self.initial_field(moving, fixed)
        polarity = contrast_polarity(moving, fixed) if self.match_polarity else None
        dt = 1.0 / self.num_steps
        diagnostics: List[Dict[str, torch.Tensor]] = []
        step = 0
        for index, stage in enumerate(self.stages):
            fixed_responses, fixed_norm, gamma, gate = stage.prepare(fixed)
            if polarity is not None:
                fixed_responses = signed(fixed_responses, polarity)
            threshold: Optional[torch.Tensor] = None
            for _ in range(self.steps_per_stage[index]):
                if step == 0 and self.phase_init is None:
                    warped = moving
                else:
                    warped = warp_image(moving, ddf.detach() if self.detach_steps else ddf, "bilinear", self.padding_mode)
                velocity, residual, mask, threshold = stage(warped, fixed_responses, fixed_norm, gamma, gate, threshold)
                ddf = ddf + dt * velocity
                step += 1
                if keep_diagnostics:
                    diagnostics.append(
                        {
                            "residual": residual.detach(),
                            "mask": mask.detach(),
                            "ddf": ddf.detach(),
                            "stage": torch.tensor(index),
                        }
                    )
        return ddf, diagnostics

    def forward(self, moving: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        return self.integrate(moving, fixed, False)[0]
