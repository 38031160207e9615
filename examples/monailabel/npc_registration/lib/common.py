"""What the app's infer tasks share: request errors, the base task, model loading, result files.

- :class:`RequestError`: a bad request, an HTTP 4xx answer whose body (``{"detail": ...}``) says
  what is wrong (a ``fastapi.HTTPException`` under MONAI Label, and a ``ValueError``);
- :class:`NPCInferTask`: a MONAI Label ``InferTask`` (or, without ``monailabel``, a minimal
  stand-in with its interface) that resolves image / label ids of the datastore, parses
  ``npc_refine``, loads each NPC network once and writes the result into a temporary NIfTI file.

The keys ``model`` and ``device`` of a request belong to MONAI Label (``model`` is the task's
name), so the tasks read their NPC network and device from ``npc_model`` and ``npc_device``.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections import OrderedDict
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


def model_help() -> str:
    """The accepted ``npc_model`` values, for error messages."""
    from monai_npc.apps.registration.models import PHASE_CORRELATION
    from monai_npc.networks.nets import available_models

    return (
        f"a shipped model ({', '.join(available_models())}), {PHASE_CORRELATION}, a file written by "
        "monai_npc.networks.nets.save_pretrained or a MONAI bundle folder on the server"
    )


def whole_number(value: Any, key: str, what: str) -> Optional[int]:
    """Request value ``value`` of ``key`` as an int >= 0 (``None`` when absent); 400 otherwise, naming ``key`` and ``what`` it counts."""
    if value is None or value == "":
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        number = -1
    if number < 0:
        raise RequestError(400, f"{key} must be a whole number >= 0 ({what}), got {value!r}.")
    return number


#: networks a task keeps loaded (the most recently used; a request for another one loads it again)
MAX_NETWORKS = 4


def _device(value: Any) -> str:
    """Request value ``npc_device`` as a torch device string; 400 naming ``npc_device`` when it is not one this server has."""
    import torch

    try:
        device = torch.device(str(value))
    except (RuntimeError, ValueError):
        raise RequestError(400, f"npc_device {value!r} is not a torch device (cpu, cuda, cuda:0...).") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RequestError(400, f"npc_device {value!r}: this server has no CUDA device; use cpu.")
    return str(device)


def server_path(value: str) -> Optional[str]:
    """``value`` when it is an absolute path of an existing file or folder on the server, else ``None``
    (a relative path would resolve against the folder the server was started from)."""
    return value if value and os.path.isabs(value) and os.path.exists(value) else None


class NPCInferTask(InferTask):
    """Base of the app's infer tasks: an NPC ``model``, an optional datastore, a folder for results.

    Subclasses set :attr:`what`, :attr:`task_dimension`, :attr:`default_description` and
    :meth:`request_config` (the request keys a client may set, shown in the task's ``config``).

    Args:
        model: a model argument of ``monai_npc.register`` (``"acdc"``, ``"camus"``, ``"sar"``, a
            ``save_pretrained`` file, a MONAI bundle folder or its ``models/model.pt``) or
            ``"phase-correlation"``.
        labels: label names, e.g. ``{"rv": 1, "myocardium": 2, "lv": 3}`` (default: those of the
            model's data, :data:`MODEL_LABELS`, else ACDC's).
        datastore: optional MONAI Label datastore to resolve image / label ids.
        output_root: folder for the temporary result files (default: the system's temporary folder).
        device: torch device.
        description: of the MONAI Label task (default: :attr:`default_description`).
    """

    #: the task's name in error messages
    what = "NPC task"
    #: MONAI Label's ``dimension`` of the task
    task_dimension = 2
    default_description = "Neural Phase Correlation"

    def __init__(
        self,
        model: str = "acdc",
        labels: Optional[Dict[str, int]] = None,
        datastore=None,
        output_root: Optional[str] = None,
        device: str = "cpu",
        description: Optional[str] = None,
    ) -> None:
        super().__init__(
            type=SEGMENTATION,
            labels=labels or MODEL_LABELS.get(str(model), MODEL_LABELS["acdc"]),
            dimension=self.task_dimension,
            description=description or self.default_description,
            config=dict({"npc_model": model}, **self.request_config()),
        )
        self.model = model
        self.datastore = datastore
        self.output_root = output_root
        self.device = device
        self._nets: "OrderedDict[Tuple[str, str, Optional[int], bool], Any]" = OrderedDict()
        self._nets_lock = threading.Lock()

    def request_config(self) -> Dict[str, Any]:
        """The task's own request keys and their defaults (MONAI Label's task ``config``, besides ``npc_model``)."""
        return {}

    def is_valid(self) -> bool:
        """Whether ``model`` names a network this server can load."""
        from monai_npc.apps.registration.models import PHASE_CORRELATION
        from monai_npc.networks.nets import available_models

        path = Path(str(self.model))
        bundle = (path / "configs" / "inference.json").is_file() and (path / "models" / "model.pt").is_file()
        return self.model == PHASE_CORRELATION or path.is_file() or bundle or self.model in available_models()

    def _image(self, value: Any, key: str) -> str:
        """Path of the image named by request key ``key`` (a path on the server or a datastore id)."""
        value = "" if value is None else str(value)
        if not value:
            raise RequestError(400, f"{self.what} needs {key!r} (a datastore image id or an absolute path on the server) in the request.")
        if server_path(value):
            return value
        uri = self.datastore.get_image_uri(value) if self.datastore is not None else ""
        if not uri or not os.path.exists(uri):
            raise RequestError(404, f"{key} {value!r} is neither an image id of the datastore nor an absolute path of a file on the server.")
        return uri

    def _label(self, value: Any, key: str, image_id: Optional[str] = None) -> Optional[str]:
        """Path of the label map named by ``key`` (path or datastore id of a ``final`` label), or
        ``None`` when the request leaves it out and ``image_id`` has no ``final`` label."""
        value = "" if value is None else str(value)
        if server_path(value):
            return value
        uri = ""
        if self.datastore is not None and (value or image_id):
            uri = self.datastore.get_label_uri(value or image_id, "final") or ""
        if uri and os.path.exists(uri):
            return uri
        if value:
            raise RequestError(404, f"{key} {value!r} is neither the id of a final label in the datastore nor an absolute path of a "
                                    "file on the server.")
        return None

    def _network(self, request: Dict[str, Any], tracking: bool = False) -> Tuple[Any, str, str]:
        """``(network, name, device)`` of the request (``npc_model``, ``npc_device``, ``npc_refine``;
        never MONAI Label's ``model`` / ``device``), each network loaded once and reused. ``tracking``:
        with ``monai_npc.track``'s settings for consecutive frames (4 ODE steps; 10 refinement steps
        unless ``npc_refine`` is given)."""
        from monai_npc.apps.registration.models import resolve_model
        from monai_npc.apps.tracking.track import tracking_model

        spec = str(request.get("npc_model") or self.model)
        device = _device(request.get("npc_device") or self.device)
        refine = whole_number(request.get("npc_refine"), "npc_refine", "refinement steps")
        key = (spec, device, refine, tracking)
        with self._nets_lock:
            if key not in self._nets:
                try:
                    self._nets[key] = (tracking_model if tracking else resolve_model)(spec, device, refine)
                except (FileNotFoundError, ValueError) as err:
                    status = 404 if isinstance(err, FileNotFoundError) else 400
                    raise RequestError(status, f"npc_model {spec!r}: {err} Use {model_help()}.") from None
                while len(self._nets) > MAX_NETWORKS:  # each distinct npc_model / npc_refine would otherwise stay in memory
                    self._nets.popitem(last=False)
            self._nets.move_to_end(key)
            net, name = self._nets[key]
        return net, name, device

    def _write_result(self, image) -> str:
        """``image`` (a ``sitk.Image``) written into a new temporary NIfTI file in ``output_root``; its path
        (the server streams it back and deletes it; direct callers delete it)."""
        import SimpleITK as sitk

        handle, path = tempfile.mkstemp(prefix="npc_result_", suffix=".nii.gz", dir=self.output_root)
        os.close(handle)
        try:
            sitk.WriteImage(image, path, True)
        except BaseException:
            os.remove(path)
            raise
        return path
