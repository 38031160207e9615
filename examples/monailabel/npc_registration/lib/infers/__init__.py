from ..common import MODEL_LABELS, RequestError
from .npc_registration import NPCRegistration
from .npc_track import NPCTrack

__all__ = ["MODEL_LABELS", "NPCRegistration", "NPCTrack", "RequestError"]
