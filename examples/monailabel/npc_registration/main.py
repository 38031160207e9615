"""MONAI Label app: NPC registration for label propagation.

Start it with ``serve.py`` beside this file (it runs ``monailabel start_server`` on a copy of this
app in a temporary folder, so that nothing is written into the repository), in an environment
with ``monailabel`` (see README.md: a separate one, it must not replace the ``torch`` and
``numpy`` of your ``monai_npc`` environment)::

    python examples/monailabel/npc_registration/serve.py --studies /path/to/images --conf npc_model acdc

``npc_model``: ``acdc``, ``camus``, ``sar``, a ``save_pretrained`` file, a MONAI bundle folder or
``phase-correlation``; ``npc_device``: the torch device (default ``cpu``). The task reads its model
from ``npc_model``, never from MONAI Label's own request key ``model`` (the task name).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional

from monailabel.interfaces.app import MONAILabelApp
from monailabel.interfaces.tasks.infer_v2 import InferTask

from lib.infers import NPCRegistration, RequestError

logger = logging.getLogger(__name__)

#: the app's one infer task (the ``{model}`` of ``POST /infer/{model}``)
TASK = "npc_registration"


class MyApp(MONAILabelApp):
    def __init__(self, app_dir: str, studies: str, conf: Dict[str, str]) -> None:
        self.npc_model = conf.get("npc_model", "acdc")
        self.npc_device = conf.get("npc_device", "cpu")
        super().__init__(
            app_dir=app_dir,
            studies=studies,
            conf=conf,
            name="monai_npc registration",
            description="Neural Phase Correlation registration: propagate a label map to the open image",
            version="0.1.0",
        )

    def init_infers(self) -> Dict[str, InferTask]:
        task = NPCRegistration(model=self.npc_model, datastore=self.datastore(), device=self.npc_device)
        if not task.is_valid():
            raise ValueError(
                f"--conf npc_model {self.npc_model!r}: no such NPC model; use acdc, camus, sar, phase-correlation, "
                "a file written by monai_npc.networks.nets.save_pretrained or a MONAI bundle folder."
            )
        return {TASK: task}

    def infer(self, request: Dict[str, Any], datastore: Optional[Any] = None) -> Dict[str, Any]:
        """MONAI Label's ``infer`` after checking the task name and the fixed image (4xx answers, not 500).

        MONAI Label copies the request's ``params`` over the URL's task name, so a ``model`` key in
        the params replaces it: a value that is not a task of this app is refused with 400 (or 404
        when no ``params`` could have set it), naming ``npc_model`` as the key for the network.
        """
        try:
            return self._checked_infer(request, datastore)
        except RequestError as err:  # the client gets err.status_code and {"detail": err.detail}
            logger.warning(f"Infer request refused ({err.status_code}): {err.detail}")
            raise

    def _checked_infer(self, request: Dict[str, Any], datastore: Optional[Any]) -> Dict[str, Any]:
        model = request.get("model")
        if model not in self._infers:
            from monai_npc.networks.nets import available_models

            network = str(model) in available_models() or str(model).lower() in ("phase-correlation", "phase_correlation")
            raise RequestError(
                400 if network else 404,
                f"model {model!r} is not a task of this app (tasks: {', '.join(self._infers)}). "
                + (f"{model!r} is an NPC network: send it as the parameter 'npc_model'; " if network else "")
                + "a 'model' key in the request parameters replaces the task name of the URL (POST /infer/"
                + f"{TASK}): leave it out.",
            )
        image = request.get("image")
        store = datastore or self.datastore()
        if isinstance(image, str) and image and not os.path.exists(image) and not store.get_image_uri(image):
            raise RequestError(404, f"image {image!r} is neither an image id of the datastore nor a file on the server.")
        return super().infer(request, datastore)
