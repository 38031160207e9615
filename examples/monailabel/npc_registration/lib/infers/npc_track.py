"""MONAI Label infer task: a label carried through every frame of a 4-D cine (:func:`monai_npc.track`).

The open image (``request["image"]``) is a 4-D short-axis cine (NIfTI ``(X, Y, Z, T)``, e.g. ACDC's
``patientNNN_4d.nii.gz``). The request gives the label map of one frame; the task tracks it through
every frame and returns, as MONAI Label infer tasks do, one result file plus JSON params:

- the file: the tracked labels of every frame, a temporary 4-D NIfTI file with the cine's geometry
  (size, spacing, origin, direction), which the server streams back and then deletes;
- the params: the cardiac function (``function``: ED/ES frames found from the LV volume curve,
  LV/RV EDV, ESV, SV in mL, EF in %, LV mass in g), ``volumes_ml`` per frame (``lv``, ``rv``,
  ``myo``), ``label_frame`` (and where it came from), ``scheme``, ``drift_dice``, ``model``,
  ``info_cfg`` (ED/ES of an ``Info.cfg`` beside the cine, when there is one), seconds, and with
  ``strain`` the myocardial strain of the motion (``strain``: peak circumferential and radial strain in
  %, their frames, per AHA segment; :func:`monai_npc.strain`).

Request keys (MONAI Label merges the client's ``params`` into the request):

- ``image``: the cine (MONAI Label resolves the datastore id to a path);
- ``label``: the label map (0 bg, 1 RV, 2 myocardium, 3 LV, as ACDC) of frame ``label_frame``,
  3-D on the frame grid or 4-D (its frame ``label_frame`` is used): the file uploaded with the
  request (MONAI Label's ``label`` form field puts its path here), a path on the server or the id
  of a ``final`` label in the datastore; default: the datastore's ``final`` label of the cine;
- ``label_frame`` (optional, 0-based): default, as ``monai-npc track``, with an ACDC ``Info.cfg`` beside
  the cine the frame an ACDC label file names (``patient090_frame11_gt.nii.gz``: 10; not for an
  uploaded label, whose name the server does not keep), else that ``Info.cfg``'s ED (``ED: n`` is frame
  ``n - 1``), else 0 (``label_frame_from`` in the answer says which);
- ``scheme`` (optional): ``direct`` (default: the reference frame registered onto every frame with the weights'
  register settings, the label and their label prior), ``anchored``, ``sequential``, ``average`` or ``bidirectional``;
- ``structures`` (optional): which label value is which structure, ``"lv=1,myo=2,rv=3"`` (M&Ms) or a JSON object
  ``{"lv": 1, "myo": 2, "rv": 3}``: the volumes, EF, basal rules and strain read them (the tracked labels keep the
  label's values); default: the app's ``--conf npc_structures`` (same form), else as ``monai-npc track``: the label
  prior's naming of the labelled frame, else the model's training labels (``registration_settings.structures.from``
  in the answer says which);
- ``strain`` (optional, default true): return the myocardial strain in ``params``;
- ``npc_model``, ``npc_device``, ``npc_refine`` (optional): as for the registration task; for the chained
  schemes shipped or saved NPC weights get ``monai_npc.track``'s settings for consecutive frames (4 ODE
  steps; 10 refinement steps unless ``npc_refine`` is given). For ``anchored``, ``npc_refine`` is the
  steps of the correction against the reference frame (default 6,
  :data:`monai_npc.apps.tracking.anchor.ANCHOR_ITERATIONS`) and the consecutive frames get the network alone.

Bad requests raise :class:`~lib.common.RequestError` (HTTP 4xx with a ``detail`` saying what is
wrong): 400 for a bad parameter, a missing label or a ``label_frame`` out of range, 404 for an
unknown image, label or ``npc_model``, 422 for a cine or label that cannot be tracked (unreadable
file, a 3-D image instead of a 4-D cine, a label off the frame grid).
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, Optional, Tuple

from ..common import NPCInferTask, RequestError, whole_number

__all__ = ["NPCTrack"]


class NPCTrack(NPCInferTask):
    """Carry the label of one frame of the open 4-D cine to every frame with :func:`monai_npc.track`.

    Args: ``model`` and ``scheme`` (the default tracking scheme, :data:`monai_npc.apps.tracking.DEFAULT_SCHEME` when
    ``None``); ``structures``: the default label numbering of requests (``"lv=1,myo=2,rv=3"`` or a mapping; ``None``:
    as ``monai_npc.track`` finds it); ``options``: the other arguments of :class:`~lib.common.NPCInferTask` (``labels``,
    ``datastore``, ``output_root``, ``device``, ``description``).

    Raises:
        ValueError: ``structures`` is not a numbering of the RV, myocardium and LV.
    """

    what = "NPC tracking"
    task_dimension = 3
    default_description = "Label propagation through a 4-D cine by NPC registration (one labelled frame -> every frame; volumes, EF)"

    def __init__(self, model: str = "acdc", scheme: Optional[str] = None, structures: Any = None, **options: Any) -> None:
        from monai_npc.apps.tracking.schemes import DEFAULT_SCHEME

        self.scheme = scheme or DEFAULT_SCHEME
        try:
            self.structures = _numbering(structures)
        except ValueError as err:
            raise ValueError(f"--conf npc_structures: {err}") from None
        super().__init__(model, **options)

    def request_config(self) -> Dict[str, Any]:
        return {"label": "", "label_frame": "", "scheme": self.scheme, "structures": "", "npc_refine": "", "npc_device": ""}

    def _structures(self, value: Any) -> Optional[Dict[str, int]]:
        """The request's ``structures`` (else the task's default) as ``{name: value}``; 400 when it is not a numbering."""
        try:
            return _numbering(value) or self.structures
        except ValueError as err:
            raise RequestError(400, f"structures: {err}") from None

    def _scheme(self, value: Any) -> str:
        from monai_npc.apps.tracking.schemes import SCHEMES

        scheme = str(value or self.scheme)
        if scheme not in SCHEMES:
            raise RequestError(400, f"scheme {scheme!r} is not a tracking scheme; use one of {', '.join(SCHEMES)}.")
        return scheme

    def _cine(self, path: str, image_id: Any):
        """The cine at ``path`` (:class:`monai_npc.apps.tracking.cine.Cine`); 422 when it is unreadable or not 4-D."""
        from monai_npc.apps.tracking.cine import read_cine

        try:
            return read_cine(path, what=f"image {image_id!r}:" if image_id else "image")
        except FileNotFoundError as err:
            raise RequestError(404, str(err)) from None
        except (ValueError, TypeError) as err:  # unreadable, 3-D instead of 4-D, frames off one grid
            raise RequestError(422, f"{err} NPC tracking needs a 4-D cine as the open image.") from None

    # ------------------------------------------------------------------------------------ call

    def __call__(self, request: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
        """Track ``request["label"]`` (frame ``label_frame``) through the cine ``request["image"]``;
        returns ``(4-D label file, params)``.

        The file is a new temporary NIfTI file (the caller, e.g. the MONAI Label server, deletes
        it); ``params`` is JSON-serialisable. Raises :class:`RequestError` for bad requests.
        """
        from monai_npc.apps.tracking.cine import info_frames, label_frame
        from monai_npc.apps.tracking.track import track

        t0 = time.perf_counter()
        image_id = request.get("npc_image_id")  # the datastore id of the cine (set by the app), for its final label
        cine_path = self._image(request.get("image"), "image")
        scheme = self._scheme(request.get("scheme"))
        structures = self._structures(request.get("structures"))
        frame = whole_number(request.get("label_frame"), "label_frame", "the 0-based frame of the label")
        label = self._label(request.get("label"), "label", str(image_id) if image_id else None)
        if label is None:
            raise RequestError(400, "NPC tracking needs the label map of one frame of the cine: upload it with the request "
                                    "(form field 'label') or name a final label of the datastore in the parameter 'label'.")
        anchored = scheme == "anchored"  # the network alone between consecutive frames, npc_refine steps against the reference
        refine = whole_number(request.get("npc_refine"), "npc_refine", "refinement steps") if anchored else None
        net, name, device = self._network(dict(request, npc_refine=0) if anchored else request, tracking=scheme not in ("direct", "average"))
        cine = self._cine(cine_path, image_id)
        info = info_frames(cine_path)
        frame, how = label_frame(cine_path, label, frame)  # as monai-npc track: the request's, an ACDC label name's, Info.cfg's ED, 0
        source = "request" if how == "given" else how
        if frame >= len(cine):
            raise RequestError(400, f"label_frame {frame} (from the {source}) is out of range: the cine {image_id or cine_path!r} "
                                    f"has {len(cine)} frames (label_frame 0..{len(cine) - 1}, 0-based).")
        try:
            result = track(cine, label, frame, scheme, model=net, model_name=name, device=device, progress=False, refine_iterations=refine,
                           structures=structures)
        except FileNotFoundError as err:
            raise RequestError(404, str(err)) from None
        except (ValueError, TypeError) as err:  # unreadable label, label off the frame grid, wrong shape...
            raise RequestError(422, str(err)) from None

        label_file = self._write_result(result.label_image)
        params = result.summary
        if request.get("strain", True) not in (False, "false", "False", 0, "0"):
            from monai_npc.apps.tracking.outputs import strain_peaks

            params["strain"] = strain_peaks(result.strain)
            params["strain"]["segments"] = result.strain.summary["segments"]
        if info:
            found = result.function
            params["info_cfg"] = dict(info, ed_matches=info["ed"] == found["ed_frame"], es_matches=info["es"] == found["es_frame"])
        size = result.label_image.GetSize()
        params.update(
            cine=str(image_id or cine_path), result="label", model=name, label_frame=frame, label_frame_from=source,
            label_names=self.labels, size=list(size), seconds_request=time.perf_counter() - t0,
        )
        return label_file, params


def _numbering(value: Any) -> Optional[Dict[str, int]]:
    """``"lv=1,myo=2,rv=3"``, its JSON object form or a mapping -> ``{name: value}`` checked as ``monai_npc.track`` checks
    it; ``None`` or ``""`` -> ``None``. Raises ``ValueError`` otherwise."""
    from monai_npc.apps.tracking.structures import check_structures, parse_structures

    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = value.strip()
        value = json.loads(text) if text.startswith("{") else parse_structures(text)
    return check_structures(value)
