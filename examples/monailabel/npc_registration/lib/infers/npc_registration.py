"""MONAI Label infer task: label propagation by NPC registration.

The fixed image is the one open in the viewer (``request["image"]``). The task registers a
``moving`` image onto it with :func:`monai_npc.register` (in memory) and returns, as MONAI Label
infer tasks do, one result file plus JSON params:

- the file: the moving image's label map warped onto the fixed image (``result: "label"``), or,
  when the moving image has no label map, the warped moving image (``result: "image"``); a
  temporary NIfTI file on the fixed image's grid, which the server streams back and then deletes;
- the params: the registration summary (model, Dice before/after when a fixed label is given,
  folding %, Jacobian minimum, displacement in mm, reliability, seconds, warnings).

Request keys (MONAI Label merges the client's ``params`` into the request):

- ``image``: the fixed image (MONAI Label resolves the datastore id to a path);
- ``moving``: moving image, a datastore id or a path on the server;
- ``moving_label`` (optional): its label map, a datastore id (the ``final`` label) or a path;
  default: the datastore's ``final`` label of ``moving`` if there is one, else the warped image
  is returned;
- ``fixed_label`` (optional): datastore id or path of the fixed image's label map (for Dice);
- ``npc_model`` (optional, overrides the task's model), ``npc_device`` (optional),
  ``npc_refine`` (optional: test-time refinement steps, ``0`` for the network alone);
- ``output_dir`` (optional): a folder *on the server* where all the files of
  :meth:`monai_npc.Registration.save` are written (transforms for ITK/ANTs/Slicer, overview...).

The keys ``model`` and ``device`` belong to MONAI Label (``model`` is the task's name), so the task
never reads its NPC model or device from them.

A bad request raises :class:`RequestError` (an ``HTTPException`` under MONAI Label), so the
client gets a 4xx answer whose body (``{"detail": ...}``) says what is wrong; failures of the
server itself stay 500.

The task runs with or without ``monailabel`` installed (without it, a minimal stand-in base
class is used), so it can be called directly, e.g. from tests or scripts.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
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

try:  # MONAI Label answers a raised HTTPException with its status code and {"detail": message}
    from fastapi import HTTPException as _HTTPError
except ImportError:  # pragma: no cover - exercised when fastapi (monailabel) is absent

    class _HTTPError(Exception):
        def __init__(self, status_code: int, detail: str) -> None:
            super().__init__(status_code, detail)
            self.status_code = status_code
            self.detail = detail


class RequestError(_HTTPError, ValueError):
    """A bad request: an HTTP 4xx ``status_code`` and a ``detail`` message saying what is wrong.

    Under MONAI Label it is a ``fastapi.HTTPException``: the client gets ``status_code`` and the
    body ``{"detail": detail}``. It is also a ``ValueError`` for direct (server-less) callers.
    """

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(status_code=status_code, detail=detail)

    def __str__(self) -> str:
        return f"{self.status_code}: {self.detail}"


#: label names of the shipped models' training data (the default ``labels`` for those models)
MODEL_LABELS = {
    "acdc": {"rv": 1, "myocardium": 2, "lv": 3},
    "camus": {"lv": 1, "myocardium": 2, "la": 3},
}

def _model_help() -> str:
    from monai_npc.interop.api import PHASE_CORRELATION
    from monai_npc.networks.nets import available_models

    return (
        f"a shipped model ({', '.join(available_models())}), {PHASE_CORRELATION}, a file written by "
        "monai_npc.networks.nets.save_pretrained or a MONAI bundle folder on the server"
    )


class NPCRegistration(InferTask):
    """Propagate a moving image's label map onto the open (fixed) image with :func:`monai_npc.register`.

    Args:
        model: a model argument of ``monai_npc.register`` (``"acdc"``, ``"camus"``, ``"sar"``, a
            ``save_pretrained`` file, a MONAI bundle folder or its ``models/model.pt``) or
            ``"phase-correlation"``.
        labels: label names, e.g. ``{"rv": 1, "myocardium": 2, "lv": 3}`` (default: those of the
            model's data, :data:`MODEL_LABELS`, else ACDC's).
        datastore: optional MONAI Label datastore to resolve ``moving`` / label ids.
        output_root: folder for the temporary result files (default: the system's temporary folder).
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
        self._nets: Dict[Tuple[str, str, Optional[int]], Any] = {}
        self._nets_lock = threading.Lock()

    def is_valid(self) -> bool:
        from monai_npc.interop.api import PHASE_CORRELATION
        from monai_npc.networks.nets import available_models

        path = Path(str(self.model))
        bundle = (path / "configs" / "inference.json").is_file() and (path / "models" / "model.pt").is_file()
        return self.model == PHASE_CORRELATION or path.is_file() or bundle or self.model in available_models()

    # ---------------------------------------------------------------------------------- inputs

    def _image(self, value: Any, key: str) -> str:
        """Path of the image named by request key ``key`` (a path on the server or a datastore id)."""
        value = "" if value is None else str(value)
        if not value:
            raise RequestError(400, f"NPC registration needs {key!r} (a datastore image id or a path on the server) in the request.")
        if os.path.exists(value):
            return value
        uri = self.datastore.get_image_uri(value) if self.datastore is not None else ""
        if not uri or not os.path.exists(uri):
            raise RequestError(404, f"{key} {value!r} is neither an image id of the datastore nor a file on the server.")
        return uri

    def _label(self, value: Any, key: str, image_id: Optional[str] = None) -> Optional[str]:
        """Path of the label map named by ``key`` (path or datastore id of a ``final`` label), or
        ``None`` when the request leaves it out and ``image_id`` has no ``final`` label."""
        value = "" if value is None else str(value)
        if value and os.path.exists(value):
            return value
        uri = ""
        if self.datastore is not None and (value or image_id):
            uri = self.datastore.get_label_uri(value or image_id, "final") or ""
        if uri and os.path.exists(uri):
            return uri
        if value:
            raise RequestError(404, f"{key} {value!r} is neither the id of a final label in the datastore nor a file on the server.")
        return None

    def _network(self, spec: str, device: str, refine: Optional[int]):
        """``(network, name)`` for ``spec``, loaded once per (model, device, refinement) and reused."""
        from monai_npc.interop.api import resolve_model

        key = (spec, device, refine)
        with self._nets_lock:
            if key not in self._nets:
                try:
                    self._nets[key] = resolve_model(spec, device, refine)
                except (FileNotFoundError, ValueError) as err:
                    status = 404 if isinstance(err, FileNotFoundError) else 400
                    raise RequestError(status, f"npc_model {spec!r}: {err} Use {_model_help()}.") from None
            return self._nets[key]

    @staticmethod
    def _refine(value: Any) -> Optional[int]:
        """``npc_refine`` as a number of refinement steps (``None``: the weights' own setting)."""
        if value is None or value == "":
            return None
        try:
            refine = int(str(value).strip())
        except ValueError:
            refine = -1
        if refine < 0:
            raise RequestError(400, f"npc_refine must be a whole number >= 0 (refinement steps), got {value!r}.")
        return refine

    # ------------------------------------------------------------------------------------ call

    def __call__(self, request: Dict[str, Any]) -> Tuple[Optional[str], Dict[str, Any]]:
        """Register ``request["moving"]`` onto ``request["image"]``; returns ``(result file, params)``.

        The result file is a new temporary NIfTI file (the caller, e.g. the MONAI Label server,
        deletes it); ``params`` is JSON-serialisable. Raises :class:`RequestError` for bad requests.
        """
        import SimpleITK as sitk

        import monai_npc

        t0 = time.perf_counter()
        fixed = self._image(request.get("image"), "image")
        moving_id = request.get("moving")
        moving = self._image(moving_id, "moving")
        moving_label = self._label(request.get("moving_label"), "moving_label", str(moving_id))
        fixed_label = self._label(request.get("fixed_label"), "fixed_label")
        # not request["model"] / ["device"]: MONAI Label's own keys (the task name, the server's device)
        spec = str(request.get("npc_model") or self.model)
        device = str(request.get("npc_device") or self.device)
        net, name = self._network(spec, device, self._refine(request.get("npc_refine")))
        try:
            reg = monai_npc.register(moving, fixed, model=net, moving_label=moving_label, fixed_label=fixed_label,
                                     device=device, model_name=name)
        except FileNotFoundError as err:
            raise RequestError(404, str(err)) from None
        except (ValueError, TypeError) as err:  # unreadable files, 2-D vs 3-D, no overlap, label off its grid...
            raise RequestError(422, str(err)) from None

        summary = dict(reg.summary)  # JSON-ready: what summary.json holds
        if request.get("output_dir"):
            try:
                saved = reg.save(str(request["output_dir"]))
            except ValueError as err:
                raise RequestError(400, f"output_dir: {err}") from None
            summary["output_dir"] = str(request["output_dir"])
            summary["outputs"] = saved["outputs"]
        result_image = reg.warped_label if reg.warped_label is not None else reg.warped
        handle, label_file = tempfile.mkstemp(prefix="npc_result_", suffix=".nii.gz", dir=self.output_root)
        os.close(handle)
        try:
            sitk.WriteImage(result_image, label_file, True)
        except BaseException:
            os.remove(label_file)
            raise
        summary.update(
            result="label" if reg.warped_label is not None else "image",
            label_names=self.labels,
            seconds_request=time.perf_counter() - t0,
        )
        return label_file, summary
