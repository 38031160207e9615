"""Plain training and evaluation loops over in-memory registration pairs (demo, benchmarks, tests)."""

from .loops import evaluate_pairs, stack_pairs, train_pairs

__all__ = ["evaluate_pairs", "stack_pairs", "train_pairs"]
