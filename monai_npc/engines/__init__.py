"""Training and evaluation engines.

- :mod:`~monai_npc.engines.loops`: plain loops over in-memory pairs (demo, benchmarks, tests).
- :mod:`~monai_npc.engines.workflows`: MONAI workflows of the bundles,
  :class:`RegistrationTrainer` (bidirectional unsupervised loss) and :class:`RegistrationEvaluator`
  (register, warp labels, per-pair metrics).
- :mod:`~monai_npc.engines.stack_training`: whole-stack training for a fixed wall time on one GPU, several
  (``torchrun``, :mod:`~monai_npc.engines.stack_distributed`) or the CPU, data on the device
  (:mod:`~monai_npc.engines.stack_data`), checkpoints and export (:mod:`~monai_npc.engines.stack_checkpoint`), log and
  curve (:mod:`~monai_npc.engines.stack_report`); imported on its own (``docs/training_gpu.md``), not re-exported here.
- :mod:`~monai_npc.engines.bundle_args`: the bundle argument checks and start weights
  (:func:`check_training_args`, :func:`as_bool`, :func:`require_file`, :func:`init_weights`).

The bundle data helpers :func:`prepare_dataset_dir` and :func:`load_pairs` live in
:mod:`monai_npc.data.bundle_data` (they read the dataset registry) and are exported here too.
"""

from monai_npc.data.bundle_data import load_pairs, prepare_dataset_dir

from .bundle_args import as_bool, check_training_args, init_weights, require_file
from .distributed import finalize_distributed
from .loops import evaluate_pairs, stack_pairs, train_pairs
from .workflows import RegistrationEvaluator, RegistrationTrainer

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
