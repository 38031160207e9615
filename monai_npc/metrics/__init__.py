"""Registration metrics: Dice, HD95, SDlogJ, NDV and % folding."""

from .registration import dice_per_structure, folding_percent, hd95_per_structure, ndv, registration_metrics, sdlogj

__all__ = ["dice_per_structure", "folding_percent", "hd95_per_structure", "ndv", "registration_metrics", "sdlogj"]
