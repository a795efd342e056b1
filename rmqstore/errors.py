"""Every exception rmqstore raises, each carrying its process exit code (style R4).

Exit codes are part of the command-line contract and documented in README.md and
``man/rmqstore.1``: 0 ok, 1 error, 2 usage, 3 problems found, 4 store locked,
5 not a store, 6 corrupt data, 7 unsupported store, 8 unsafe plan refused.
"""

from __future__ import annotations

import errno
from pathlib import Path


def _rebuild(cls: type, args: tuple, state: dict) -> Exception:
    e = cls.__new__(cls)
    Exception.__init__(e, *args)
    e.__dict__.update(state)
    return e


class RmqstoreError(Exception):
    """Root of every error the library raises on purpose."""

    exit_code = 1

    def __init_subclass__(cls, exit_code: int | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)  # type: ignore[arg-type]
        if exit_code is not None:
            cls.exit_code = exit_code

    def __reduce__(self) -> tuple:
        # Constructors take keyword-only fields, so pickling (results of worker processes) goes
        # by the message and the fields, not by calling the constructor again.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class ProblemsFound(RmqstoreError, exit_code=3):
    """A scan or check finished and reported problems."""


class StoreLocked(RmqstoreError, exit_code=4):
    """A running broker holds the store's ``lock`` (fcntl byte-range lock on byte 0)."""


class StoreNotFound(RmqstoreError, exit_code=5):
    """The path is missing or is not a RocketMQ store root."""


class CorruptData(RmqstoreError, exit_code=6):
    """Bytes on disk are not what the format says they must be."""

    def __init__(self, what: str, *, path: Path | str, pos: int, phy_offset: int | None = None) -> None:
        self.what = what
        self.path = Path(path)
        self.pos = pos
        self.phy_offset = phy_offset
        at = "" if phy_offset is None else f" (phy offset {phy_offset})"
        super().__init__(f"{path}: {what} at byte {pos}{at}")


class ChecksumMismatch(CorruptData):
    """A record's stored body CRC differs from the CRC of its body bytes."""

    def __init__(self, *, path: Path | str, pos: int, phy_offset: int | None, stored: int, computed: int) -> None:
        self.stored = stored
        self.computed = computed
        super().__init__(
            f"body CRC mismatch: stored {stored}, computed {computed}", path=path, pos=pos, phy_offset=phy_offset
        )


class ConfigError(RmqstoreError, exit_code=1):
    """broker.conf or a config/*.json file cannot be used."""

    def __init__(self, what: str, *, path: Path | str, line: int | None = None) -> None:
        self.what = what
        self.path = Path(path)
        self.line = line
        at = "" if line is None else f":{line}"
        super().__init__(f"{path}{at}: {what}")


class InputError(RmqstoreError, exit_code=1):
    """A user-supplied value (message, NDJSON line, time, topic) is invalid."""


class UsageError(RmqstoreError, exit_code=2):
    """An option value is not one rmqstore accepts (e.g. an unknown --broker-version)."""


class UnsupportedStore(RmqstoreError, exit_code=7):
    """A store layout, or an operation on it, that rmqstore refuses (RocksDB consume queue, writing to DLedger, ...)."""


class UnsafePlan(RmqstoreError, exit_code=8):
    """The plan would drop data or break the store; refused without --force."""


class ExpireRunning(RmqstoreError, exit_code=11):
    """Another ``rmqstore expire`` holds ``<root>/.rmqstore/expire.lock``."""


class FileAccessError(RmqstoreError):
    """A file or directory the operation needs cannot be used as one (an ``OSError``, explained).

    A wrong file type (a directory where a file belongs, a symlink loop, a file that cannot be mapped)
    is damage to the store layout: exit 6. Permissions, a missing path, a full or read-only disk: exit 1.
    """

    def __init__(self, message: str, *, path: Path | str | None, errno_: int | None, exit_code: int):
        super().__init__(message)
        self.path = Path(path) if path is not None else None
        self.errno = errno_
        self.exit_code = exit_code


_EXPECTED = {
    errno.EISDIR: ("is a directory; a regular file was expected", 6),
    errno.ENOTDIR: ("is not a directory (or a parent is a file); a directory was expected", 6),
    errno.ELOOP: ("is a symbolic link loop; a file or directory was expected", 6),
    errno.ENODEV: ("cannot be memory-mapped; a regular file was expected", 6),
    errno.EACCES: ("permission denied; read (and, to modify, write) access is needed", 1),
    errno.EPERM: ("operation not permitted; read (and, to modify, write) access is needed", 1),
    errno.ENOENT: ("does not exist", 1),
    errno.ENOSPC: ("no space left on the device", 1),
    errno.EROFS: ("is on a read-only file system; write access is needed", 1),
    errno.EMFILE: ("too many open files (raise ulimit -n)", 1),
}


def from_os_error(e: OSError, path: Path | str | None = None, *, doing: str | None = None) -> FileAccessError:
    """One line naming the path and what was expected there, with a documented exit code."""
    where = path if path is not None else (e.filename if e.filename is not None else None)
    what, code = _EXPECTED.get(e.errno or 0, (f"{e.strerror or e}", 1))
    head = f"{where}: " if where is not None else ""
    during = f" (while trying to {doing})" if doing else ""
    return FileAccessError(f"{head}{what}{during}", path=where, errno_=e.errno, exit_code=code)


class MissingExtra(RmqstoreError, exit_code=1):
    """An optional dependency (the ``spark`` or ``rocksdb`` extra, Java) is not installed."""


class VersionContradicted(UserWarning):
    """``--broker-version`` names a family the store's own contents rule out (followed anyway)."""


EXIT_CODES: dict[int, str] = {
    0: "success (a dry run included)",
    1: "error: bad input, bad configuration, a missing optional dependency, a file that cannot be read or "
    "written (permission, missing path, full disk: the message names the path), or an internal error",
    2: "usage error (unknown option, missing argument, a range that selects nothing: `--from-offset 10 --to-offset 5`, "
    "`--since` after `--until`, `--begin` after `--end`, `--count 0`)",
    3: "problems found: the scan or check finished and reported problems (`check`: errors or warnings; `info`: errors)",
    4: "store locked: a running broker holds store/lock; nothing was changed (`check`: the store is in use and "
    "nothing else was found)",
    5: "not a store: the path is missing or is not a RocketMQ store root",
    6: "corrupt data: a file is damaged where the operation needed it intact, or is of the wrong type "
    "(a directory, FIFO, socket or device where a file belongs, a symlink loop, a link out of the store, "
    "JSON nested too deep)",
    7: "unsupported store or operation (`write` to a DLedger commit log, a RocksDB consume queue store or a batch consume queue topic)",
    8: "unsafe plan refused: the operation would lose data, or write the same input twice; see --force "
    "(write: --again)",
    9: "expire `--detailed-exitcode` only: files were deleted (a dry run: would be); without the option a successful run exits 0",
    11: "expire: another rmqstore expire run holds this store's expire lock",
}


class RecordSizeMismatch(CorruptData):
    """TOTALSIZE disagrees with the size computed from the record's own lengths (§3.11 step 7).

    The broker's dispatcher skips ``total_size`` bytes past such a record; recovery stops at it.
    """

    def __init__(self, *, path: Path | str, pos: int, phy_offset: int | None, total_size: int, computed: int):
        self.total_size = total_size
        self.computed = computed
        super().__init__(
            f"record size mismatch: TOTALSIZE {total_size}, fields add up to {computed}",
            path=path,
            pos=pos,
            phy_offset=phy_offset,
        )
