"""Generate a large store for benchmarks: production file sizes, keys on every message.

    python benchmarks/make_store.py [--out DIR] [--size-gib 1] [--msg-size 200|4096]
                                    [--topics 4] [--queues 8] [--file-size BYTES] [--verify]

Writes ``DIR/broker.conf`` and ``DIR/store/`` (default DIR: /tmp/rmqstore-bench/<size>g-<msg>b):
commit log files of 1 GiB (each full one ending with a BLANK record), consume queues of 300,000
entries per file, index files of the default 5,000,000 slots x 20,000,000 entries, checkpoint and
config/topics.json, as a 4.4.0 broker leaves them after a clean shutdown. Message n goes to topic
``BenchTopicNN`` = n % topics and queue (n // topics) % queues; it has TAGS ``TagA``, KEYS
``k-<n, 10 digits>``, a UNIQ_KEY in the client layout and WAIT, stored in the broker's property order,
and a body of --msg-size bytes starting with n in 10 digits.

Records are not encoded one by one: one template record is repeated with numpy and the fields that
change (offsets, times, queue id, CRC, digits of the key, the UNIQ_KEY and the body) are patched
column-wise, so a GiB takes seconds. Consume queues are written with numpy; the index goes through
:class:`rmqstore.dispatch.Dispatcher`, the same code ``write`` and ``redispatch`` use. ``--verify``
decodes a sample of records with the project's decoder and checks them against the queues.
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rmqstore.codec import checkpoint as cpmod  # noqa: E402
from rmqstore.codec.commitlog import encode_blank, encode_record  # noqa: E402
from rmqstore.codec.consumequeue import ENTRY_DTYPE, ENTRY_SIZE  # noqa: E402
from rmqstore.codec.javahash import java_hash  # noqa: E402
from rmqstore.dispatch.dispatcher import Dispatcher  # noqa: E402
from rmqstore.ops.write import java_hashmap_order  # noqa: E402
from rmqstore.store import config as cfgmod  # noqa: E402
from rmqstore.store.layout import file_name, load_broker_config  # noqa: E402
from rmqstore.walk.requests import DispatchRequest  # noqa: E402

GIB = 1 << 30
BASE_TS = 1_700_000_000_000
MSGS_PER_MS = 100  # store times advance 1 ms every 100 messages (100k msg/s)
UNIQ_PREFIX = "C0A8000A1F9018B4AAC2"  # ip 192.168.0.10, pid 0x1F90, class-loader hash 0x18B4AAC2
STORE_ADDR, STORE_PORT = bytes([192, 168, 0, 200]), 10911
BORN_ADDR, BORN_PORT = bytes([192, 168, 0, 10]), 40000
CHUNK = 1 << 18  # records patched per numpy batch

BROKER_CONF = """# benchmark store: production sizes (1 GiB commit log files) unless --file-size says otherwise
storePathRootDir=store
storePathCommitLog=store/commitlog
mapedFileSizeCommitLog={fs}
flushDiskType=ASYNC_FLUSH
"""


def _digits(values: np.ndarray, width: int, base: int = 10) -> np.ndarray:
    """ASCII digits (upper-case hex for base 16) of each value, zero-padded: shape (n, width)."""
    powers = base ** np.arange(width - 1, -1, -1, dtype=np.uint64)
    d = (values.astype(np.uint64)[:, None] // powers) % base
    return np.where(d < 10, d + 48, d + 55).astype(np.uint8)


def _be(values: np.ndarray, dtype: str) -> np.ndarray:
    """Big-endian bytes of ``values`` as a (n, itemsize) uint8 array."""
    return values.astype(dtype).view(np.uint8).reshape(len(values), -1)


HOSTS = {"born_addr": BORN_ADDR, "born_port": BORN_PORT, "store_addr": STORE_ADDR, "store_port": STORE_PORT}


class Layout:
    """Where every field of the template record lies (V1, IPv4 hosts)."""

    def __init__(self, topic_len: int, msg_size: int, topic0: str):
        self.body = 88
        self.topic = self.body + msg_size + 1
        props = {"TAGS": "TagA", "KEYS": "k-0000000000", "WAIT": "true", "UNIQ_KEY": UNIQ_PREFIX + "0" * 12}
        order = java_hashmap_order(["TAGS", "KEYS", "WAIT", "UNIQ_KEY"])
        text = "".join(f"{k}\x01{props[k]}\x02" for k in order)
        self.props_bytes = text.encode()
        self.props = self.topic + topic_len + 2
        self.keys_digits = self.props + text.index("KEYS\x01k-") + len("KEYS\x01k-")
        self.uniq_tail = self.props + text.index("UNIQ_KEY\x01") + len("UNIQ_KEY\x01") + len(UNIQ_PREFIX)
        self.template = bytearray(
            encode_record(
                topic=topic0,
                queue_id=0,
                queue_offset=0,
                phy_offset=0,
                born_timestamp_ms=0,
                store_timestamp_ms=0,
                body=b"b" * msg_size,
                properties=self.props_bytes,
                **HOSTS,
            )
        )
        self.size = len(self.template)


def generate(
    out: Path,
    *,
    size_bytes: int,
    msg_size: int,
    topics: int,
    queues: int,
    file_size: int = GIB,
    progress: bool = True,
) -> dict:
    root = out / "store"
    (out).mkdir(parents=True, exist_ok=True)
    (out / "broker.conf").write_text(BROKER_CONF.format(fs=file_size))
    cfg = load_broker_config(out / "broker.conf", store_root=root)
    names = [f"BenchTopic{t:02d}" for t in range(topics)]
    lay = Layout(len(names[0]), msg_size, names[0])
    rs = lay.size
    per_file = (file_size - 8) // rs  # record k fits while k*rs + rs + 8 <= file size (§3.4)
    total = max(1, size_bytes // rs)
    n_files = (total + per_file - 1) // per_file
    t0 = time.perf_counter()
    (root / "commitlog").mkdir(parents=True, exist_ok=True)
    template = np.frombuffer(bytes(lay.template), dtype=np.uint8)
    topic_rows = np.array([list(n.encode()) for n in names], dtype=np.uint8)
    crc_out = np.empty(total, dtype=np.int64)
    for f in range(n_files):
        first, last = f * per_file, min(total, (f + 1) * per_file)
        path = root / "commitlog" / file_name(f * file_size)
        with open(path, "wb") as fh:
            fh.truncate(file_size)
        fd = os.open(path, os.O_RDWR)
        m = mmap.mmap(fd, file_size)
        os.close(fd)
        view = np.frombuffer(m, dtype=np.uint8, count=(last - first) * rs).reshape(-1, rs)
        for a in range(first, last, CHUNK):
            b = min(last, a + CHUNK)
            n = np.arange(a, b, dtype=np.int64)
            rec = np.empty((b - a, rs), dtype=np.uint8)
            rec[:] = template
            rec[:, 12:16] = _be(((n // topics) % queues), ">i4")
            rec[:, 20:28] = _be(n // (topics * queues), ">i8")
            rec[:, 28:36] = _be(f * file_size + (n - first) * rs, ">i8")
            ts = BASE_TS + n // MSGS_PER_MS
            rec[:, 40:48] = _be(ts - 1, ">i8")  # born 1 ms before it is stored
            rec[:, 56:64] = _be(ts, ">i8")
            rec[:, lay.body : lay.body + 10] = _digits(n, 10)
            rec[:, lay.topic : lay.topic + len(names[0])] = topic_rows[n % topics]
            rec[:, lay.keys_digits : lay.keys_digits + 10] = _digits(n, 10)
            month_ms = (ts - _month_start(BASE_TS)) & 0xFFFFFFFF
            rec[:, lay.uniq_tail : lay.uniq_tail + 8] = _digits(month_ms, 8, 16)
            rec[:, lay.uniq_tail + 8 : lay.uniq_tail + 12] = _digits(n & 0xFFFF, 4, 16)
            bodies = rec[:, lay.body : lay.body + msg_size]
            crcs = np.fromiter((zlib.crc32(row) & 0x7FFFFFFF for row in bodies), np.int64, b - a)
            rec[:, 8:12] = _be(crcs, ">i4")
            crc_out[a:b] = crcs
            view[a - first : b - first] = rec
        del view
        if last == (f + 1) * per_file:  # a full file ends with a BLANK record
            pos = per_file * rs
            m[pos : pos + 8] = encode_blank(file_size - pos)
        m.flush()
        m.close()
        if progress:
            print(f"  commit log {path.name}: {last - first} records", file=sys.stderr)
    t_cl = time.perf_counter() - t0

    # consume queues, straight from the arithmetic of the layout
    n_all = np.arange(total, dtype=np.int64)
    phy_all = (n_all // per_file) * file_size + (n_all % per_file) * rs
    ts_all = BASE_TS + n_all // MSGS_PER_MS
    tag = java_hash("TagA")
    for t in range(topics):
        for q in range(queues):
            idx = n_all[t + topics * q :: topics * queues]
            entries = np.empty(len(idx), dtype=ENTRY_DTYPE)
            entries["phy_offset"] = phy_all[idx]
            entries["size"] = rs
            entries["tags_code"] = tag
            qdir = root / "consumequeue" / names[t] / str(q)
            qdir.mkdir(parents=True, exist_ok=True)
            per_cq = cfg.cq_file_size // ENTRY_SIZE
            for s in range(0, max(len(idx), 1), per_cq):
                with open(qdir / file_name(s * ENTRY_SIZE), "wb") as fh:
                    fh.truncate(cfg.cq_file_size)
                    fh.write(entries[s : s + per_cq].tobytes())
    t_cq = time.perf_counter() - t0 - t_cl

    # index: every UNIQ_KEY and KEYS token, through the dispatcher
    disp = Dispatcher(cfg, consume_queue=False, index=True, clock=lambda: BASE_TS)
    month0 = _month_start(BASE_TS)
    for a in range(0, total, CHUNK):
        b = min(total, a + CHUNK)
        reqs = [
            DispatchRequest(
                names[i % topics],
                (i // topics) % queues,
                int(phy_all[i]),
                rs,
                tag,
                int(ts_all[i]),
                i // (topics * queues),
                f"k-{i:010d}",
                f"{UNIQ_PREFIX}{(int(ts_all[i]) - month0) & 0xFFFFFFFF:08X}{i & 0xFFFF:04X}",
                0,
            )
            for i in range(a, b)
        ]
        disp.dispatch(reqs)
    stats = disp.close(sync=True)
    t_ix = time.perf_counter() - t0 - t_cl - t_cq

    last_ts = int(ts_all[-1])
    cp = cpmod.Checkpoint(last_ts, last_ts, stats.index_msg_timestamp_ms)
    (root / "checkpoint").write_bytes(cpmod.encode(cp))
    (root / "lock").touch()
    data: dict = {}
    for name in names:
        cfgmod.set_topic(data, cfgmod.TopicConfig(name, queues, queues), now_ms=BASE_TS)
    cfgmod.write_config(root / "config", "topics.json", data)
    info = {
        "store": str(root),
        "records": total,
        "recordSize": rs,
        "bodySize": msg_size,
        "commitLogFiles": n_files,
        "dataBytes": total * rs,
        "maxPhyOffset": int(phy_all[-1]) + rs,
        "indexEntries": stats.index_entries,
        "seconds": {"commitlog": round(t_cl, 2), "consumequeue": round(t_cq, 2), "index": round(t_ix, 2)},
    }
    return info


def _month_start(ms: int) -> int:
    import datetime as dt

    t = dt.datetime.fromtimestamp(ms / 1000)
    return int(t.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)


def verify(out: Path) -> None:
    """Rebuild consume queues and index from the generated commit log with the dispatcher (CRC
    checked on every record) and require the generated files to be identical."""
    import shutil
    import tempfile

    from rmqstore.store import open_store
    from rmqstore.store.files import map_file
    from rmqstore.walk.requests import iter_requests, scan_requests

    with open_store(out / "store") as st:
        cfg = st.config
        segs, problems = st.commitlog_segments()
        assert not problems, problems
        for seg in segs:  # every record decodes and its body CRC matches
            with map_file(seg.path) as buf:
                _, stop = scan_requests(buf, seg, cfg, check_crc=True, skip_size_mismatch=False)
            assert stop.reason in ("blank", "end"), stop
        build = Path(tempfile.mkdtemp(prefix="verify-", dir=out))
        try:
            disp = Dispatcher(cfg, root=build, clock=lambda: BASE_TS)
            for reqs, _, _ in iter_requests(segs, cfg):
                for i in range(0, len(reqs), CHUNK):
                    disp.dispatch(reqs[i : i + CHUNK])
            disp.close(sync=False)
            for p in sorted((build / "consumequeue").rglob("*")):
                if p.is_file():
                    mine = out / "store" / "consumequeue" / p.relative_to(build / "consumequeue")
                    assert mine.read_bytes() == p.read_bytes(), mine
            mine_ix = sorted((out / "store" / "index").iterdir())
            ref_ix = sorted((build / "index").iterdir())
            assert [a.read_bytes() for a in mine_ix] == [b.read_bytes() for b in ref_ix]
        finally:
            shutil.rmtree(build)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--size-gib", type=float, default=1.0, help="commit log data to generate")
    ap.add_argument("--msg-size", type=int, default=200, help="body bytes per message")
    ap.add_argument("--topics", type=int, default=4)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--file-size", type=int, default=GIB, help="mappedFileSizeCommitLog")
    ap.add_argument("--verify", action="store_true")
    args = ap.parse_args(argv)
    out = args.out or Path("/tmp/rmqstore-bench") / f"{args.size_gib:g}g-{args.msg_size}b"
    if (out / "store").exists():
        raise SystemExit(f"{out}/store exists; remove it first")
    info = generate(
        out,
        size_bytes=int(args.size_gib * GIB),
        msg_size=args.msg_size,
        topics=args.topics,
        queues=args.queues,
        file_size=args.file_size,
    )
    if args.verify:
        verify(out)
        info["verified"] = True
    import json

    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
