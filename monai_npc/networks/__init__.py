"""NPC networks: ``blocks`` (building blocks) and ``nets`` (complete registration networks)."""
