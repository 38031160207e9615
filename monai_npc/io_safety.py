"""All-or-nothing output files and folders: write to a temporary sibling, check, then rename.

Every file the package writes as a result (``register``'s folder, ``--batch``'s
``batch_summary.csv``, the bundle writers, the quickstart) goes through this module:

- :func:`atomic_write` runs a writer on a temporary name in the target's folder (same suffix, so
  SimpleITK / nibabel / matplotlib pick the same format), flushes it to disk, checks it
  (:func:`verify_file`: not empty, gzip streams complete, PNG/JSON/HDF5 intact) and renames it into
  place with :func:`os.replace`. A failure removes the temporary file, leaves the previous file
  untouched and raises :class:`OutputError`: one line naming the path and the cause
  (:func:`describe_os_error`: disk full, permission, missing folder...).
- :class:`AtomicFolder` does the same for a folder: files go into a temporary sibling folder that
  replaces the target as a whole (:func:`replace_folder`): on Linux with
  ``renameat2(RENAME_EXCHANGE)`` (the target is never missing), elsewhere by a rename to a backup
  name that :func:`recover_folder` restores at the next start if a kill came between the two renames.

Only the standard library is used (format checks import SimpleITK lazily).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import gzip
import json
import os
import shutil
import sys
import tempfile
import threading
import uuid
import zlib
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

__all__ = [
    "OutputError",
    "describe_os_error",
    "output_error",
    "temp_sibling",
    "fsync_path",
    "verify_file",
    "atomic_write",
    "atomic_write_text",
    "atomic_copy",
    "make_folder",
    "remove_stale",
    "replace_folder",
    "recover_folder",
    "AtomicFolder",
]

PathLike = Union[str, os.PathLike]

#: causes named in :class:`OutputError` messages, by ``errno``
_CAUSES = {
    errno.ENOSPC: "disk full (ENOSPC)",
    errno.EDQUOT: "disk quota exceeded (EDQUOT)",
    errno.EACCES: "permission denied (EACCES)",
    errno.EPERM: "operation not permitted (EPERM)",
    errno.EROFS: "read-only file system (EROFS)",
    errno.ENOENT: "missing folder (ENOENT)",
    errno.ENOTDIR: "a parent is not a folder (ENOTDIR)",
    errno.EISDIR: "is a folder (EISDIR)",
    errno.EIO: "I/O error (EIO)",
    errno.EFBIG: "file too large (EFBIG)",
}

#: ``renameat2`` flag that swaps two paths atomically (Linux >= 3.15)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class OutputError(ValueError):
    """An output could not be written completely; the message is one line naming the path and the cause.

    A ``ValueError`` so that the command line prints it as a user-facing error without a traceback.
    """


def describe_os_error(err: BaseException, folder: Optional[PathLike] = None) -> str:
    """A short cause for ``err``: ``"disk full (ENOSPC)"``, ``"permission denied (EACCES)"``...

    Writers that report failure without an ``errno`` (ITK's HDF5 and NIfTI writers raise
    ``RuntimeError``, or write a truncated file) get ``"disk full (ENOSPC)"`` when ``folder``'s
    file system has no space left, else the first line of their message.
    """
    code = getattr(err, "errno", None)
    if code in _CAUSES:
        return _CAUSES[code]
    if isinstance(err, OSError) and code is not None:
        return f"{err.strerror or err} ({errno.errorcode.get(code, code)})"
    if folder is not None:
        try:
            if shutil.disk_usage(folder).free == 0:
                return _CAUSES[errno.ENOSPC]
        except OSError:
            pass
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else 'no message'}"


def output_error(path: PathLike, err: BaseException) -> OutputError:
    """The :class:`OutputError` for a failed write of ``path`` (``err`` kept as its cause)."""
    if isinstance(err, OutputError):
        return err
    out = OutputError(f"cannot write {path}: {describe_os_error(err, Path(path).parent)}")
    out.__cause__ = err
    return out


def temp_sibling(path: PathLike, kind: str = "tmp") -> Path:
    """A fresh hidden name next to ``path`` that keeps its suffixes: ``.tmp-1a2b3c4d-warped.nii.gz``."""
    path = Path(path)
    return path.parent / f".{kind}-{uuid.uuid4().hex[:8]}-{path.name}"


def fsync_path(path: PathLike) -> None:
    """Flush a file or folder to disk (folders: best effort, not every platform allows it)."""
    path = Path(path)
    if path.is_dir():
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        getattr(os, "fdatasync", os.fsync)(fd)  # the data (and size), not the access times
    finally:
        os.close(fd)


def _check_gzip(path: Path) -> None:
    with gzip.open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def _check_png(path: Path) -> None:
    with path.open("rb") as f:
        head = f.read(8)
        f.seek(-12, os.SEEK_END)
        tail = f.read(12)
    if head != b"\x89PNG\r\n\x1a\n" or tail[4:8] != b"IEND":
        raise ValueError("not a complete PNG file")


#: ITK's HDF5 library is not thread-safe: every read and write of a transform file in this package holds it
#: (re-entrant: a write checks its file back inside)
HDF5_LOCK = threading.RLock()


def _check_hdf5(path: Path) -> None:
    with path.open("rb") as f:
        if f.read(8) != b"\x89HDF\r\n\x1a\n":
            raise ValueError("not an HDF5 file")
    import SimpleITK as sitk

    with HDF5_LOCK:
        sitk.ReadTransform(str(path))


def verify_file(path: PathLike, name: Optional[str] = None) -> None:
    """Check that a just-written file is complete; ``ValueError`` / ``OSError`` otherwise.

    Every file must be non-empty; by the suffix of ``name`` (default: ``path``'s name) ``.gz``
    streams are decompressed to their end, ``.png`` files must end with ``IEND``, ``.json``
    must parse and ``.h5`` transforms must read back with SimpleITK.
    """
    path = Path(path)
    name = (name or path.name).lower()
    if path.stat().st_size == 0:
        raise ValueError("the file is empty")
    if name.endswith(".gz"):
        _check_gzip(path)
    elif name.endswith(".png"):
        _check_png(path)
    elif name.endswith(".json"):
        json.loads(path.read_text())
    elif name.endswith(".h5"):
        _check_hdf5(path)


def _incomplete(path: Path, err: BaseException) -> OutputError:
    """The error for a file that was written without error but does not read back."""
    if isinstance(err, OSError):
        return output_error(path, err)
    cause = describe_os_error(err, path.parent)
    if cause.startswith("disk full"):
        return OutputError(f"cannot write {path}: {cause}")
    detail = str(err).strip().splitlines()
    reason = detail[0] if detail else type(err).__name__
    if isinstance(err, (EOFError, gzip.BadGzipFile, zlib.error)):
        reason = "truncated"
    return OutputError(f"cannot write {path}: the file is incomplete after writing ({reason}; disk full?)")


def write_checked(path: PathLike, writer: Callable[[Path], object], check: bool = True, name: Optional[str] = None) -> Path:
    """Run ``writer(path)``, flush the file to disk and :func:`verify_file` it.

    Any failure removes ``path`` and raises :class:`OutputError` naming ``name`` (default ``path``).
    Use it for files inside a temporary folder (:class:`AtomicFolder`); :func:`atomic_write` adds
    the temporary name and the rename.
    """
    path = Path(path)
    shown = Path(name) if name is not None else path
    try:
        writer(path)
        fsync_path(path)
    except BaseException as err:
        path.unlink(missing_ok=True)
        if isinstance(err, (OSError, RuntimeError, ValueError)):
            raise output_error(shown, err) from err
        raise
    if check:
        try:
            verify_file(path, shown.name)
        except Exception as err:  # noqa: BLE001 - every way a file can fail to read back
            path.unlink(missing_ok=True)
            raise _incomplete(shown, err) from err
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: PathLike, writer: Callable[[Path], object], check: bool = True) -> Path:
    """Write ``path`` all or nothing: ``writer(tmp)`` on :func:`temp_sibling`, flush, check, rename.

    ``writer`` gets the temporary path (same folder and suffixes as ``path``). On any failure the
    temporary file is removed, a previous ``path`` is left untouched and :class:`OutputError`
    names ``path`` and the cause. The file gets the usual ``0o666`` minus umask permissions.
    """
    path = Path(path)
    make_folder(path.parent)
    tmp = temp_sibling(path)
    write_checked(tmp, writer, check, name=str(path))
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise output_error(path, err) from err
        raise
    fsync_path(path.parent)
    return path


def atomic_write_text(path: PathLike, text: str) -> Path:
    """:func:`atomic_write` of a text (UTF-8)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_copy(src: PathLike, dst: PathLike) -> Path:
    """:func:`atomic_write` of a copy of ``src``."""
    return atomic_write(dst, lambda tmp: shutil.copyfile(src, tmp))


def make_folder(path: PathLike, what: str = "output folder") -> Path:
    """Create folder ``path`` (and its parents); :class:`OutputError` naming it and the cause when
    that fails, when it is an existing file, or when it is not writable."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} {path} is an existing file; give a folder path.")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create {what} {path}: {describe_os_error(err, path.parent)}.") from None
    if not os.access(path, os.W_OK):
        raise OutputError(f"cannot write {what} {path}: {_CAUSES[errno.EACCES]}.")
    return path


def remove_stale(paths: Iterable[PathLike]) -> None:
    """Remove result files of a previous run at the start of a new one (so none is taken as current)."""
    for p in paths:
        try:
            Path(p).unlink(missing_ok=True)
        except OSError as err:
            raise output_error(p, err) from err


# ------------------------------------------------------------------------------------------ folders


def _renameat2():
    """libc's ``renameat2`` (Linux, glibc >= 2.28), or ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2()


def exchange(a: PathLike, b: PathLike) -> bool:
    """Swap two existing paths atomically (``renameat2(RENAME_EXCHANGE)``); ``False`` where unsupported."""
    if _RENAMEAT2 is None:
        return False
    rc = _RENAMEAT2(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):  # file system without it
        return False
    raise OSError(code, os.strerror(code), str(b))


def _backup_name(out: Path) -> Path:
    return out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"


def _remove(path: Path) -> None:
    """Remove a replaced folder (a symlink is unlinked, what it points to is kept)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _between_renames() -> None:
    """Hook between the two renames of the portable fallback (tests kill the process here)."""


def replace_folder(tmp: PathLike, out: PathLike, attempts: int = 20) -> Path:
    """Make the complete folder ``tmp`` become ``out``; a previous ``out`` is replaced as a whole.

    ``out`` is never missing on Linux: the two are swapped with ``renameat2(RENAME_EXCHANGE)`` and
    the old content removed afterwards. Elsewhere ``out`` is renamed to a backup
    (``.{name}.old-XXXXXXXX``) before ``tmp`` takes its place; a failure in between renames the
    backup back, and a kill in between is repaired by :func:`recover_folder` at the next start.
    Concurrent writers of one ``out`` never mix: the last to finish wins.
    """
    tmp, out = Path(tmp), Path(out)
    for _ in range(attempts):
        try:
            os.rename(tmp, out)  # no ``out`` (or an empty one): one atomic step
            return out
        except OSError as err:
            if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                raise
        if out.exists() and not out.is_dir():
            raise OutputError(f"cannot write {out}: it became a file while registering.")
        try:
            if exchange(tmp, out):  # ``tmp`` now holds the previous content: a backup to remove
                old = _backup_name(out)
                os.rename(tmp, old)
                _remove(old)
                return out
        except FileNotFoundError:
            continue  # another writer moved ``out`` away first
        old = _backup_name(out)
        try:
            os.rename(out, old)
        except FileNotFoundError:
            continue
        try:
            _between_renames()
            os.rename(tmp, out)
        except BaseException:
            if not out.exists():
                os.rename(old, out)
            raise
        _remove(old)
        return out
    raise OutputError(f"cannot write {out}: another process keeps replacing it.")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def recover_folder(out: PathLike) -> None:
    """Repair what a kill during a write of ``out`` left: restore the newest backup of ``out``
    when ``out`` is missing, remove backups when it exists, and remove the temporary folders
    (``.{name}.tmp-PID-*``) of processes that no longer run."""
    out = Path(out)
    parent = out.parent
    if not parent.is_dir():
        return
    for tmp in parent.glob(f".{out.name}.tmp-*"):
        pid = tmp.name[len(out.name) + 6:].split("-", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
    backups = sorted(parent.glob(f".{out.name}.old-*"), key=lambda p: p.lstat().st_mtime)
    if not backups:
        return
    if not out.exists() and not out.is_symlink():
        try:
            os.rename(backups.pop(), out)
        except OSError:
            pass
    for b in backups:
        _remove(b)


class AtomicFolder:
    """A folder written all at once: files go into a temporary sibling folder, then replace ``out``.

    The temporary folder is created at once (so a bad parent fails before any work, as
    :class:`OutputError`); :meth:`put` writes one checked file into it, :meth:`commit` swaps it in
    (:func:`replace_folder`), :meth:`discard` removes it after a failure. A leftover of a killed
    previous commit is repaired first (:func:`recover_folder`).
    """

    def __init__(self, out: PathLike) -> None:
        self.out = Path(out)
        parent = self.out.absolute().parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            recover_folder(self.out)
            self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.tmp-{os.getpid()}-", dir=parent))
            os.chmod(self.tmp, 0o777 & ~_umask())
        except OSError as err:
            raise OutputError(f"cannot write output folder {self.out}: {describe_os_error(err, parent)} ({parent}).") from None

    def path(self, name: str) -> Path:
        """Where file ``name`` goes before the commit."""
        return self.tmp / name

    def put(self, name: str, writer: Callable[[Path], object], check: bool = True) -> Path:
        """Write file ``name`` with ``writer(path)``, flush and check it (:func:`write_checked`)."""
        return write_checked(self.path(name), writer, check, name=str(self.out / name))

    def commit(self) -> Path:
        """Flush the temporary folder and make it ``out`` (:func:`replace_folder`); returns ``out``."""
        try:
            fsync_path(self.tmp)
            replace_folder(self.tmp, self.out)
            fsync_path(self.out.absolute().parent)
        except BaseException as err:
            self.discard()
            if isinstance(err, OSError):
                raise output_error(self.out, err) from err
            raise
        return self.out

    def discard(self) -> None:
        """Remove the temporary folder (after a failure)."""
        shutil.rmtree(self.tmp, ignore_errors=True)


class RunFolder(AtomicFolder):
    """The output folder of one command's run, written all at once (:class:`AtomicFolder`).

    Checked *before* any work, so that a bad ``out`` fails at once with a ``ValueError`` naming it:
    an existing file, or a folder holding files other than ``outputs`` (the names a previous run
    of the same command writes), since :meth:`commit` replaces ``out`` as a whole (never missing,
    even after a kill; no stale file of an earlier run survives; two runs into one ``out`` never
    mix, the last to finish wins).
    """

    def __init__(self, out: PathLike, outputs: Iterable[str]) -> None:
        out = Path(out)
        recover_folder(out)
        if out.exists() and not out.is_dir():
            raise ValueError(f"output folder {out} is an existing file; give a folder path.")
        if out.is_dir():
            allowed = set(outputs)
            foreign = sorted(p.name for p in out.iterdir() if p.name not in allowed)
            if foreign:
                shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
                raise ValueError(
                    f"output folder {out} holds files that are not outputs of a previous run ({shown}); "
                    "it would be replaced as a whole: give a new or empty folder."
                )
        super().__init__(out)
