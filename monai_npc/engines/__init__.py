"""Training and evaluation engines.

- :mod:`~monai_npc.engines.loops`: plain loops over in-memory pairs (demo, benchmarks, tests).
- :mod:`~monai_npc.engines.workflows`: MONAI workflows of the bundles,
  :class:`RegistrationTrainer` (bidirectional unsupervised loss) and :class:`RegistrationEvaluator`
  (register, warp labels, per-pair metrics), plus the bundle data helpers.
"""

from .distributed import finalize_distributed
from .loops import evaluate_pairs, stack_pairs, train_pairs
from .workflows import RegistrationEvaluator, RegistrationTrainer, as_bool, check_training_args, init_weights, load_pairs, prepare_dataset_dir, require_file

__all__ = [
    "RegistrationEvaluator",
    "RegistrationTrainer",
    "as_bool",
    "check_training_args",
    "evaluate_pairs",
    "finalize_distributed",
    "init_weights",
    "load_pairs",
    "prepare_dataset_dir",
    "require_file",
    "stack_pairs",
    "train_pairs",
]
