"""Durable files: append-only JSONL logs and atomically replaced documents.

Every append is written and fsynced before it returns, so an acknowledged
write survives kill -9. A crash can tear only the last line; recovery
(``_reading``) drops that line (with a log line), truncates it away and
carries on. Appends that
arrive while a log is being written share its next write and fsync (group
commit): the file holds them in call order, and each returns only once its
bytes are durable. The writes run in the daemon's writer threads
(``_writers``), a batch's whole disk work in one hop; appends placed in
several logs (``place``, then ``durable``) wait for the disk side by side.

A failed write or fsync (disk full, I/O error) is cut back to the last good
offset before the next batch is taken, so the next append never lands glued
to half a record; if even that cut fails the log stops taking appends
(fail-stop: after a failed fsync the page cache cannot be trusted). Every
OSError leaves this module as StorageError. Files are created 0600 and
directories 0700 whatever the umask.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.to_thread
import msgspec
from anyio.abc import AsyncResource

from ..._errors import NotFoundError, StorageError
from ._reading import read_bytes, read_log, read_tail, storage_error
from ._writers import Outcome, cut_back, write_all, write_batch

log = logging.getLogger("rosterd.stores")

T = TypeVar("T")
_encoder = msgspec.json.Encoder()


class _Append:
    """One append: its bytes, what to do once they are durable, and the
    error if they cannot be."""

    __slots__ = ("committed", "data", "error")

    def __init__(self, data: bytes, committed: Callable[[], None] | None) -> None:
        self.data = data
        self.committed = committed
        self.error: StorageError | None = None


class _Batch:
    """Appends that go to the file together: one write, one fsync. It is
    *taken* once a writer thread has it; *done* is set once each append in
    it is durable or has its error."""

    __slots__ = ("appends", "done", "taken")

    def __init__(self) -> None:
        self.appends: list[_Append] = []
        # asyncio's, as the writers are (``_writers``): it is set from a
        # callback of the loop, outside any task, where anyio cannot tell
        # which loop it is in.
        self.done = asyncio.Event()
        self.taken = False


class Placed:
    """An append placed in its log, in call order: ``durable`` waits for
    its write."""

    __slots__ = ("_append", "_batch")

    def __init__(self, append: _Append, batch: _Batch) -> None:
        self._append = append
        self._batch = batch

    async def durable(self) -> None:
        """Return once the append is durable; raise ``StorageError`` if it
        cannot be. Cancelled while it waits for a write to take it, the
        append is not written; once taken, it is written whatever becomes
        of its caller, and the cancellation is raised once it is settled."""
        batch = self._batch
        try:
            await batch.done.wait()
        except anyio.get_cancelled_exc_class():
            if not batch.taken:
                batch.appends.remove(self._append)
                raise
            with anyio.CancelScope(shield=True):
                await batch.done.wait()
            raise
        if self._append.error is not None:
            raise self._append.error

    async def settled(self) -> None:
        """Wait, raising nothing, until the append is durable, failed or
        withdrawn by a cancelled ``durable``."""
        if self._append in self._batch.appends:
            await self._batch.done.wait()


async def durable(placed: Sequence[Placed]) -> None:
    """Wait for each of *placed*, written side by side: one wait for the
    disk between them, not one each. Each runs to its end whatever becomes
    of the others; the first failure in the order given is raised, once
    they all are settled."""
    failure: StorageError | None = None
    for each in placed:
        try:
            await each.durable()
        except StorageError as exc:
            failure = failure or exc
    if failure is not None:
        raise failure


class JsonlLog(AsyncResource, Generic[T]):
    """An append-only JSONL file of one record type, one record per line.

    Open it with ``await JsonlLog.open(path, type)``, which returns the log
    and the records already in it. One batch at a time goes to the file,
    in a writer thread (``_writers``); the appends placed meanwhile wait
    together and go in the next one, with one fsync for them all.
    """

    def __init__(self, path: Path, fd: int, size: int) -> None:
        self.path = path
        # Where writes are placed and their outcomes handled.
        self._loop = asyncio.get_running_loop()
        self._fd = fd
        self._size = size  # end of the last acknowledged record
        # The batch a writer thread has (or a cut back under way), and the
        # one filling meanwhile, taken as soon as that one is done.
        self._writing: _Batch | None = None
        self._filling = _Batch()
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
        await self.place((record,), committed).durable()

    async def extend(
        self, records: Iterable[T], committed: Callable[[], None] | None = None
    ) -> None:
        """Append *records* and return once they are durable (``place``)."""
        await self.place(records, committed).durable()

    def place(self, records: Iterable[T], committed: Callable[[], None] | None = None) -> Placed:
        """Place *records* in the log, after every append placed before, and
        start their write if none is under way; ``Placed.durable`` waits for
        it. Appends placed in several logs are written side by side.

        *committed* (which must not raise) runs once they are durable, in
        call order and before any append written with them returns: what a
        caller keeps in memory follows the file. If the write fails,
        nothing of it stays in the file and *committed* never runs.
        """
        if self._broken is not None:
            raise self._broken
        append = _Append(b"".join(_encoder.encode(r) + b"\n" for r in records), committed)
        batch = self._filling
        batch.appends.append(append)
        if self._writing is None:
            self._take()
        return Placed(append, batch)

    def _take(self) -> None:
        """Hand the filling batch to a writer thread."""
        batch = self._writing = self._filling
        self._filling = _Batch()
        batch.taken = True
        datas = [append.data for append in batch.appends]
        write_batch(self._loop, self._fd, self._size, datas, partial(self._written, batch))

    def _written(self, batch: _Batch, outcome: Outcome) -> None:
        """On the loop: settle *batch* by its writer's *outcome*, then take
        the batch that filled meanwhile."""
        if isinstance(outcome, Exception):
            # Not a disk's error but a fault of ours: what the file holds
            # is unknown, so the log takes no more.
            log.error("%s: a writer failed", self.path, exc_info=outcome)
            self._broken = StorageError(
                f"{self.path}: append failed: {outcome!r}", path=str(self.path), op="append"
            )
            for append in batch.appends:
                append.error = self._broken
            self._next(batch)
            return
        errors, self._size, cut = outcome
        if cut is not None:
            self._stop(cut)
        for append, error in zip(batch.appends, errors, strict=True):
            if error is None:
                if append.committed is not None:
                    append.committed()
            elif error is cut:
                append.error = self._broken
            else:
                append.error = storage_error(self.path, "append", error)
        self._next(batch)

    def _next(self, finished: _Batch) -> None:
        """*finished* is done: take the batch that filled meanwhile, or fail
        it if the log stopped."""
        self._writing = None
        finished.done.set()
        waiting = self._filling
        if not waiting.appends:
            return
        if self._broken is None:
            self._take()
            return
        self._filling = _Batch()
        for append in waiting.appends:
            append.error = self._broken
        waiting.taken = True
        waiting.done.set()

    async def retract(self, size: int) -> None:
        """Cut the log back to *size*, a ``size`` read before appends that
        must not stay: the other half of one write failed, or the lines
        were never traced. They go as a failed append does, and if even the
        cut fails the log stops taking appends. Appends placed meanwhile
        wait for it."""
        await self._idle()
        if size >= self._size:
            return
        cutting = self._writing = _Batch()
        try:
            self._size = size
            await anyio.to_thread.run_sync(cut_back, self._fd, size)
        except OSError as cut:
            self._stop(cut)
        finally:
            self._next(cutting)

    def _stop(self, cut: OSError) -> None:
        self._broken = storage_error(self.path, "truncate after failed append", cut)
        log.error("%s: stopped taking appends: %s", self.path, self._broken)

    async def _idle(self) -> None:
        while self._writing is not None:
            await self._writing.done.wait()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._idle()
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
            write_all(fd, data)
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
