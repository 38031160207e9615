"""The progress bar of a tracking run."""

from __future__ import annotations

__all__ = ["progress_bar"]


def progress_bar(progress: bool, total: int, desc: str):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="frame")
