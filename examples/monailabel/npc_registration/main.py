"""MONAI Label app: NPC registration for label propagation.

Run in a separate environment with ``monailabel`` (see README.md beside this file: it must not
replace the ``torch`` and ``numpy`` of your ``monai_npc`` environment)::

    monailabel start_server --app examples/monailabel/npc_registration --studies /path/to/images \
        --conf npc_model acdc

``npc_model``: ``acdc``, ``camus``, ``sar``, a ``save_pretrained`` file, a MONAI bundle folder or
``phase-correlation``; ``npc_device``: the torch device (default ``cpu``). The task reads its model
from ``npc_model``, never from MONAI Label's own request key ``model`` (the task name).
"""

from __future__ import annotations

import logging
from typing import Dict

from monailabel.interfaces.app import MONAILabelApp
from monailabel.interfaces.tasks.infer_v2 import InferTask

from lib.infers import NPCRegistration

logger = logging.getLogger(__name__)


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
            logger.warning(f"NPC model {self.npc_model!r} not found; use --conf npc_model PATH or phase-correlation")
        return {"npc_registration": task}
