"""Writing files so that nothing is ever half-written (temp file in the same folder, fsync, rename), and
checking an output can be written before the work that produces it starts."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from engine.errors import UserError


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import: os.umask is process-wide, so never toggle it in threads


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Yield a file object; on success it replaces `path` atomically, on error it leaves `path` as it was
    (and removes the folders it made for it)."""
    path = Path(path)
    if path.is_dir():
        check_output_file(path)  # raises: replacing a directory would fail only after the work
    made = list(itertools.takewhile(lambda d: not d.exists(), (path.parent, *path.parent.parents)))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError:
        check_output_file(path)  # a UserError naming the reason, when it is one a user can fix
        raise
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the mode open() would
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        for folder in made:  # deepest first; one another writer has used since stays
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_write(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path, "w") as f:
        f.write(text)


def _writable_folder(folder: Path, target: str) -> None:
    """UserError unless `folder` is, or could be created as, a folder we can write in. Nothing is left
    behind: the probe is a temp file in the nearest existing ancestor, removed at once."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{target}: cannot be created: {existing} is a file, not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise UserError(f"{target}: cannot write in {existing} ({e.strerror or e})") from None


def check_output_file(path: str | os.PathLike, option: str = "") -> Path:
    """Fail before any work when `path` cannot be written as a file (a directory, a path under a file,
    a read-only place); creates nothing. `option` (e.g. "-o") prefixes the message."""
    p = Path(path)
    target = f"{option} {p}".lstrip()
    if p.is_dir():
        raise UserError(f"{target}: is a directory; give a file name")
    _writable_folder(p.parent, target)
    return p


def check_output_dir(path: str | os.PathLike, option: str = "") -> Path:
    """Fail before any work when `path` cannot be (created as) a writable directory; creates nothing."""
    p = Path(path)
    target = f"{option} {p}".lstrip()
    if p.exists() and not p.is_dir():
        raise UserError(f"{target}: is a file, not a directory")
    _writable_folder(p, target)
    return p


@contextlib.contextmanager
def removed_if_refused(path: str | os.PathLike) -> Iterator[Path]:
    """Yield `path`; if it did not exist and the block raises UserError, remove what the block made of it,
    so a run refused after some work (data found too small once its cache was built, say) leaves nothing
    behind. Folders that existed are left alone: they may hold the user's earlier work."""
    p = Path(path)
    made = list(itertools.takewhile(lambda d: not d.exists(), (p, *p.parents)))
    try:
        yield p
    except UserError:
        if made:
            shutil.rmtree(made[-1], ignore_errors=True)
        raise


def check_settings_file(path: Path, settings: dict, holds: str) -> None:
    """A UserError unless the JSON settings file `path` (if it exists) records `settings`: a run with
    other settings would add records that do not belong with the folder's (`holds`: what it holds)."""
    if not path.exists():
        return
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: unreadable ({e}); use a new folder") from None
    if before != settings:
        raise UserError(
            f"{path.parent} holds {holds} made with other settings ({path}: {json.dumps(before)}); "
            "rerun with those, or use a new folder"
        )
