"""MONAI Label infer task: label propagation by NPC registration.

The fixed image is the one open in the viewer (``request["image"]``). The task registers a
``moving`` image onto it with :func:`monai_npc.register` (in memory) and returns, as MONAI Label
infer tasks do, one result file plus JSON params:

- the file: the moving image's label map warped onto the fixed image (``result: "label"``), or,
  when the moving image has no label map, the warped moving image (``result: "image"``); a
  temporary NIfTI file on the fixed image's grid, which the server streams back and then deletes;
- the params: the registration summary (model, Dice before/after when a fixed label is given,
  folding %, Jacobian minimum, displacement in mm, reliability, seconds, warnings) and, when the label
  prior acted, ``fused_label_file``: a second temporary NIfTI file holding ``Registration.fused_label`` (the
  prior's outlines on the slices where it agrees with the carried label; not what the transform does), which
  the caller deletes as well.

Request keys (MONAI Label merges the client's ``params`` into the request):

- ``image``: the fixed image (MONAI Label resolves the datastore id to a path);
- ``moving``: moving image, a datastore id or an absolute path on the server;
- ``moving_label`` (optional): its label map, a datastore id (the ``final`` label) or a path;
  default: the datastore's ``final`` label of ``moving`` if there is one, else the warped image
  is returned;
- ``fixed_label`` (optional): datastore id or path of the fixed image's label map (for Dice);
- ``npc_model`` (optional, overrides the task's model), ``npc_device`` (optional),
  ``npc_refine`` (optional: test-time refinement steps, ``0`` for the network alone);
  ``npc_align`` (optional: ``auto`` (default; a rigid in-plane pre-alignment when the two images
  do not share a grid), ``rigid`` or ``none``; ``monai_npc.register(align=)``);
- ``foreground`` (optional): click(s) on the heart in the open image, as MONAI Label's interactive
  clients send them (voxel indices ``[i, j]`` or ``[i, j, k]``: column, row, slice); the heart
  window of a ``"heart"`` model (``acdc``) is centred on their mean (``register(heart_centre=)``)
  instead of where the two images differ;
- ``output_dir`` (optional): an absolute path of a folder *on the server* where all the files of
  :meth:`monai_npc.Registration.save` are written (transforms for ITK/ANTs/Slicer, overview...).

The keys ``model`` and ``device`` belong to MONAI Label (``model`` is the task's name), so the task
never reads its NPC model or device from them.

A bad request raises :class:`RequestError` (an ``HTTPException`` under MONAI Label), so the
client gets a 4xx answer whose body (``{"detail": ...}``) says what is wrong; failures of the
server itself stay 500.

The task runs with or without ``monailabel`` installed (without it, a minimal stand-in base
class is used), so it can be called directly, e.g. from tests or scripts.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional, Tuple

from ..common import MODEL_LABELS, NPCInferTask, RequestError

__all__ = ["MODEL_LABELS", "NPCRegistration", "RequestError", "heart_centre"]


def heart_centre(foreground: Any) -> Optional[Tuple[float, float]]:
    """``(row, col)`` of the mean of MONAI Label ``foreground`` clicks (``[[i, j(, k)], ...]`` voxel
    indices: column, row, slice), or ``None`` without clicks. Raises :class:`RequestError` (400) for
    anything else."""
    if foreground is None or (isinstance(foreground, (list, tuple)) and len(foreground) == 0):
        return None
    try:
        points = [[float(v) for v in p] for p in foreground]
    except (TypeError, ValueError):
        points = []
    if not points or any(len(p) not in (2, 3) or any(v != v for v in p) for p in points):
        raise RequestError(400, f"foreground must be a list of clicks [i, j] or [i, j, k] (voxel indices), got {foreground!r}.")
    return sum(p[1] for p in points) / len(points), sum(p[0] for p in points) / len(points)


class NPCRegistration(NPCInferTask):
    """Propagate a moving image's label map onto the open (fixed) image with :func:`monai_npc.register`.

    Args: those of :class:`~lib.common.NPCInferTask` (``model``, ``labels``, ``datastore``, ``output_root``,
    ``device``, ``description``).
    """

    what = "NPC registration"
    task_dimension = 2
    default_description = "Label propagation by Neural Phase Correlation registration (moving label -> open image)"

    def request_config(self) -> Dict[str, Any]:
        return {"moving": "", "moving_label": "", "fixed_label": "", "npc_refine": "", "npc_device": "", "npc_align": ""}

    # ------------------------------------------------------------------------------------ call

    def __call__(self, request: Dict[str, Any]) -> Tuple[Optional[str], Dict[str, Any]]:
        """Register ``request["moving"]`` onto ``request["image"]``; returns ``(result file, params)``.

        The result file is a new temporary NIfTI file (the caller, e.g. the MONAI Label server,
        deletes it); ``params`` is JSON-serialisable. Raises :class:`RequestError` for bad requests.
        """
        import monai_npc
        from monai_npc.apps.registration.align import check_align
        from monai_npc.apps.registration.result import compact_label

        t0 = time.perf_counter()
        fixed = self._image(request.get("image"), "image")
        moving_id = request.get("moving")
        moving = self._image(moving_id, "moving")
        moving_label = self._label(request.get("moving_label"), "moving_label", str(moving_id))
        fixed_label = self._label(request.get("fixed_label"), "fixed_label")
        net, name, device = self._network(request)  # npc_model / npc_device / npc_refine, not MONAI Label's keys
        centre = heart_centre(request.get("foreground"))
        try:
            align = check_align(str(request.get("npc_align") or "auto"), "npc_align")  # sent empty: not given
        except ValueError as err:
            raise RequestError(400, str(err)) from None
        try:
            reg = monai_npc.register(moving, fixed, model=net, moving_label=moving_label, fixed_label=fixed_label,
                                     device=device, model_name=name, heart_centre=centre, align=align)
        except FileNotFoundError as err:
            raise RequestError(404, str(err)) from None
        except (ValueError, TypeError) as err:  # unreadable files, 2-D vs 3-D, no overlap, label off its grid...
            raise RequestError(422, str(err)) from None

        fused = reg.fused_label  # the prior's outlines where it agrees with the transform's label (None: it did not act)
        summary = dict(reg.summary)  # JSON-ready: what summary.json holds
        if request.get("output_dir"):
            if not os.path.isabs(str(request["output_dir"])):
                raise RequestError(400, f"output_dir must be an absolute path on the server, got {request['output_dir']!r}.")
            try:
                saved = reg.save(str(request["output_dir"]))
            except ValueError as err:
                raise RequestError(400, f"output_dir: {err}") from None
            summary["output_dir"] = str(request["output_dir"])
            summary["outputs"] = saved["outputs"]
        result_image = compact_label(reg.warped_label) if reg.warped_label is not None else reg.warped  # uint8, as warped_label.nii.gz
        label_file = self._write_result(result_image)
        if fused is not None:  # an estimate of its own, not the transform's label: a second file, named in the params
            summary["fused_label_file"] = self._write_result(compact_label(fused))
        summary.update(
            result="label" if reg.warped_label is not None else "image",
            label_names=self.labels,
            seconds_request=time.perf_counter() - t0,
        )
        return label_file, summary
