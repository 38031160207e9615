from .npc_registration import NPCRegistration

__all__ = ["NPCRegistration"]
