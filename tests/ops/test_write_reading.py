"""NDJSON parsed by worker processes (``ops/write/reading``): the same blocks, digest and errors as
the reader in place, in input order, and no worker left behind when the plan stops early."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, copy_real_store, killed_leaves_no_worker

from rmqstore.codec import messages as messages_mod
from rmqstore.errors import InputError
from rmqstore.ops import write as wr


def _input(n: int, bad_at: int | None = None) -> bytes:
    lines = []
    for i in range(n):
        m = {"topic": f"T{i % 3}", "tags": "TagA", "keys": f"k-{i}", "uniqKey": f"C0A8000A1F9018B4AAC22A3B{i:08X}"}
        m |= {"properties": {"traceId": f"t{i}"}, "body": "b" * (i % 90)}
        lines.append("{oops" if i == bad_at else json.dumps(m))
        if i % 50 == 7:
            lines.append("")  # a blank line: read line by line, skipped
    return ("\n".join(lines) + "\n").encode()


def _blocks(read: object, data: bytes) -> tuple[list[list[object]], str]:
    digest = hashlib.sha256()
    blocks = [
        b.messages() if isinstance(b, wr.MessageBatch) else b for b in read(io.BytesIO(data), digest, source="in")
    ]  # type: ignore[operator]
    return blocks, digest.hexdigest()


def _children() -> set[int]:
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
        return {int(p) for p in f.read().split()}


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(messages_mod, "_READ_CHUNK", 4096)  # many chunks: the workers take part


def test_workers_give_the_blocks_of_the_reader_in_place(small_chunks: None) -> None:
    data = _input(700)
    here, digest = _blocks(wr.read_ndjson_blocks, data)
    there, digest_there = _blocks(wr.read_blocks, data)
    assert len(here) > 10 and there == here and digest_there == digest == hashlib.sha256(data).hexdigest()
    last_line = data.count(b"\n")
    assert [m.origin for b in there for m in b][-1] == f"in:{last_line}"  # type: ignore[attr-defined]


def test_a_bad_line_in_a_late_chunk_is_named_as_read_in_place(small_chunks: None) -> None:
    data = _input(700, bad_at=650)
    errors = []
    for read in (wr.read_ndjson_blocks, wr.read_blocks):
        with pytest.raises(InputError) as e:
            _blocks(read, data)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and errors[0].startswith("in:")


def test_a_plan_stopped_early_leaves_no_worker(small_chunks: None) -> None:
    before = _children()
    blocks = wr.read_blocks(io.BytesIO(_input(700)), hashlib.sha256(), source="in")
    next(blocks)
    assert _children() - before  # the workers run
    blocks.close()
    assert _children() == before


def test_a_write_read_by_workers_is_the_write_read_in_place(tmp_path, small_chunks: None) -> None:  # type: ignore[no-untyped-def]
    data = _input(400)
    fixed = {"clock": lambda: 1_800_000_000_000, "topic_queue_nums": 4}
    stores = []
    for name, read in (("here", wr.read_ndjson_blocks), ("there", wr.read_blocks)):
        root = copy_real_store("clean-2topics", tmp_path / name)
        with wr.open_for_write(root) as st:
            digest = hashlib.sha256()
            blocks = read(io.BytesIO(data), digest, source="in")
            opts = wr.WriteOptions(**fixed, uniq_keys=wr.UniqKeySource(seed=3))  # type: ignore[arg-type]
            plan, hexdigest, _ = wr.prepare_write_blocks(st, blocks, digest, opts, again=False, dry_run=False)
            wr.apply_write(st, plan, index_clock=fixed["clock"], now_ms=1_800_000_000_000, digest=hexdigest)  # type: ignore[arg-type]
        files = [p for p in root.rglob("*") if p.is_file() and ".rmqstore" not in p.parts]
        stores.append({p.relative_to(root): p.read_bytes() for p in files})
    assert stores[0] == stores[1]


_KILLED = textwrap.dedent(
    """\
    import hashlib, io, os, sys, time
    sys.path.insert(0, {repo!r})
    from rmqstore.codec import messages
    from rmqstore.ops import write as wr
    messages._READ_CHUNK = 4096
    blocks = wr.read_blocks(io.BytesIO(open({source!r}, "rb").read()), hashlib.sha256(), source="in")
    next(blocks)
    with open(f"/proc/{{os.getpid()}}/task/{{os.getpid()}}/children") as f:
        print(f.read(), flush=True)
    time.sleep(60)  # killed here, with its workers running
    """
)


def test_workers_of_a_killed_write_exit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "in.ndjson"
    source.write_bytes(_input(700))
    script = _KILLED.format(repo=str(REPO), source=str(source))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert killed_leaves_no_worker(proc)
