"""The label prior's part in a registration: which prior and weight ``register`` uses, whether it may act
(its segmentation of the moving image must agree with the moving label), and its class probabilities
of the fixed slices for the refinement's label-guided term (:mod:`monai_npc.functional.label_prior`)."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import torch
from torch import nn

from monai_npc.functional import contrast_polarity, dice_by_value, warp_image
from monai_npc.functional.stack_field import warp_stack_slices

__all__ = ["PRIOR_CHECK_SLICES", "PRIOR_IMAGES_AGREEMENT", "PRIOR_MIN_STRUCTURE_VOXELS", "PRIOR_MIN_CHECK_VOXELS", "PRIOR_MIN_AGREEMENT", "PRIOR_MIN_FIXED_AGREEMENT", "PRIOR_MIN_GAP",
           "prior_agreement", "value_map", "relabel", "label_structures", "fixed_prior", "moving_prior", "fill_unlabelled",
           "carried_prior_check"]


#: the label prior acts only when its segmentation of the moving image agrees with the moving label at least this much
#: (mean Dice over the label's values): ACDC labels on their own frames agree far above it; a map of another
#: convention (M&Ms: LV 1, RV 3) or of other anatomy falls far below, and the prior would pull it astray
#: (docs/design_notes.md, "apps/registration/label_prior.py")
PRIOR_MIN_AGREEMENT = 0.5


#: the agreement is measured on this many moving slices (those with the most label)
PRIOR_CHECK_SLICES = 3


#: ... and only when its segmentation of the fixed slices overlaps the moving label (unregistered: the two frames of one
#: heart) at least this much (mean Dice over the label's values; calibrated on the validation patients, docs/design_notes.md)
PRIOR_MIN_FIXED_AGREEMENT = 0.25
#: ... holding at least this many labelled voxels of the model grid together (else it cannot be judged and does not act)
PRIOR_MIN_CHECK_VOXELS = 200


#: ... and only when the label carried by the network's own field (before the refinement) disagrees with its segmentation
#: of the fixed image by at least this much more than the prior disagrees with the moving label on the moving image
#: (mean Dice): where the transform already agrees with the prior about as well as the prior agrees with an expert's
#: label, the prior cannot tell the transform's errors from its own and would pull the label towards its own outlines
#: (calibrated on the validation patients and the quickstart phantoms, docs/design_notes.md)
PRIOR_MIN_GAP = 0.04


#: without a moving label (:func:`moving_prior`), the agreement with an expert's label the prior is taken to have on the
#: moving image, for :func:`carried_prior_check`: the lower quartile of its agreement with the expert on the 52
#: validation pairs (0.923; median 0.939), so that it stands aside where the network's field already carries its
#: segmentation of the moving image onto that of the fixed one with a mean Dice above 0.88 (calibrated on the
#: validation patients and the quickstart phantoms, docs/design_notes.md)
PRIOR_IMAGES_AGREEMENT = 0.92
#: ... and only when its segmentation of the moving slices holds every structure it knows (at least this many model-grid
#: voxels of each): on a short-axis stack it finds RV, myocardium and LV under every acquisition shift of the validation
#: suite, on an echocardiogram it finds no LV on most frames, and its outlines there would pull the field astray
#: (docs/design_notes.md, "Images only: the prior's segmentation of the moving image")
PRIOR_MIN_STRUCTURE_VOXELS = 20


def prior_agreement(probabilities: torch.Tensor, label: torch.Tensor) -> Optional[float]:
    """Mean Dice, over the values ``1 .. K-1`` present in ``label`` ``(N, 1, h, w)``, of the most likely value of
    ``probabilities`` ``(N, K, h, w)`` against ``label``; values ``>= K`` (structures the prior does not know) are
    left out; ``None`` when ``label`` holds none of ``1 .. K-1``."""
    seen = probabilities.max(1).indices.cpu().numpy()  # argmax's value (the first largest), faster on the CPU
    lab = label[:, 0].round().to(torch.int64).cpu().numpy()
    values = [int(v) for v in np.unique(lab) if 0 < v < probabilities.shape[1]]
    return float(np.mean(list(dice_by_value(seen, lab, values).values()))) if values else None


def value_map(probabilities: torch.Tensor, label: torch.Tensor) -> Optional[Dict[int, int]]:
    """``{label value: the prior's value}`` for a label of another convention (M&Ms: LV 1, RV 3; or 10 / 20 / 30): each
    value > 0 of ``label`` ``(N, 1, h, w)`` named by the structure ``1 .. K-1`` of the most likely values of
    ``probabilities`` ``(N, K, h, w)`` it overlaps best (Dice), when every value overlaps one and no two values share
    it; ``None`` otherwise, or when the values already are the prior's. The renamed label is then judged as any label
    (:func:`prior_agreement` at least :data:`PRIOR_MIN_AGREEMENT`), so a label of other anatomy still does not pass."""
    seen = probabilities.max(1).indices.cpu().numpy()
    lab = label[:, 0].round().to(torch.int64).cpu().numpy()
    mapping: Dict[int, int] = {}
    for v in (int(v) for v in np.unique(lab) if v > 0):
        mine = lab == v
        dice = [2 * float((mine & (seen == k)).sum()) / max(float(mine.sum() + (seen == k).sum()), 1.0)
                for k in range(1, probabilities.shape[1])]
        if max(dice, default=0.0) <= 0.0:
            return None
        mapping[v] = 1 + int(np.argmax(dice))
    if not mapping or len(set(mapping.values())) < len(mapping) or all(k == v for k, v in mapping.items()):
        return None
    return mapping


def relabel(label: torch.Tensor, mapping: Dict[int, int], num_classes: int) -> torch.Tensor:
    """``label`` with its values renamed by ``mapping`` (:func:`value_map`); a value > 0 it does not name becomes one the
    prior does not know (``num_classes`` + the value), so that it cannot be taken for one of the prior's structures."""
    out = torch.where(label > 0, label + num_classes, label)
    for v, k in mapping.items():
        out = torch.where(label == v, torch.full_like(label, float(k)), out)
    return out


def label_structures(label_prior: nn.Module, mapping: Optional[Dict[int, int]]) -> Dict[str, int]:
    """``{structure name: its value in the moving label}`` by the prior's names (``meta["labels"]``, e.g. ``"lv"``): the
    prior's own values, or through ``mapping`` (:func:`value_map`: label value -> the prior's) those of a label of
    another convention, only the structures it names. Values the prior has no name for are left out."""
    names = _prior_names(label_prior)
    pairs = mapping.items() if mapping else ((k, k) for k in range(1, label_prior.num_classes))
    return {str(names[str(k)]): int(v) for v, k in pairs if str(k) in names}


def fixed_prior(label_prior: nn.Module, moving: torch.Tensor, fixed: torch.Tensor, label: torch.Tensor
                ) -> Tuple[Optional[torch.Tensor], Optional[float], Optional[float], Optional[str], Optional[Dict[int, int]]]:
    """``(class probabilities (N, K, h, w) of the fixed slices or None, agreement on the moving image, overlap on the
    fixed image, why not, how the label's values name the prior's or None)`` for the label term.

    First on the moving slices: a label map of another convention (LV = 1, say) would be pulled onto the
    wrong structures, so the prior acts only where it agrees with the moving label on its own image
    (:func:`prior_agreement` on the :data:`PRIOR_CHECK_SLICES` slices with the most label; each costs a
    U-Net pass), or where the label's values name its structures one for one (:func:`value_map`; the label term then
    steers the label with the prior's values, :func:`relabel`). The fixed slices are segmented where the moving label has something (the term's
    region is the label's); elsewhere the probabilities are uniform. Their segmentation must overlap the moving
    label there (:data:`PRIOR_MIN_FIXED_AGREEMENT`): a fixed image unlike the prior's training data is segmented
    wrongly even when the moving one is not; a fixed image whose contrast is the moving one's inverted
    (:func:`~monai_npc.functional.polarity.contrast_polarity` on most labelled slices) is not segmented at all.
    ``(None, None, None, None, None)``: no labelled slice, nothing for the prior to steer; otherwise ``why not`` says
    why it does not act.
    """
    area = (label > 0).flatten(1).sum(1).cpu().numpy()
    labelled = np.flatnonzero(area > 0)
    if labelled.size == 0:
        return None, None, None, None, None
    grid_note = _grid_note(moving)
    if grid_note:
        return None, None, None, grid_note, None
    check = np.argsort(-area, kind="stable")[: min(PRIOR_CHECK_SLICES, labelled.size)]
    if area[check].sum() < PRIOR_MIN_CHECK_VOXELS:
        return None, None, None, (f"too little of the moving label lies in the model grid to check the prior against it "
                                  f"({int(area[check].sum())} voxels on its fullest slices, at least {PRIOR_MIN_CHECK_VOXELS} needed)"), None
    seen = label_prior.predict(moving[check])
    agreement = prior_agreement(seen, label[check])
    mapping = value_map(seen, label[check]) if agreement is None or agreement < PRIOR_MIN_AGREEMENT else None
    if mapping is not None:
        label = relabel(label, mapping, label_prior.num_classes)
        agreement = prior_agreement(seen, label[check])
    known = label_prior.num_classes - 1
    if agreement is None:
        return None, None, None, f"the moving label has none of the values it knows (1-{known})", None
    if agreement < PRIOR_MIN_AGREEMENT:
        return None, agreement, None, (f"its segmentation of the moving image does not match the moving label (mean Dice {agreement:.2f} "
                                       f"over the values 1-{known}, at least {PRIOR_MIN_AGREEMENT} needed, and its values do not name "
                                       f"the prior's structures one for one): the label's values may follow another convention than "
                                       f"the prior's ({_named_values(label_prior)}) or show other anatomy, or the moving image is "
                                       "unlike the images it was trained on (another modality or sequence)"), None
    prior, on_fixed, why = _on_fixed(label_prior, moving, fixed, label, labelled, f"it agrees {agreement:.2f} with the label on the moving image")
    return prior, agreement, on_fixed, why, mapping


def moving_prior(label_prior: nn.Module, moving: torch.Tensor, fixed: torch.Tensor, whole: bool = True
                 ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor], Optional[float], Optional[str]]:
    """Without a moving label: ``(the prior's segmentation of the moving slices (N, 1, h, w) float or None, class
    probabilities (N, K, h, w) of the fixed slices or None, overlap on the fixed image, why not)`` for the label term.

    The label prior segments the moving slices (their most likely value) and that segmentation stands in for a moving
    label: the label-guided term models the moving image's intensities under it and the prior's view of the fixed
    slices scores where the field carries it. No expert's label to check the prior against, so it acts under the fixed
    side's checks of :func:`fixed_prior` (contrast not inverted, its segmentations of the two frames overlapping
    before registration by at least :data:`PRIOR_MIN_FIXED_AGREEMENT`), and then :func:`carried_prior_check` with
    :data:`PRIOR_IMAGES_AGREEMENT` (the caller's, on the network's field). ``whole``: the moving slices are the whole
    moving image, and its segmentation of them must hold every structure it knows (:data:`PRIOR_MIN_STRUCTURE_VOXELS`
    of each; an image of another modality or view lacks some); ``False``: some slices of an image whose label already
    vouched for the prior (:func:`fill_unlabelled`). ``(None, None, None, None)``: it found no structure on the moving
    slices; otherwise ``why not`` says why it does not act (then both tensors are ``None``).
    """
    grid_note = _grid_note(moving)
    if grid_note:
        return None, None, None, grid_note
    label = label_prior.predict(moving).max(1, keepdim=True).indices.to(device=moving.device, dtype=torch.float32)
    labelled = np.flatnonzero((label > 0).flatten(1).any(1).cpu().numpy())
    if labelled.size == 0:
        return None, None, None, None
    missing = [k for k in range(1, label_prior.num_classes) if int((label == k).sum()) < PRIOR_MIN_STRUCTURE_VOXELS] if whole else []
    if missing:
        names = _prior_names(label_prior)
        return None, None, None, (f"its segmentation of the moving image lacks {', '.join(names.get(str(k), str(k)) for k in missing)} "
                                  f"(fewer than {PRIOR_MIN_STRUCTURE_VOXELS} voxels): the moving image is unlike the images it was "
                                  "trained on (another modality, view or sequence)")
    prior, on_fixed, why = _on_fixed(label_prior, moving, fixed, label, labelled, "no moving label to check it against")
    return (None if why else label), prior, on_fixed, why


def fill_unlabelled(label_prior: nn.Module, moving: torch.Tensor, fixed: torch.Tensor, label: torch.Tensor, prior: torch.Tensor
                    ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(label, prior)`` for the label term with the slices the moving label leaves empty steered as images only: there
    the prior's segmentation of the moving slice (:func:`moving_prior`, under its checks), of the structures the label
    names, takes the label's place, and its class probabilities of the fixed slice the prior's. ``moving``, ``fixed``,
    ``label`` ``(N, 1, h, w)`` (the label in the prior's values), ``prior`` ``(N, K, h, w)`` (:func:`fixed_prior`);
    returned as given where the prior finds nothing or may not act. A label drawn on a few slices then steers the
    others as no label would, instead of leaving them to the images alone; the empty slices of a whole label (beyond
    the heart) stay empty where the prior finds none of its structures there."""
    empty = ~(label > 0).flatten(1).any(1)
    named = [v for v in torch.unique(label).tolist() if 0 < v < label_prior.num_classes]
    if not bool(empty.any()) or not named:
        return label, prior
    seg, seen, _, why = moving_prior(label_prior, moving[empty], fixed[empty], whole=False)
    if seg is None or why:
        return label, prior
    label, prior = label.clone(), prior.clone()
    label[empty] = torch.where(torch.isin(seg, torch.tensor(named, dtype=seg.dtype, device=seg.device)), seg, torch.zeros_like(seg))
    prior[empty] = seen.to(prior.dtype)
    return label, prior


def _grid_note(moving: torch.Tensor) -> Optional[str]:
    """Why the prior cannot segment slices ``(N, 1, h, w)`` of this model grid, or ``None`` when it can."""
    h, w = moving.shape[2:]
    return f"the model grid ({h} x {w}) is not a multiple of 16 on each side, which its U-Net needs" if h % 16 or w % 16 else None


def _on_fixed(label_prior: nn.Module, moving: torch.Tensor, fixed: torch.Tensor, label: torch.Tensor, labelled: np.ndarray,
              checked: str) -> Tuple[Optional[torch.Tensor], Optional[float], Optional[str]]:
    """The fixed side of :func:`fixed_prior` and :func:`moving_prior`: ``(class probabilities (N, K, h, w) of the fixed
    slices, uniform off the ``labelled`` ones, or None; overlap of its segmentation of them with ``label`` before
    registration; why not)``; ``checked``: what the moving side's check found, for the message."""
    if float(contrast_polarity(moving[labelled], fixed[labelled]).mean()) < 0:
        return None, None, ("the fixed image's contrast is the moving one's turned upside down (on most of the labelled "
                            "slices): it is unlike the images the prior was trained on")
    seen = label_prior.predict(fixed[labelled]).to(moving.device)
    # the two frames show one heart, so the prior's view of the fixed image must overlap the moving label where it lies
    # (before any registration); a fixed image unlike the prior's training data (another contrast, artefacts) gives a
    # segmentation that does not, and the prior would pull the label astray
    on_fixed = prior_agreement(seen, label[labelled])
    if on_fixed is None or on_fixed < PRIOR_MIN_FIXED_AGREEMENT:
        return None, on_fixed, (f"its segmentation of the fixed image does not overlap the moving label (mean Dice "
                                f"{0.0 if on_fixed is None else on_fixed:.2f} before registration, at least {PRIOR_MIN_FIXED_AGREEMENT} "
                                f"needed; {checked}): the fixed image may be unlike the images it was trained on (another "
                                "contrast or sequence, artefacts)")
    prior = torch.full((moving.shape[0], label_prior.num_classes) + tuple(moving.shape[2:]), 1.0 / label_prior.num_classes,
                       device=moving.device)
    prior[labelled] = seen
    return prior, on_fixed, None


def carried_prior_check(prior: torch.Tensor, agreement: float, label: torch.Tensor, ddf: torch.Tensor
                        ) -> Tuple[Optional[float], Optional[str]]:
    """``(agreement of the carried label with the prior on the fixed slices, why the prior stands aside or None)``.

    Args:
        prior: ``(N, K, h, w)`` class probabilities of the fixed slices (:func:`fixed_prior`).
        agreement: the prior against the moving label on the moving image (mean Dice, :func:`fixed_prior`).
        label: ``(N, 1, h, w)`` moving label.
        ddf: ``(N, 2, h, w)`` the network's field (voxels), before the refinement the prior would steer; a stack network's
            ``(N, 3, h, w)`` (one stack, channel 0 through the plane in slices) carries the label in 3-D
            (:func:`~monai_npc.functional.stack_field.warp_stack_slices`, nearest).

    The prior helps where the transform's label is further from its segmentation of the fixed image than the prior is
    from an expert's label (its error on the moving image): it acts only when ``agreement - carried``
    is at least :data:`PRIOR_MIN_GAP`.
    """
    labelled = (label > 0).flatten(1).any(1)
    if not bool(labelled.any()):
        return None, None
    if ddf.shape[1] == 3:  # one stack's 3-D field: the label carried through the plane too
        group = torch.zeros(ddf.shape[0], dtype=torch.int64, device=ddf.device)
        carried = warp_stack_slices(label.to(ddf.dtype), ddf, group, 1, "nearest", "zeros")[labelled]
    else:
        carried = warp_image(label[labelled].to(ddf.dtype), ddf[labelled], "nearest", "zeros")
    on_carried = prior_agreement(prior[labelled], carried)
    if on_carried is None or agreement - on_carried >= PRIOR_MIN_GAP:
        return on_carried, None
    return on_carried, (f"the label carried by the network's field already agrees with its segmentation of the fixed image "
                        f"(mean Dice {on_carried:.2f}) about as well as it agrees with an expert's label ({agreement:.2f}: with "
                        "the moving label on the moving image, or without one the value taken for it, PRIOR_IMAGES_AGREEMENT; "
                        f"it acts when the first is at least {PRIOR_MIN_GAP} lower): it could not correct the transform, only "
                        "pull the label towards its own outlines")


def _prior_names(label_prior: nn.Module) -> Dict[str, str]:
    """``{"1": "rv", ...}``: the prior's names of its values (``meta["labels"]``; ``{}`` when it has none)."""
    return (getattr(label_prior, "meta", None) or {}).get("labels") or {}


def _named_values(label_prior: nn.Module) -> str:
    """``"1 rv, 2 myo, 3 lv"`` from the prior's ``meta["labels"]`` (its values without names when it has none)."""
    names = _prior_names(label_prior)
    return ", ".join(f"{v} {names.get(str(v), '?')}" for v in range(1, label_prior.num_classes))
