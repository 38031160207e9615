"""The READMEs run as written.

Every fenced ``bash`` and ``python`` block of the README and the bundle READMEs is found by :func:`readme_blocks`,
so a new block is picked up without touching this file. Each command of a ``bash`` block runs with its exact
arguments, in the folder the README runs it from (``cd`` and ``cp`` lines of the block before it are replayed), on
small generated data laid out under the file names it uses (``tests/readme_layouts.py``); each ``python`` block
runs in a session that has the imports of the blocks above it. A command passes when it exits with 0 and writes
the files the README says it writes (:data:`PROMISES`). Commands that cannot run in a test are listed in
:data:`SKIPS` with the reason; nothing else is left out.

Only one thing is substituted: the placeholder roots of the user's own data (``/data/...``, ``/path/to/...``) and of
scratch folders (``/tmp/...``) become folders of the test's workspace, holding data in the layouts the READMEs
name. Commands run in this process (``monai-npc ARGS`` as the console script does, ``python -m MODULE ARGS`` with
``runpy``), to spare each of them the seconds of importing torch and MONAI; the process state they touch (working
folder, ``sys.argv``, environment, logging, torch threads) is restored after each. A command that several READMEs
give in the same folder (or in a copy of a bundle folder that a README's ``cp -r`` made) runs once.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import gc
import glob
import io
import json
import logging
import os
import re
import runpy
import shlex
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest
import torch

from tests.conftest import SHARED
from tests import readme_layouts as layouts

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

ROOT = Path(__file__).resolve().parents[1]

#: README -> (folder its bash blocks run from, folder its python blocks run from), relative to the repository root
DOCS: Dict[str, Tuple[str, str]] = {
    "README.md": (".", "."),
    "bundles/README.md": ("bundles/npc_acdc", "."),  # "Then, from a bundle folder (`cd bundles/npc_acdc`)"
    "bundles/npc_acdc/docs/README.md": ("bundles/npc_acdc", "bundles/npc_acdc"),
    "bundles/npc_camus/docs/README.md": ("bundles/npc_camus", "bundles/npc_camus"),
}

#: (pattern searched in a block's first command, folder the block runs from instead of its README's): a block that
#: copies a bundle folder names it from the repository root
BLOCK_FOLDERS: List[Tuple[str, str]] = [(r"^cp -r bundles/", ".")]

#: placeholder roots of the READMEs' commands -> folders of the test's workspace (under ``abs/``)
PLACEHOLDERS = ("/data/", "/path/to/", "/tmp/")

#: (pattern searched in a command, why it does not run in a test); each must match a command (tested)
SKIPS: List[Tuple[str, str]] = [
    (r"^pip install\b", "installs packages: the test runs in the installed environment"),
    (r"^python -m pytest\b", "the test suite itself"),
    (r"^torchrun\b", "several processes (GPUs); tests/test_tracking_cohort.py and test_bundle.py cover the shared work"),
    (r"--config_file configs/train(_crops)?\.json|examples/train_acdc_stacks\.py",
     "training (minutes to days); tests/test_bundle.py and test_bundle_resume.py train on phantoms with tiny networks"),
    (r"--ckpt_path runs/acdc_cpu/models/model\.pt", "needs the weights of the CPU training above (skipped)"),
    (r"^(OMP_NUM_THREADS=1 )?python benchmarks/(results_table|heldout)\.py",
     "a benchmark over a real data set (up to 35 minutes; the official ACDC test split is not for tests)"),
]

#: (pattern, file under ../shared the command's placeholder needs, reason) for commands that need a real file
NEEDS_SHARED: List[Tuple[str, Path, str]] = [
    (r"verify_metadata", SHARED / "monai" / "meta_schema_20240725.json",
     "verify_metadata needs a local copy of MONAI's bundle schema (../shared/monai/meta_schema_20240725.json)"),
]

REGISTER_FILES = ("warped.nii.gz", "warped_label.nii.gz", "transform.h5", "displacement.nii.gz", "transform_slicer.h5",
                  "jacobian.nii.gz", "reliability.nii.gz", "overview.png", "summary.json")
TRACK_FILES = ("labels_4d.nii.gz", "volumes.csv", "function.json", "function.png")
STRAIN_FILES = ("strain.csv", "strain.json", "strain_curves.png", "strain_bullseye.png")

#: the patient of the README's tracking example: ED is frame 4 in its Info.cfg (``../shared/data/acdc_cine_example``)
EXAMPLE = "patient090"
EXAMPLE_ED = 4


# --------------------------------------------------------------------------------------------- reading the READMEs


@dataclasses.dataclass(frozen=True)
class Block:
    doc: str
    line: int
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Command:
    block: Block
    index: int
    text: str  # continuation lines joined, comment stripped

    @property
    def argv(self) -> List[str]:
        return shlex.split(self.text)

    @property
    def id(self) -> str:
        return f"{self.block.id}#{self.index}"


def readme_blocks(doc: str) -> List[Block]:
    """The fenced code blocks of ``doc`` (relative to the repository root), with the line of their opening fence."""
    text = (ROOT / doc).read_text()
    return [Block(doc, text[:m.start()].count("\n") + 1, m.group(1), m.group(2))
            for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)]


def block_commands(block: Block) -> List[Command]:
    """The commands of a bash block: continuation lines joined, comments and blank lines dropped."""
    lines = (_without_comment(line) for line in re.sub(r"\s*\\\n\s*", " ", block.text).splitlines())
    return [Command(block, i, line) for i, line in enumerate(line for line in lines if line)]


def _without_comment(line: str) -> str:
    """``line`` as written up to its shell comment (``""`` for a comment or blank line)."""
    tokens = shlex.split(line, comments=True)
    if not tokens:
        return ""
    for m in re.finditer(r"\s#", line):
        with contextlib.suppress(ValueError):  # a '#' inside quotes: the prefix does not parse
            if shlex.split(line[:m.start()]) == tokens:
                return line[:m.start()].strip()
    return line.strip()


def all_blocks() -> List[Block]:
    return [b for doc in DOCS for b in readme_blocks(doc)]


def all_commands() -> List[Command]:
    return [c for b in all_blocks() if b.lang == "bash" for c in block_commands(b)]


def skip_reason(command: Command) -> Optional[str]:
    return next((reason for pattern, reason in SKIPS if re.search(pattern, command.text)), None)


def block_folder(block: Block) -> str:
    """The folder (relative to the repository root) a bash block runs from."""
    first = block_commands(block)[0].text
    return next((folder for pattern, folder in BLOCK_FOLDERS if re.search(pattern, first)), DOCS[block.doc][0])


def _is_setup(command: Command) -> bool:
    return command.argv[0] in ("cd", "cp")


RUN = [c for c in all_commands() if not _is_setup(c)]
PYTHON = [b for b in all_blocks() if b.lang == "python"]


# ------------------------------------------------------------------------------------------- what each command writes


def _option(argv: Sequence[str], flag: str, default: Optional[str] = None) -> Optional[str]:
    return argv[argv.index(flag) + 1] if flag in argv else default


def _config_output_dir(cwd: Path, argv: Sequence[str]) -> Path:
    """``--output_dir``, else the ``output_dir`` the bundle config sets (``"$@bundle_root + '/eval/track'"``)."""
    given = _option(argv, "--output_dir")
    if given is not None:
        return cwd / given
    config = json.loads((cwd / _option(argv, "--config_file", "")).read_text())
    return cwd / re.search(r"'/([^']+)'", config["output_dir"]).group(1)


def _register_batch(cwd: Path, argv: Sequence[str]) -> List[str]:
    from monai_npc.apps.registration.files import read_pairs_csv

    return [str(Path(row["out"]) / name) for row in read_pairs_csv(cwd / _option(argv, "--batch")) for name in REGISTER_FILES]


def _bundle_run(cwd: Path, argv: Sequence[str]) -> List[str]:
    out, config = _config_output_dir(cwd, argv), Path(_option(argv, "--config_file")).name
    if config == "inference.json" and cwd.name.startswith("npc_acdc"):  # whole stacks: a folder per study and direction
        return [str(out / "summary.json"), str(out / "*" / "*_to_*" / "warped.nii.gz"), str(out / "*" / "*_to_*" / "transform.h5")]
    if config.startswith("inference"):  # 128 x 128 crops
        return [str(out / "metrics.json"), str(out / "*_warped.nii.gz")]
    if config.startswith("evaluate"):
        return [str(out / "metrics.json")]
    if config == "track.json":
        if "--cohort_csv" in argv:
            return [str(out / "cohort.csv"), str(out / "*" / "labels_4d.nii.gz")]
        return [str(out / name) for name in TRACK_FILES + STRAIN_FILES]  # track.json: strain true
    raise AssertionError(f"no promise for bundle config {config}")


#: (pattern searched in a command, the files it writes: paths or glob patterns, relative to its folder)
PROMISES: List[Tuple[str, Callable[[Path, Sequence[str]], List[str]]]] = [
    (r"^monai-npc quickstart\b", lambda cwd, a: [f"{_option(a, '--out')}/{f}" for f in ("metrics.json", "overview.png")]
     + [f"{_option(a, '--out')}/registered/pair00/{f}" for f in REGISTER_FILES]),
    (r"^monai-npc register .*--moving\b", lambda cwd, a: [f"{_option(a, '--out')}/{f}" for f in REGISTER_FILES]),
    (r"^monai-npc register --batch\b", _register_batch),
    (r"^monai-npc track --cine\b", lambda cwd, a: [f"{_option(a, '--out')}/{f}" for f in TRACK_FILES + (STRAIN_FILES if "--strain" in a else ())]),
    (r"^monai-npc track --batch\b", lambda cwd, a: [f"{_option(a, '--out')}/cohort.csv", f"{_option(a, '--out')}/*/labels_4d.nii.gz"]),
    (r"^python -m monai\.bundle run\b", _bundle_run),
    (r"^python -m monai\.bundle ckpt_export\b", lambda cwd, a: [_option(a, "--filepath")]),
    (r"^python -m monai\.bundle (verify_net_in_out|verify_metadata)\b", lambda cwd, a: []),  # raises on a failed check
    (r"^python -m monai_npc\.cli\.main verify-weights\b", lambda cwd, a: []),  # exits 1 on a mismatch
]


def promised(command: Command, cwd: Path, argv: Sequence[str]) -> List[str]:
    rules = [promise for pattern, promise in PROMISES if re.search(pattern, command.text)]
    assert len(rules) == 1, f"{command.id}: {len(rules)} rules of PROMISES match {command.text!r}; say what it writes"
    return rules[0](cwd, argv)


def assert_written(cwd: Path, patterns: Sequence[str], since: float, what: str) -> None:
    """Every pattern names at least one file written (modified) after ``since``."""
    for pattern in patterns:
        full = pattern if os.path.isabs(pattern) else str(cwd / pattern)
        found = [Path(p) for p in glob.glob(full, recursive=True)] if "*" in full else [Path(full)]
        fresh = [p for p in found if p.is_file() and p.stat().st_mtime >= since - 1.0]
        assert fresh, f"{what}: wrote no {pattern}"


# ----------------------------------------------------------------------------------------------------- the workspace


@dataclasses.dataclass
class Workspace:
    repo: Path  # the repository root (bundles copied) and the user's folder of README.md's commands
    abs: Path  # where the placeholder roots /data/, /path/to/, /tmp/ point
    done: Dict[Tuple[str, str], str] = dataclasses.field(default_factory=dict)  # (folder, command) -> first test id
    copies: Dict[Path, Path] = dataclasses.field(default_factory=dict)  # folder copied by a README's cp line -> source

    def key(self, cwd: Path, command: Command) -> Tuple[str, str]:
        """What makes a command the same as one run before: its text and folder, where a copy of a bundle folder made
        by a README's ``cp -r`` counts as the folder itself (tests/test_bundle_travel.py runs a copy)."""
        for copy, source in self.copies.items():
            if cwd == copy or copy in cwd.parents:
                cwd = source / cwd.relative_to(copy)
        return str(cwd), command.text

    def path(self, token: str) -> str:
        for root in PLACEHOLDERS:
            if token.startswith(root):
                return str(self.abs / token.lstrip("/"))
        return token


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("readme") / "repo", tmp_path_factory.mktemp("readme_abs"))
    for bundle in ("npc_acdc", "npc_camus"):
        shutil.copytree(ROOT / "bundles" / bundle, ws.repo / "bundles" / bundle, ignore=shutil.ignore_patterns("eval", "runs", "__pycache__"))
    # README.md: a pair named as in "Register your own images", a CSV of pairs, the tracking example's study
    layouts.write_pair(ws.repo, {"ED": "ED.nii.gz", "ES": "ES.nii.gz", "ED_gt": "ED_gt.nii.gz", "ES_gt": "ES_gt.nii.gz"})
    layouts.write_csv(ws.repo / "pairs.csv", [
        {"moving": "ED.nii.gz", "fixed": "ES.nii.gz", "moving_label": "ED_gt.nii.gz", "fixed_label": "ES_gt.nii.gz", "out": "pairs/ed_es"},
        {"moving": "ES.nii.gz", "fixed": "ED.nii.gz", "moving_label": "ES_gt.nii.gz", "fixed_label": "ED_gt.nii.gz", "out": "pairs/es_ed"},
    ])
    info = layouts.write_acdc_cine_study(ws.repo, EXAMPLE, ed=EXAMPLE_ED)
    layouts.write_csv(ws.repo / "cohort.csv", [{"cine": f"{EXAMPLE}_4d.nii.gz", "label": f"{EXAMPLE}_frame{info['ED']:02d}_gt.nii.gz"}])
    # the bundles' placeholders: the user's ACDC / CAMUS folders, a cine, a schema copy, scratch folders
    data = ws.abs / "data"
    layouts.write_acdc_cine_study(data / "patient001", "patient001", ed=1)
    layouts.write_csv(ws.repo / "bundles" / "npc_acdc" / "cohort.csv", [
        {"cine": str(data / "patient001" / "patient001_4d.nii.gz"), "label": str(data / "patient001" / "patient001_frame01_gt.nii.gz")}])
    layouts.write_acdc_stacks([data / "ACDC" / "testing", data / "clinic_stacks", data / "stacks", data / "ACDC_test"], patients=1, first_id=101)
    layouts.write_acdc_stacks([data / "ACDC" / "training"], patients=2)  # the protocol's split of 2 patients: 1 test
    layouts.write_acdc_ssl4mis(ws.abs / "path" / "to" / "acdc_ssl4mis", patients=5)  # 56/14/0 scaled to 5: 1 val
    layouts.write_camus_folder(data / "CAMUS", patients=4)  # 300/100/100 scaled to 4 patients: 1 test
    split = json.loads((ROOT / "bundles" / "npc_camus" / "configs" / "camus224_split.json").read_text())
    layouts.write_camus_png_copy(ws.abs / "path" / "to" / "camus_224", split["test"])
    for _, needed, _ in NEEDS_SHARED:
        if needed.is_file():
            (ws.abs / "path" / "to").mkdir(parents=True, exist_ok=True)
            shutil.copy(needed, ws.abs / "path" / "to" / needed.name)
    (ws.abs / "tmp").mkdir()
    return ws


# -------------------------------------------------------------------------------------------------- running a command


@contextlib.contextmanager
def process_state(cwd: Path, env: Dict[str, str], argv: List[str]) -> Iterator[None]:
    """Run as a fresh process would see it: ``cwd``, ``sys.argv``, the environment plus ``env``; restore all after,
    with logging (bundle runs load ``configs/logging.conf``), warnings filters and torch's thread count."""
    saved_env, saved_argv, saved_cwd, threads = dict(os.environ), list(sys.argv), os.getcwd(), torch.get_num_threads()
    root = logging.getLogger()
    saved_root = (list(root.handlers), root.level)
    saved_loggers = {name: (lg.disabled, lg.level, list(lg.handlers), lg.propagate)
                     for name, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    os.environ.update(env)
    sys.argv = argv
    os.chdir(cwd)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module is already imported
            yield
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        torch.set_num_threads(threads)
        gc.unfreeze()  # monai-npc freezes the collector before it exits
        root.handlers[:], root.level = saved_root
        for name, lg in logging.root.manager.loggerDict.items():
            if isinstance(lg, logging.Logger):
                lg.disabled, lg.level, lg.handlers[:], lg.propagate = saved_loggers.get(name, (False, logging.NOTSET, [], True))


def execute(argv: List[str], cwd: Path, what: str) -> None:
    """``[VAR=value ...] monai-npc ARGS | python -m MODULE ARGS | python SCRIPT ARGS`` in this process; it must
    return or exit with 0."""
    env = {}
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
        key, value = argv.pop(0).split("=", 1)
        env[key] = value
    if argv[0] == "monai-npc":  # the console script: monai_npc.cli.main.entry_point
        target, module, args = "monai_npc.cli.main", True, argv
    elif argv[:2] == ["python", "-m"]:
        target, module, args = argv[2], True, [argv[2], *argv[3:]]
    elif argv[0] == "python":
        target, module, args = argv[1], False, argv[1:]
    else:
        raise AssertionError(f"{what}: the test cannot run {argv[0]!r}; run it here or list it in SKIPS")
    with process_state(cwd, env, args):
        try:
            if module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
        except SystemExit as stop:
            assert stop.code in (None, 0), f"{what}: exited with {stop.code}"


def run_setup(command: Command, ws: Workspace, cwd: Path) -> Path:
    """A ``cd`` or ``cp -r`` line of a block (``cp`` once per workspace); returns the folder after it."""
    argv = [ws.path(a) for a in command.argv]
    if argv[0] == "cd":
        target = cwd / argv[1]
        assert target.is_dir(), f"{command.id}: {command.text!r}: no folder {target}"
        return target
    assert argv[:2] == ["cp", "-r"] and len(argv) == 4, f"{command.id}: the test runs 'cp -r SRC DST' only, not {command.text!r}"
    key = ws.key(cwd, command)
    if key not in ws.done:
        src, dst = cwd / argv[2], cwd / argv[3]
        dst = dst / src.name if dst.is_dir() else dst
        shutil.copytree(src, dst)
        ws.copies[dst] = src
        ws.done[key] = command.id
    return cwd


# ---------------------------------------------------------------------------------------------------------- the tests


def test_readmes_have_only_bash_and_python_blocks() -> None:
    """Every fenced block is one this test runs (a ``sh`` or unlabelled block would be missed)."""
    blocks = all_blocks()
    assert {b.doc for b in blocks} == set(DOCS)
    assert {b.lang for b in blocks} <= {"bash", "python"}, sorted({b.id + " " + b.lang for b in blocks if b.lang not in ("bash", "python")})


def test_every_skip_names_a_command() -> None:
    commands = all_commands()
    for pattern, reason in SKIPS:
        assert any(re.search(pattern, c.text) for c in commands), f"SKIPS entry {pattern!r} ({reason}) matches no README command"


@pytest.mark.skipif(not (SHARED / "data" / "acdc_cine_example" / EXAMPLE).is_dir(), reason="../shared/data/acdc_cine_example is absent")
def test_readme_names_the_example_cines_files() -> None:
    """The example cine a new user tries the README on holds every ``patient090_*`` file the README names, and the
    layout the commands run on has its ED frame."""
    example = SHARED / "data" / "acdc_cine_example" / EXAMPLE
    named = set(re.findall(rf"\b{EXAMPLE}_\w+\.nii\.gz", (ROOT / "README.md").read_text()))
    assert named, f"README.md names no {EXAMPLE} file"
    missing = sorted(n for n in named if not (example / n).is_file())
    assert not missing, f"README.md names {missing}, which {example} does not hold"
    assert f"ED: {EXAMPLE_ED}" in (example / "Info.cfg").read_text()


@pytest.mark.parametrize("command", RUN, ids=[c.id for c in RUN])
def test_readme_command_runs(command: Command, workspace: Workspace) -> None:
    reason = skip_reason(command)
    if reason:
        pytest.skip(f"{command.text!r}: {reason}")
    for pattern, needed, why in NEEDS_SHARED:
        if re.search(pattern, command.text) and not needed.is_file():
            pytest.skip(why)
    cwd = workspace.repo / block_folder(command.block)
    for before in block_commands(command.block)[:command.index]:
        if _is_setup(before):
            cwd = run_setup(before, workspace, cwd)
    key = workspace.key(cwd, command)
    if key in workspace.done:
        return  # the same command in the same folder ran (and passed) in an earlier test
    argv = [workspace.path(a) for a in command.argv]
    start = time.time()
    execute(list(argv), cwd, f"{command.id} {command.text!r}")
    assert_written(cwd, promised(command, cwd, argv), start, f"{command.id} {command.text!r}")
    workspace.done[key] = command.id


def _imports_above(block: Block) -> str:
    """The import statements of the python blocks above ``block`` in its README: a reader's session."""
    above = [b for b in readme_blocks(block.doc) if b.lang == "python" and b.line < block.line]
    nodes = [n for b in above for n in ast.parse(b.text).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return "\n".join(ast.unparse(n) for n in nodes)


def _tracked_every_frame(cwd: Path, res: object) -> None:
    """The carried labels and volumes cover every frame of the cine (``NbFrame`` of the study's ``Info.cfg``)."""
    frames = int(re.search(r"NbFrame: (\d+)", (cwd / "Info.cfg").read_text()).group(1))
    assert res.labels.shape[0] == frames and all(len(v) == frames for v in res.volumes.values()), (res.labels.shape, frames)
    assert res.labels.max() == 3  # RV, myocardium and LV carried


#: (pattern searched in a python block, check of (folder, namespace, printed text, start time))
PYTHON_PROMISES: List[Tuple[str, Callable[[Path, dict, str, float], None]]] = [
    (r'reg\.save\("(\w+)"\)', lambda cwd, ns, out, t: assert_written(cwd, [f"result/{f}" for f in REGISTER_FILES], t, "reg.save('result')")),
    (r"monai_npc\.track\(", lambda cwd, ns, out, t: _tracked_every_frame(cwd, ns["res"])),
    (r"print\(tuple\(ddf\.shape\)\)", lambda cwd, ns, out, t: None if out.strip() == "(1, 2, 128, 128)" else pytest.fail(out)),
]


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_readme_python_block_runs(block: Block, workspace: Workspace) -> None:
    checks = [check for pattern, check in PYTHON_PROMISES if re.search(pattern, block.text)]
    assert len(checks) == 1, f"{block.id}: {len(checks)} rules of PYTHON_PROMISES match; say what the block does"
    cwd = workspace.repo / DOCS[block.doc][1]
    namespace: dict = {"__name__": "__main__"}
    printed = io.StringIO()
    start = time.time()
    with process_state(cwd, {}, ["python"]), contextlib.redirect_stdout(printed):
        exec(compile(_imports_above(block) + "\n" + block.text, block.id, "exec"), namespace)
    checks[0](cwd, namespace, printed.getvalue(), start)
