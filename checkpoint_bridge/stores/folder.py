"""The local-folder object store: one file per key under a root folder.

Writes go to a temporary file in the target folder and are published with
``os.link``, which fails if the name exists. That makes a write atomic (a
reader never sees half a file) and exclusive (two racing writers cannot both
create the object), the same guarantee S3 gives with ``If-None-Match: *``.

Blocking file calls run in a worker thread so the event loop (and a Temporal
activity's heartbeats) keep running.
"""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Callable, TypeVar

from workflows.vocabulary.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    InvalidIdError,
    StoreUnavailableError,
)

from checkpoint_bridge.stores.contract import check_key

# What a person must fix (permissions, a read-only or full disk, a file where a folder
# should be); anything else (EIO, a network filesystem's timeouts) may pass by itself.
_NEEDS_A_PERSON = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.ENOSPC, errno.EDQUOT}

__all__ = ["FileObjectStore"]

T = TypeVar("T")
_TMP = ".tmp-"
# Filesystems without hard links (some FUSE / network mounts) report these.
_NO_LINK = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV}


class FileObjectStore:
    """Objects as files under ``root`` (created on first write)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser().resolve()
        self.url = self.root.as_uri()
        self._checked_folders: set[Path] = set()

    def __repr__(self) -> str:
        return f"FileObjectStore({str(self.root)!r})"

    async def __aenter__(self) -> FileObjectStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        return None

    # -- public API ---------------------------------------------------------

    async def check_access(self) -> None:
        """The root is a folder, or can become one (it is created on first write)."""
        if self.root.exists() and not self.root.is_dir():
            raise StoreUnavailableError(f"store folder {self.root} exists but is not a folder; point the store elsewhere",
                                        refused=True)
        # The nearest folder that exists is where the root will be made: a file in its
        # place (a mistyped or unmounted volume) fails every later write.
        above = self.root
        while not above.exists() and above != above.parent:
            above = above.parent
        if not above.is_dir():
            raise StoreUnavailableError(
                f"file store {self.url} cannot be created: {above} is not a folder; point the store elsewhere",
                refused=True,
            )

    async def get(self, key: str) -> bytes:
        # Read in the event loop's own thread: an object is a few KB from a local
        # folder (microseconds), and a checkpoint's chain is read as hundreds of
        # them at once, which a thread hand-off per object would make ~10x slower.
        try:
            return self._get(key)
        except OSError as exc:
            raise self._unavailable("read", key, exc) from exc

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        return await self._run("write", key, self._put_if_absent, key, bytes(data))

    async def list(self, prefix: str) -> list[str]:
        return await self._run("list", prefix, self._list, prefix)

    async def delete_prefix(self, prefix: str) -> None:
        await self._run("delete", prefix, self._delete_prefix, prefix)

    async def delete(self, key: str) -> bool:
        return await self._run("delete", key, self._delete, key)

    # -- helpers --------------------------------------------------------------

    async def _run(self, op: str, key: str, fn: Callable[..., T], *args: object) -> T:
        try:
            return await asyncio.to_thread(fn, *args)
        except OSError as exc:
            raise self._unavailable(op, key, exc) from exc

    def _unavailable(self, op: str, key: str, exc: OSError) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"file store {self.url} could not {op} {key!r} ({exc.strerror or exc}); "
            "check that the folder exists, is writable and the disk is not full",
            refused=exc.errno in _NEEDS_A_PERSON,
        )

    def _path(self, key: str) -> Path:
        check_key(key)
        path = self.root / key
        # Keys are already safe; this also catches a symlink inside the root
        # that points elsewhere.
        if not path.resolve().is_relative_to(self.root):
            raise InvalidIdError(f"storage key {key!r} resolves outside the store root {self.root}")
        return path

    def _dir(self, prefix: str) -> Path:
        check_key(prefix, prefix=True)
        folder = prefix.rpartition("/")[0]
        return self._path(folder) if folder else self.root

    def _get(self, key: str) -> bytes:
        check_key(key)
        path = self.root / key
        # The folder is checked to lie inside the root once (resolving a path
        # costs several system calls), the file itself by refusing to follow a
        # symlink: together what `_path`'s resolve() checks, at a read's cost.
        folder = path.parent
        if folder not in self._checked_folders:
            if not folder.resolve().is_relative_to(self.root):
                raise InvalidIdError(f"storage key {key!r} resolves outside the store root {self.root}")
            self._checked_folders.add(folder)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except (FileNotFoundError, NotADirectoryError) as exc:
            self._checked_folders.discard(folder)  # it may be replaced before it exists
            raise CheckpointNotFoundError(f"no object {key!r} in {self.url}") from exc
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise InvalidIdError(f"storage key {key!r} is a symlink; objects are plain files inside {self.root}") from exc
            raise
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def _write_temp(self, folder: Path, data: bytes) -> str:
        # os.open/os.write on a random name rather than tempfile.mkstemp and a file object:
        # the same exclusive create (O_EXCL) and mode (0600) at a fraction of the Python
        # work, which a worker pays for every object it writes (about three a step).
        while True:
            tmp = f"{folder}/{_TMP}{os.urandom(6).hex()}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            except FileExistsError:
                continue
            break
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        os.close(fd)
        return tmp

    def _folder_for_write(self, key: str) -> Path:
        """The folder of `key`'s object, made if missing and checked to lie inside the root.
        A folder checked once is not checked again (resolving a path costs a system call per
        part, for every write); `_put_if_absent` forgets one that went away (a deleted prefix)."""
        check_key(key)
        folder = (self.root / key).parent
        if folder not in self._checked_folders:
            folder.mkdir(parents=True, exist_ok=True)
            if not folder.resolve().is_relative_to(self.root):
                raise InvalidIdError(f"storage key {key!r} resolves outside the store root {self.root}")
            self._checked_folders.add(folder)
        return folder

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        folder = self._folder_for_write(key)
        path = self.root / key
        try:
            tmp = self._write_temp(folder, data)
        except (FileNotFoundError, NotADirectoryError):
            # The folder went away since it was checked (a deleted run): check and make it again.
            self._checked_folders.discard(folder)
            folder = self._folder_for_write(key)
            tmp = self._write_temp(folder, data)
        try:
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                pass
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                if self._create_exclusive(path, data):
                    return True
        finally:
            _unlink_quietly(tmp)
        if self._get(key) == data:  # not following a symlink, as a read
            return False
        raise CheckpointExistsError(
            f"object {key!r} in {self.url} already exists with different content; "
            "stored objects are immutable, write under a new key instead"
        )

    @staticmethod
    def _create_exclusive(path: Path, data: bytes) -> bool:
        # Fallback without hard links: still exclusive, though a concurrent
        # reader may briefly see a short file (it then fails its hash check).
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return True

    def _list(self, prefix: str, *, include_temp: bool = False) -> list[str]:
        base = self._dir(prefix)
        if not base.is_dir():
            return []
        keys = []
        root = str(self.root)
        for dirpath, _dirs, files in os.walk(base):
            # The folder's key once, as a string: pathlib per file was most of a long run's listing.
            folder = Path(os.path.relpath(dirpath, root)).as_posix()
            folder = "" if folder == "." else folder + "/"
            for name in files:
                if name.startswith(_TMP) and not include_temp:
                    continue
                key = folder + name
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def _delete(self, key: str) -> bool:
        path = self._path(key)
        self._checked_folders.clear()  # the folders it empties go: checked again when written
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        # The folders it leaves empty go too (segments/ab/ of a content-addressed
        # object): a folder's name is part of what the object was called.
        folder = path.parent
        while folder != self.root and folder.is_relative_to(self.root):
            try:
                os.rmdir(folder)
            except OSError:
                break  # not empty (or a concurrent writer's): it stays
            folder = folder.parent
        return True

    def _delete_prefix(self, prefix: str) -> None:
        if not prefix:
            raise InvalidIdError(f"refusing to delete everything in {self.url}: the prefix is empty")
        self._checked_folders.clear()
        for key in self._list(prefix, include_temp=True):
            _unlink_quietly(str(self.root / key))
        if prefix.endswith("/"):
            top = self._path(prefix.rstrip("/"))
            if top.is_dir():
                for dirpath, _dirs, _files in os.walk(top, topdown=False):
                    _rmdir_quietly(dirpath)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _rmdir_quietly(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass  # not empty: a concurrent writer added something, which is theirs to keep
