"""MONAI Label infer task: label propagation by NPC registration.

The fixed image is the one open in the viewer (``request["image"]``). The task registers a
``moving`` image onto it, warps the moving image's label map with the result and returns the
warped label as the task's label file. Its JSON carries the transform files (ITK ``.h5``, ANTs
``.nii.gz``, the one-slice 3-D Slicer transform for 2-D images) and quality figures (folding %,
residual reliability, Dice when a fixed label is given, seconds).

Request keys (MONAI Label merges the client's ``params``, i.e. the task's ``config``, into the request):

- ``image``: fixed image path (MONAI Label resolves the datastore id);
- ``moving``: moving image path or datastore id;
- ``moving_label``: its label map path or datastore id (default: the datastore's ``final`` label
  of ``moving``);
- ``fixed_label`` (optional), ``output_dir`` (optional);
- ``npc_model`` (optional, overrides the task's model) and ``npc_device`` (optional).

The keys ``model`` and ``device`` belong to MONAI Label (the server sets ``model`` to the task's
name, e.g. ``"npc_registration"``), so the task never reads its NPC model or device from them.

The task runs with or without ``monailabel`` installed (without it, a minimal stand-in base
class is used), so it can be called directly, e.g. from tests or scripts.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

try:  # only in a MONAI Label environment (see README.md: a separate venv)
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


#: label names of the shipped models' training data (the default ``labels`` for those models)
MODEL_LABELS = {
    "acdc": {"rv": 1, "myocardium": 2, "lv": 3},
    "camus": {"lv": 1, "myocardium": 2, "la": 3},
}


class NPCRegistration(InferTask):
    """Propagate a moving image's label map onto the open (fixed) image with ``monai_npc.interop.register_files``.

    Args:
        model: a model argument of ``monai_npc.networks.nets.load_pretrained`` (``"acdc"``, ``"camus"``,
            ``"sar"``, a ``save_pretrained`` file, a MONAI bundle folder or its ``models/model.pt``)
            or ``"phase-correlation"``.
        labels: label names, e.g. ``{"rv": 1, "myocardium": 2, "lv": 3}`` (default: those of the
            model's data, :data:`MODEL_LABELS`, else ACDC's).
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
            labels=labels or MODEL_LABELS.get(str(model), MODEL_LABELS["acdc"]),
            dimension=2,
            description=description,
            config={"npc_model": model, "moving": "", "moving_label": "", "fixed_label": ""},
        )
        self.model = model
        self.datastore = datastore
        self.output_root = output_root
        self.device = device

    def is_valid(self) -> bool:
        from monai_npc.interop.register import PHASE_CORRELATION
        from monai_npc.networks.nets import available_models

        path = Path(str(self.model))
        bundle = (path / "configs" / "inference.json").is_file() and (path / "models" / "model.pt").is_file()
        return self.model == PHASE_CORRELATION or path.is_file() or bundle or self.model in available_models()

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
            # not request["model"]: MONAI Label sets it to this task's name
            model=request.get("npc_model") or self.model, device=request.get("npc_device") or self.device,
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
