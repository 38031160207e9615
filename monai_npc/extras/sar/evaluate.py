"""SAR co-registration metrics: NCC after registration, endpoint error, wins against phase correlation.

Both metrics are computed on the interior of the fixed grid (``margin`` pixels dropped on every
side), where the moving image has content for every method: near the border the moving date has
no data for a shifted scene, whatever the method.
"""

from __future__ import annotations

import time
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch
from torch import nn

from monai_npc.functional.phase_correlation import phase_correlation, tukey_window
from monai_npc.functional.similarity import global_ncc
from monai_npc.functional.warp import warp_image

from .preprocess import DEFAULT_SIGMA, log_amplitude, sar_normalize

__all__ = [
    "METHODS", "ncc", "endpoint_error", "interior", "preprocess_pairs", "tukey_window", "phase_correlation_shift",
    "register_sar", "evaluate_sar",
]

#: method names of :func:`evaluate_sar`, in table order
METHODS = ("none", "phase_correlation", "npc")


def interior(x: torch.Tensor, margin: int) -> torch.Tensor:
    """Drop ``margin`` pixels on every side of the last two axes."""
    if margin <= 0:
        return x
    if 2 * margin >= min(x.shape[-2:]):
        raise ValueError(f"margin {margin} leaves nothing of a {tuple(x.shape[-2:])} image.")
    return x[..., margin:-margin, margin:-margin]


def ncc(a: torch.Tensor, b: torch.Tensor, margin: int = 0, eps: float = 1e-8) -> torch.Tensor:
    """Global normalised cross-correlation (Pearson) of ``(B, 1, H, W)`` images over the interior -> ``(B,)``."""
    return global_ncc(interior(a, margin), interior(b, margin), eps).float()


def endpoint_error(ddf: torch.Tensor, true: torch.Tensor, margin: int = 0) -> torch.Tensor:
    """Mean Euclidean distance (pixels) between ``(B, 2, H, W)`` displacement fields over the interior -> ``(B,)``."""
    return interior((ddf - true).norm(dim=1), margin).flatten(1).mean(1)


def preprocess_pairs(pairs: Sequence[Mapping], sigma: float = DEFAULT_SIGMA) -> List[Dict[str, np.ndarray]]:
    """:func:`sar_normalize` both amplitudes of every pair; other keys (``ddf``...) are kept."""
    out = []
    for p in pairs:
        q = dict(p)
        q["moving"] = sar_normalize(np.asarray(p["moving"]), sigma)
        q["fixed"] = sar_normalize(np.asarray(p["fixed"]), sigma)
        out.append(q)
    return out


def phase_correlation_shift(
    moving: np.ndarray, fixed: np.ndarray, upsample_factor: int = 20, max_shift: Optional[float] = None
) -> torch.Tensor:
    """Global shift ``(2,)`` (pixels, ``moving(x + s) ~ fixed(x)``) of two amplitude images ``(H, W)``.

    The classical SAR co-registration baseline: log-amplitude, mean removed, Tukey-windowed (without
    a window the image borders, which do not move, put a peak at zero shift), then
    :func:`monai_npc.functional.phase_correlation` (upsampled-DFT sub-pixel peak), whose peak search
    ``max_shift`` (pixels per axis) bounds when given.
    """
    m, f = (torch.from_numpy(np.nan_to_num(log_amplitude(a))) for a in (moving, fixed))
    return phase_correlation(m[None, None], f[None, None], upsample_factor, window=0.25, max_shift=max_shift)[0].float()


@torch.inference_mode()
def register_sar(
    network: Optional[nn.Module], moving: np.ndarray, fixed: np.ndarray, method: str = "npc", sigma: float = DEFAULT_SIGMA
) -> torch.Tensor:
    """Displacement ``(2, H, W)`` (pixels, MONAI ``Warp`` convention) of one method for amplitude images ``(H, W)``.

    ``method``: ``"none"`` (zero field), ``"phase_correlation"`` (:func:`phase_correlation_shift`) or
    ``"npc"`` (``network`` on the :func:`~.preprocess.sar_normalize` d images, smoothing ``sigma``).
    """
    shape = tuple(np.shape(moving))
    if method == "none":
        return torch.zeros((2,) + shape)
    if method == "phase_correlation":
        return phase_correlation_shift(moving, fixed)[:, None, None].expand(2, *shape).contiguous()
    if method == "npc":
        if network is None:
            raise ValueError("register_sar: method 'npc' needs a network.")
        m = torch.from_numpy(sar_normalize(moving, sigma))[None, None]
        f = torch.from_numpy(sar_normalize(fixed, sigma))[None, None]
        return network(torch.cat([m, f], 1))[0].float()
    raise ValueError(f"method must be one of {METHODS}, got {method!r}.")


def evaluate_sar(
    network: nn.Module,
    pairs: Sequence[Mapping],
    sigma: Optional[float] = None,
    margin: int = 16,
    progress: bool = False,
) -> Dict[str, object]:
    """Evaluate no registration, global phase correlation and NPC on amplitude pairs.

    Args:
        network: the NPC model (its ``meta["sigma"]`` is the default ``sigma``).
        pairs: dicts with ``moving`` / ``fixed`` amplitudes ``(H, W)`` and optionally the true ``ddf`` ``(2, H, W)``.
        sigma: preprocessing smoothing (pixels) for NPC and for the NCC images.
        margin: border pixels left out of both metrics.
    Returns:
        ``per_pair`` (``ncc_<method>``, ``epe_<method>`` lists), ``mean``, ``wins`` (pairs where NPC's NCC
        exceeds phase correlation's, and where its endpoint error is lower), ``n_pairs``, ``margin``,
        ``sigma``, ``seconds_per_pair_npc`` and ``ddf`` (per method ``(N, 2, H, W)``, for figures).
        NCC is measured between the warped and the fixed image, both preprocessed with ``sigma``.
    """
    from tqdm.auto import tqdm

    if not pairs:
        raise ValueError("evaluate_sar: no pairs.")
    if sigma is None:
        sigma = float(getattr(network, "meta", {}).get("sigma", DEFAULT_SIGMA))
    network.eval()
    per: Dict[str, List[float]] = {}
    fields: Dict[str, List[torch.Tensor]] = {m: [] for m in METHODS}
    seconds = 0.0
    for p in tqdm(pairs, desc="evaluate", unit="pair", disable=not progress):
        moving, fixed = np.asarray(p["moving"]), np.asarray(p["fixed"])
        m = torch.from_numpy(sar_normalize(moving, sigma))[None, None]
        f = torch.from_numpy(sar_normalize(fixed, sigma))[None, None]
        true = torch.as_tensor(np.asarray(p["ddf"]), dtype=torch.float32)[None] if "ddf" in p else None
        for method in METHODS:
            t0 = time.perf_counter()
            ddf = register_sar(network, moving, fixed, method, sigma)[None]
            if method == "npc":
                seconds += time.perf_counter() - t0
            fields[method].append(ddf)
            warped = warp_image(m, ddf, "bilinear", "border")
            per.setdefault(f"ncc_{method}", []).extend(ncc(warped, f, margin).tolist())
            if true is not None:
                per.setdefault(f"epe_{method}", []).extend(endpoint_error(ddf, true, margin).tolist())
    n = len(pairs)
    mean = {k: float(np.mean(v)) for k, v in per.items()}
    wins = {"ncc": int(np.sum(np.array(per["ncc_npc"]) > np.array(per["ncc_phase_correlation"])))}
    if "epe_npc" in per:
        wins["epe"] = int(np.sum(np.array(per["epe_npc"]) < np.array(per["epe_phase_correlation"])))
    return {
        "n_pairs": n,
        "margin": margin,
        "sigma": sigma,
        "mean": mean,
        "wins": wins,
        "per_pair": per,
        "seconds_per_pair_npc": seconds / n,
        "ddf": {k: torch.cat(v) for k, v in fields.items()},
    }
