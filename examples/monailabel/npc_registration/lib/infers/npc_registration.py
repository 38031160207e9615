"""MONAI Label infer task: label propagation by NPC registration.

The fixed image is the one open in the viewer (``request["image"]``). The task registers a
``moving`` image onto it, warps the moving image's label map with the result and returns the
warped label as the task's label file. Its JSON carries the transform files (ITK ``.h5``, ANTs
``.nii.gz``, the one-slice 3-D Slicer transform for 2-D images) and quality figures (folding %,
residual reliability, Dice when a fixed label is given, seconds).

Request keys (MONAI Label merges the client's ``params`` into the request):

- ``image``: fixed image path (MONAI Label resolves the datastore id);
- ``moving``: moving image path or datastore id;
- ``moving_label``: its label map path or datastore id (default: the datastore's ``final`` label
  of ``moving``);
- ``fixed_label`` (optional), ``model`` (optional, overrides the task's), ``output_dir`` (optional).

The task runs with or without ``monailabel`` installed (without it, a minimal stand-in base
class is used), so it can be called directly, e.g. from tests or scripts.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

try:  # optional extra: pip install monai_npc[label]
    from monailabel.interfaces.tasks.infer_v2 import InferTask, InferType

    SEGMENTATION = InferType.SEGMENTATION
except ImportError:  # pragma: no cover - exercised when monailabel is absent

    class InferTask:  # minimal stand-in with MONAI Label's InferTask interface
        def __init__(self, type, labels, dimension, description, config=None):
            self.type = type
            self.labels = [] if labels is None else [labels] if isinstance(labels, str) else labels
            self.dimension = dimension
            self.description = description
            self._config = dict(config or {})

        def info(self) -> Dict[str, Any]:
            return {
                "type": self.type, "labels": self.labels, "dimension": self.dimension,
                "description": self.description, "config": self.config(),
            }

        def config(self) -> Dict[str, Any]:
            return self._config

        def get_path(self, validate=True):
            return None

    SEGMENTATION = "segmentation"


class NPCRegistration(InferTask):
    """Propagate a moving image's label map onto the open (fixed) image with ``monai_npc.interop.register_files``.

    Args:
        model: ``"acdc"``, ``"camus"``, ``"sar"``, a ``save_pretrained`` file or ``"phase-correlation"``.
        labels: label names, e.g. ``{"rv": 1, "myocardium": 2, "lv": 3}`` (ACDC).
        datastore: optional MONAI Label datastore to resolve ``moving`` / ``moving_label`` ids.
        output_root: folder for per-request outputs (default: a temporary folder).
        device: torch device.
    """

    def __init__(
        self,
        model: str = "acdc",
        labels: Optional[Dict[str, int]] = None,
        datastore=None,
        output_root: Optional[str] = None,
        device: str = "cpu",
        description: str = "Label propagation by Neural Phase Correlation registration (moving label -> open image)",
    ) -> None:
        super().__init__(
            type=SEGMENTATION,
            labels=labels or {"rv": 1, "myocardium": 2, "lv": 3},
            dimension=2,
            description=description,
            config={"model": model, "moving": "", "moving_label": "", "fixed_label": ""},
        )
        self.model = model
        self.datastore = datastore
        self.output_root = output_root
        self.device = device

    def is_valid(self) -> bool:
        from monai_npc.interop.register import PHASE_CORRELATION

        if self.model == PHASE_CORRELATION or Path(str(self.model)).is_file():
            return True
        from monai_npc.networks.nets import available_models

        return self.model in available_models()

    def _image(self, value: str) -> str:
        if value and (os.path.exists(value) or self.datastore is None):
            return value
        return self.datastore.get_image_uri(value)

    def _label(self, value: Optional[str], image_id: str) -> Optional[str]:
        if value and (os.path.exists(value) or self.datastore is None):
            return value
        if self.datastore is None:
            return None
        return self.datastore.get_label_uri(value or image_id, "final")

    def __call__(self, request: Dict[str, Any]) -> Tuple[Optional[str], Dict[str, Any]]:
        from monai_npc.interop.register import register_files

        fixed = request.get("image")
        moving_id = request.get("moving")
        if not fixed or not moving_id:
            raise ValueError("NPC registration needs 'image' (fixed) and 'moving' in the request.")
        moving = self._image(str(moving_id))
        moving_label = self._label(request.get("moving_label"), str(moving_id))
        if not moving_label:
            raise ValueError(f"NPC registration needs a 'moving_label' for {moving} to propagate.")
        out = request.get("output_dir") or tempfile.mkdtemp(prefix="npc_", dir=self.output_root)
        summary = register_files(
            moving, fixed, out, moving_label=moving_label, fixed_label=request.get("fixed_label") or None,
            model=request.get("model") or self.model, device=request.get("device", self.device),
        )
        files = {key: str(Path(out) / name) for key, name in summary["outputs"].items()}
        result = {
            "model": summary["model"],
            "transform": files["transform"],
            "displacement": files["displacement"],
            "transform_slicer": files.get("transform_slicer"),
            "warped": files["warped"],
            "overview": files.get("overview"),
            "summary": files["summary"],
            "folding_percent": summary["folding_percent"],
            "jacobian_min": summary["jacobian_min"],
            "reliability_mean": summary.get("reliability_mean"),
            "dice_mean": summary.get("dice_mean"),
            "dice_mean_initial": summary.get("dice_mean_initial"),
            "seconds": summary["seconds"],
            "label_names": self.labels,
        }
        return files["warped_label"], result
