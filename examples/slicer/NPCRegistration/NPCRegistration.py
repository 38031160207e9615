r"""3D Slicer scripted module: register two volumes with ``monai-npc register`` and load the results.

Install: Slicer > Edit > Application Settings > Modules > Additional module paths: add this
folder (``examples/slicer/NPCRegistration``), restart Slicer; the module appears under
*Registration > NPC Registration*. ``monai_npc`` runs outside Slicer's Python: set *Command* to
the ``monai-npc`` executable of the environment where ``monai_npc`` is installed (e.g.
``/home/me/venv/bin/monai-npc`` or ``C:\Users\me\venv\Scripts\monai-npc.exe``; paths with
spaces need no quotes). See ``docs/slicer.md``.

What it does: saves the fixed and moving volumes (and the moving segmentation or label map, if
any) to a work folder, starts ``monai-npc register`` in the background with the environment
Slicer was started with (``slicer.util.startupEnvironment()``, so Slicer's own Python paths do
not leak into it) while the GUI stays responsive, then loads ``warped.nii.gz``, the warped label
map and the transform (``transform_slicer.h5`` for 2-D images, else ``transform.h5``), and puts
the moving volume under the transform so it overlays the fixed volume.

The command building and the background job (:func:`split_command`, :func:`build_register_command`,
:class:`RegisterJob`, :func:`result_files`) are plain Python, usable and tested without Slicer.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from typing import Dict, List, Mapping, Optional, Sequence, Union


def split_command(command: Union[str, Sequence[str]], windows: Optional[bool] = None) -> List[str]:
    r"""The program and its leading arguments from the *Command* field.

    - a list or tuple is used as is (no splitting at all);
    - a string naming an existing file is one program path, spaces and backslashes included
      (``C:\Program Files\npc\Scripts\monai-npc.exe``, ``/opt/my tools/monai-npc``);
    - otherwise it is split like a command line of the platform (``windows``: default
      ``os.name == "nt"``): on Windows with ``shlex.split(posix=False)``, which keeps backslashes,
      then surrounding double quotes are removed (``"C:\My venv\monai-npc.exe" --threads 1``);
      elsewhere with POSIX ``shlex.split`` (quotes or backslash-escaped spaces).
    """
    if not isinstance(command, str):
        parts = [str(c) for c in command]
    else:
        text = command.strip()
        if not text:
            raise ValueError("the Command field is empty: give the monai-npc executable of the environment with monai_npc.")
        unquoted = text[1:-1] if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'" else text
        if os.path.isfile(unquoted):
            return [unquoted]
        windows = (os.name == "nt") if windows is None else windows
        if windows:
            parts = [p[1:-1] if len(p) > 1 and p[0] == p[-1] == '"' else p for p in shlex.split(text, posix=False)]
        else:
            parts = shlex.split(text)
    if not parts:
        raise ValueError("the Command is empty: give the monai-npc executable of the environment with monai_npc.")
    return parts


def build_register_command(
    executable: Union[str, Sequence[str]],
    moving: str,
    fixed: str,
    out: str,
    model: str = "acdc",
    moving_label: Optional[str] = None,
    fixed_label: Optional[str] = None,
    windows: Optional[bool] = None,
) -> List[str]:
    """The ``monai-npc register`` command as an argument list (for ``subprocess`` / ``QProcess``, no shell).

    ``executable`` is split by :func:`split_command`; every path is one list element, so spaces
    and backslashes in them need no quoting.
    """
    cmd = split_command(executable, windows) + ["register", "--moving", moving, "--fixed", fixed, "--out", out, "--model", model]
    if moving_label:
        cmd += ["--moving-label", moving_label]
    if fixed_label:
        cmd += ["--fixed-label", fixed_label]
    return cmd


class RegisterJob:
    """``monai-npc register`` running in the background; poll it from a timer so the GUI never blocks.

    Output (stdout and stderr) goes to ``log_path``, not to pipes, so a chatty run cannot stall.
    ``env`` is the environment of the child (in Slicer: ``slicer.util.startupEnvironment()``); a
    bare program name is looked up on *its* ``PATH``.
    """

    def __init__(self, command: Sequence[str], log_path: str, env: Optional[Mapping[str, str]] = None) -> None:
        self.command = list(command)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.process: Optional[subprocess.Popen] = None

    def start(self) -> "RegisterJob":
        program = self.command[0]
        if not os.path.isfile(program):
            search = (self.env or os.environ).get("PATH")
            found = shutil.which(program, path=search)
            if found is None:
                raise FileNotFoundError(
                    f"{program!r} not found on the PATH Slicer was started with; set Command to the full path of "
                    "monai-npc (monai-npc.exe on Windows) in the Python environment where monai_npc is installed."
                )
            self.command[0] = found
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        return self

    def poll(self) -> Optional[int]:
        """``None`` while running, else the exit code."""
        if self.process is None:
            raise RuntimeError("RegisterJob.poll() before start().")
        return self.process.poll()

    def wait(self, timeout: Optional[float] = None) -> int:
        """Block until it ends (scripts and tests; the module polls instead)."""
        return self.process.wait(timeout) if self.process is not None else -1

    def cancel(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def log(self, max_lines: int = 20) -> str:
        """The last lines of the output (the error message when the exit code is not 0)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                lines = f.read().strip().splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-max_lines:])


def result_files(out: str) -> Dict[str, str]:
    """Files to load after the command ran: warped image, warped label (if any), the Slicer transform, summary."""
    files = {
        "warped": os.path.join(out, "warped.nii.gz"),
        "summary": os.path.join(out, "summary.json"),
        "transform": os.path.join(out, "transform_slicer.h5"),
    }
    if not os.path.exists(files["transform"]):  # 3-D inputs: transform.h5 is already 3-D
        files["transform"] = os.path.join(out, "transform.h5")
    label = os.path.join(out, "warped_label.nii.gz")
    if os.path.exists(label):
        files["warped_label"] = label
    return files


try:  # only inside 3D Slicer
    import ctk
    import qt
    import slicer
    from slicer.ScriptedLoadableModule import (
        ScriptedLoadableModule,
        ScriptedLoadableModuleLogic,
        ScriptedLoadableModuleWidget,
    )
except ImportError:  # imported outside Slicer (tests, docs): only the helpers above
    slicer = None


if slicer is not None:

    class NPCRegistration(ScriptedLoadableModule):
        def __init__(self, parent):
            ScriptedLoadableModule.__init__(self, parent)
            parent.title = "NPC Registration"
            parent.categories = ["Registration"]
            parent.contributors = ["monai_npc"]
            parent.helpText = "Deformable registration with Neural Phase Correlation (monai-npc register)."
            parent.acknowledgementText = "Uses the monai_npc command line; see docs/slicer.md."

    class NPCRegistrationWidget(ScriptedLoadableModuleWidget):
        def setup(self):
            ScriptedLoadableModuleWidget.setup(self)
            form = qt.QFormLayout()
            box = ctk.ctkCollapsibleButton()
            box.text = "Register"
            box.setLayout(form)
            self.layout.addWidget(box)
            self.fixed = self._selector(["vtkMRMLScalarVolumeNode"], "fixed volume (output space)")
            self.moving = self._selector(["vtkMRMLScalarVolumeNode"], "moving volume")
            self.label = self._selector(
                ["vtkMRMLLabelMapVolumeNode", "vtkMRMLSegmentationNode"], "moving label map or segmentation", none=True
            )
            self.model = qt.QLineEdit("acdc")
            self.model.toolTip = "acdc, camus, sar, a weights file, a MONAI bundle folder, or phase-correlation"
            self.command = qt.QLineEdit("monai-npc")
            self.command.toolTip = (
                "monai-npc executable of the Python environment with monai_npc, e.g. "
                "C:\\Users\\me\\venv\\Scripts\\monai-npc.exe (spaces need no quotes)"
            )
            self.button = qt.QPushButton("Register")
            self.status = qt.QLabel("")
            for name, widget in (("Fixed", self.fixed), ("Moving", self.moving), ("Moving label", self.label),
                                 ("Model", self.model), ("Command", self.command)):
                form.addRow(name + ":", widget)
            form.addRow(self.button)
            form.addRow(self.status)
            self.button.connect("clicked(bool)", self.onRegister)
            self.layout.addStretch(1)

        def _selector(self, classes, tip, none=False):
            s = slicer.qMRMLNodeComboBox()
            s.nodeTypes = classes
            s.noneEnabled = none
            s.addEnabled = False
            s.removeEnabled = False
            s.setMRMLScene(slicer.mrmlScene)
            s.toolTip = tip
            return s

        def onRegister(self):
            if getattr(self, "job", None) is not None and self.job.poll() is None:
                return  # one registration at a time
            with slicer.util.tryWithErrorDisplay("NPC registration failed to start.", waitCursor=True):
                self.logic = NPCRegistrationLogic()
                self.job = self.logic.start(
                    self.fixed.currentNode(), self.moving.currentNode(), self.label.currentNode(),
                    self.model.text, self.command.text,
                )
                self.button.enabled = False
                self.status.text = "registering in the background ..."
                self.timer = qt.QTimer()
                self.timer.setInterval(250)
                self.timer.connect("timeout()", self._poll)
                self.timer.start()

        def _poll(self):
            code = self.job.poll()
            if code is None:
                return
            self.timer.stop()
            self.button.enabled = True
            if code != 0:
                self.status.text = "failed"
                slicer.util.errorDisplay(f"monai-npc register failed (exit code {code}):\n{self.job.log()}")
                return
            with slicer.util.tryWithErrorDisplay("Loading the NPC results failed.", waitCursor=True):
                summary = self.logic.load_results()
                self.status.text = (
                    f"{summary['model']}: {summary['seconds']:.1f} s, folding {summary['folding_percent']:.2f} %"
                )

        def cleanup(self):
            if getattr(self, "job", None) is not None:
                self.job.cancel()

    class NPCRegistrationLogic(ScriptedLoadableModuleLogic):
        def start(self, fixed, moving, label=None, model="acdc", executable="monai-npc", work=None):
            """Save the nodes and start ``monai-npc register`` in the background; returns the :class:`RegisterJob`."""
            import tempfile

            if fixed is None or moving is None:
                raise ValueError("choose a fixed and a moving volume.")
            work = work or tempfile.mkdtemp(prefix="npc_slicer_")
            paths = {"fixed": os.path.join(work, "fixed.nii.gz"), "moving": os.path.join(work, "moving.nii.gz")}
            slicer.util.saveNode(fixed, paths["fixed"])
            slicer.util.saveNode(moving, paths["moving"])
            label_path = None
            if label is not None:
                label_path = os.path.join(work, "moving_label.nii.gz")
                if label.IsA("vtkMRMLSegmentationNode"):  # export on the moving volume's grid
                    labelmap = slicer.mrmlScene.AddNewNodeByClass("vtkMRMLLabelMapVolumeNode")
                    slicer.modules.segmentations.logic().ExportVisibleSegmentsToLabelmapNode(label, labelmap, moving)
                    slicer.util.saveNode(labelmap, label_path)
                    slicer.mrmlScene.RemoveNode(labelmap)
                else:
                    slicer.util.saveNode(label, label_path)
            self.moving, self.out = moving, os.path.join(work, "out")
            cmd = build_register_command(executable, paths["moving"], paths["fixed"], self.out, model, label_path)
            # the environment Slicer was started with: no Slicer Python paths in the monai_npc environment
            env = slicer.util.startupEnvironment()
            return RegisterJob(cmd, os.path.join(work, "monai-npc.log"), env).start()

        def load_results(self):
            """Load the transform (moving volume put under it), the warped volume and label; returns summary.json."""
            import json

            files = result_files(self.out)
            transform = slicer.util.loadTransform(files["transform"])
            self.moving.SetAndObserveTransformNodeID(transform.GetID())  # moving now overlays fixed
            slicer.util.loadVolume(files["warped"], {"name": self.moving.GetName() + "_warped"})
            if "warped_label" in files:
                slicer.util.loadLabelVolume(files["warped_label"], {"name": self.moving.GetName() + "_warped_label"})
            with open(files["summary"]) as f:
                return json.load(f)
