from .npc_registration import MODEL_LABELS, NPCRegistration, RequestError

__all__ = ["MODEL_LABELS", "NPCRegistration", "RequestError"]
