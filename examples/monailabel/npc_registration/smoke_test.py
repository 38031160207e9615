"""End-to-end check of the MONAI Label app: a real server, a real registration, a real cine tracking, malformed requests.

Run it in the MONAI Label environment (README.md beside this file), from the repository root::

    python examples/monailabel/npc_registration/smoke_test.py            # ACDC pair if ../shared exists
    python examples/monailabel/npc_registration/smoke_test.py --phantom  # generated phantom pair

It

1. writes a temporary studies folder: the fixed image ``es`` and moving image ``ed`` (ES and ED
   frames of an ACDC test patient from ``../shared/data/acdc_official_test/testing`` beside the
   repository when present, else a generated 3-D phantom pair) with their ``final`` labels, a
   generated 4-D phantom cine ``cine`` (5 frames, 2 slices, 64 x 64), plus a 2-D image ``flat``
   and an unreadable ``broken.nii.gz`` for the malformed requests;
2. starts ``serve.py`` on 127.0.0.1 and a free port (app data in the temporary folder);
3. sends one real registration (``POST /infer/npc_registration?image=es`` with ``moving=ed``) and
   checks the answer: 200, the JSON params (Dice before/after, folding, seconds) and the returned
   label file, read with SimpleITK, on the fixed image's grid (size, spacing, origin, direction);
4. sends one real tracking (``POST /infer/npc_track?image=cine`` with the label of frame 1
   uploaded) and checks the answer: 200, the function figures in the params and the returned 4-D
   label, read with SimpleITK, with the cine's geometry, its frame 1 equal to the uploaded label;
5. sends malformed requests to both tasks and checks their 4xx status and the text of their body;
6. checks that no result file is left in the server's temporary folder and nothing was written
   into the app folder of the repository, and stops the server (always, also after a failure).

``python -m pytest tests/test_monailabel.py`` runs it (skipped when ``monailabel`` is missing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import SimpleITK as sitk

APP = Path(__file__).resolve().parent
REPO = APP.parents[2]
#: the ACDC test patients beside the repository (``../shared``), when present
ACDC_TESTING = REPO.parent / "shared" / "data" / "acdc_official_test" / "testing"
TASK = "npc_registration"
TRACK_TASK = "npc_track"
#: the frame whose label the tracking request uploads (0-based)
CINE_LABEL_FRAME = 1


class SmokeTestError(AssertionError):
    """A check of the smoke test failed (the message says which, with the server's answer)."""


@dataclass
class SmokeResult:
    """What the smoke test measured."""

    pair: str
    startup_seconds: float = 0.0
    latency_seconds: float = 0.0
    params: Dict[str, Any] = field(default_factory=dict)
    track_seconds: float = 0.0
    track_params: Dict[str, Any] = field(default_factory=dict)
    #: Dice of the tracked labels against the phantom's true labels, per frame
    track_dice: List[float] = field(default_factory=list)
    malformed: List[Tuple[str, int, str]] = field(default_factory=list)


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def acdc_pair(patient: Optional[str] = None) -> Optional[Dict[str, Path]]:
    """ED and ES frames and their labels of an ACDC test patient (``Info.cfg`` names the frames), or ``None``."""
    if not ACDC_TESTING.is_dir():
        return None
    folders = sorted(p for p in ACDC_TESTING.glob("patient1*") if (p / "Info.cfg").is_file())
    if patient:
        folders = [p for p in folders if p.name == patient]
    for folder in folders:
        info = dict(line.split(":", 1) for line in (folder / "Info.cfg").read_text().splitlines() if ":" in line)
        frames = {k: f"{folder.name}_frame{int(info[k]):02d}" for k in ("ED", "ES")}
        files = {
            "ed": folder / f"{frames['ED']}.nii.gz", "es": folder / f"{frames['ES']}.nii.gz",
            "ed_label": folder / f"{frames['ED']}_gt.nii.gz", "es_label": folder / f"{frames['ES']}_gt.nii.gz",
        }
        if all(p.is_file() for p in files.values()):
            return files
    return None


def phantom_pair(folder: Path, slices: int = 2, size: int = 96) -> Dict[str, Path]:
    """A 3-D phantom pair (``slices`` short-axis slices of ``cardiac_pair``, 8 mm apart) written into ``folder``."""
    from monai_npc.data.phantoms import cardiac_pair

    pairs = [cardiac_pair(size=size, seed=11 + z) for z in range(slices)]
    files = {}
    for key, src, pixel in (("ed", "moving", sitk.sitkFloat32), ("es", "fixed", sitk.sitkFloat32),
                            ("ed_label", "moving_label", sitk.sitkUInt8), ("es_label", "fixed_label", sitk.sitkUInt8)):
        image = sitk.Cast(sitk.GetImageFromArray(np.stack([p[src] for p in pairs])), pixel)
        image.SetSpacing((192.0 / size, 192.0 / size, 8.0))
        image.SetOrigin((-96.0, -80.0, 12.0))
        files[key] = folder / f"phantom_{key}.nii.gz"
        sitk.WriteImage(image, str(files[key]))
    return files


def phantom_cine(folder: Path, frames: int = 5, slices: int = 2, size: int = 64) -> Dict[str, Any]:
    """A small 4-D phantom cine (:func:`monai_npc.data.phantom_cine.cardiac_cine`, 8 x 2.5 x 2.5 mm) written
    as ``cine.nii.gz`` into ``folder`` with the label of frame :data:`CINE_LABEL_FRAME` as ``cine_label.nii.gz``;
    returns ``{"cine", "label"}`` paths and ``labels``, the true ``(T, Z, H, W)`` labels."""
    from monai_npc.data.phantom_cine import cardiac_cine

    levels = tuple(np.linspace(0.3, 0.6, slices).tolist())
    data = cardiac_cine(frames=frames, size=size, levels=levels, spacing=(8.0, 2.5, 2.5), seed=7)
    direction = (0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, -1.0)  # not the identity, to check it comes back

    def frame(arr: np.ndarray, pixel: int) -> sitk.Image:
        image = sitk.Cast(sitk.GetImageFromArray(arr), pixel)
        image.SetSpacing((2.5, 2.5, 8.0))
        image.SetOrigin((-70.0, -90.0, 30.0))
        image.SetDirection(direction)
        return image

    cine = sitk.JoinSeries([frame(a, sitk.sitkFloat32) for a in data["image"]])
    cine.SetOrigin((-70.0, -90.0, 30.0, 0.0))
    cine.SetSpacing((2.5, 2.5, 8.0, 30.0))
    files = {"cine": folder / "cine.nii.gz", "label": folder / "cine_label.nii.gz"}
    sitk.WriteImage(cine, str(files["cine"]))
    sitk.WriteImage(frame(data["label"][CINE_LABEL_FRAME], sitk.sitkUInt8), str(files["label"]))
    return dict(files, labels=data["label"])


def make_studies(studies: Path, pair: Dict[str, Path], cine: Optional[Path] = None) -> None:
    """The datastore: ``es`` (fixed), ``ed`` (moving), their final labels, the 4-D ``cine`` (no label),
    a 2-D ``flat`` and an unreadable ``broken``."""
    (studies / "labels" / "final").mkdir(parents=True, exist_ok=True)
    if cine is not None:
        shutil.copy(cine, studies / "cine.nii.gz")
    shutil.copy(pair["es"], studies / "es.nii.gz")
    shutil.copy(pair["ed"], studies / "ed.nii.gz")
    shutil.copy(pair["ed_label"], studies / "labels" / "final" / "ed.nii.gz")
    shutil.copy(pair["es_label"], studies / "labels" / "final" / "es.nii.gz")
    es = sitk.ReadImage(str(pair["es"]))
    sitk.WriteImage(es[:, :, es.GetSize()[2] // 2] if es.GetDimension() == 3 else es, str(studies / "flat.nii.gz"))
    (studies / "broken.nii.gz").write_bytes(b"\x1f\x8b\x08\x00 this is not a NIfTI file")


def _app_files() -> List[str]:
    return sorted(str(p.relative_to(APP)) for p in APP.rglob("*") if "__pycache__" not in p.parts)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SmokeTestError(message)


class Server:
    """``serve.py`` on 127.0.0.1 in its own process group; :meth:`stop` ends the whole group."""

    def __init__(self, studies: Path, app_data: Path, port: int, conf: Dict[str, str], log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.app_data = app_data
        self.log = log
        env = dict(os.environ)
        # the server imports monai_npc from this clone (its app copy lies in app_data, outside the repository)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        env.setdefault("OMP_NUM_THREADS", "1")
        command = [sys.executable, str(APP / "serve.py"), "--studies", str(studies), "--host", "127.0.0.1",
                   "--port", str(port), "--app-data", str(app_data)]
        for key, value in conf.items():
            command += ["--conf", key, value]
        self._log_file = open(log, "wb")
        self.proc = subprocess.Popen(command, env=env, stdout=self._log_file, stderr=subprocess.STDOUT,
                                     cwd=str(app_data.parent), start_new_session=True)

    def log_tail(self, chars: int = 3000) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")[-chars:]

    def wait_ready(self, timeout: float) -> float:
        """Seconds until ``GET /info/`` answers 200; :class:`SmokeTestError` (with the log) otherwise."""
        import requests

        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SmokeTestError(f"the server exited with code {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/info/", timeout=5).status_code == 200:
                    return time.perf_counter() - t0
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        raise SmokeTestError(f"the server did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the process group (launcher and server), SIGKILL after ``timeout`` seconds."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        try:  # whatever of the group is left (the server, if the launcher went first)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._log_file.close()


def _infer(url: str, image: str, params: Any, timeout: float = 300.0, task: str = TASK,
           label: Optional[Path] = None):
    """``POST /infer/{task}?image=...`` with ``params`` (a dict, or a string sent as is) and ``label`` uploaded as the form field ``label``."""
    import requests

    files = {"label": (label.name, label.read_bytes(), "application/octet-stream")} if label is not None else None
    return requests.post(f"{url}/infer/{task}", params={"image": image}, data={"params": params if isinstance(params, str) else json.dumps(params)},
                         files=files, timeout=timeout)


def _multipart(response) -> Tuple[Dict[str, Any], bytes, str]:
    """``(params, file bytes, file name)`` of MONAI Label's multipart infer answer."""
    from requests_toolbelt.multipart.decoder import MultipartDecoder

    params, data, name = None, None, ""
    for part in MultipartDecoder.from_response(response).parts:
        disposition = part.headers.get(b"Content-Disposition", b"").decode()
        if 'name="params"' in disposition:
            params = json.loads(part.content)
        elif 'name="image"' in disposition:
            data = part.content
            name = disposition.split('filename="')[-1].rstrip('"') if "filename=" in disposition else ""
    _check(params is not None and data is not None, f"the answer lacks params or the image part: {response.headers}")
    return params, data, name


#: malformed requests: (what, task, image, params, file of the studies folder uploaded as the label or None,
#: expected status, text the body must contain)
MALFORMED = [
    ("unknown moving image", TASK, "es", {"moving": "no_such_image"}, None, 404, "no_such_image"),
    ("request 'model' naming a network", TASK, "es", {"model": "acdc", "moving": "ed"}, None, 400, "npc_model"),
    ("missing moving image", TASK, "es", {}, None, 400, "'moving'"),
    ("unknown fixed image", TASK, "no_such_fixed", {"moving": "ed"}, None, 404, "no_such_fixed"),
    ("2-D moving onto 3-D fixed", TASK, "es", {"moving": "flat", "moving_label": ""}, None, 422, "2-D"),
    ("unreadable moving file", TASK, "es", {"moving": "broken", "moving_label": ""}, None, 422, "broken"),
    ("unknown npc_model", TASK, "es", {"moving": "ed", "npc_model": "no_such_model"}, None, 404, "no_such_model"),
    ("track: request 'model' naming the other task", TRACK_TASK, "cine", {"model": TASK, "label": "es"}, None, 400,
     f"URL's task '{TRACK_TASK}'"),
    ("track: params not JSON", TRACK_TASK, "cine", '{"label_frame": 1', None, 400, "params is not valid JSON"),
    ("track: 3-D image instead of a 4-D cine", TRACK_TASK, "es", {}, None, 422, "a cine must be 4-D"),
    ("track: no label", TRACK_TASK, "cine", {}, None, 400, "form field 'label'"),
    ("track: label_frame out of range", TRACK_TASK, "cine", {"label": "es", "label_frame": 9}, None, 400,
     "label_frame 9 (from the request) is out of range"),
    ("track: label off the frame grid", TRACK_TASK, "cine", {"label": "es", "label_frame": 0}, None, 422, "grid"),
    ("track: unreadable label file", TRACK_TASK, "cine", {}, "broken.nii.gz", 422, "cannot read label"),
    ("no image at all", TASK, "", {"moving": "ed"}, None, 400, "no image"),
    ("relative output_dir (would resolve against the server's folder)", TASK, "es", {"moving": "ed", "output_dir": "result"}, None,
     400, "absolute path"),
    ("npc_device the server lacks", TASK, "es", {"moving": "ed", "npc_device": "cuda:7"}, None, 400, "npc_device"),
    ("npc_align not auto, none or rigid", TASK, "es", {"moving": "ed", "npc_align": "affine"}, None, 400, "npc_align"),
]


def _track(server: Server, cine: Dict[str, Any], refine: Optional[int], result: SmokeResult,
           report: Callable[[str], None], work: Path) -> None:
    """The real tracking request: the label of frame :data:`CINE_LABEL_FRAME` uploaded; checks the answer."""
    params: Dict[str, Any] = {"label_frame": CINE_LABEL_FRAME}
    if refine is not None:
        params["npc_refine"] = refine
    t0 = time.perf_counter()
    answer = _infer(server.url, "cine", params, task=TRACK_TASK, label=cine["label"])
    result.track_seconds = time.perf_counter() - t0
    _check(answer.status_code == 200, f"tracking: status {answer.status_code}: {answer.text[:2000]}\n{server.log_tail()}")
    result.track_params, data, filename = _multipart(answer)
    p, truth = result.track_params, cine["labels"]
    _check(p.get("result") == "label" and p.get("label_frame") == CINE_LABEL_FRAME and p.get("frames") == len(truth),
           f"tracking params: {p}")
    _check(all(len(p["volumes_ml"][k]) == len(truth) for k in ("lv", "rv", "myo")), f"volumes per frame: {p['volumes_ml']}")
    for key in ("ed_frame", "es_frame", "lv_edv", "lv_esv", "lv_ef", "rv_ef", "lv_mass_g"):
        _check(isinstance(p["function"].get(key), (int, float)), f"function lacks a number {key!r}: {p['function']}")
    returned = work / ("track_" + (filename or "result.nii.gz"))
    returned.write_bytes(data)
    label, source = sitk.ReadImage(str(returned)), sitk.ReadImage(str(cine["cine"]))
    _check(label.GetDimension() == 4 and label.GetSize() == source.GetSize(), f"label size {label.GetSize()} != cine {source.GetSize()}")
    for what in ("Spacing", "Origin", "Direction"):
        a, b = getattr(label, f"Get{what}")(), getattr(source, f"Get{what}")()
        _check(np.allclose(a, b, atol=1e-4), f"tracked label {what.lower()} {a} != cine {b}")
    arr, given = sitk.GetArrayFromImage(label), sitk.GetArrayFromImage(sitk.ReadImage(str(cine["label"])))
    _check(np.array_equal(arr[CINE_LABEL_FRAME], given), f"frame {CINE_LABEL_FRAME} of the tracked label is not the uploaded label")
    result.track_dice = [float(np.mean([2 * np.sum((a == v) & (b == v)) / max(np.sum(a == v) + np.sum(b == v), 1) for v in (1, 2, 3)]))
                         for a, b in zip(arr, truth)]
    _check(min(result.track_dice) > 0.6, f"tracked labels far from the phantom's: Dice per frame {result.track_dice}")
    f = p["function"]
    report(f"tracking: {result.track_seconds:.2f} s for {len(truth)} frames, Dice per frame "
           f"{' '.join(f'{d:.3f}' for d in result.track_dice)}, LV EF {f['lv_ef']:.1f} %, ED {f['ed_frame']} ES {f['es_frame']}, "
           f"returned {filename} {label.GetSize()}")


def run_smoke_test(workdir: Optional[Path] = None, phantom: bool = False, model: str = "acdc",
                   refine: Optional[int] = None, startup_timeout: float = 180.0,
                   report: Callable[[str], None] = print) -> SmokeResult:
    """Start the server, send the requests, check the answers, stop the server; returns the timings.

    Args:
        workdir: folder for the studies, app data and server log (default: a new temporary folder, removed after).
        phantom: use a generated phantom pair even when the ACDC pair is available.
        model: ``npc_model`` of the server.
        refine: ``npc_refine`` of the registration and tracking requests (``None``: the weights' setting).
    Raises:
        SmokeTestError: a check failed (its message holds the server's answer or log).
    """
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="npc_smoke_")) if own else Path(workdir)
    before = _app_files()
    server = None
    try:
        studies = work / "studies"
        pair = None if phantom else acdc_pair()
        name = f"ACDC {pair['es'].parent.name}" if pair else "phantom"
        if pair is None:
            (work / "pair").mkdir(parents=True, exist_ok=True)
            pair = phantom_pair(work / "pair")
        (work / "phantom_cine").mkdir(parents=True, exist_ok=True)  # not "cine": the server (cwd work) takes existing paths as paths
        cine = phantom_cine(work / "phantom_cine")
        make_studies(studies, pair, cine["cine"])
        result = SmokeResult(pair=name)
        server = Server(studies, work / "app_data", free_port(), {"npc_model": model}, work / "server.log")
        result.startup_seconds = server.wait_ready(startup_timeout)
        report(f"server up in {result.startup_seconds:.1f} s at {server.url} ({name}, npc_model {model})")

        params: Dict[str, Any] = {"moving": "ed", "fixed_label": "es"}
        if refine is not None:
            params["npc_refine"] = refine
        t0 = time.perf_counter()
        answer = _infer(server.url, "es", params)
        result.latency_seconds = time.perf_counter() - t0
        _check(answer.status_code == 200, f"registration: status {answer.status_code}: {answer.text[:2000]}\n{server.log_tail()}")
        result.params, data, filename = _multipart(answer)
        p = result.params
        _check(p.get("result") == "label" and p.get("model") == model, f"params: {p}")
        for key in ("dice_mean", "dice_mean_initial", "folding_percent", "seconds"):
            _check(isinstance(p.get(key), (int, float)), f"params lack a number {key!r}: {p}")
        _check(not any(isinstance(v, str) and v.startswith(tempfile.gettempdir()) and "npc_result" in v for v in p.values()),
               f"params report a server-side result path: {p}")
        if model != "phase-correlation":
            _check(p["dice_mean"] > p["dice_mean_initial"], f"Dice did not improve: {p['dice_mean_initial']} -> {p['dice_mean']}")
        returned = work / (filename or "result.nii.gz")
        returned.write_bytes(data)
        label, fixed = sitk.ReadImage(str(returned)), sitk.ReadImage(str(studies / "es.nii.gz"))
        _check(label.GetSize() == fixed.GetSize(), f"label size {label.GetSize()} != fixed {fixed.GetSize()}")
        for what in ("Spacing", "Origin", "Direction"):
            a, b = getattr(label, f"Get{what}")(), getattr(fixed, f"Get{what}")()
            _check(np.allclose(a, b, atol=1e-4), f"label {what.lower()} {a} != fixed {b}")
        values = set(np.unique(sitk.GetArrayFromImage(label)).tolist())
        _check(values <= {0, 1, 2, 3} and len(values) > 1, f"label values {values}")
        report(f"registration: {result.latency_seconds:.2f} s, Dice {p['dice_mean_initial']:.3f} -> {p['dice_mean']:.3f}, "
               f"folding {p['folding_percent']:.3f} %, returned {filename} {label.GetSize()}")

        _track(server, cine, refine, result, report, work)

        for what, task, image, bad, upload, status, text in MALFORMED:
            answer = _infer(server.url, image, bad, task=task, label=studies / upload if upload else None)
            detail = answer.text
            _check(answer.status_code == status and text in detail,
                   f"{what}: expected {status} with {text!r} in the body, got {answer.status_code}: {detail[:1000]}")
            result.malformed.append((what, answer.status_code, detail))
            report(f"{what}: {answer.status_code} {detail[:160]}")

        time.sleep(1.0)  # the server deletes a result file in a background task after sending it
        left = sorted(p.name for p in (work / "app_data" / "tmp").glob("npc_result_*"))
        _check(not left, f"result files left on the server: {left}")
        uploads = sorted(p.name for p in (work / "app_data" / "tmp").glob("tmp*.nii*"))  # also after the refused requests
        _check(not uploads, f"uploaded files left on the server: {uploads}")
    finally:
        if server is not None:
            server.stop()
        after = _app_files()
        if own:
            shutil.rmtree(work, ignore_errors=True)
    _check(after == before, f"the server wrote into the repository's app folder: {sorted(set(after) - set(before))}")
    return result


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="End-to-end check of the monai_npc MONAI Label app (starts a server).")
    parser.add_argument("--phantom", action="store_true", help="use a generated phantom pair instead of ACDC")
    parser.add_argument("--model", default="acdc", help="npc_model of the server (default acdc)")
    parser.add_argument("--refine", type=int, default=None, help="npc_refine of the registration and tracking requests")
    parser.add_argument("--workdir", default=None, help="keep studies, app data and the server log in this folder")
    args = parser.parse_args(argv)
    try:
        import monailabel  # noqa: F401
        import requests  # noqa: F401
    except ImportError as err:
        parser.error(f"{err.name} is not installed: run this in the MONAI Label environment (README.md).")
    t0 = time.perf_counter()
    try:
        result = run_smoke_test(Path(args.workdir) if args.workdir else None, args.phantom, args.model, args.refine)
    except SmokeTestError as err:
        print(f"FAILED: {err}", file=sys.stderr)
        return 1
    print(f"OK ({result.pair}): startup {result.startup_seconds:.1f} s, registration {result.latency_seconds:.2f} s, "
          f"tracking {result.track_seconds:.2f} s, "
          f"{len(result.malformed)} malformed requests refused, total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
