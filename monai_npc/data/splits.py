"""Patient-level train / validation / test splits with a fixed seed."""

from __future__ import annotations

import json
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["SPLITS", "resolve_split_counts", "patient_split", "read_split_file", "split_patients", "empty_split_error"]

SPLITS: Tuple[str, ...] = ("train", "val", "test")
Count = Optional[Union[int, float]]


def _largest_remainder(shares: Sequence[Fraction], total: int) -> List[int]:
    """Round ``shares`` to integers summing to ``min(total, round(sum(shares)))`` (largest remainder)."""
    floors = [int(s) for s in shares]
    left = min(total, round(float(sum(shares)))) - sum(floors)
    order = sorted(range(len(shares)), key=lambda i: (-(shares[i] - floors[i]), i))  # ties: train first
    for i in order[: max(left, 0)]:
        floors[i] += 1
    return floors


def resolve_split_counts(n_available: int, n_train: Count, n_val: Count, n_test: Count) -> Tuple[int, int, int]:
    """Number of patients per split out of ``n_available``.

    Each count is an int (number of patients), a float in ``(0, 1]`` (fraction of the available
    patients) or ``None`` (all patients the other two leave; at most one may be ``None``).
    When the requested counts add up to more than ``n_available`` (e.g. the paper's 80/20/50 of
    150 on a 70-patient copy of ACDC) they are scaled proportionally (largest-remainder rounding,
    ties favouring train) and a ``UserWarning`` says so. Fewer than available leaves the rest
    unused, as the paper does.
    """
    if n_available <= 0:
        raise ValueError("cannot split an empty list of patients.")
    requested = {"n_train": n_train, "n_val": n_val, "n_test": n_test}
    if sum(v is None for v in requested.values()) > 1:
        raise ValueError("at most one of n_train, n_val, n_test may be None (= the remaining patients).")
    shares: Dict[str, Optional[Fraction]] = {}
    for name, value in requested.items():
        if value is None:
            shares[name] = None
        elif isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"{name} must be an int, a float fraction or None, got {value!r}.")
        elif isinstance(value, (float, np.floating)) and 0 < value <= 1:
            shares[name] = Fraction(float(value)).limit_denominator(10**6) * n_available
        elif isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise ValueError(f"{name}={value} is neither a patient count nor a fraction in (0, 1].")
        else:
            if value < 0:
                raise ValueError(f"{name}={value} is negative.")
            shares[name] = Fraction(int(value))
    fixed = sum(s for s in shares.values() if s is not None)
    if fixed > n_available:
        scaled = {k: (s * n_available / fixed if s is not None else None) for k, s in shares.items()}
        counts = _largest_remainder([s for s in scaled.values() if s is not None], n_available)
        it = iter(counts)
        result = {k: (next(it) if s is not None else 0) for k, s in scaled.items()}
        warnings.warn(
            f"requested patient split {n_train}/{n_val}/{n_test} needs {float(fixed):g} patients but only "
            f"{n_available} are available; scaled proportionally to "
            f"{result['n_train']}/{result['n_val']}/{result['n_test']}.",
            UserWarning,
            stacklevel=3,
        )
        return result["n_train"], result["n_val"], result["n_test"]
    counts = _largest_remainder([s for s in shares.values() if s is not None], n_available)
    it = iter(counts)
    result = {k: (next(it) if s is not None else None) for k, s in shares.items()}
    rest = n_available - sum(v for v in result.values() if v is not None)
    result = {k: (rest if v is None else v) for k, v in result.items()}
    return result["n_train"], result["n_val"], result["n_test"]


def patient_split(
    patients: Sequence[str], n_train: Count, n_val: Count, n_test: Count, seed: int
) -> Dict[str, List[str]]:
    """Split patient ids into ``{"train", "val", "test"}`` lists (sorted within each split).

    The ids are sorted, permuted with ``numpy.random.default_rng(seed)`` and cut into
    consecutive blocks of the sizes from :func:`resolve_split_counts`. The same ids, counts and
    seed always give the same split, whatever order the ids were found in.
    """
    ids = sorted(set(patients))
    if len(ids) != len(patients):
        raise ValueError("patient ids are not unique.")
    counts = resolve_split_counts(len(ids), n_train, n_val, n_test)
    order = np.random.default_rng(seed).permutation(len(ids))
    shuffled = [ids[i] for i in order]
    out, start = {}, 0
    for name, count in zip(SPLITS, counts):
        out[name] = sorted(shuffled[start : start + count])
        start += count
    return out


def read_split_file(path: Union[str, Path]) -> Dict[str, List[str]]:
    """Read a patient split ``{"train": [ids], "val": [ids], "test": [ids]}`` from a JSON file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is not such a mapping, or a patient id is listed in two splits.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"split_file {str(path)!r} does not exist.")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"split_file {str(path)!r} is not valid JSON: {err}") from err
    if not isinstance(data, dict) or not set(SPLITS) <= set(data):
        raise ValueError(f"split_file {str(path)!r} must map each of {list(SPLITS)} to a list of patient ids.")
    out = {name: [str(x) for x in data[name]] for name in SPLITS}
    seen: Dict[str, str] = {}
    for name, ids in out.items():
        for pid in ids:
            if pid in seen:
                raise ValueError(f"split_file {str(path)!r}: patient {pid} is in both '{seen[pid]}' and '{name}'.")
            seen[pid] = name
    return out


def split_patients(
    patients: Sequence[str],
    split: str,
    n_train: Count,
    n_val: Count,
    n_test: Count,
    seed: int,
    split_file: Optional[Union[str, Path]] = None,
) -> List[str]:
    """The ids of ``split`` among ``patients``: from ``split_file`` when given, else :func:`patient_split`.

    Raises ``ValueError`` when the split file lists a patient of ``split`` that is not in ``patients``.
    """
    if split_file is None:
        return patient_split(patients, n_train, n_val, n_test, seed)[split]
    listed = read_split_file(split_file)[split]
    missing = sorted(set(listed) - set(patients))
    if missing:
        raise ValueError(f"split_file {str(split_file)!r} lists {len(missing)} '{split}' patient(s) not found: {missing[:5]}")
    return sorted(listed)


def empty_split_error(dataset: str, split: str, root: Union[str, Path], n_available: int, n_train: Count, n_val: Count, n_test: Count,
                      split_file: Optional[Union[str, Path]] = None) -> ValueError:
    """The error for a split without patients: how many patients ``root`` holds, what the counts
    became for them, and what to do."""
    where = f"the {dataset} '{split}' split of {root} has no patients: the folder holds {n_available}"
    if split_file is not None:
        return ValueError(f"{where}, and split_file {str(split_file)!r} lists none for '{split}'.")
    if n_available == 0:
        return ValueError(f"{where} (is it the dataset's folder?).")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = resolve_split_counts(n_available, n_train, n_val, n_test)
    return ValueError(f"{where}, and the counts {n_train}/{n_val}/{n_test} (train/val/test) become {counts[0]}/{counts[1]}/{counts[2]} "
                      f"for them; give a folder with more patients, smaller counts (--n_train/--n_val/--n_test), a split_file, or "
                      f"split 'all'.")

