"""A run's and a reports folder's files, in a folder others may write to too (a team's `reports/`
on a shared machine, NFS, a CI cache). Every write goes to a fresh file beside its destination,
created exclusively, and is moved into place: a link or a special file a co-user left at the
destination is refused with one line naming it, never written through. Every read opens the file
without following a link and without blocking (a FIFO never hangs a reader), takes only a regular
file, and reads at most a stated size. docs/security.md lists these limits."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

MIB = 1 << 20
JSON_LIMIT = 64 * MIB  # run.json, summary.json, a status, a preflight's, a marker
TRACE_LIMIT = 256 * MIB  # a rollout trace, as written (its arrays decode within DECODED_LIMIT)
DECODED_LIMIT = 1024 * MIB  # a trace's arrays, decoded, all together
LINE_LIMIT = 16 * MIB  # one line of results.jsonl or verdicts.jsonl
BLOCK = 64 * 1024  # what a stream of lines reads at a time (under malloc's own mapping)
RESULTS_LIMIT = 4096 * MIB  # a results.jsonl or verdicts.jsonl, streamed (held a line at a time)
LINES_LIMIT = 2048 * MIB  # a JSON-lines file read whole (a blinded run's files, unblinded)


class Refused(OSError):
    """A file policybench will not write or read: a link, a special file, a folder where a file
    belongs, a file over its size limit, or one owned by someone else where that matters. Its
    message is one line naming the path and why."""


def _what(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "a special file"


def _refuse_destination(path: Path) -> None:
    """Refuses `path` as a place to write a file unless nothing or a regular file is there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    what = _what(mode)
    if stat.S_ISLNK(mode):
        what += f" (to {os.readlink(path)})"
    raise Refused(
        f"refused to write {path}: it is {what}, not a regular file; someone with write access "
        "to the folder may have put it there to redirect the write. Remove it, or write "
        "elsewhere"
    )


def _fresh(folder: Path, name: str) -> tuple[int, Path]:
    """A new, empty file beside `name` in `folder`, created exclusively (never an existing one,
    never through a link), with a new file's mode (0666 less the umask)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        staging = folder / f".{name}.{os.getpid()}-{secrets.token_hex(4)}"
        try:
            return os.open(staging, flags, 0o666), staging
        except FileExistsError:
            continue


def write_file(path: Path, data: str | bytes, encoding: str = "utf-8") -> None:
    """Writes `data` to `path` whole or not at all: a reader, or a process killed as it writes,
    finds the old file or the new one, never a part, and a link at `path` is refused (Refused),
    its target left untouched."""
    path = Path(path)
    _refuse_destination(path)
    descriptor, staging = _fresh(path.parent, path.name)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data.encode(encoding) if isinstance(data, str) else data)
        os.replace(staging, path)  # replaces whatever is at `path` itself, never its target
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def staging_for(path: Path) -> Path:
    """A new, empty file beside `path`, created exclusively, for a writer that needs a name
    (an encoder): move it into place with `move_into_place` once written."""
    descriptor, staging = _fresh(Path(path).parent, Path(path).name)
    os.close(descriptor)
    return staging


def move_into_place(staging: Path, path: Path) -> None:
    """Moves a finished `staging` file to `path`; Refused (the staging file removed) where a
    link or a special file is at `path`."""
    try:
        _refuse_destination(Path(path))
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


def open_append(path: Path, binary: bool = False, readable: bool = False) -> IO[Any]:
    """`path` opened to append (and to read, if `readable`), created if absent; Refused where a
    link or a special file is."""
    path = Path(path)
    _refuse_destination(path)
    flags = os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    flags |= os.O_RDWR if readable else os.O_WRONLY
    try:
        descriptor = os.open(path, flags, 0o666)
    except OSError as error:
        _refuse_destination(path)  # a link planted since the check
        raise error
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        _refuse_destination(path)
    os.set_blocking(descriptor, True)
    mode = "a+" if readable else "a"
    if binary:
        return os.fdopen(descriptor, mode + "b")
    return os.fdopen(descriptor, mode, encoding="utf-8")


def make_folder(path: Path) -> Path:
    """Makes the folder `path` (its parent exists) or takes the one there; Refused where a link,
    a file or a special file is in its place (a link there would send every write into it
    elsewhere)."""
    path = Path(path)
    try:
        os.mkdir(path)
    except FileExistsError:
        mode = os.lstat(path).st_mode
        if not stat.S_ISDIR(mode):
            what = _what(mode)
            raise Refused(
                f"refused to write into {path}: it is {what}, not a folder; someone with write "
                "access may have put it there to redirect what is written into it. Remove it, "
                "or write elsewhere"
            ) from None
    return path


def make_folders(base: Path, *names: str) -> Path:
    """`base` (followed as given: the folder a user named) and each folder `names` lead to below
    it, made or taken as make_folder does."""
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = make_folder(path / name)
    return path


def open_regular(path: Path, limit: int) -> IO[bytes]:
    """`path` opened to read: only a regular file (a link, a FIFO or a device is Refused, and
    opening never blocks), of at most `limit` bytes. FileNotFoundError where nothing is."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        if error.errno == getattr(os, "ELOOP", 40) or os.path.islink(path):
            raise Refused(f"refused to read {path}: it is a symbolic link") from None
        raise
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        raise Refused(f"refused to read {path}: it is {_what(status.st_mode)}, not a file")
    if status.st_size > limit:
        os.close(descriptor)
        raise Refused(
            f"refused to read {path}: {status.st_size:,} bytes, over the {limit:,} bytes this "
            "kind of file may have"
        )
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb")


def read_bytes(path: Path, limit: int = JSON_LIMIT) -> bytes:
    """A regular file's bytes, at most `limit` of them (a file that grew past it is Refused)."""
    with open_regular(path, limit) as file:
        # As much as the file holds, and a byte more: reading `limit` at once would make a
        # buffer of `limit` bytes for a file of a few; one that grew since reads on to the limit.
        size = os.fstat(file.fileno()).st_size
        data = file.read(min(size, limit) + 1)
        if size < len(data) <= limit:
            data += file.read(limit + 1 - len(data))
    if len(data) > limit:
        raise Refused(
            f"refused to read {path}: over the {limit:,} bytes this kind of file may have"
        )
    return data


def read_text(path: Path, limit: int = JSON_LIMIT, encoding: str = "utf-8") -> str:
    return read_bytes(path, limit).decode(encoding)


def read_json(path: Path, limit: int = JSON_LIMIT) -> Any:
    """A JSON file's document; ValueError (naming the file) where it is not JSON or nests too
    deep to read."""
    return loads(read_bytes(path, limit), str(path))


def loads(text: str | bytes, where: str = "the document") -> Any:
    """A JSON document as json.loads reads it, with one nested too deep for Python's parser
    refused as ValueError (its RecursionError would end a command that reads many files).
    orjson reads it first, three times as fast; what orjson refuses and json reads (NaN, an
    integer past 64 bits, a lone surrogate) and every error message are json's."""
    found = _fast(text, where)
    if found is not UNREAD:
        return found
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deep to read; refused") from None


def loads_line(line: bytes, where: str = "the line") -> Any:
    """A JSON line's document, read from its bytes as they are (invalid UTF-8 read as json
    reads it decoded with replacements, as `loads` says)."""
    found = _fast(line, where)
    return found if found is not UNREAD else loads(line.decode("utf-8", errors="replace"), where)


TOO_DEEP = "depth limit exceeded"  # orjson's words for a document nested past 1,024 levels
UNREAD = object()  # what orjson did not read, for json to read or refuse in its own words


def _fast(text: str | bytes, where: str) -> Any:
    """orjson's reading of `text`, or UNREAD; ValueError for a document nested past its depth
    limit, said alike whatever the stack has left (json's recursion depends on it)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as error:
        if str(error).startswith(TOO_DEEP):
            raise ValueError(f"{where}: JSON nested too deep to read; refused") from None
    return UNREAD


@contextlib.contextmanager
def held_apart() -> Iterator[None]:
    """Keeps every object the process holds now out of the cyclic collector's scans for the
    block (gc.freeze): a run's records, read once and kept, are not walked again at each
    collection of what the block makes; the collector still runs on that."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector while a block builds many objects that form no
    cycles (documents parsed from JSON): left on, it would scan every object the process holds
    again and again as they pile up. Nested pauses restore what the outermost found."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def lines_of(path: Path, limit: int = LINE_LIMIT) -> Any:
    """A JSON-lines file's lines, streamed a block at a time: (number, bytes) of each, without
    its newline, and a line longer than `limit` as (number, None), skipped without holding it."""
    with open_regular(path, RESULTS_LIMIT) as file:
        number, parts, held, too_long = 0, [], 0, False  # the line read so far, its length
        while block := file.read(BLOCK):
            *ended, tail = block.split(b"\n")
            for piece in ended:
                number += 1
                if too_long or held + len(piece) > limit:
                    yield number, None
                else:
                    yield number, b"".join((*parts, piece)) if parts else piece
                parts, held, too_long = [], 0, False
            if too_long or held + len(tail) > limit:
                parts, held, too_long = [], 0, True
            elif tail:
                parts.append(tail)
                held += len(tail)
        if parts or too_long:  # a last line without its newline
            yield number + 1, None if too_long else b"".join(parts)
