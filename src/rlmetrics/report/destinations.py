"""Where a command writes: checked before anything is written, and written whole or not at all.

The commands that write files (``rlmetrics report --plot/--html/--timeline``, ``alerts -o``,
``--tests``, ``stack --dir``, ``demo --output``) share these checks, so one mistake — a folder
named where a file goes, a file named where a folder goes, a path under a file, a folder that
cannot be created — is said in the same words by each, in one line, before anything is
written.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

__all__ = ["NotWritten", "file_problem", "folder_problem", "write_all"]


class NotWritten(OSError):
    """Nothing was written; ``str()`` says why in one line (the folder or the file that
    failed, and the system's reason)."""


def _nearest(path: Path) -> Path:
    """The nearest of ``path`` and its ancestors that exists (or is a dangling link)."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(path.anchor or ".")


def _on_the_way(path: Path, folder: Path) -> str | None:
    """Why ``folder`` (where ``path`` goes) can be neither used nor created: a file on the
    way; None when it is a folder or could be one."""
    existing = _nearest(folder)
    return None if existing.is_dir() else f"{path}: {existing} is a file, not a folder"


def _writable(path: Path, folder: Path) -> str | None:
    existing = _nearest(folder)
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{path}: cannot write in {existing} (permission denied)"
    return None


def file_problem(path: str | os.PathLike[str], *, create_folders: bool = False) -> str | None:
    """Why a file cannot be written at ``path``, or None: it must not be a folder, and its
    folder must exist (or, with ``create_folders``, be one that can be created: no file on
    the way) and be writable."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder: name a file"
    folder = path.parent
    problem = _on_the_way(path, folder)
    if problem is None and not create_folders and not folder.is_dir():
        problem = f"{path}: no such folder {folder} (create it first)"
    if problem is None and path.exists() and not os.access(path, os.W_OK):
        problem = f"{path}: cannot write it (permission denied)"
    return problem or _writable(path, folder)


def folder_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be a folder to write in, or None: it must be a folder, or not
    exist yet with no file on the way, and be writable."""
    path = Path(path)
    if os.path.lexists(path) and not path.is_dir():
        return f"{path} is a file: name a folder"
    return _on_the_way(path, path) or _writable(path, path)


def write_all(files: Sequence[tuple[Path, str]], folders: Sequence[Path] = ()) -> None:
    """Write every file (``(path, text)``), creating its folder and each of ``folders``, or
    none of them: each text goes first to a hidden file beside its path, and only when every
    one is written do they take their paths (a rename, which a full disk does not fail). On an
    ``OSError`` (a folder that cannot be created, a full disk) what was written is removed,
    the folders created included, and :class:`NotWritten` says which."""
    created: list[Path] = []
    staged: list[tuple[Path, Path]] = []
    doing = ""  # what was under way, for the one line that says what failed
    try:
        for folder in (*folders, *(path.parent for path, _text in files)):
            missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
            for new in reversed(missing):
                doing = f"create the folder {new}"
                new.mkdir()
                created.append(new)
        for path, text in files:
            doing = f"write {path}"
            temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
            # Mode "x" creates it with the umask's permissions, as writing ``path`` would.
            with temporary.open("x", encoding="utf-8") as handle:
                staged.append((temporary, path))
                handle.write(text)
        for temporary, path in staged:
            doing = f"write {path}"
            os.replace(temporary, path)
    except OSError as exc:
        for temporary, _path in staged:
            with contextlib.suppress(OSError):
                temporary.unlink()
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise NotWritten(f"cannot {doing}: {exc.strerror or exc}") from exc
