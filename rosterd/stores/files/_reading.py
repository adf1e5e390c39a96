"""Reading JSONL logs back: whole, or from their end, a torn tail dropped.

A kill can tear only a log's last line (appends are fsynced one after the
other), so only a last line without its newline, or a last whole line that
does not decode, is dropped and, when repairing, cut from the file; an
unreadable line before it can only be a hand edit, and is skipped with an
error. Every OSError leaves this module as StorageError.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import anyio
import anyio.to_thread
import msgspec

from ..._errors import StorageError

log = logging.getLogger("rosterd.stores")

T = TypeVar("T")
# How much of a log ``read_tail`` reads at a time, from its end.
_CHUNK = 64 * 1024


async def read_bytes(path: Path) -> bytes:
    """The bytes of *path*, read through aiofiles (the store's async read
    path), which loads with the first read: the client commands that never
    read a state do not pay for it.

    Shielded: aiofiles opens, reads and closes in a worker thread, and a
    caller cancelled meanwhile (a stop during a start's warm-up) would drop
    the open file unclosed, left to the collector."""
    import aiofiles

    with anyio.CancelScope(shield=True):
        async with aiofiles.open(path, "rb") as handle:
            data: bytes = await handle.read()
    return data


async def read_log(path: Path, record_type: type[T], *, repair: bool = False) -> list[T]:
    """All whole records of a JSONL file; a torn last line is dropped.

    With *repair*, the torn tail is also cut from the file so that the next
    append starts on a fresh line. Readers that only look (the CLI) leave
    the file alone.
    """
    try:
        data = await read_bytes(path)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise storage_error(path, "read", exc) from None
    decoder = msgspec.json.Decoder(record_type)
    records: list[T] = []
    good_end = 0
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            log.warning("%s: dropped a torn last line of %d bytes", path, len(data) - start)
            break
        last = data.find(b"\n", end + 1) < 0
        record = _decoded(decoder, data[start:end], path, start, last=last)
        if record is not None:
            records.append(record)
        elif last:
            break
        start = end + 1
        good_end = start
    if repair and good_end < len(data):
        try:
            await anyio.to_thread.run_sync(_truncate, path, good_end)
        except OSError as exc:
            raise storage_error(path, "truncate a torn tail", exc) from None
    return records


async def read_tail(path: Path, record_type: type[T], enough: Callable[[T], bool]) -> list[T]:
    """The newest records of a JSONL file, oldest first: read from its end
    until *enough* (shown each record, newest first) says so, or the file
    ends. A torn last line is dropped and cut from the file as ``read_log``
    with *repair* does: the first use of a log of years costs what the
    caller keeps of it, not the whole file in memory.
    """
    try:
        newest, cut = await anyio.to_thread.run_sync(_read_tail, path, record_type, enough)
        if cut is not None:
            await anyio.to_thread.run_sync(_truncate, path, cut)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise storage_error(path, "read the tail of", exc) from None
    newest.reverse()
    return newest


async def read_head(path: Path, record_type: type[T], enough: Callable[[T], bool]) -> list[T]:
    """The oldest records of a JSONL file, in order: read from its start
    until *enough* (shown each record) says so, that record included, or
    the file ends (a torn last line left out). What a reader wants from the
    start of a long log costs what it reads, not the whole file."""
    try:
        return await anyio.to_thread.run_sync(_read_head, path, record_type, enough)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise storage_error(path, "read the head of", exc) from None


def _read_head(path: Path, record_type: type[T], enough: Callable[[T], bool]) -> list[T]:
    decoder = msgspec.json.Decoder(record_type)
    oldest: list[T] = []
    with open(path, "rb") as handle:
        offset = 0
        line = handle.readline()
        while line.endswith(b"\n"):  # a torn last one is a kill's, or a write under way
            following = handle.readline()
            record = _decoded(decoder, line, path, offset, last=not following)
            if record is not None:
                oldest.append(record)
                if enough(record):
                    break
            offset += len(line)
            line = following
    return oldest


def _read_tail(
    path: Path, record_type: type[T], enough: Callable[[T], bool]
) -> tuple[list[T], int | None]:
    """The newest records of *path*, newest first, and where a torn or
    unreadable tail to cut begins (``None`` when there is none)."""
    decoder = msgspec.json.Decoder(record_type)
    newest: list[T] = []
    cut: int | None = None
    whole = 0
    with open(path, "rb") as handle:
        for offset, line in _lines_backwards(handle, handle.seek(0, os.SEEK_END)):
            if not line.endswith(b"\n"):
                log.warning("%s: dropped a torn last line of %d bytes", path, len(line))
                cut = offset
                continue
            whole += 1
            record = _decoded(decoder, line, path, offset, last=whole == 1)
            if record is None:
                if whole == 1:
                    cut = offset
                continue
            newest.append(record)
            if enough(record):
                break
    return newest, cut


def _decoded(
    decoder: msgspec.json.Decoder[T], line: bytes, path: Path, offset: int, *, last: bool
) -> T | None:
    """The record *line* (at *offset*) holds, or ``None`` when it does not
    decode: dropped if it is the *last* whole line, which a kill can leave
    half-written with a newline in it; else skipped, since a line before it
    can only be damaged by hand."""
    try:
        return decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        if last:
            log.warning("%s: dropped an unreadable last line: %s", path, exc)
        else:
            log.error("%s: skipped an unreadable line at byte %d: %s", path, offset, exc)
        return None


def _lines_backwards(handle: BinaryIO, size: int) -> Iterator[tuple[int, bytes]]:
    """The offset and bytes of each line of *handle*'s first *size* bytes,
    newest first, each with its newline (a torn last one has none)."""
    # buffer holds the file from pos on; its lines from end on are yielded.
    pos, buffer, end = size, b"", 0
    while True:
        newline = buffer.rfind(b"\n", 0, max(end - 1, 0))
        if newline >= 0:
            yield pos + newline + 1, buffer[newline + 1 : end]
            end = newline + 1
        elif pos == 0:
            if end:
                yield 0, buffer[:end]
            return
        else:
            # Growing with what is held: a line of megabytes is read in a
            # few steps, not re-joined chunk by chunk.
            step = min(max(_CHUNK, end), pos)
            pos -= step
            handle.seek(pos)
            buffer = handle.read(step) + buffer[:end]
            end += step


async def line_end(path: Path, lines: int) -> int:
    """The offset in *path* just past its first *lines* lines."""
    data = await read_bytes(path)
    end = 0
    for _ in range(lines):
        end = data.index(b"\n", end) + 1
    return end


async def read_whole_lines(path: Path) -> bytes:
    """A log's bytes up to its last newline: a torn last line is left out."""
    try:
        data = await read_bytes(path)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise storage_error(path, "read", exc) from None
    return data[: data.rfind(b"\n") + 1]


def storage_error(path: Path, op: str, exc: OSError) -> StorageError:
    return StorageError(
        f"{path}: {op} failed: {exc.strerror or exc}", path=str(path), op=op, errno=exc.errno
    )


async def repair_tails(logs: Sequence[tuple[Path, type[Any]]]) -> None:
    """Cut a torn last line from each (path, record type) log nobody
    appends to any more.

    Only the last byte of each is read unless its tail is torn, all in one
    thread hop: recovery visits thousands of runs, and most ended cleanly.
    """
    torn = await anyio.to_thread.run_sync(_torn, [path for path, _ in logs])
    for n in torn:
        await read_log(*logs[n], repair=True)


def _torn(paths: list[Path]) -> list[int]:
    """Which of *paths* end without a newline, by index."""
    torn = []
    for n, path in enumerate(paths):
        try:
            if _ends_torn(path):
                torn.append(n)
        except OSError as exc:
            raise storage_error(path, "read", exc) from None
    return torn


def _ends_torn(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            if handle.seek(0, os.SEEK_END) == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except FileNotFoundError:
        return False


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(size)
        handle.flush()
        os.fsync(handle.fileno())
