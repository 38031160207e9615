"""The MONAI Label example's registration (label propagation) task, called directly (no server).

Runs with or without ``monailabel`` installed: the task falls back to a stand-in base class.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from monai_npc.data.phantoms import cardiac_pair

TASK = Path(__file__).resolve().parents[1] / "examples/monailabel/npc_registration/lib/infers/npc_registration.py"


def _load_task_module():
    spec = importlib.util.spec_from_file_location("npc_monailabel_task", TASK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(arr, path, pixel=sitk.sitkFloat32):
    image = sitk.Cast(sitk.GetImageFromArray(arr), pixel)
    image.SetSpacing((1.4, 1.4))
    image.SetOrigin((-50.0, 20.0))
    sitk.WriteImage(image, str(path))
    return str(path)


class _Datastore:
    """The two datastore calls the task makes (``LocalDatastore`` API)."""

    def __init__(self, folder):
        self.folder = Path(folder)

    def get_image_uri(self, image_id):
        return str(self.folder / f"{image_id}.nii.gz")

    def get_label_uri(self, label_id, label_tag):
        return str(self.folder / "labels" / label_tag / f"{label_id}.nii.gz")


def test_label_propagation_task(tmp_path):
    module = _load_task_module()
    try:  # with monailabel installed the task is a real MONAI Label InferTask
        from monailabel.interfaces.tasks.infer_v2 import InferTask

        assert issubclass(module.NPCRegistration, InferTask)
    except ImportError:
        pass
    pair = cardiac_pair(size=64, seed=3)
    (tmp_path / "labels" / "final").mkdir(parents=True)
    fixed = _write(pair["fixed"], tmp_path / "es.nii.gz")
    _write(pair["moving"], tmp_path / "ed.nii.gz")
    _write(pair["moving_label"], tmp_path / "labels" / "final" / "ed.nii.gz", sitk.sitkUInt8)
    fixed_label = _write(pair["fixed_label"], tmp_path / "es_gt.nii.gz", sitk.sitkUInt8)

    task = module.NPCRegistration(model="phase-correlation", datastore=_Datastore(tmp_path), output_root=str(tmp_path))
    assert task.is_valid() and task.info()["type"] == "segmentation" and task.info()["dimension"] == 2
    assert not module.NPCRegistration(model="acdc-does-not-exist").is_valid()
    # MONAI Label resolves "image" to a path; "moving" is a datastore id, its label the "final" one.
    # The server sets "model" to the task's name and may pass its own "device": neither is the NPC model.
    assert task.config() == {"npc_model": "phase-correlation", "moving": "", "moving_label": "", "fixed_label": ""}
    request = {"model": "npc_registration", "device": "cuda", "image": fixed, "moving": "ed", "fixed_label": fixed_label}
    label_file, result = task(request)
    warped = sitk.ReadImage(label_file)
    assert warped.GetSize() == (64, 64) and np.allclose(warped.GetSpacing(), (1.4, 1.4))
    assert set(np.unique(sitk.GetArrayFromImage(warped))) <= {0, 1, 2, 3}
    for key in ("transform", "displacement", "transform_slicer", "warped", "overview", "summary"):
        assert Path(result[key]).is_file(), key
    assert sitk.ReadTransform(result["transform"]).GetName() == "DisplacementFieldTransform"
    assert result["model"] == "phase-correlation" and 0.0 <= result["dice_mean"] <= 1.0
    assert result["folding_percent"] == 0.0 and result["seconds"] > 0
    json.dumps(result)  # MONAI Label sends it to the client as JSON
    summary = json.loads(Path(result["summary"]).read_text())
    assert summary["dice_mean"] == result["dice_mean"]
    # plain paths work without a datastore
    label_file, result = module.NPCRegistration(model="phase-correlation")(
        {"image": fixed, "moving": str(tmp_path / "ed.nii.gz"), "moving_label": str(tmp_path / "labels/final/ed.nii.gz"),
         "output_dir": str(tmp_path / "direct")}
    )
    assert Path(label_file) == tmp_path / "direct" / "warped_label.nii.gz" and result["dice_mean"] is None


def test_task_model_comes_from_npc_model_not_from_monailabel_model(tmp_path):
    """A request as the server sends it: ``model`` = task name; ``npc_model`` (the task's config) picks the network."""
    module = _load_task_module()
    pair = cardiac_pair(size=64, seed=5)
    fixed = _write(pair["fixed"], tmp_path / "es.nii.gz")
    moving = _write(pair["moving"], tmp_path / "ed.nii.gz")
    moving_label = _write(pair["moving_label"], tmp_path / "ed_gt.nii.gz", sitk.sitkUInt8)
    fixed_label = _write(pair["fixed_label"], tmp_path / "es_gt.nii.gz", sitk.sitkUInt8)
    task = module.NPCRegistration(model="acdc", output_root=str(tmp_path))
    assert task.is_valid() and task.labels == {"rv": 1, "myocardium": 2, "lv": 3}
    base = {"model": "npc_registration", "image": fixed, "moving": moving, "moving_label": moving_label, "fixed_label": fixed_label}
    _, result = task(dict(task.config(), **base))  # the Slicer client sends the task config with the request
    assert result["model"] == "acdc" and result["dice_mean"] > result["dice_mean_initial"] + 0.05
    _, result = task(dict(base, npc_model="phase-correlation"))
    assert result["model"] == "phase-correlation"
    camus = module.NPCRegistration(model="camus")
    assert camus.is_valid() and camus.labels == {"lv": 1, "myocardium": 2, "la": 3}
