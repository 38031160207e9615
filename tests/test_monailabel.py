"""The MONAI Label example's tasks: registration (label propagation) and cine tracking.

The tasks themselves are called directly (no server; runs with or without ``monailabel``: the task falls
back to a stand-in base class). ``test_server_smoke`` starts a real MONAI Label server with the
example's ``smoke_test.py`` and is skipped where ``monailabel`` is not installed.
"""

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from monai_npc.data.phantoms import cardiac_pair
from monai_npc.apps.tracking.cine import read_cine

APP = Path(__file__).resolve().parents[1] / "examples/monailabel/npc_registration"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _load_task_module(name="npc_registration"):
    """The app's ``lib.infers.<name>`` module, its ``lib`` package loaded as ``npc_monailabel_lib`` (relative imports)."""
    package = "npc_monailabel_lib"
    if package not in sys.modules:
        spec = importlib.util.spec_from_file_location(package, APP / "lib/__init__.py", submodule_search_locations=[str(APP / "lib")])
        sys.modules[package] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[package])
    return importlib.import_module(f"{package}.infers.{name}")


def _write(arr, path, pixel=sitk.sitkFloat32):
    image = sitk.Cast(sitk.GetImageFromArray(arr), pixel)
    image.SetSpacing((1.4, 1.4, 8.0)[: image.GetDimension()])
    image.SetOrigin((-50.0, 20.0, 0.0)[: image.GetDimension()])
    sitk.WriteImage(image, str(path))
    return str(path)


class _Datastore:
    """The two datastore calls the task makes (``LocalDatastore`` API: ``""`` for an unknown id)."""

    def __init__(self, folder):
        self.folder = Path(folder)

    def get_image_uri(self, image_id):
        path = self.folder / f"{image_id}.nii.gz"
        return str(path) if path.is_file() else ""

    def get_label_uri(self, label_id, label_tag):
        path = self.folder / "labels" / label_tag / f"{label_id}.nii.gz"
        return str(path) if path.is_file() else ""


def _refused(task, request, status, text):
    with pytest.raises(ValueError) as info:
        task(request)
    err = info.value
    assert type(err) is sys.modules[type(task).__module__].RequestError  # the app's one RequestError (lib/common.py)
    assert err.status_code == status and text in err.detail, (err.status_code, err.detail)


def test_label_propagation_task(tmp_path):
    module = _load_task_module()
    try:  # with monailabel installed the task is a real MONAI Label InferTask and errors are HTTPExceptions
        from fastapi import HTTPException
        from monailabel.interfaces.tasks.infer_v2 import InferTask

        assert issubclass(module.NPCRegistration, InferTask) and issubclass(module.RequestError, HTTPException)
    except ImportError:
        pass
    pair = cardiac_pair(size=64, seed=3)
    (tmp_path / "labels" / "final").mkdir(parents=True)
    fixed = _write(pair["fixed"], tmp_path / "es.nii.gz")
    _write(pair["moving"], tmp_path / "ed.nii.gz")
    _write(pair["moving_label"], tmp_path / "labels" / "final" / "ed.nii.gz", sitk.sitkUInt8)
    _write(pair["fixed_label"], tmp_path / "labels" / "final" / "es.nii.gz", sitk.sitkUInt8)
    _write(pair["moving"][None].repeat(2, 0), tmp_path / "vol.nii.gz")  # 3-D
    (tmp_path / "broken.nii.gz").write_bytes(b"\x1f\x8b\x08\x00 not a NIfTI file")
    results = tmp_path / "results"
    results.mkdir()

    task = module.NPCRegistration(model="phase-correlation", datastore=_Datastore(tmp_path), output_root=str(results))
    assert task.is_valid() and task.info()["type"] == "segmentation" and task.info()["dimension"] == 2
    assert not module.NPCRegistration(model="acdc-does-not-exist").is_valid()
    assert task.config() == {"npc_model": "phase-correlation", "moving": "", "moving_label": "", "fixed_label": "", "npc_refine": "",
                             "npc_device": "", "npc_align": ""}
    # MONAI Label resolves "image" to a path; "moving" is a datastore id, its label the "final" one;
    # the server sets "model" to the task's name and may pass its own "device": neither is the NPC model.
    request = {"model": "npc_registration", "device": "cuda", "image": fixed, "moving": "ed", "fixed_label": "es"}
    label_file, result = task(request)
    assert Path(label_file).parent == results and Path(label_file).name.startswith("npc_result_")
    warped = sitk.ReadImage(label_file)
    assert warped.GetSize() == (64, 64) and np.allclose(warped.GetSpacing(), (1.4, 1.4))
    assert np.allclose(warped.GetOrigin(), (-50.0, 20.0))
    assert set(np.unique(sitk.GetArrayFromImage(warped))) <= {0, 1, 2, 3} and warped.GetPixelID() == sitk.sitkUInt8  # as warped_label.nii.gz
    assert result["result"] == "label" and result["model"] == "phase-correlation"
    assert 0.0 <= result["dice_mean"] <= 1.0 and result["folding_percent"] == 0.0 and result["seconds"] > 0
    assert "outputs" not in result and "output_dir" not in result  # nothing but the label file is written
    assert sorted(p.name for p in results.iterdir()) == [Path(label_file).name]
    json.dumps(result)  # MONAI Label sends it to the client as JSON

    # no moving label: the warped moving image comes back; output_dir keeps the transform files
    label_file, result = module.NPCRegistration(model="phase-correlation", output_root=str(results))(
        {"image": fixed, "moving": str(tmp_path / "ed.nii.gz"), "output_dir": str(tmp_path / "direct")}
    )
    assert result["result"] == "image" and "dice_mean" not in result
    assert sitk.ReadImage(label_file).GetPixelID() == sitk.sitkFloat32
    assert result["output_dir"] == str(tmp_path / "direct")
    assert sitk.ReadTransform(str(tmp_path / "direct" / result["outputs"]["transform"])).GetName() == "DisplacementFieldTransform"

    # bad requests: RequestError (HTTP 4xx under MONAI Label) naming what is wrong
    _refused(task, {"image": fixed}, 400, "'moving'")
    _refused(task, {"image": "", "moving": "ed"}, 400, "'image'")
    _refused(task, {"image": fixed, "moving": "no_such_image"}, 404, "no_such_image")
    _refused(task, {"image": fixed, "moving": "ed", "moving_label": "no_such_label"}, 404, "no_such_label")
    _refused(task, {"image": fixed, "moving": "vol"}, 422, "3-D")
    _refused(task, {"image": fixed, "moving": "broken"}, 422, "broken.nii.gz")
    _refused(task, {"image": fixed, "moving": "ed", "npc_model": "no_such_model"}, 404, "no_such_model")
    _refused(task, {"image": fixed, "moving": "ed", "npc_refine": "many"}, 400, "npc_refine")
    _refused(task, {"image": fixed, "moving": "ed", "npc_align": "affine"}, 400, "npc_align")
    assert len(list(results.iterdir())) == 2  # refused requests leave no file behind


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
    label_file, result = task(dict(task.config(), **base))  # the Slicer client sends the task config with the request
    assert result["model"] == "acdc" and result["dice_mean"] > result["dice_mean_initial"] + 0.05
    os.remove(label_file)
    label_file, result = task(dict(base, npc_model="phase-correlation", npc_refine=0))
    assert result["model"] == "phase-correlation"
    os.remove(label_file)
    # a click on the heart (MONAI Label "foreground", [i, j] = column, row) centres the heart window there
    label_file, result = task(dict(base, foreground=[[30, 20], [34, 24]]))
    assert result["model_grid"]["centre_voxel"] == pytest.approx([22.0, 32.0])
    os.remove(label_file)
    _refused(task, dict(base, foreground="the heart"), 400, "foreground")
    _refused(task, dict(base, foreground=[[500, 20]]), 422, "outside the fixed image")
    assert len(task._nets) == 2  # each network is loaded once and reused
    camus = module.NPCRegistration(model="camus")
    assert camus.is_valid() and camus.labels == {"lv": 1, "myocardium": 2, "la": 3}


def test_server_smoke(tmp_path):
    """A real MONAI Label server (``smoke_test.py``): one registration of a real pair, one tracking of a
    phantom cine (label uploaded), malformed requests to both tasks.

    The ACDC pair of ``../shared`` when present (10 slices), else a 2-slice phantom; a 5-frame, 2-slice
    64 x 64 cine; ``npc_refine=0`` (the network without test-time refinement) keeps it near 30 s on one thread.
    """
    pytest.importorskip("monailabel")
    pytest.importorskip("requests_toolbelt")
    smoke = _load("npc_monailabel_smoke", APP / "smoke_test.py")
    result = smoke.run_smoke_test(tmp_path / "work", refine=0, report=lambda line: None)
    assert result.params["result"] == "label" and result.params["dice_mean"] > result.params["dice_mean_initial"]
    assert [status for _, status, _ in result.malformed] == [status for *_, status, _ in smoke.MALFORMED]
    assert result.track_params["label_frame"] == smoke.CINE_LABEL_FRAME and len(result.track_dice) == 5
    assert result.track_dice[smoke.CINE_LABEL_FRAME] == 1.0 and min(result.track_dice) > 0.85  # against the phantom's truth
    assert 10 < result.track_params["function"]["lv_ef"] < 70
    assert not list((tmp_path / "work" / "app_data").glob("**/npc_result_*"))  # results deleted after sending


def _cine_study(folder):
    """The smoke test's 4-D phantom cine (5 frames, 2 slices, 64 x 64) in ``folder``: paths and true labels."""
    smoke = _load("npc_monailabel_smoke", APP / "smoke_test.py")
    folder.mkdir(parents=True, exist_ok=True)
    return smoke, smoke.phantom_cine(folder)


def _dice(a, b):
    return float(np.mean([2 * np.sum((a == v) & (b == v)) / (np.sum(a == v) + np.sum(b == v)) for v in (1, 2, 3)]))


def test_track_task(tmp_path):
    """A cine tracking request as the server sends it (uploaded label of frame 1), then bad requests."""
    module = _load_task_module("npc_track")
    smoke, cine = _cine_study(tmp_path)
    truth = cine["labels"]
    flat = _write(truth[0, 0].astype(np.float32), tmp_path / "flat.nii.gz")  # 2-D
    _write(truth[0].astype(np.float32), tmp_path / "es.nii.gz")  # 3-D on its own grid
    (tmp_path / "labels" / "final").mkdir(parents=True)
    _write(truth[0], tmp_path / "labels" / "final" / "es.nii.gz", sitk.sitkUInt8)  # off the cine's grid
    (tmp_path / "broken.nii.gz").write_bytes(b"\x1f\x8b\x08\x00 not a NIfTI file")
    results = tmp_path / "results"
    results.mkdir()

    task = module.NPCTrack(model="acdc", datastore=_Datastore(tmp_path), output_root=str(results))
    assert task.is_valid() and task.info()["type"] == "segmentation" and task.info()["dimension"] == 3
    assert task.config() == {"npc_model": "acdc", "label": "", "label_frame": "", "scheme": "direct", "structures": "",
                             "npc_refine": "", "npc_device": ""}
    frame = smoke.CINE_LABEL_FRAME
    request = {"model": "npc_track", "device": "cuda", "image": str(cine["cine"]), "npc_image_id": "cine",
               "label": str(cine["label"]), "label_frame": str(frame), "npc_refine": 0}
    label_file, params = task(dict(task.config(), **request))
    assert Path(label_file).parent == results and Path(label_file).name.startswith("npc_result_")
    tracked, source = sitk.ReadImage(label_file), sitk.ReadImage(str(cine["cine"]))
    assert tracked.GetDimension() == 4 and tracked.GetSize() == source.GetSize() == (64, 64, 2, 5)
    for what in ("Spacing", "Origin", "Direction"):
        assert np.allclose(getattr(tracked, f"Get{what}")(), getattr(source, f"Get{what}")()), what
    arr = sitk.GetArrayFromImage(tracked)
    assert np.array_equal(arr[frame], truth[frame])
    dice = [_dice(a, b) for a, b in zip(arr, truth)]
    assert min(dice) > 0.85, dice  # phantom frames 0-4 (ES = 2), the network alone
    assert params["result"] == "label" and params["model"] == "acdc" and params["scheme"] == "direct"
    assert params["label_frame"] == frame and params["label_frame_from"] == "request" and params["cine"] == "cine"
    assert params["frames"] == 5 and params["registrations"] == 4 and params["size"] == [64, 64, 2, 5]  # the reference onto each other frame
    f, lv = params["function"], np.asarray(params["volumes_ml"]["lv"])
    assert lv.shape == (5,) and f["ed_frame"] == int(lv.argmax()) and f["es_frame"] == int(lv.argmin())
    voxel_ml = 2.5 * 2.5 * 8.0 / 1000.0
    assert lv[frame] == pytest.approx(np.sum(truth[frame] == 3) * voxel_ml)  # the given frame keeps its label
    assert f["lv_ef"] == pytest.approx(100 * (lv.max() - lv.min()) / lv.max()) and 10 < f["lv_ef"] < 70
    assert f["lv_mass_g"] > 0 and "info_cfg" not in params
    strain = params["strain"]  # the myocardial strain of the tracked motion (monai_npc.strain)
    assert strain["circumferential"]["peak"] < 0 and np.isfinite(strain["radial"]["peak"]) and len(strain["segments"]) == 16
    assert strain["units"] == {"strain": "%", "time": "frame"}
    json.dumps(params)  # MONAI Label sends it to the client as JSON
    assert sorted(p.name for p in results.iterdir()) == [Path(label_file).name]

    base = {"image": str(cine["cine"]), "label": str(cine["label"]), "npc_refine": 0}
    _refused(task, {"label": str(cine["label"])}, 400, "'image'")
    _refused(task, dict(base, image="no_such_cine"), 404, "no_such_cine")
    _refused(task, dict(base, image="es"), 422, "a cine must be 4-D")
    _refused(task, dict(base, image=flat), 422, "2-D")
    _refused(task, dict(base, image="broken"), 422, "broken.nii.gz")
    _refused(task, dict(base, label=""), 400, "form field 'label'")
    _refused(task, dict(base, label="no_such_label"), 404, "no_such_label")
    _refused(task, dict(base, label_frame=5), 400, "label_frame 5 (from the request) is out of range")
    _refused(task, dict(base, label_frame="first"), 400, "label_frame must be a whole number")
    _refused(task, dict(base, label="es"), 422, "does not match the grid of frame")
    _refused(task, dict(base, label=str(tmp_path / "broken.nii.gz")), 422, "cannot read label")
    _refused(task, dict(base, scheme="zigzag"), 400, "zigzag")
    _refused(task, dict(base, npc_refine="many"), 400, "npc_refine")
    _refused(task, dict(base, npc_model="no_such_model"), 404, "no_such_model")
    assert len(list(results.iterdir())) == 1  # refused requests leave no file behind
    os.remove(label_file)


def test_track_task_defaults_from_datastore_and_info_cfg(tmp_path):
    """No label and no label_frame: the cine's final label in the datastore (4-D), the frame from Info.cfg's ED."""
    module = _load_task_module("npc_track")
    _, cine = _cine_study(tmp_path)
    truth = cine["labels"]
    labels = read_cine(cine["cine"]).to_4d(truth)  # a 4-D label with the cine's frames and geometry
    (tmp_path / "labels" / "final").mkdir(parents=True)
    sitk.WriteImage(labels, str(tmp_path / "labels" / "final" / "cine.nii.gz"))
    (tmp_path / "Info.cfg").write_text("ED: 3\nES: 1\nGroup: NOR\nNbFrame: 5\n")  # ACDC: 1-based frames
    task = module.NPCTrack(model="phase-correlation", datastore=_Datastore(tmp_path), output_root=str(tmp_path), scheme="direct")
    label_file, params = task({"model": "npc_track", "image": str(cine["cine"]), "npc_image_id": "cine"})
    arr = sitk.GetArrayFromImage(sitk.ReadImage(label_file))
    os.remove(label_file)
    assert params["label_frame"] == 2 and params["label_frame_from"] == "ED of Info.cfg" and params["scheme"] == "direct"
    assert np.array_equal(arr[2], truth[2]) and params["model"] == "phase-correlation" and params["registrations"] == 4
    assert params["info_cfg"]["ed"] == 2 and params["info_cfg"]["es"] == 0
    assert params["info_cfg"]["es_matches"] == (params["function"]["es_frame"] == 0)
    (tmp_path / "Info.cfg").write_text("ED: 9\nES: 1\n")
    _refused(task, {"image": str(cine["cine"]), "npc_image_id": "cine"}, 400, "label_frame 8 (from the ED of Info.cfg) is out of range")


def test_track_task_reads_the_numbering_it_is_given(tmp_path):
    """An M&Ms-numbered label (1 LV, 3 RV): with the request's structures (or the app's npc_structures) the volumes are
    the ACDC-numbered label's, and the tracked label keeps the uploaded values; a bad numbering is refused."""
    module = _load_task_module("npc_track")
    smoke, cine = _cine_study(tmp_path)
    given = sitk.ReadImage(str(cine["label"]))  # the smoke test's label of one frame, on the cine's frame grid
    frame = smoke.CINE_LABEL_FRAME
    mms = sitk.GetImageFromArray(np.choose(sitk.GetArrayFromImage(given), [0, 3, 2, 1]).astype(np.uint8))  # M&Ms: 1 LV, 3 RV
    mms.CopyInformation(given)
    acdc_file, mms_file = str(cine["label"]), str(tmp_path / "mms_label.nii.gz")
    sitk.WriteImage(mms, mms_file)
    task = module.NPCTrack(model="phase-correlation", output_root=str(tmp_path), scheme="direct")
    base = {"image": str(cine["cine"]), "label_frame": frame, "strain": False}
    runs = {}
    for name, request in {"acdc": dict(base, label=acdc_file), "mms": dict(base, label=mms_file, structures="lv=1,myo=2,rv=3"),
                          "unnamed": dict(base, label=mms_file),
                          "json": dict(base, label=mms_file, structures='{"lv": 1, "myo": 2, "rv": 3}')}.items():
        label_file, runs[name] = task(request)
        runs[name]["labels"] = sitk.GetArrayFromImage(sitk.ReadImage(label_file))
        os.remove(label_file)
    assert runs["acdc"]["volumes_ml"]["lv"][0] > 0
    # unnamed, the M&Ms label is read as the model's numbering (ACDC's): its RV counted as the LV
    assert runs["unnamed"]["volumes_ml"]["lv"][0] < 0.8 * runs["acdc"]["volumes_ml"]["lv"][0]
    assert runs["mms"]["structures"] == {"rv": 3, "myo": 2, "lv": 1}
    assert runs["mms"]["registration_settings"]["structures"]["from"] == "the structures argument"
    for name in ("mms", "json"):
        for structure in ("lv", "rv", "myo"):
            np.testing.assert_allclose(runs[name]["volumes_ml"][structure], runs["acdc"]["volumes_ml"][structure])
        assert np.array_equal(runs[name]["labels"], np.choose(runs["acdc"]["labels"], [0, 3, 2, 1]))  # the user's values
    configured = module.NPCTrack(model="phase-correlation", output_root=str(tmp_path), scheme="direct", structures="lv=1,myo=2,rv=3")
    label_file, params = configured(dict(base, label=mms_file))
    os.remove(label_file)
    np.testing.assert_allclose(params["volumes_ml"]["lv"], runs["acdc"]["volumes_ml"]["lv"])
    _refused(task, dict(base, label=mms_file, structures="lv=one"), 400, "structures: 'lv=one'")
    _refused(task, dict(base, label=mms_file, structures="heart=1"), 400, "'heart'")
    _refused(task, dict(base, label=mms_file, structures='{"lv": 1, "rv": 1}'), 400, "one value to two structures")
    with pytest.raises(ValueError, match="--conf npc_structures"):
        module.NPCTrack(model="phase-correlation", structures="lv=1,rv")


def test_tasks_keep_few_networks_and_read_absolute_paths_only(tmp_path, monkeypatch):
    """Each distinct npc_refine loads a network: only the last MAX_NETWORKS stay in memory. A relative path
    (which would resolve against the server's own folder, e.g. the repository) is not read; npc_device is checked."""
    module = _load_task_module()
    common = importlib.import_module("npc_monailabel_lib.common")
    root = APP.parents[2]
    task = module.NPCRegistration(model="acdc")
    for refine in range(common.MAX_NETWORKS + 3):
        net, _, _ = task._network({"npc_refine": refine})
        assert net.refiner.iterations == refine
    assert len(task._nets) == common.MAX_NETWORKS and [k[2] for k in task._nets] == list(range(3, common.MAX_NETWORKS + 3))
    monkeypatch.chdir(root)
    with pytest.raises(module.RequestError) as err:
        task._image("pyproject.toml", "moving")
    assert err.value.status_code == 404 and "absolute path" in err.value.detail
    assert task._image(str(root / "pyproject.toml"), "moving") == str(root / "pyproject.toml")
    with pytest.raises(module.RequestError, match="npc_device 'cuda:7'|npc_device 'gpu'"):
        task._network({"npc_device": "cuda:7" if not __import__("torch").cuda.is_available() else "gpu"})
