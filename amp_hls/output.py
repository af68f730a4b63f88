"""Where amp-hls writes: output paths checked before any work, and generated directories that
never lose a user's file.

``check_output_file`` is for one file (``--json``, ``--checkpoint``, ``--plot``, ``export -o``):
it must be creatable or writable, and not a directory. ``ProjectOutput`` is for a generated
project (``generate -o DIR``): the generator writes into a fresh staging directory inside ``DIR``,
and only then are its files moved into place, under three rules:

- ``DIR`` must be new, empty, or a project amp-hls wrote: its ``RECORD`` (a sidecar of
  ``manifest.json``) lists the SHA-256 of every file amp-hls put there;
- a file is overwritten only if amp-hls wrote it and nobody changed it since; any other (a
  user's edit, a user's own file under a generated name) needs ``force``;
- a file is deleted only if amp-hls wrote it, nobody changed it, and this generation no longer
  writes it (a previous graph's kernel). Files amp-hls never wrote are never touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from .errors import AmpHlsError

RECORD = ".amp-hls-files.json"  # in a generated directory: what amp-hls wrote there
RECORD_SCHEMA = "amp-hls.files"
MANIFEST = "manifest.json"
STAGE_PREFIX = ".amp-hls-stage-"
SHOWN = 8  # files named in one message


def check_output_file(path: str | Path | None, option: str) -> None:
    """That ``path`` (given as ``option``) can be written: not empty, not a directory, and its
    directory (or the nearest one that exists) accepts a new file. Nothing is left behind."""
    if path is None:
        return
    if str(path) == "":
        raise AmpHlsError(f"{option} needs a file name, got an empty one")
    path = Path(path)
    if path.is_dir():
        raise AmpHlsError(f"{option} {path} is a directory: give a file name")
    if path.exists():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            raise AmpHlsError(f"{option} {path} cannot be written: {exc.strerror}") from None
        return
    _check_creatable(path.parent, f"{option} {path}")


def _check_creatable(directory: Path, what: str) -> None:
    """That files can be created in ``directory``, or where it would be created."""
    existing = directory
    while not existing.exists():
        if existing.is_symlink():
            raise AmpHlsError(f"{what}: {existing} is a dangling symbolic link")
        existing = existing.parent
    if not existing.is_dir():
        raise AmpHlsError(f"{what}: {existing} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise AmpHlsError(f"{what}: cannot create files in {existing}: {exc.strerror}") from None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_output_dir(root: str | Path, force: bool = False) -> dict[str, str]:
    """Whether amp-hls may generate into ``root``; the files it wrote there before (relative
    path -> SHA-256). AmpHlsError, before any work, for an empty path, a file, a non-empty
    directory that is not a project amp-hls wrote, or one whose files a user changed (both
    unless ``force``)."""
    if str(root) == "":
        raise AmpHlsError("-o needs a directory name, got an empty one")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise AmpHlsError(f"-o {root} is not a directory")
    if not root.exists():
        _check_creatable(root, f"-o {root}")
        return {}
    entries = [p for p in root.iterdir() if not p.name.startswith(STAGE_PREFIX)]
    if not entries:
        _check_creatable(root, f"-o {root}")
        return {}
    record, why = _read_record(root)
    if record is None:
        if not force:
            raise AmpHlsError(f"{root} is not empty and {why}: refusing to write into it; choose a new or "
                              "empty directory, or use --force (no file amp-hls did not write is ever deleted)")
        return {}
    changed = sorted(rel for rel, digest in record.items()
                     if (root / rel).is_file() and not (root / rel).is_symlink() and sha256(root / rel) != digest)
    if changed and not force:
        raise AmpHlsError(f"{root}: {len(changed)} file(s) changed since amp-hls wrote them: {_names(changed)}; "
                          "use --force to overwrite them")
    return record


def _read_record(root: Path) -> tuple[dict[str, str] | None, str]:
    """The record of what amp-hls wrote in ``root``, or None and why there is none."""
    manifest = root / MANIFEST
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.get("schema") != "amp-hls.manifest":
            return None, f"its {MANIFEST} is not an amp-hls manifest"
    except FileNotFoundError:
        return None, f"holds no amp-hls project (no {MANIFEST})"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"its {MANIFEST} is not an amp-hls manifest ({type(exc).__name__}: {exc})"
    try:
        doc = json.loads((root / RECORD).read_text(encoding="utf-8"))
        files = doc["files"] if isinstance(doc, dict) and doc.get("schema") == RECORD_SCHEMA else None
        if not isinstance(files, dict) or not all(
                isinstance(k, str) and _inside(root, k) and isinstance(v, str) for k, v in files.items()):
            raise ValueError("not a record of files")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, RecursionError):
        return None, f"holds an amp-hls project without a valid record of its files ({RECORD})"
    return files, ""


def _inside(root: Path, rel: str) -> bool:
    """Whether the recorded name ``rel`` stays inside ``root`` (a record is read, not trusted)."""
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts and rel != RECORD


def _names(rels: list[str]) -> str:
    return ", ".join(rels[:SHOWN]) + (f" and {len(rels) - SHOWN} more" if len(rels) > SHOWN else "")


class ProjectOutput:
    """``with ProjectOutput(root, force) as out:`` generate into ``out.stage``; on a clean exit
    the files move into ``root`` under the module's rules, and the staging directory goes."""

    def __init__(self, root: str | Path, force: bool = False):
        self.old = check_output_dir(root, force)
        self.root = Path(root)
        self.force = force
        self.stage = self.root  # set on entry

    def __enter__(self) -> ProjectOutput:
        self.created = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        self.stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=self.root))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if kind is None:
                self._install()
        finally:
            shutil.rmtree(self.stage, ignore_errors=True)
            if self.created and kind is not None:
                with contextlib.suppress(OSError):
                    self.root.rmdir()  # only if nothing else arrived meanwhile

    def moved(self, path: Path) -> Path:
        """Where a file written under the staging directory ends up."""
        return self.root / path.relative_to(self.stage)

    def _install(self) -> None:
        new = {p.relative_to(self.stage).as_posix(): p for p in sorted(self.stage.rglob("*")) if p.is_file()}
        conflicts = []
        for rel in new:
            target = self.root / rel
            for parent in list(reversed(target.relative_to(self.root).parents))[1:]:
                where = self.root / parent
                if where.is_symlink() or (where.exists() and not where.is_dir()):
                    raise AmpHlsError(f"{self.root}: {parent} is not a plain directory, so {rel} cannot be "
                                      "written; move it away")
            if target.is_dir() and not target.is_symlink():
                raise AmpHlsError(f"{self.root}: {rel} is a directory, where amp-hls writes a file; move it away")
            if target.is_symlink() or target.exists():
                ours = rel in self.old and not target.is_symlink() and sha256(target) == self.old[rel]
                if not ours:
                    conflicts.append(rel)
        if conflicts and not self.force:
            raise AmpHlsError(f"{self.root}: amp-hls would overwrite {len(conflicts)} file(s) it did not write, "
                              f"or that changed since: {_names(conflicts)}; use --force to overwrite them")
        digests = {rel: sha256(path) for rel, path in new.items()}
        for rel, path in new.items():
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, self.root / rel)  # a symlink in its place is replaced, not followed
        for rel in sorted(set(self.old) - set(new)):  # a previous generation's, unchanged: gone
            target = self.root / rel
            if target.is_file() and not target.is_symlink() and sha256(target) == self.old[rel]:
                target.unlink()
                self._prune(target.parent)
        record = self.root / RECORD
        fd, tmp = tempfile.mkstemp(prefix=".amp-hls-record-", dir=self.root)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"schema": RECORD_SCHEMA, "version": 1, "files": digests}, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, record)

    def _prune(self, directory: Path) -> None:
        """Remove the directories the deletions emptied, up to (not including) the root."""
        while directory != self.root and directory.is_relative_to(self.root):
            try:
                directory.rmdir()
            except OSError:
                return  # not empty: something else lives there
            directory = directory.parent
