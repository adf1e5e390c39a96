"""Durable files: append-only JSONL logs and atomically replaced documents.

Every append is written and fsynced before it returns, so an acknowledged
write survives kill -9. A crash can tear only the last line; recovery
(``_reading``) drops that line (with a log line), truncates it away and
carries on. Appends that
arrive while a log is being written share its next write and fsync (group
commit): the file holds them in call order, and each returns only once its
bytes are durable.

A failed write or fsync (disk full, I/O error) is cut back to the last good
offset before the lock is released, so the next append never lands glued
to half a record; if even that cut fails the log stops taking appends
(fail-stop: after a failed fsync the page cache cannot be trusted). Every
OSError leaves this module as StorageError. Files are created 0600 and
directories 0700 whatever the umask.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.to_thread
import msgspec
from anyio.abc import AsyncResource

from ..._errors import NotFoundError, StorageError
from ._reading import read_bytes, read_log, read_tail, storage_error

log = logging.getLogger("rosterd.stores")

T = TypeVar("T")
_encoder = msgspec.json.Encoder()


class _Append:
    """One append waiting for its write: its bytes, what to do once they
    are durable, and the error if they cannot be."""

    __slots__ = ("committed", "data", "error")

    def __init__(self, data: bytes, committed: Callable[[], None] | None) -> None:
        self.data = data
        self.committed = committed
        self.error: StorageError | None = None


class JsonlLog(AsyncResource, Generic[T]):
    """An append-only JSONL file of one record type, one record per line.

    Open it with ``await JsonlLog.open(path, type)``, which returns the log
    and the records already in it. One write at a time goes to the file;
    the appends made meanwhile wait together and go in the next one, with
    one fsync for them all.
    """

    def __init__(self, path: Path, fd: int, size: int) -> None:
        self.path = path
        self._fd = fd
        self._size = size  # end of the last acknowledged record
        # Held by the task writing a batch; whoever gets it next writes the
        # batch that filled meanwhile, if nobody has yet.
        self._writing = anyio.Lock()
        self._filling: list[_Append] = []
        self._closed = False
        self._broken: StorageError | None = None

    def __repr__(self) -> str:
        return f"JsonlLog({str(self.path)!r}{', closed' if self._closed else ''})"

    @classmethod
    async def open(
        cls, path: Path, record_type: type[T], enough: Callable[[T], bool] | None = None
    ) -> tuple[JsonlLog[T], list[T]]:
        """With *enough*, only the newest records are read (``read_tail``)."""
        if enough is None:
            records = await read_log(path, record_type, repair=True)
        else:
            records = await read_tail(path, record_type, enough)
        fd, size = await anyio.to_thread.run_sync(_open_append, path)
        return cls(path, fd, size), records

    @property
    def stopped(self) -> bool:
        """Whether the log stopped taking appends: the bytes of a failed
        write that could not be cut back are still in the file."""
        return self._broken is not None

    @property
    def size(self) -> int:
        """Where the last durable record ends: a mark for ``retract``."""
        return self._size

    async def append(self, record: T, committed: Callable[[], None] | None = None) -> None:
        await self.extend((record,), committed)

    async def extend(
        self, records: Iterable[T], committed: Callable[[], None] | None = None
    ) -> None:
        """Append *records* and return once they are durable.

        They are placed before this coroutine first yields, so the file
        holds appends in the order they were called. *committed* (which
        must not raise) runs once they are durable, in that same order and
        before any append written with them returns: what a caller keeps
        in memory follows the file. If the write fails, nothing of it stays
        in the file and *committed* never runs. Cancelled while it waits
        for a write to take it, an append is not written; once taken, it
        is written whatever becomes of its caller.
        """
        if self._broken is not None:
            raise self._broken
        append = _Append(b"".join(_encoder.encode(r) + b"\n" for r in records), committed)
        batch = self._filling
        batch.append(append)
        try:
            async with self._writing:
                if batch is self._filling:
                    self._filling = []
                    # Shielded: the others in the batch wait on this write.
                    with anyio.CancelScope(shield=True):
                        await self._write(batch)
        except anyio.get_cancelled_exc_class():
            if batch is self._filling:  # cancelled before anyone wrote it
                batch.remove(append)
            raise
        if append.error is not None:
            raise append.error

    async def _write(self, batch: list[_Append]) -> None:
        if await self._written(batch) or len(batch) == 1:
            return
        # Together they did not go in (a full disk, say): each alone now,
        # so only an append that cannot be written fails.
        for append in batch:
            await self._written([append])

    async def _written(self, appends: list[_Append]) -> bool:
        """Write *appends* with one fsync; whether they are durable."""
        error = self._broken
        if error is None:
            data = b"".join(append.data for append in appends)
            try:
                await anyio.to_thread.run_sync(_write_all, self._fd, data)
            except OSError as exc:
                error = storage_error(self.path, "append", exc)
                await self._cut_back()
            else:
                self._size += len(data)
        for append in appends:
            append.error = error
            if error is None and append.committed is not None:
                append.committed()
        return error is None

    async def retract(self, size: int) -> None:
        """Cut the log back to *size*, a ``size`` read before appends that
        must not stay: the other half of one write failed, or the lines
        were never traced. They go as a failed append does, and if even the
        cut fails the log stops taking appends. Only for a log with one
        writer, whose appends since *size* have returned."""
        async with self._writing:
            if size < self._size:
                self._size = size
                await self._cut_back()

    async def _cut_back(self) -> None:
        """Cut a failed write back to the last durable record, or stop
        taking appends if even that fails."""
        try:
            await anyio.to_thread.run_sync(_cut_back, self._fd, self._size)
        except OSError as cut:
            self._broken = storage_error(self.path, "truncate after failed append", cut)
            log.error("%s: stopped taking appends: %s", self.path, self._broken)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await anyio.to_thread.run_sync(os.close, self._fd)


def make_private_dir(path: Path) -> None:
    """Create *path* (and missing parents) 0700; tighten it if it already exists."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
    except FileNotFoundError:
        # mkdir(parents=True) would make the parents umask-wide.
        make_private_dir(path.parent)
        path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


def _open_append(path: Path) -> tuple[int, int]:
    try:
        make_private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)
        return fd, os.fstat(fd).st_size
    except OSError as exc:
        raise storage_error(path, "open", exc) from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _cut_back(fd: int, size: int) -> None:
    os.ftruncate(fd, size)
    os.fsync(fd)


def remove_leftover_tmp(root: Path, skip: str | None = None) -> int:
    """Remove write_document temporaries a kill left under *root* (but in
    its subdirectory *skip*); their count.

    Run before anything writes there: a live writer's temporary looks the same.
    """
    removed = 0
    for directory, subdirectories, files in os.walk(root):
        if skip in subdirectories and directory == str(root):
            subdirectories.remove(skip)
        leftovers = [name for name in files if name.startswith(".") and name.endswith(".tmp")]
        for name in leftovers:
            Path(directory, name).unlink(missing_ok=True)
        if leftovers:
            # Gone for good before a run's recovery is recorded done.
            _sync_directory(Path(directory))
            removed += len(leftovers)
    if removed:
        log.warning("%s: removed %d temporary files left by an interrupted write", root, removed)
    return removed


async def write_document(path: Path, value: Any) -> None:
    """Replace *path* atomically with *value* as JSON: old or new, never half."""
    try:
        await anyio.to_thread.run_sync(_replace, path, _encoder.encode(value))
    except OSError as exc:
        raise storage_error(path, "write", exc) from None


def _replace(path: Path, data: bytes) -> None:
    make_private_dir(path.parent)
    # One temporary name per write: two writers of one document must not
    # rename each other's file away (the loser's os.replace would fail).
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


async def remove_document(path: Path) -> None:
    """Remove *path*, durably, if it is there."""
    try:
        await anyio.to_thread.run_sync(_remove, path)
    except OSError as exc:
        raise storage_error(path, "remove", exc) from None


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    _sync_directory(path.parent)


def _sync_directory(path: Path) -> None:
    """Make the names in directory *path* durable: a file put or removed there."""
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


async def read_document(path: Path, document_type: type[T]) -> T | None:
    """The document at *path*, or ``None`` when there is none yet."""
    try:
        data = await read_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise storage_error(path, "read", exc) from None
    return _decode_document(msgspec.json.Decoder(document_type), path, data)


async def read_documents(
    paths: Iterable[str], document_type: type[T], unreadable: list[StorageError] | None = None
) -> list[T]:
    """The documents at *paths* that exist, in order, read in one thread hop
    (listing thousands of runs costs one hop, not one per run).

    One that cannot be read raises; with *unreadable*, it goes there
    instead and the others are still read."""
    return await anyio.to_thread.run_sync(_read_documents, list(paths), document_type, unreadable)


def _read_documents(
    paths: list[str], document_type: type[T], unreadable: list[StorageError] | None
) -> list[T]:
    decoder = msgspec.json.Decoder(document_type)
    found = []
    for path in paths:
        try:
            document = _read_one(decoder, path)
        except StorageError as error:
            if unreadable is None:
                raise
            unreadable.append(error)
            continue
        if document is not None:
            found.append(document)
    return found


def _read_one(decoder: msgspec.json.Decoder[T], path: str) -> T | None:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (FileNotFoundError, NotADirectoryError):
        # Not a run's directory: a file left beside them (an editor's
        # swap file, a note) belongs to someone else.
        return None
    except OSError as exc:
        raise storage_error(Path(path), "read", exc) from None
    return _decode_document(decoder, path, data)


def _decode_document(decoder: msgspec.json.Decoder[T], path: Path | str, data: bytes) -> T:
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        # Written atomically, so only a hand edit or a foreign file gets here.
        raise StorageError(
            f"{path}: unreadable state file: {exc}", path=str(path), op="decode"
        ) from None


def id_number(key: str, prefix: str) -> int:
    """The *n* of an id ``<prefix>-<n>``; 0 for any other key."""
    head, _, tail = key.rpartition("-")
    return int(tail) if head == prefix and tail.isdigit() else 0


class _Keyed(Protocol):
    @property
    def id(self) -> str: ...


K = TypeVar("K", bound=_Keyed)


class StateTable(Generic[K]):
    """Latest state per id, persisted as an append-only log of whole states.

    Each change appends the record's new state; on recovery the last state of
    each id wins. Small records, rare changes: simpler than events. Ids are
    ``<prefix>-<n>`` (a gate ``g-<n>``, a task ``task-<n>``), numbered by
    ``insert``; ``get`` of an id the table does not hold raises
    ``NotFoundError`` naming its *kind*.
    """

    def __init__(self, log: JsonlLog[K], states: dict[str, K], kind: str, prefix: str) -> None:
        self._log = log
        self._states = states
        self._kind = kind
        self._prefix = prefix
        self._last_number: int | None = None

    def __repr__(self) -> str:
        return f"StateTable({str(self._log.path)!r}, {len(self._states)} ids)"

    @classmethod
    async def open(cls, path: Path, record_type: type[K], kind: str, prefix: str) -> StateTable[K]:
        log, records = await JsonlLog.open(path, record_type)
        return cls(log, {record.id: record for record in records}, kind, prefix)

    def _new_id(self) -> str:
        """The next ``<prefix>-<n>``, never handed out before.

        Counted, not derived from len(): a put that failed while another
        was in flight must not give its successor's id out a second time.
        """
        if self._last_number is None:
            numbers = (id_number(key, self._prefix) for key in self._states)
            self._last_number = max(numbers, default=0)
        self._last_number += 1
        return f"{self._prefix}-{self._last_number}"

    async def insert(self, record: Callable[[str], K]) -> K:
        """A new record, ``record(id)`` under the next id, put."""
        inserted = record(self._new_id())
        await self.put(inserted)
        return inserted

    def get(self, key: str) -> K:
        """The record *key* names; ``NotFoundError`` when there is none."""
        record = self._states.get(key)
        if record is None:
            raise NotFoundError(self._kind, key)
        return record

    def find(self, key: str) -> K | None:
        """The record *key* names, or ``None``."""
        return self._states.get(key)

    def values(self) -> list[K]:
        return list(self._states.values())

    def __len__(self) -> int:
        return len(self._states)

    async def put(self, record: K) -> None:
        # The state is taken before the first await: a concurrent reader
        # sees it, and a failed append puts the previous one back.
        previous = self._states.get(record.id)
        self._states[record.id] = record
        try:
            await self._log.append(record)
        except Exception:
            if self._states.get(record.id) is record:
                if previous is None:
                    del self._states[record.id]
                else:
                    self._states[record.id] = previous
            raise

    async def aclose(self) -> None:
        await self._log.aclose()
