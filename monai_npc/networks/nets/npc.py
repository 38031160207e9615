"""NPCNet: the Neural Phase Correlation registration network."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from monai_npc.functional.dihedral import DIHEDRAL_INVERSE, dihedral, dihedral_field
from monai_npc.functional.warp import warp_image
from monai_npc.networks.blocks.npc_stage import NPCStage
from monai_npc.networks.blocks.refinement import InstanceRefinement
from monai_npc.networks.blocks.warp_ode import WarpODE, split_steps

__all__ = ["NPCNet", "ACDC_CONFIG", "CAMUS_CONFIG", "FLIP_ENSEMBLES"]

#: the paper's ACDC configuration (Table "Architecture hyperparameters"); NPCNet's defaults
ACDC_CONFIG: Dict[str, Any] = dict(
    kernel_size=16, stride=4, num_pairs=128, top_k=64, gate_dim=128, hidden_dim=128, num_pe=256, num_steps=10, head="unet"
)
#: the paper's CAMUS configuration: a 2-stage cascade, coarse (k_f 64, s 8) then fine (k_f 32, s 4)
CAMUS_CONFIG: Dict[str, Any] = dict(
    ACDC_CONFIG,
    stages=[{"kernel_size": 64, "stride": 8, "num_steps": 5}, {"kernel_size": 32, "stride": 4, "num_steps": 5}],
)

#: symmetries (:func:`~monai_npc.functional.dihedral` codes) averaged by ``NPCNet(flip_ensemble=n)``: identity; + 180 degree rotation;
#: + transpose and anti-transpose; all 8 (the flips / transposes the SAR training loop draws)
FLIP_ENSEMBLES: Dict[int, List[int]] = {1: [0], 2: [0, 3], 4: [0, 3, 4, 7], 8: list(range(8))}


def _check_flip_ensemble(flip_ensemble: int, spatial_dims: int) -> None:
    if int(flip_ensemble) not in FLIP_ENSEMBLES or (spatial_dims != 2 and int(flip_ensemble) != 1):
        raise ValueError(f"flip_ensemble must be one of {sorted(FLIP_ENSEMBLES)} (2D; 1 in 3D), got {flip_ensemble}.")


_STAGE_KEYS = (
    "kernel_size", "stride", "num_pairs", "top_k", "gate_dim", "hidden_dim", "num_pe", "head",
    "head_channels", "mask_temperature", "hard_mask", "init", "padding_mode",
)


class NPCNet(nn.Module):
    """Neural Phase Correlation: learned filter pairs, residual top-K masking, PE decoder, warp ODE.

    Input ``image`` ``(B, 2, *S)``: channel 0 the moving image, channel 1 the fixed image (MONAI
    bundle convention). Output the dense displacement ``(B, D, *S)`` in voxels, channel ``k`` along
    spatial axis ``k``, with ``moving(x + ddf(x)) ~ fixed(x)`` (MONAI ``Warp`` convention).

    The defaults are the paper's ACDC configuration: ``k_f = 16``, ``s = 4``, ``C = 128``,
    ``K = 64``, ``G = 128``, ``B = 128``, ``n_pe = 256``, ``n_t = 10`` and the mini-UNet head
    (about 0.32 M parameters). The CAMUS cascade is ``NPCNet(**CAMUS_CONFIG)``, i.e.
    ``stages=[{"kernel_size": 64, "stride": 8, "num_steps": 5}, {"kernel_size": 32, "stride": 4, "num_steps": 5}]``.

    Args:
        spatial_dims: 2 (default) or 3; ``num_pe`` must be a multiple of ``2 * spatial_dims``.
        kernel_size: filter width ``k_f`` in voxels.
        stride: coarse-grid stride ``s`` in voxels.
        num_pairs: filter pairs ``C`` per bank.
        top_k: pairs kept per location ``K``; ``K = C`` is the unmasked model.
        gate_dim: gate-space width ``G``.
        hidden_dim: ``MLP_z`` hidden width ``B``.
        num_pe: positional-encoding channels ``n_pe``.
        num_steps: ODE steps ``n_t`` (split evenly over cascade stages unless each stage sets ``num_steps``).
        head: ``"unet"`` (depth-1 mini-UNet, hidden ``head_channels``) or ``"linear"``.
        head_channels: mini-UNet width.
        mask_temperature: soft top-K temperature, in units of the normalised residual.
        hard_mask: exact top-K forward with soft-mask gradients.
        init: filter initialisation, ``"fourier"`` or ``"random"``.
        padding_mode: filter-bank border padding, ``"reflect"``, ``"replicate"`` or ``"zeros"``.
        stages: optional cascade; a list of dicts, each overriding any of the stage arguments above
            (and ``num_steps``) for one stage, run in order within one integration.
        detach_steps: training option: no gradient through the warped image a step sees
            (:class:`~monai_npc.networks.blocks.WarpODE`); the output is the same.
        refine_iterations: optional test-time refinement after the ODE
            (:class:`~monai_npc.networks.blocks.InstanceRefinement`): Adam steps on a smooth residual
            field against the pair's LNCC + regularisers; 0 (default) is the plain network. It
            changes no parameter and adds a few ms per step; a TorchScript export needs 0.
        refine_options: other :class:`~monai_npc.networks.blocks.InstanceRefinement` arguments
            (``learning_rate``, ``grid_stride``, ``window``, ``lambda_reg``, ``lambda_jac``).
        phase_init: Tukey ``alpha`` (e.g. 0.25) of a global phase-correlation initialisation of the
            field (:class:`~monai_npc.networks.blocks.WarpODE`): the learned steps refine the shift
            phase correlation finds, which extends the capture range of global shifts. ``None``
            (default): the integration starts from zero, as in the paper.
        phase_init_gains: candidates of that start, one per gain ``g`` (phase correlation of ``exp(g * image)``,
            ``0`` = the images as given); the default ``(0,)`` is the single classical start. With several,
            the candidate whose warped moving image correlates best with the fixed one (NCC of
            ``exp(phase_init_score_gain * image)``) is the start (:func:`~monai_npc.networks.blocks.warp_ode.select_shift`).
            The SAR model uses ``(0, 3)``: log-amplitude and (about) linear amplitude.
        phase_init_score_gain: gain of that NCC score.
        phase_init_max_shift: bound (voxels, per axis, on the network's input grid) of that start's
            peak search: a prior on the plausible global misalignment, so that a spurious
            phase-correlation peak far out (unrelated texture, e.g. sea under a different wind) cannot
            be the start. Shifts beyond it are out of the model's range. ``None`` (default): unbounded.
        flip_ensemble: 2D test-time ensemble: the mean displacement over ``n`` flips / transposes of
            the pair (:data:`FLIP_ENSEMBLES`, ``n`` in 1, 2, 4, 8; each field mapped back to the original
            grid), i.e. ``n`` times the cost. Only in ``eval()`` mode (a training loop draws the
            transforms itself). Averages the network's noisy local estimates of a model trained with
            these augmentations; 1 (default): the single pass.
        match_polarity: compare the two images with one contrast: where one image's contrast is the other's turned
            upside down (a sequence with inverted contrast, an intensity window reversed;
            :func:`~monai_npc.functional.polarity.contrast_polarity`), the fixed filter responses are negated before
            the interaction, so the field is that of the uninverted pair. Pairs of one contrast are unchanged
            (default). ``False``: the paper's interaction as written.
    """

    def __init__(
        self,
        spatial_dims: int = 2,
        kernel_size: int = 16,
        stride: int = 4,
        num_pairs: int = 128,
        top_k: int = 64,
        gate_dim: int = 128,
        hidden_dim: int = 128,
        num_pe: int = 256,
        num_steps: int = 10,
        head: str = "unet",
        head_channels: int = 16,
        mask_temperature: float = 0.1,
        hard_mask: bool = False,
        init: str = "fourier",
        padding_mode: str = "reflect",
        stages: Optional[Sequence[Mapping[str, Any]]] = None,
        detach_steps: bool = False,
        refine_iterations: int = 0,
        refine_options: Optional[Mapping[str, Any]] = None,
        phase_init: Optional[float] = None,
        phase_init_gains: Sequence[float] = (0.0,),
        phase_init_score_gain: float = 3.0,
        phase_init_max_shift: Optional[float] = None,
        flip_ensemble: int = 1,
        match_polarity: bool = True,
    ) -> None:
        super().__init__()
        if spatial_dims not in (2, 3):
            raise ValueError(f"spatial_dims must be 2 or 3, got {spatial_dims}.")
        _check_flip_ensemble(flip_ensemble, spatial_dims)
        base = dict(
            kernel_size=kernel_size, stride=stride, num_pairs=num_pairs, top_k=top_k, gate_dim=gate_dim,
            hidden_dim=hidden_dim, num_pe=num_pe, head=head, head_channels=head_channels,
            mask_temperature=mask_temperature, hard_mask=hard_mask, init=init, padding_mode=padding_mode,
        )
        stage_cfgs: List[Dict[str, Any]] = [dict(s) for s in stages] if stages else [{}]
        for cfg in stage_cfgs:
            unknown = set(cfg) - set(_STAGE_KEYS) - {"num_steps"}
            if unknown:
                raise ValueError(f"unknown stage option(s) {sorted(unknown)}; allowed: {list(_STAGE_KEYS) + ['num_steps']}.")
        if all("num_steps" in c for c in stage_cfgs):
            steps = [int(c["num_steps"]) for c in stage_cfgs]
        elif any("num_steps" in c for c in stage_cfgs):
            raise ValueError("set num_steps in every stage or in none.")
        else:
            steps = split_steps(num_steps, len(stage_cfgs))
        modules = []
        for cfg in stage_cfgs:
            kw = dict(base)
            kw.update({k: v for k, v in cfg.items() if k != "num_steps"})
            modules.append(NPCStage(spatial_dims=spatial_dims, **kw))
        self.ode = WarpODE(modules, steps, detach_steps=detach_steps, phase_init=phase_init,
                           phase_init_gains=phase_init_gains, phase_init_score_gain=phase_init_score_gain,
                           phase_init_max_shift=phase_init_max_shift, match_polarity=match_polarity)
        self.spatial_dims = spatial_dims
        #: constructor arguments, enough to rebuild the network (saved with pretrained weights)
        self.config: Dict[str, Any] = dict(
            base, spatial_dims=spatial_dims, num_steps=num_steps, stages=[dict(c) for c in stages] if stages else None,
            detach_steps=detach_steps, phase_init=phase_init, phase_init_gains=[float(g) for g in phase_init_gains],
            phase_init_score_gain=float(phase_init_score_gain),
            phase_init_max_shift=None if phase_init_max_shift is None else float(phase_init_max_shift), refine_iterations=int(refine_iterations),
            refine_options=dict(refine_options) if refine_options else None, flip_ensemble=int(flip_ensemble),
            match_polarity=bool(match_polarity),
        )
        self.flip_codes: List[int] = [0]  # the identity; set_flip_ensemble sets the ensemble
        self.flip_inverse: List[int] = [0]
        self.set_flip_ensemble(flip_ensemble)
        self.refiner = InstanceRefinement(int(refine_iterations), **(dict(refine_options) if refine_options else {}))
        self.min_size: int = max(max(int(m.filters.stride), (int(m.filters.kernel_size) - int(m.filters.stride)) // 2 + 1) for m in modules)
        # follows .to(dtype) / .double() of the network: inputs are cast to it
        self.register_buffer("dtype_reference", torch.zeros(0), persistent=False)

    @torch.jit.ignore
    def set_flip_ensemble(self, flip_ensemble: int) -> None:
        """Average the ODE's field over ``flip_ensemble`` (1, 2, 4 or 8) symmetries of the pair in eval
        mode (:data:`FLIP_ENSEMBLES`; 1 = off), as the constructor's argument; the saved config follows."""
        _check_flip_ensemble(flip_ensemble, self.spatial_dims)
        self.flip_codes = list(FLIP_ENSEMBLES[int(flip_ensemble)])
        self.flip_inverse = [DIHEDRAL_INVERSE[c] for c in self.flip_codes]
        self.config["flip_ensemble"] = int(flip_ensemble)

    def _as_input(self, image: torch.Tensor) -> torch.Tensor:
        """``image`` in the network's floating dtype: float64 and integer images (e.g. uint8) are cast."""
        if image.is_complex() or image.dtype == torch.bool:
            raise ValueError("NPCNet expects real-valued images (float or integer), got dtype " + str(image.dtype) + ".")
        return image.to(self.dtype_reference.dtype)

    def _check(self, image: torch.Tensor) -> None:
        if image.dim() != self.spatial_dims + 2:
            raise ValueError(
                "NPCNet expects image of shape (B, 2, " + ", ".join(["S"] * self.spatial_dims) + ") with "
                + str(self.spatial_dims) + " spatial dims, got shape " + str(list(image.shape)) + "."
            )
        if image.shape[0] == 0:
            raise ValueError("NPCNet got an empty batch (batch size 0, shape " + str(list(image.shape)) + "); pass at least one pair.")
        if max(self.flip_codes) >= 4 and image.shape[-1] != image.shape[-2]:
            raise ValueError(
                "NPCNet(flip_ensemble=" + str(len(self.flip_codes)) + ") transposes the pair and needs square images, got "
                + str(list(image.shape[2:])) + "; use flip_ensemble=1 or 2, or resample to a square grid."
            )
        if image.shape[1] != 2:
            raise ValueError(
                "NPCNet expects 2 channels (moving, fixed), got " + str(image.shape[1]) + " in shape " + str(list(image.shape)) + "."
            )
        if min(image.shape[2:]) < self.min_size:
            raise ValueError(
                "NPCNet needs every spatial size >= " + str(self.min_size) + " for its filter windows, got " + str(list(image.shape[2:])) + "."
            )
        if not torch.jit.is_tracing() and not bool(torch.isfinite(image).all()):
            raise ValueError("NPCNet input contains NaN or Inf values.")

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """``(B, 2, *S)`` moving + fixed -> displacement ``(B, D, *S)`` in voxels.

        Integer and float64 images are cast to the network's dtype (float32 unless converted).
        """
        image = self._as_input(image)
        self._check(image)
        ddf = self._integrate_ensemble(image[:, 0:1], image[:, 1:2])
        if not torch.jit.is_scripting():  # the refinement optimises with autograd: eager mode only
            ddf = self.refiner(image[:, 0:1], image[:, 1:2], ddf)  # returns ddf as is with 0 iterations
        return ddf

    def _integrate_ensemble(self, moving: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        """The ODE's field, averaged over :attr:`flip_codes` (``flip_ensemble``) in eval mode: one batch of all transforms."""
        if self.training or len(self.flip_codes) == 1:
            return self.ode(moving, fixed)
        return self._mean_over_flips(self.ode(*self._flip_batch(moving, fixed)), moving.shape[0])

    def _flip_batch(self, moving: torch.Tensor, fixed: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(n * B, 1, H, W)`` moving and fixed images under each of :attr:`flip_codes` (code 0, the identity, first)."""
        return (torch.cat([dihedral(moving, c) for c in self.flip_codes], 0),
                torch.cat([dihedral(fixed, c) for c in self.flip_codes], 0))

    def _mean_over_flips(self, ddf: torch.Tensor, b: int) -> torch.Tensor:
        """``(n * B, D, H, W)`` fields of :meth:`_flip_batch` mapped back to the original grid and averaged: ``(B, D, H, W)``."""
        out = torch.zeros_like(ddf[:b])
        for i, c in enumerate(self.flip_inverse):
            out = out + dihedral_field(ddf[i * b : (i + 1) * b], c)
        return out / len(self.flip_codes)

    @torch.jit.ignore
    def network_field(self, moving: torch.Tensor, fixed: torch.Tensor, return_diagnostics: bool = False
                      ) -> Tuple[torch.Tensor, List[Dict[str, torch.Tensor]]]:
        """The network's own field of ``moving`` onto ``fixed`` (each ``(B, 1, *S)``), before the test-time refinement:
        ``(ddf (B, D, *S) in voxels, diagnostics)`` (the flip ensemble's mean in eval mode; diagnostics as in :meth:`register`)."""
        moving, fixed = self._as_input(moving), self._as_input(fixed)
        self._check(torch.cat([moving, fixed], 1))
        if len(self.flip_codes) > 1 and not self.training:  # one batched pass; diagnostics: the untransformed member's
            b = moving.shape[0]
            ddf, diagnostics = self.ode.integrate(*self._flip_batch(moving, fixed), return_diagnostics)
            diagnostics = [{k: (v[:b] if v.dim() > 0 else v) for k, v in d.items()} for d in diagnostics]
            return self._mean_over_flips(ddf, b), diagnostics
        return self.ode.integrate(moving, fixed, return_diagnostics)

    @torch.jit.ignore
    def register(
        self, moving: torch.Tensor, fixed: torch.Tensor, return_diagnostics: bool = False,
        moving_label: Optional[torch.Tensor] = None, lambda_label: Optional[float] = None,
        fixed_prior: Optional[torch.Tensor] = None, prior_weight: Optional[float] = None,
        field: Optional[Tuple[torch.Tensor, List[Dict[str, torch.Tensor]]]] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, List[Dict[str, torch.Tensor]]]:
        """Register ``moving`` onto ``fixed`` (each ``(B, 1, *S)``).

        ``moving_label`` ``(B, 1, *S)`` (integer label map of ``moving``) and ``lambda_label`` reach the
        test-time refinement's label-guided term (:class:`~monai_npc.networks.blocks.InstanceRefinement`),
        and with them ``fixed_prior`` ``(B, K, *S)`` (class probabilities of ``fixed``, e.g.
        :class:`~monai_npc.networks.nets.label_prior.LabelPrior`) and its ``prior_weight``. ``field``: what
        :meth:`network_field` already gave for these images (the refinement starts from it; no second pass).

        Returns ``(warped, ddf, diagnostics)``: the warped moving image, the displacement in voxels
        and, when ``return_diagnostics``, one dict per ODE step (``residual``, ``mask``, ``ddf``, ``stage``).
        """
        ddf, diagnostics = self.network_field(moving, fixed, return_diagnostics) if field is None else field
        moving, fixed = self._as_input(moving), self._as_input(fixed)
        ddf = self.refiner(moving, fixed, ddf, moving_label, lambda_label, fixed_prior, prior_weight)
        return warp_image(moving, ddf, "bilinear", "border"), ddf, diagnostics
