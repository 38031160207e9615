"""``register``'s first step: what the caller handed in, read as SimpleITK images and checked against each other."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import SimpleITK as sitk

from monai_npc.interop.checks import check_inputs, input_warnings
from monai_npc.interop.images import check_label, check_same_dims
from monai_npc.interop.inputs import ImageLike, as_image, describe_input, in_pixel_space

__all__ = ["Inputs", "read_inputs"]


@dataclass
class Inputs:
    """The images of one registration (float32 SimpleITK images, mm, LPS; label maps on their image's grid or ``None``)
    and what the caller passed (:meth:`name` describes each for messages and the summary)."""

    moving: sitk.Image
    fixed: sitk.Image
    moving_label: Optional[sitk.Image]
    fixed_label: Optional[sitk.Image]
    #: what the caller passed: ``moving``, ``fixed``, ``moving_label``, ``fixed_label``, ``moving_select``, ``fixed_select``,
    #: ``pixel_space``
    given: Dict[str, Any] = field(default_factory=dict)
    #: warnings about the inputs (already given)
    notes: List[str] = field(default_factory=list)

    def name(self, key: str) -> Optional[str]:
        """The input ``key`` as messages and ``summary.json`` name it (a path, or a description of an in-memory image)."""
        return describe_input(self.given.get(key))


def read_inputs(moving: ImageLike, fixed: ImageLike, moving_label: Optional[ImageLike], fixed_label: Optional[ImageLike],
                spacing: Optional[Sequence[float]], moving_select: Any, fixed_select: Any, pixel_space: bool, size: int,
                keep_aspect: bool) -> Inputs:
    """Read the images and label maps (``register``'s arguments of the same names) and check them for a model grid of
    ``size`` (:func:`monai_npc.interop.checks.check_inputs`); what is usable but doubtful is warned about (``notes``).

    Raises:
        FileNotFoundError, ValueError: unreadable inputs, labels off their image's grid, images of different
            dimensionality, a whole fixed stack against a single moving slice, images too small for the model.
    """
    fixed_img = as_image(fixed, "fixed image", spacing, fixed_select)
    moving_img = as_image(moving, "moving image", spacing, moving_select)
    fixed_lab = moving_lab = None
    if fixed_label is not None:
        fixed_lab = check_label(as_image(fixed_label, "fixed label", spacing), fixed_img,
                                f"fixed label {describe_input(fixed_label)}", f"its image {describe_input(fixed)}")
    if moving_label is not None:
        moving_lab = check_label(as_image(moving_label, "moving label", spacing), moving_img,
                                 f"moving label {describe_input(moving_label)}", f"its image {describe_input(moving)}")
    if pixel_space:
        moving_img = in_pixel_space(moving_img, fixed_img, f"moving image {describe_input(moving)}")
        if moving_lab is not None:
            moving_lab = in_pixel_space(moving_lab, fixed_img, f"moving label {describe_input(moving_label)}")
    check_same_dims(moving_img, fixed_img, describe_input(moving), describe_input(fixed))
    _check_stack_against_slice(moving_img, fixed_img, moving, fixed, moving_select)
    check_inputs(moving_img, fixed_img, describe_input(moving), describe_input(fixed), size, keep_aspect)
    inputs = Inputs(moving_img, fixed_img, moving_lab, fixed_lab,
                    {"moving": moving, "fixed": fixed, "moving_label": moving_label, "fixed_label": fixed_label,
                     "moving_select": moving_select, "fixed_select": fixed_select, "pixel_space": pixel_space})
    inputs.notes = input_warnings(moving_img, fixed_img, inputs.name("moving"), inputs.name("fixed"), moving_lab, fixed_lab,
                                  f"moving label {inputs.name('moving_label')}", f"fixed label {inputs.name('fixed_label')}")
    for note in inputs.notes:
        warnings.warn(note, RuntimeWarning, stacklevel=3)
    return inputs


def _check_stack_against_slice(moving_img: sitk.Image, fixed_img: sitk.Image, moving: ImageLike, fixed: ImageLike, moving_select: Any) -> None:
    if not (fixed_img.GetDimension() == 3 and fixed_img.GetSize()[2] > 1 and moving_img.GetSize()[2] == 1):
        return
    from monai_npc.data.io import parse_select

    why = ""
    if "frame" in parse_select(moving_select):  # frame=K of a 3-D file takes its slice K (a 2-D + time sequence)
        why = (f" (moving_select / --moving-select {moving_select!r} took one slice of it: frame=K picks a frame of a 4-D file or "
               "a slice of a 3-D one; leave it out to register the whole stack)")
    raise ValueError(
        f"fixed image {describe_input(fixed)} has {fixed_img.GetSize()[2]} slices but moving image {describe_input(moving)} has one{why}."
    )
