"""MONAI Label app: NPC registration for label propagation, and label tracking through a 4-D cine.

Two infer tasks (``POST /infer/{task}``): ``npc_registration`` (a moving image's label onto the
open image, ``lib/infers/npc_registration.py``) and ``npc_track`` (the label of one frame of the
open 4-D cine carried to every frame, with volumes and EF, ``lib/infers/npc_track.py``).

Start it with ``serve.py`` beside this file (it runs ``monailabel start_server`` on a copy of this
app in a temporary folder, so that nothing is written into the repository), in an environment
with ``monailabel`` (see README.md: a separate one, it must not replace the ``torch`` and
``numpy`` of your ``monai_npc`` environment)::

    python examples/monailabel/npc_registration/serve.py --studies /path/to/images --conf npc_model acdc

``npc_model``: ``acdc``, ``camus``, ``sar``, a ``save_pretrained`` file, a MONAI bundle folder or
``phase-correlation``; ``npc_device``: the torch device (default ``cpu``); ``npc_scheme``: the
default tracking scheme of ``npc_track`` (``direct``). The tasks read their model from
``npc_model``, never from MONAI Label's own request key ``model`` (the task name): a ``model`` in
the request's params that differs from the URL's task is refused with 400 before it can reroute
the request (:func:`guard_task_routing`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from typing import Any, Dict, Optional

from monailabel.interfaces.app import MONAILabelApp
from monailabel.interfaces.tasks.infer_v2 import InferTask

from lib.infers import NPCRegistration, NPCTrack, RequestError

logger = logging.getLogger(__name__)

#: the app's infer tasks (the ``{model}`` of ``POST /infer/{model}``)
TASK = "npc_registration"
TRACK_TASK = "npc_track"


def _wrong_model(model: Any, tasks: Any, url_task: Optional[str] = None) -> RequestError:
    """The refusal of a request whose ``model`` (the task name MONAI Label routes by) is not the URL's task."""
    from monai_npc.apps.registration.models import is_phase_correlation
    from monai_npc.networks.nets import available_models

    network = str(model) in available_models() or is_phase_correlation(model)
    where = f"the URL's task {url_task!r}" if url_task else "the task name of the URL"
    return RequestError(
        400 if network or url_task else 404,
        f"model {model!r} is not {'the task of this request' if url_task else 'a task of this app'} (tasks: {', '.join(tasks)}). "
        + (f"{model!r} is an NPC network: send it as the parameter 'npc_model'; " if network else "")
        + f"a 'model' key in the request parameters replaces {where} (POST /infer/<task>): leave it out.",
    )


def _remove_uploads(background_tasks: Any) -> None:
    """Run the file removals MONAI Label queued for a request's uploads: its background tasks run only after a
    successful answer, so a refused request would leave them in the server's temporary folder."""
    for task in list(getattr(background_tasks, "tasks", [])):
        if getattr(task.func, "__name__", "") == "remove_file":
            try:
                task.func(*task.args, **task.kwargs)
            except OSError:
                pass


def guard_task_routing(tasks: Any) -> None:
    """Let the URL's task, not a ``model`` key of the request's params, choose the task.

    MONAI Label's ``run_inference`` copies the params over ``{"model": <URL task>}`` and routes by
    the result, so ``params={"model": "npc_registration"}`` sent to ``/infer/npc_track`` would run
    the other task. The wrapper installed here refuses such a request with 400 (and params that are
    not a JSON object, or a request without any image, with 400 instead of 500), drops options sent
    empty (Slicer sends every option of a task's config; an empty ``label`` would hide the uploaded
    one), and deletes the uploaded files when a request fails (MONAI Label deletes them only after a
    successful answer). Without ``monailabel`` it does nothing.
    """
    try:
        from monailabel.endpoints import infer as endpoint
    except ImportError:  # pragma: no cover - only under MONAI Label
        return
    original = endpoint.run_inference
    if getattr(original, "npc_guarded", False):
        return

    @functools.wraps(original)
    def run_inference(background_tasks, model, image="", session_id="", params="{}", *args, **kwargs):
        try:
            try:
                given = json.loads(params) if isinstance(params, str) and params else {}
            except ValueError as err:
                raise RequestError(400, f"params is not valid JSON ({err}): send a JSON object, e.g. '{{\"npc_refine\": 0}}'.") from None
            if not isinstance(given, dict):
                raise RequestError(400, f"params must be a JSON object, got {type(given).__name__}.")
            if "model" in given and given["model"] != model:
                raise _wrong_model(given["model"], tasks, model)
            upload = kwargs.get("file", args[0] if args else None)
            if not image and not session_id and not upload:
                raise RequestError(400, "no image: name the open image (?image=<datastore id>) or upload one (form field 'file').")
            # an empty option is an option left unset (Slicer sends every option of the task's config): it must not
            # replace what the request carries, such as the uploaded label's path
            params = json.dumps({k: v for k, v in given.items() if v != ""})
            return original(background_tasks, model, image, session_id, params, *args, **kwargs)
        except BaseException as err:
            if isinstance(err, RequestError):
                logger.warning(f"Infer request refused ({err.status_code}): {err.detail}")
            _remove_uploads(background_tasks)
            raise

    run_inference.npc_guarded = True
    endpoint.run_inference = run_inference


class MyApp(MONAILabelApp):
    def __init__(self, app_dir: str, studies: str, conf: Dict[str, str]) -> None:
        self.npc_model = conf.get("npc_model", "acdc")
        self.npc_device = conf.get("npc_device", "cpu")
        self.npc_scheme = conf.get("npc_scheme") or None
        self.npc_structures = conf.get("npc_structures") or None  # the tracking task's label numbering, "lv=1,myo=2,rv=3"
        super().__init__(
            app_dir=app_dir,
            studies=studies,
            conf=conf,
            name="monai_npc registration",
            description="Neural Phase Correlation registration: propagate a label map to the open image or through a 4-D cine",
            version="0.1.0",
        )

    def init_infers(self) -> Dict[str, InferTask]:
        from monai_npc.apps.tracking.schemes import SCHEMES

        task = NPCRegistration(model=self.npc_model, datastore=self.datastore(), device=self.npc_device)
        if not task.is_valid():
            raise ValueError(
                f"--conf npc_model {self.npc_model!r}: no such NPC model; use acdc, camus, sar, phase-correlation, "
                "a file written by monai_npc.networks.nets.save_pretrained or a MONAI bundle folder."
            )
        if self.npc_scheme is not None and self.npc_scheme not in SCHEMES:
            raise ValueError(f"--conf npc_scheme {self.npc_scheme!r}: no such tracking scheme; use one of {', '.join(SCHEMES)}.")
        tracking = NPCTrack(model=self.npc_model, datastore=self.datastore(), device=self.npc_device, scheme=self.npc_scheme,
                            structures=self.npc_structures)
        tasks = {TASK: task, TRACK_TASK: tracking}
        guard_task_routing(tasks)
        return tasks

    def infer(self, request: Dict[str, Any], datastore: Optional[Any] = None) -> Dict[str, Any]:
        """MONAI Label's ``infer`` after checking the task name and the fixed image (4xx answers, not 500).

        MONAI Label copies the request's ``params`` over the URL's task name, so a ``model`` key in
        the params replaces it: :func:`guard_task_routing` refuses one that differs from the URL's
        task; here (direct calls) a value that is not a task of this app is refused with 400 when it
        names a network (naming ``npc_model`` as the key for it), else 404. The cine task gets the
        datastore id of the open image as ``npc_image_id`` (for its default label).
        """
        try:
            return self._checked_infer(request, datastore)
        except RequestError as err:  # the client gets err.status_code and {"detail": err.detail}
            logger.warning(f"Infer request refused ({err.status_code}): {err.detail}")
            raise

    def _checked_infer(self, request: Dict[str, Any], datastore: Optional[Any]) -> Dict[str, Any]:
        model = request.get("model")
        if model not in self._infers:
            raise _wrong_model(model, self._infers)
        image = request.get("image")
        store = datastore or self.datastore()
        if isinstance(image, str) and image and not os.path.exists(image) and not store.get_image_uri(image):
            raise RequestError(404, f"image {image!r} is neither an image id of the datastore nor a file on the server.")
        if isinstance(image, str) and image and not os.path.exists(image):
            request = dict(request, npc_image_id=image)
        return super().infer(request, datastore)
