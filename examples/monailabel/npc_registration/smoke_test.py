"""End-to-end check of the MONAI Label app: a real server, a real registration, malformed requests.

Run it in the MONAI Label environment (README.md beside this file), from the repository root::

    python examples/monailabel/npc_registration/smoke_test.py            # ACDC pair if ../shared exists
    python examples/monailabel/npc_registration/smoke_test.py --phantom  # generated phantom pair

It

1. writes a temporary studies folder: the fixed image ``es`` and moving image ``ed`` (ES and ED
   frames of an ACDC test patient from ``../shared/data/acdc_official_test/testing`` beside the
   repository when present, else a generated 3-D phantom pair) with their ``final`` labels, plus a
   2-D image ``flat`` and an unreadable ``broken.nii.gz`` for the malformed requests;
2. starts ``serve.py`` on 127.0.0.1 and a free port (app data in the temporary folder);
3. sends one real registration (``POST /infer/npc_registration?image=es`` with ``moving=ed``) and
   checks the answer: 200, the JSON params (Dice before/after, folding, seconds) and the returned
   label file, read with SimpleITK, on the fixed image's grid (size, spacing, origin, direction);
4. sends malformed requests and checks their 4xx status and the text of their body;
5. checks that no result file is left in the server's temporary folder and nothing was written
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


class SmokeTestError(AssertionError):
    """A check of the smoke test failed (the message says which, with the server's answer)."""


@dataclass
class SmokeResult:
    """What the smoke test measured."""

    pair: str
    startup_seconds: float = 0.0
    latency_seconds: float = 0.0
    params: Dict[str, Any] = field(default_factory=dict)
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


def make_studies(studies: Path, pair: Dict[str, Path]) -> None:
    """The datastore: ``es`` (fixed), ``ed`` (moving), their final labels, a 2-D ``flat`` and an unreadable ``broken``."""
    (studies / "labels" / "final").mkdir(parents=True, exist_ok=True)
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


def _infer(url: str, image: str, params: Dict[str, Any], timeout: float = 300.0):
    import requests

    return requests.post(f"{url}/infer/{TASK}", params={"image": image}, data={"params": json.dumps(params)}, timeout=timeout)


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


#: malformed requests: (what, image, params, expected status, text the body must contain)
MALFORMED = [
    ("unknown moving image", "es", {"moving": "no_such_image"}, 404, "no_such_image"),
    ("request 'model' naming a network", "es", {"model": "acdc", "moving": "ed"}, 400, "npc_model"),
    ("missing moving image", "es", {}, 400, "'moving'"),
    ("unknown fixed image", "no_such_fixed", {"moving": "ed"}, 404, "no_such_fixed"),
    ("2-D moving onto 3-D fixed", "es", {"moving": "flat", "moving_label": ""}, 422, "2-D"),
    ("unreadable moving file", "es", {"moving": "broken", "moving_label": ""}, 422, "broken"),
    ("unknown npc_model", "es", {"moving": "ed", "npc_model": "no_such_model"}, 404, "no_such_model"),
]


def run_smoke_test(workdir: Optional[Path] = None, phantom: bool = False, model: str = "acdc",
                   refine: Optional[int] = None, startup_timeout: float = 180.0,
                   report: Callable[[str], None] = print) -> SmokeResult:
    """Start the server, send the requests, check the answers, stop the server; returns the timings.

    Args:
        workdir: folder for the studies, app data and server log (default: a new temporary folder, removed after).
        phantom: use a generated phantom pair even when the ACDC pair is available.
        model: ``npc_model`` of the server.
        refine: ``npc_refine`` of the registration request (``None``: the weights' setting).
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
        make_studies(studies, pair)
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

        for what, image, bad, status, text in MALFORMED:
            answer = _infer(server.url, image, bad)
            detail = answer.text
            _check(answer.status_code == status and text in detail,
                   f"{what}: expected {status} with {text!r} in the body, got {answer.status_code}: {detail[:1000]}")
            result.malformed.append((what, answer.status_code, detail))
            report(f"{what}: {answer.status_code} {detail[:160]}")

        time.sleep(1.0)  # the server deletes a result file in a background task after sending it
        left = sorted(p.name for p in (work / "app_data" / "tmp").glob("npc_result_*"))
        _check(not left, f"result files left on the server: {left}")
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
    parser.add_argument("--refine", type=int, default=None, help="npc_refine of the registration request")
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
          f"{len(result.malformed)} malformed requests refused, total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
