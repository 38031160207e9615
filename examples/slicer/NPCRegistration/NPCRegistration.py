"""3D Slicer scripted module: register two volumes with ``monai-npc register`` and load the results.

Install: Slicer > Edit > Application Settings > Modules > Additional module paths: add this
folder (``examples/slicer/NPCRegistration``), restart Slicer; the module appears under
*Registration > NPC Registration*. ``monai_npc`` runs outside Slicer's Python: set *Command* to
the ``monai-npc`` executable of the environment where ``monai_npc`` is installed (e.g.
``/home/me/venv/bin/monai-npc``). See ``docs/slicer.md``.

What it does: saves the fixed and moving volumes (and the moving segmentation or label map, if
any) to a work folder, runs ``monai-npc register``, then loads ``warped.nii.gz``, the warped
label map and the transform (``transform_slicer.h5`` for 2-D images, else ``transform.h5``),
and puts the moving volume under the transform so it overlays the fixed volume.
"""

from __future__ import annotations

import os
import shlex
from typing import Dict, List, Optional


def build_register_command(
    executable: str,
    moving: str,
    fixed: str,
    out: str,
    model: str = "acdc",
    moving_label: Optional[str] = None,
    fixed_label: Optional[str] = None,
) -> List[str]:
    """The ``monai-npc register`` command line (a list for ``subprocess``); ``executable`` may hold arguments."""
    cmd = shlex.split(executable) + ["register", "--moving", moving, "--fixed", fixed, "--out", out, "--model", model]
    if moving_label:
        cmd += ["--moving-label", moving_label]
    if fixed_label:
        cmd += ["--fixed-label", fixed_label]
    return cmd


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
            self.model.toolTip = "acdc, camus, sar, a weights file, or phase-correlation"
            self.command = qt.QLineEdit("monai-npc")
            self.command.toolTip = "monai-npc executable of the Python environment with monai_npc"
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
            with slicer.util.tryWithErrorDisplay("NPC registration failed.", waitCursor=True):
                summary = NPCRegistrationLogic().run(
                    self.fixed.currentNode(), self.moving.currentNode(), self.label.currentNode(),
                    self.model.text, self.command.text,
                )
                self.status.text = (
                    f"{summary['model']}: {summary['seconds']:.1f} s, folding {summary['folding_percent']:.2f} %"
                )

    class NPCRegistrationLogic(ScriptedLoadableModuleLogic):
        def run(self, fixed, moving, label=None, model="acdc", executable="monai-npc", work=None):
            """Save the nodes, run ``monai-npc register``, load the results; returns summary.json as a dict."""
            import json
            import subprocess
            import tempfile

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
            out = os.path.join(work, "out")
            cmd = build_register_command(executable, paths["moving"], paths["fixed"], out, model, label_path)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr.strip() or proc.stdout.strip())
            files = result_files(out)
            transform = slicer.util.loadTransform(files["transform"])
            moving.SetAndObserveTransformNodeID(transform.GetID())  # moving now overlays fixed
            slicer.util.loadVolume(files["warped"], {"name": moving.GetName() + "_warped"})
            if "warped_label" in files:
                slicer.util.loadLabelVolume(files["warped_label"], {"name": moving.GetName() + "_warped_label"})
            with open(files["summary"]) as f:
                return json.load(f)
