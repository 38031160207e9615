"""The ``monai-npc`` command line."""
