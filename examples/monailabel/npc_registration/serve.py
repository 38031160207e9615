"""Start the MONAI Label server of this app without writing into the repository.

``monailabel start_server --app DIR`` creates ``logs/``, ``model/`` and ``bin/`` inside ``DIR``
(and the log file in ``logs/``). This launcher copies the app (``main.py``, ``lib/``) into an
app-data folder, points MONAI Label's sessions and temporary files there too, runs the server on the copy and removes
the folder when the server stops (unless ``--app-data`` names a folder to keep)::

    python examples/monailabel/npc_registration/serve.py --studies /path/to/images --conf npc_model acdc
    python examples/monailabel/npc_registration/serve.py --studies images --host 127.0.0.1 --port 8123 \\
        --conf npc_model phase-correlation

Every argument it does not know is passed on to ``monailabel start_server`` (e.g. ``--conf``).
Stop it with Ctrl+C or SIGTERM: the server is stopped and the temporary app-data folder removed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

APP = Path(__file__).resolve().parent


def copy_app(target: Path) -> Path:
    """Copy ``main.py`` and ``lib/`` of this app into ``target/app`` (replacing a previous copy); returns it."""
    app = target / "app"
    if app.exists():
        shutil.rmtree(app)
    app.mkdir(parents=True)
    shutil.copy2(APP / "main.py", app / "main.py")
    shutil.copytree(APP / "lib", app / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    return app


def server_command(app: Path, studies: str, host: str, port: int, extra: Sequence[str]) -> List[str]:
    """The ``monailabel start_server`` command line (run with this Python) for the copied app."""
    return [sys.executable, "-m", "monailabel.main", "start_server", "--app", str(app), "--studies", studies,
            "--host", host, "--port", str(port), *extra]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", required=True, help="folder of images (MONAI Label local datastore) or a DICOMweb URL")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--app-data", default=None,
                        help="folder for the app copy, logs and sessions (kept); default: a temporary folder, removed on exit")
    args, extra = parser.parse_known_args(argv)
    try:
        import monailabel  # noqa: F401
    except ImportError:
        parser.error("monailabel is not installed in this Python environment; see README.md beside serve.py.")
    studies = args.studies
    if not studies.startswith(("http://", "https://")) and not Path(studies).is_dir():
        parser.error(f"--studies {studies}: no such folder.")

    keep = args.app_data is not None
    data = Path(args.app_data) if keep else Path(tempfile.mkdtemp(prefix="npc_monailabel_"))
    data.mkdir(parents=True, exist_ok=True)
    app = copy_app(data)
    env = dict(os.environ)
    env.setdefault("MONAI_LABEL_SESSION_PATH", str(data / "sessions"))
    (data / "tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(data / "tmp")  # MONAI Label's own temporary files (log config, uploads, results)
    print(f"monai_npc MONAI Label app: {app} (app data {'kept' if keep else 'removed on exit'}); "
          f"server on http://{args.host}:{args.port}", flush=True)
    proc = subprocess.Popen(server_command(app, studies, args.host, args.port, extra), env=env)

    def stop(signum, frame):  # forward Ctrl+C / SIGTERM to the server, then clean up below
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        try:
            code = proc.wait()
        except BaseException:
            proc.kill()
            code = proc.wait()
    finally:
        if not keep:
            shutil.rmtree(data, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
