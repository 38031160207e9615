"""Registration losses: Jacobian penalties, the composite NPC loss with the paper's presets and the optional label Dice."""

from .jacobian import JacobianFoldLoss, LogJacobianLoss
from .label import WarpedLabelDiceLoss, WarpedLabelVolumeLoss, one_hot_labels
from .registration import PRESETS, LossPreset, RegistrationLoss, bidirectional_loss
from .stack import StackDiceLoss, StackRegistrationLoss, group_overlap

__all__ = ["JacobianFoldLoss", "LogJacobianLoss", "PRESETS", "LossPreset", "RegistrationLoss", "bidirectional_loss", "StackDiceLoss", "StackRegistrationLoss", "group_overlap", "one_hot_labels", "WarpedLabelDiceLoss", "WarpedLabelVolumeLoss"]
