"""Registration losses: Jacobian penalties and the composite NPC loss with the paper's presets."""

from .jacobian import JacobianFoldLoss, LogJacobianLoss
from .registration import PRESETS, LossPreset, RegistrationLoss, bidirectional_loss

__all__ = ["JacobianFoldLoss", "LogJacobianLoss", "PRESETS", "LossPreset", "RegistrationLoss", "bidirectional_loss"]
