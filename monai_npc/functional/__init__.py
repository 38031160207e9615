"""Pure tensor functions of Neural Phase Correlation; shapes are stated in each docstring."""

from .dihedral import DIHEDRAL_INVERSE, dihedral, dihedral_field
from .encoding import positional_encoding
from .intensity import minmax_slices, robust_unit
from .label_fusion import FUSION_MIN_AGREEMENT, fuse_by_slice, slice_agreement
from .label_warp import indicator_tensor, label_indicators, warp_indicators, warp_indicators_volume, warp_label
from .filter_pairs import fourier_filter_pairs, pair_responses, patch_norm_statistics, same_padding, unit_normalize_filters
from .overlap import dice_by_value
from .polarity import POLARITY_BAND, contrast_polarity, matched_contrast, signed
from .interaction import interaction_features, pair_interaction, pair_residual, polar_features
from .phase_correlation import phase_correlation, tukey_window
from .reliability import reliability_map
from .strain import (
    deformation_gradient, green_lagrange, invert_displacement, invert_points, normal_strain, polar_directions,
    reference_deformation_gradient,
)
from .taper import taper_window
from .topk import soft_topk_mask, soft_topk_mask_with_threshold
from .stack_field import (
    compose_stack_fields, stack_field_gradients, stack_jacobian_determinant, stack_neighbours, stack_positions, warp_stack_slices,
)
from .stack_penalty import stack_diffusion_per_slice, stack_fold_per_slice, stack_smoothness_fold
from .stack_taps import stack_tap_slabs, through_plane_taps, warp_stack_taps
from .through_plane_evidence import (EVIDENCE_CHANNELS, LABEL_EVIDENCE_CHANNELS, LABEL_REVERSED_CHANNELS, LABEL_VALUES,
                                     REVERSED_CHANNELS, in_plane_divergence, label_evidence, reads_label, through_plane_evidence)
from .warp import compose, determinant_from_gradients, identity_grid, jacobian_determinant, sample_at, warp_image

__all__ = [
    "dice_by_value",
    "FUSION_MIN_AGREEMENT",
    "fuse_by_slice",
    "slice_agreement",
    "DIHEDRAL_INVERSE",
    "dihedral",
    "dihedral_field",
    "positional_encoding",
    "fourier_filter_pairs",
    "pair_responses",
    "patch_norm_statistics",
    "same_padding",
    "unit_normalize_filters",
    "POLARITY_BAND",
    "contrast_polarity",
    "matched_contrast",
    "signed",
    "interaction_features",
    "pair_interaction",
    "pair_residual",
    "polar_features",
    "phase_correlation",
    "reliability_map",
    "deformation_gradient",
    "green_lagrange",
    "invert_displacement",
    "invert_points",
    "normal_strain",
    "polar_directions",
    "reference_deformation_gradient",
    "tukey_window",
    "soft_topk_mask",
    "soft_topk_mask_with_threshold",
    "identity_grid",
    "jacobian_determinant",
    "determinant_from_gradients",
    "stack_positions",
    "stack_neighbours",
    "warp_stack_slices",
    "compose_stack_fields",
    "stack_field_gradients",
    "stack_jacobian_determinant",
    "stack_diffusion_per_slice",
    "stack_fold_per_slice",
    "stack_smoothness_fold",
    "through_plane_taps",
    "stack_tap_slabs",
    "warp_stack_taps",
    "EVIDENCE_CHANNELS",
    "REVERSED_CHANNELS",
    "in_plane_divergence",
    "through_plane_evidence",
    "label_evidence",
    "reads_label",
    "LABEL_EVIDENCE_CHANNELS",
    "LABEL_REVERSED_CHANNELS",
    "LABEL_VALUES",
    "sample_at",
    "warp_image",
    "compose",
    "minmax_slices",
    "robust_unit",
    "taper_window",
    "label_indicators",
    "indicator_tensor",
    "warp_indicators",
    "warp_indicators_volume",
    "warp_label",
]
