"""A segmentation network of the fixed image, used as a prior by ``register``'s label-guided refinement.

With a moving label, ``register``'s test-time refinement scores the carried labels on the fixed image
(:mod:`monai_npc.functional.label_intensity`). :class:`LabelPrior` adds what a segmentation
network sees there: class probabilities of the fixed image's model-grid slices, which the
refinement turns into a cost of ``-log p_label(x)`` per carried voxel
(:mod:`monai_npc.functional.label_prior`). The registration still carries the user's label (its
topology, its expert's contours); the prior only tells it where each structure is likely to be.

The network is MONAI's :class:`~monai.networks.nets.BasicUNet` (2-D, one input channel, one output
channel per label value including the background) as :class:`~monai_npc.networks.nets.basic_unet.BasicUNet`
builds it: the same layers, state-dict names and outputs from ``torch.nn`` alone, so that loading a
prior does not import MONAI. It works on exactly what the registration network gets: the fixed
slices resampled onto the model grid and preprocessed as the registration weights say (``acdc``:
the heart window of ``register``, ``minmax``). Shipped: ``acdc_heart`` (background, RV, myocardium,
LV), trained on the 44 training patients of ``bundles/npc_acdc/configs/acdc70_split.json`` only
(``examples/train_acdc_label_prior.py``).

Files are ``{"model", "config", "meta"}`` as :func:`~monai_npc.networks.nets.pretrained.save_pretrained`
writes them, read with ``torch.load(weights_only=True)`` and checked against ``meta["weights_sha256"]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from monai_npc.serialization import CHECKSUM_KEY, safe_load

from .basic_unet import BasicUNet
from .pretrained import WEIGHTS_DIR, _verify, save_pretrained

__all__ = ["PRIORS_DIR", "LabelPrior", "load_label_prior", "save_label_prior"]

#: shipped label priors (``NAME.pt``); a folder of their own, so that they are not model names of ``register``
PRIORS_DIR = WEIGHTS_DIR / "priors"

_CACHE: Dict[Tuple[str, int, int, str], "LabelPrior"] = {}


class LabelPrior(nn.Module):
    """Class probabilities of 2-D slices: ``(B, 1, h, w)`` network inputs -> ``(B, K, h, w)`` (softmax over ``K``).

    ``h`` and ``w`` must be multiples of 16 (four poolings of the U-Net).

    Args:
        num_classes: ``K``, label values ``0 .. K-1`` (0 = background).
        features: the U-Net's features (six numbers, as MONAI's :class:`~monai.networks.nets.BasicUNet`'s).
        dropout: dropout of the U-Net (training only).
    """

    def __init__(self, num_classes: int = 4, features: Sequence[int] = (16, 32, 64, 128, 256, 16), dropout: float = 0.1) -> None:
        super().__init__()
        if int(num_classes) < 2:
            raise ValueError(f"num_classes must be >= 2 (the background and one label), got {num_classes}.")
        if len(tuple(features)) != 6:
            raise ValueError(f"features must be six numbers (BasicUNet), got {features}.")
        self.config: Dict[str, Any] = {"num_classes": int(num_classes), "features": [int(f) for f in features], "dropout": float(dropout)}
        self.unet = BasicUNet(spatial_dims=2, in_channels=1, out_channels=int(num_classes), features=tuple(self.config["features"]),
                              dropout=float(dropout))
        self.meta: Dict[str, Any] = {}

    @property
    def num_classes(self) -> int:
        return int(self.config["num_classes"])

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, 1, h, w)`` -> ``(B, K, h, w)`` logits (for training)."""
        if x.dim() != 4 or x.shape[1] != 1:
            raise ValueError(f"LabelPrior takes (B, 1, h, w) slices, got {tuple(x.shape)}.")
        if x.shape[2] % 16 or x.shape[3] % 16:
            raise ValueError(f"LabelPrior needs slices whose sides are multiples of 16, got {tuple(x.shape[2:])}.")
        return self.unet(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(x), dim=1)

    @torch.no_grad()
    def predict(self, x: torch.Tensor, chunk: int = 16) -> torch.Tensor:
        """:meth:`forward` in eval mode (its training mode restored after) over chunks of ``chunk`` slices, in the
        module's dtype, returned as float32."""
        if not x.shape[0]:
            return x.new_zeros((0, self.num_classes) + tuple(x.shape[2:]))
        dtype, training = next(self.parameters()).dtype, self.training
        self.eval()
        try:
            return torch.cat([self(x[s : s + chunk].to(dtype)).float() for s in range(0, x.shape[0], chunk)])
        finally:
            self.train(training)


def save_label_prior(net: LabelPrior, path: Union[str, Path], meta: Optional[Mapping[str, Any]] = None) -> Path:
    """Write ``{"model", "config", "meta"}`` (atomically), with the weights' SHA-256 in ``meta``
    (:func:`~monai_npc.networks.nets.pretrained.save_pretrained`'s layout)."""
    return save_pretrained(net, path, meta)


def _locate(name_or_path: Union[str, Path]) -> Path:
    path = Path(name_or_path)
    if path.suffix != ".pt" and not path.exists():
        path = PRIORS_DIR / f"{name_or_path}.pt"
    if not path.is_file():
        shipped = sorted(p.stem for p in PRIORS_DIR.glob("*.pt"))
        raise FileNotFoundError(f"label prior {name_or_path!r}: no file {path} (shipped label priors: {shipped}).")
    return path


def load_label_prior(name_or_path: Union[str, Path], map_location: Union[str, torch.device] = "cpu") -> LabelPrior:
    """A shipped label prior by name (``"acdc_heart"``: ``monai_npc/weights/priors/acdc_heart.pt``) or a file of
    :func:`save_label_prior`, in eval mode. Kept in memory per file (and its modification time and size), so a loop of
    ``register`` calls reads it once (the cached module itself is returned: change a copy of it, not it).

    Raises:
        FileNotFoundError: no such name or file.
        ValueError: not a label prior file, or weights that do not match their configuration.
        ChecksumError: weights that do not match their recorded SHA-256.
    """
    path = _locate(name_or_path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, str(map_location))
    if key in _CACHE:
        return _CACHE[key]
    blob = safe_load(path, map_location=map_location, what="label prior")
    if not isinstance(blob, dict) or not {"model", "config"} <= set(blob):
        raise ValueError(f"{path} is not a label prior file (expected the keys 'model', 'config' and 'meta' of save_label_prior).")
    meta = dict(blob.get("meta") or {})
    if meta.get(CHECKSUM_KEY):
        _verify(path, blob["model"], {f"meta of {path}": str(meta[CHECKSUM_KEY])})
    try:
        net = LabelPrior(**blob["config"])
        net.load_state_dict(blob["model"])
    except (TypeError, RuntimeError) as err:
        raise ValueError(f"{path}: the weights do not fit a LabelPrior of config {blob['config']}: {err}") from err
    net.meta = meta
    net.eval()
    _CACHE[key] = net
    return net
