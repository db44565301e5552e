"""The artifact folder of one home: durable writes, reads and removals that never follow a link.

Files live at ``<home>/artifacts/<session folder>/<file name>``; rows keep that path relative to
the artifact folder. Every operation works relative to the session folder's descriptor, opened
with ``O_NOFOLLOW | O_DIRECTORY``, and names a single entry in it, so a symlink planted in the
folder (or in place of it) is never followed: reads refuse it, listings report the link itself,
and removals unlink the link, never its target.

A file is written under a temporary name unique to the call (``.tmp-<name>.<random>``, created
``O_EXCL``), fsynced, renamed into place and the folder fsynced. :meth:`stage` and
:meth:`publish` are the two halves of that, for a caller that must decide later, under a lock,
whether the file goes into place (an import).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property
from pathlib import Path
from typing import Protocol

from soong_store.errors import SoongStoreError, StorageError

log = logging.getLogger(__name__)


class PendingFile(Protocol):
    """An artifact file on its way to disk; its unit of work commits it or drops it.

    :class:`~soong_store.write.file_pool.FileWrite` is the one the store uses; the operations that
    hold one (:mod:`soong_store.files.artifact_op`) need only this much of it.
    """

    @property
    def path(self) -> str:
        """Where the file goes (``<session>/<file>``)."""

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the write is over, in whatever thread ends it."""

    def error(self) -> SoongStoreError | None:
        """Why the write failed (``None`` while it runs or once it succeeded)."""

    def drop(self) -> None:
        """The unit will not commit: remove the file once it is written."""


StartFile = Callable[[str, bytes], PendingFile]
"""Begins writing an artifact file in the background (``FilePool.start``)."""

TEMP_PREFIX = ".tmp-"
"""Temporary files start with this; no stored path does (file names start with an id)."""

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_SYNC | _NOFOLLOW
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW


def split_path(rel: str) -> tuple[str, str]:
    """``(folder, name)`` of a stored path, refused unless it is exactly ``<folder>/<name>``."""
    parts = rel.split("/")
    if len(parts) != 2 or any(
        p in ("", ".", "..") or p.startswith(".") or "\0" in p or "\\" in p for p in parts
    ):
        raise StorageError(f"artifact path {rel!r} is not <session>/<file>", path=rel)
    return parts[0], parts[1]


class ArtifactFiles:
    """The artifact folder of one home (see the module docstring for the guarantees)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @cached_property
    def _base(self) -> Path:
        """``root`` resolved, at the first use: a store that never touches a file never asks."""
        return self.root.resolve()

    # -- writing ----------------------------------------------------------------------------

    def write(self, rel: str, data: bytes, begun: Callable[[], None] | None = None) -> None:
        """Write ``data`` at ``rel`` atomically and durably (``begun``: called just before).

        The temporary file is opened ``O_SYNC``: the data reaches the disk within the write call,
        which runs without the GIL; the fsync after it finds nothing left to flush but keeps the
        sequence exact.
        """
        folder_name, name = split_path(rel)
        folder = self._open_folder(folder_name, create=True)
        try:
            temp = self._write_temp(folder, name, data, begun)
            self._rename(folder, temp, name)
        finally:
            os.close(folder)

    def stage(self, rel: str, data: bytes) -> str:
        """Write ``data`` durably under a temporary name beside ``rel``; return that name."""
        folder_name, name = split_path(rel)
        folder = self._open_folder(folder_name, create=True)
        try:
            return self._write_temp(folder, name, data, None)
        finally:
            os.close(folder)

    def publish(self, rel: str, staged: str) -> None:
        """Rename a file made by :meth:`stage` to ``rel`` (replacing what is there), durably."""
        folder_name, name = split_path(rel)
        folder = self._open_folder(folder_name)
        try:
            self._rename(folder, staged, name)
        finally:
            os.close(folder)

    def link(self, source: str, rel: str) -> None:
        """Give ``rel`` the bytes of ``source`` without copying them (a hard link), durably.

        Where the file system has no hard links, the bytes are copied (atomically, as
        :meth:`write` does). The file's modification time becomes now, as for a new file, so
        that ``gc`` leaves it alone until the rows naming it are committed.
        """
        source_folder, source_name = split_path(source)
        folder_name, name = split_path(rel)
        src = self._open_folder(source_folder)
        try:
            dst = self._open_folder(folder_name, create=True)
            try:
                try:
                    os.link(
                        source_name, name, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False
                    )
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                        raise
                    temp = self._write_temp(
                        dst, name, self._read_at(src, source_name, source), None
                    )
                    self._rename(dst, temp, name)
                else:
                    os.utime(name, dir_fd=dst, follow_symlinks=False)
                    os.fsync(dst)
            finally:
                os.close(dst)
        finally:
            os.close(src)

    def link_all(self, links: list[tuple[str, str]]) -> list[str]:
        """:meth:`link` each ``(source, rel)``; return the paths made.

        A source already lost is skipped (``check`` reports the copy's row as it did the
        source's); on any other failure the links made so far are removed again.
        """
        made: list[str] = []
        try:
            for source, rel in links:
                try:
                    self.link(source, rel)
                except FileNotFoundError:
                    continue
                made.append(rel)
        except BaseException:
            self.discard(made)
            raise
        return made

    def _write_temp(
        self, folder: int, name: str, data: bytes, begun: Callable[[], None] | None
    ) -> str:
        while True:
            temp = f"{TEMP_PREFIX}{name}.{secrets.token_hex(6)}"
            try:
                fd = os.open(temp, _CREATE_FLAGS, 0o644, dir_fd=folder)
                break
            except FileExistsError:  # another writer's name: pick another
                continue
        try:
            if begun is not None:
                begun()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink(temp, folder)
            raise
        os.close(fd)
        return temp

    @staticmethod
    def _rename(folder: int, temp: str, name: str) -> None:
        try:
            os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            _unlink(temp, folder)
            raise
        try:
            os.fsync(folder)
        except BaseException:
            # The rename may not be durable: the caller's unit fails, so the file must go too.
            _unlink(name, folder)
            raise

    def _open_folder(self, folder_name: str, *, create: bool = False) -> int:
        path = self._base / folder_name
        try:
            return os.open(path, _FOLDER_FLAGS)
        except FileNotFoundError:
            if not create:
                raise
        self._base.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another writer made it meanwhile
            path.mkdir()
        _fsync_path(self._base)
        return os.open(path, _FOLDER_FLAGS)

    # -- reading ----------------------------------------------------------------------------

    def read(self, rel: str) -> bytes:
        """The bytes of a stored file (``StorageError`` when it is missing or not a file)."""
        folder_name, name = split_path(rel)
        try:
            folder = self._open_folder(folder_name)
        except OSError as exc:
            raise _missing(rel, exc) from exc
        try:
            return self._read_at(folder, name, rel)
        finally:
            os.close(folder)

    @staticmethod
    def _read_at(folder: int, name: str, rel: str) -> bytes:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=folder)
        except OSError as exc:
            raise _missing(rel, exc) from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StorageError(f"artifact file {rel!r} is not a regular file", path=rel)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def size(self, rel: str) -> int | None:
        """The size of a stored file; ``None`` when it is missing, a link or not a file."""
        try:
            folder_name, name = split_path(rel)
            folder = self._open_folder(folder_name)
        except (OSError, StorageError):
            return None
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except OSError:
            return None
        finally:
            os.close(folder)
        return info.st_size if stat.S_ISREG(info.st_mode) else None

    def files(self, folders: Iterable[str] | None = None) -> Iterator[tuple[str, float]]:
        """Every entry of every session folder (links and all), as (path, modification time).

        ``folders``: only these session folders (those missing are skipped), without listing
        the others: a check of a batch of sessions reads their folders, not the whole home's.
        Session folders that are links, and anything at the top that is not a folder, are not
        entered.
        """
        if folders is None:
            try:
                top = os.scandir(self._base)
            except FileNotFoundError:
                return
            with top:
                folders = [e.name for e in top if e.is_dir(follow_symlinks=False)]
        else:  # names from rows, which may be damaged: never a path out of the base
            folders = [f for f in folders if f not in ("", ".", "..") and not set(f) & {"/", "\0"}]
        for folder_name in sorted(folders):
            try:
                fd = os.open(self._base / folder_name, _FOLDER_FLAGS)
            except OSError:  # gone meanwhile, or swapped for a link
                continue
            try:
                with os.scandir(fd) as entries:
                    found = [
                        (f"{folder_name}/{e.name}", e.stat(follow_symlinks=False).st_mtime)
                        for e in entries
                        if not e.is_dir(follow_symlinks=False)
                    ]
            finally:
                os.close(fd)
            yield from sorted(found)

    def mtime(self, rel: str) -> float | None:
        """The modification time of a folder entry (not followed), or ``None`` if it is gone."""
        try:
            folder_name, name = _split_any(rel)
            folder = self._open_folder(folder_name)
        except (OSError, StorageError):
            return None
        try:
            return os.stat(name, dir_fd=folder, follow_symlinks=False).st_mtime
        except OSError:
            return None
        finally:
            os.close(folder)

    # -- removing ---------------------------------------------------------------------------

    def remove(self, rel: str) -> None:
        """Unlink a folder entry (gone already is fine; a link goes, not its target).

        The session folder goes too once it is empty.
        """
        folder_name, name = _split_any(rel)
        try:
            folder = self._open_folder(folder_name)
        except FileNotFoundError:
            return
        try:
            _unlink(name, folder)
        finally:
            os.close(folder)
        with contextlib.suppress(OSError):  # not empty, or already gone
            os.rmdir(self._base / folder_name)

    def discard(self, paths: list[str]) -> None:
        """Remove entries, logging a failure instead of raising: one left is an orphan for gc."""
        for rel in paths:
            try:
                self.remove(rel)
            except (OSError, StorageError):
                log.warning("could not remove artifact file %s; gc will", rel, exc_info=True)


def _split_any(rel: str) -> tuple[str, str]:
    """Like :func:`split_path`, but any entry name may be removed (a temporary file, a stray)."""
    folder, _, name = rel.partition("/")
    split_path(f"{folder}/x")
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise StorageError(f"artifact path {rel!r} is not <session>/<entry>", path=rel)
    return folder, name


def _missing(rel: str, exc: OSError) -> StorageError:
    if exc.errno == errno.ELOOP:
        return StorageError(f"artifact file {rel!r} is a symbolic link: refused", path=rel)
    return StorageError(f"artifact file {rel!r} is missing", path=rel)


def _unlink(name: str, folder: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)


def _fsync_path(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
