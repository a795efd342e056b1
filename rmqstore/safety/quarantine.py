"""The quarantine: a fresh folder that keeps every byte an operation removes."""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
from pathlib import Path
from typing import Any

from rmqstore.errors import InputError
from rmqstore.safety.files import (
    atomic_write,
    copy_file,
    copy_range,
    fsync_dir,
    remove_stale_tmp,
    sha256_file,
)
from rmqstore.safety.openfile import check_regular, json_loads, read_file

MANIFEST_SCHEMA = "rmqstore-quarantine/1"


def default_quarantine_base(root: Path | str) -> Path:
    """``<store parent>/<store name>.quarantine``: each run gets a fresh folder inside."""
    r = Path(root).resolve()
    return r.parent / f"{r.name}.quarantine"


def check_quarantine_dir(qdir: Path | str, data_dirs: list[Path]) -> None:
    """A quarantine folder inside one of the store's data directories would be read as store files."""
    q = Path(qdir).resolve()
    for d in data_dirs:
        try:
            q.relative_to(Path(d).resolve())
        except ValueError:
            continue
        raise InputError(f"--quarantine {qdir} is inside {d}: choose a folder outside the store's data directories")


def _stamp(now_ms: int) -> str:
    t = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC)
    return t.strftime("%Y%m%dT%H%M%S") + f"{now_ms % 1000:03d}Z"


def _q(p: Path | str) -> str:
    return shlex.quote(str(p))


class Quarantine:
    """One run's folder for removed bytes, and its ``manifest.json``.

    Manifest schema (``schema`` = :data:`MANIFEST_SCHEMA`): ``operation``, ``store``, ``folder`` (all
    absolute), ``createdMs``, ``howToRestore`` and ``items``; each item has ``kind`` (file, range,
    directory, marker), ``path`` (absolute, where it was), ``saved`` (absolute, where it is now),
    ``why``, ``restore`` (a shell command with absolute quoted paths) and, for files and ranges,
    ``size``/``from``/``to`` and ``sha256`` of the saved bytes.
    """

    def __init__(self, folder: Path, operation: str, store: Path, created_ms: int, items: list[dict[str, Any]]):
        self.folder = folder
        self.operation = operation
        self.store = store
        self.created_ms = created_ms
        self.items = items

    @classmethod
    def fresh(cls, base: Path | str, operation: str, store: Path | str, now_ms: int) -> Quarantine:
        """A new folder ``<base>/<operation>-<UTC time>[-n]`` that no earlier run used."""
        base = Path(base).absolute()
        base.mkdir(parents=True, exist_ok=True)
        stem = f"{operation}-{_stamp(now_ms)}"
        n = 1
        while True:
            folder = base / (stem if n == 1 else f"{stem}-{n}")
            try:
                folder.mkdir()
                break
            except FileExistsError:
                n += 1
        fsync_dir(base)
        return cls(folder, operation, Path(store).resolve(), now_ms, [])

    @classmethod
    def resume(cls, folder: Path | str, operation: str, store: Path | str) -> Quarantine:
        """The folder of an interrupted run (its manifest items, if one was written)."""
        folder = Path(folder)
        items: list[dict[str, Any]] = []
        created = 0
        m = folder / "manifest.json"
        if m.exists():
            data = json_loads(read_file(m), path=m)
            items, created = list(data.get("items", [])), int(data.get("createdMs", 0))
        folder.mkdir(parents=True, exist_ok=True)
        for d in {p.parent for p in folder.rglob("*.partial")}:
            remove_stale_tmp(d)  # copies a killed run did not finish: this run makes them again
        return cls(folder, operation, Path(store).resolve(), created, items)

    def _saved(self, src: Path, sub: str, suffix: str = "") -> Path:
        try:
            rel = Path(src).resolve().relative_to(self.store)
        except ValueError:
            rel = Path(Path(src).name)
        return self.folder / sub / (str(rel) + suffix)

    def add(self, item: dict[str, Any]) -> dict[str, Any]:
        """Record an item in the manifest (replacing one for the same path and range)."""
        self.items = [i for i in self.items if not (i["path"] == item["path"] and i.get("from") == item.get("from"))]
        self.items.append(item)
        return item

    def save_file(self, src: Path, why: str, *, link: bool = False) -> dict[str, Any]:
        """Keep a copy of ``src`` (a hard link when ``link`` and nothing writes it before it goes)."""
        src = Path(src).absolute()
        check_regular(src, self.store)  # a FIFO or a device never ends a copy
        dst = self._saved(src, "files")
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.unlink(missing_ok=True)
        try:
            if not link or os.path.islink(src):
                raise OSError("copy asked")
            os.link(src, dst)
        except OSError:
            tmp = dst.with_name(dst.name + ".partial")
            copy_file(src, tmp)
            os.replace(tmp, dst)
        return self.add(
            {
                "kind": "file",
                "path": str(src),
                "saved": str(dst),
                "size": dst.stat().st_size,
                "sha256": sha256_file(dst),
                "why": why,
                "restore": f"cp --sparse=always {_q(dst)} {_q(src)}",
            }
        )

    def save_range(self, src: Path, start: int, end: int, why: str) -> dict[str, Any]:
        """Keep bytes ``[start, end)`` of ``src``."""
        src = Path(src).absolute()
        dst = self._saved(src, "ranges", f".{start}-{end}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".partial")
        digest = copy_range(src, tmp, start, end, root=self.store)
        os.replace(tmp, dst)
        return self.add(
            {
                "kind": "range",
                "path": str(src),
                "from": start,
                "to": end,
                "saved": str(dst),
                "sha256": digest,
                "why": why,
                "restore": f"dd if={_q(dst)} of={_q(src)} bs=1M seek={start} oflag=seek_bytes conv=notrunc",
            }
        )

    def note(self, path: Path, why: str, restore: str) -> dict[str, Any]:
        """An item that holds no bytes (a removed marker file)."""
        return self.add({"kind": "marker", "path": str(Path(path).absolute()), "why": why, "restore": restore})

    def write_manifest(self, **extra: Any) -> Path:
        manifest = {
            "schema": MANIFEST_SCHEMA,
            "operation": self.operation,
            "store": str(self.store),
            "folder": str(self.folder),
            "createdMs": self.created_ms,
            "howToRestore": (
                "Stop the broker, then run the 'restore' command of every item, last item first; the commands "
                "use absolute paths and work from any directory."
            ),
            **extra,
            "items": self.items,
        }
        p = self.folder / "manifest.json"
        atomic_write(p, json.dumps(manifest, indent=2).encode())
        for d in sorted({q.parent for q in self.folder.rglob("*") if q.is_file()}):
            fsync_dir(d)
        return p
