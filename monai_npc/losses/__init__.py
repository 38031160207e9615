"""Registration losses: Jacobian penalties, the composite NPC loss with the paper's presets and the optional label Dice."""

from .jacobian import JacobianFoldLoss, LogJacobianLoss
from .label import WarpedLabelDiceLoss, WarpedLabelVolumeLoss, one_hot_labels
from .registration import PRESETS, LossPreset, RegistrationLoss, bidirectional_loss

__all__ = ["JacobianFoldLoss", "LogJacobianLoss", "PRESETS", "LossPreset", "RegistrationLoss", "bidirectional_loss", "one_hot_labels", "WarpedLabelDiceLoss", "WarpedLabelVolumeLoss"]
