"""Append messages to a store offline, the way the broker's append path does.

Sources: store-format.md §3 (records: §3.2 field values, §3.4 BLANK, §3.5 limits, §3.7 property
edits), §4.3 (queue offsets), §5.3 (index keys), §6 (checkpoint), §9.4 (offline append checklist),
§11.3 / §12 (topics.json, auto-create).

What a write does, in order (``plan_write`` reads, ``apply_write`` writes exactly the plan):

1. **End of the commit log.** The recovery walk (§8.2, CRC checked when ``checkCRCOnRecover``)
   starts at the furthest consume queue entry when that entry points at a valid record, else at the
   third-to-last file as normal recovery does. Where it stops is the write position. Non-zero bytes
   after it in the same file (a torn record, stale bytes left by an earlier truncation) are copied to
   the quarantine folder and zeroed; more than one maximum-size record of them, or any data in a later
   file, is refused (``UnsafePlan``: run ``recover`` first). A later all-zero (preallocated) file is
   reused when the log rolls into it.
2. **Queue offsets** continue from each consume queue's valid end, then past every NOT/COMMIT record
   the walk found beyond the consume queues (not yet dispatched). PREPARED and ROLLBACK records get
   queue offset 0 and do not advance it.
3. **Records** are V1; V2 (2-byte topic length) only when the emulated broker is 5.1.0+ and the topic
   has more than 127 characters, as ``autoMessageVersionOnTopicLen`` does. PHYSICALOFFSET is the
   record's real position, BODYCRC is masked, hosts are 8 or 20 bytes with the sysFlag v6 bits set to
   match (IPv6 needs 4.6.0+). Limits per §3.5: whole record <= ``maxMessageSize`` up to 4.9.3; body
   <= it from 4.9.4, and record <= it + 64 KiB from 4.9.5; properties <= 32767 bytes; V1 topic <= 127
   bytes. A record that does not fit (``len + 8 > remaining``) leaves an 8-byte BLANK header (the rest
   of the file stays zero) and goes to offset 0 of the next file, created at full size with its
   20-digit name.
4. **Store timestamp** is the clock, read per message (once per 8 messages of a plain run: they are
   microseconds apart) and never below the previous record's (recovery relies on non-decreasing
   times); a message may give its own (reproducible stores).
5. **Dispatch** in the same run with :class:`~rmqstore.dispatch.Dispatcher`: records not yet
   dispatched are dispatched first (catch-up), then the new ones. ``dispatch=False`` leaves all of
   it to ``redispatch`` and creates ``abort``, so a broker started before that re-dispatches (§9.4.6).
6. **topics.json** gains every new topic (see :func:`topic_for_new`); **checkpoint**: see
   :func:`apply_write`.

Properties are stored in the order the Java broker stores them: the iteration order of a
``java.util.HashMap`` (:func:`java_hashmap_order`). A producer's map gets its keys in this order:
``TAGS``, ``KEYS``, ``WAIT`` (``new Message(...)``), ``UNIQ_KEY``, ``DELAY``, then the user
properties as given. Broker edits (§3.7) re-serialise that map with their additions put last:
``REAL_TOPIC``/``REAL_QID`` for a delay message, ``CLUSTER`` on 4.6.0+; 4.9.1-4.9.8 drop ``WAIT``.
Brokers 4.9.1+ decode into ``HashMap(128)``, earlier ones into ``HashMap()``; the result is checked
against every record of the three 4.4.0 stores. A ``raw`` message is stored as given instead:
topic, queue, properties in the given order, no broker edit, no generated ``UNIQ_KEY`` or ``WAIT``
(a replay of dumped records, or what the broker's own services write, e.g. a delay level coming due).

Speed: runs of plain producer messages (every store-level field left to the broker, IPv4 hosts, no
delay, no user properties) are checked and encoded a run at a time: record heads as one numpy array,
each record one bytes %-format with the constant parts of its properties built in, UNIQ_KEYs and the
index key hashes computed as arrays, the plan's columns kept as arrays for the dispatch. Every other
message, and any plain one the run cannot vouch for, takes the per-message path, which is the
reference: both give the same bytes and columns (``tests/test_write.py``). A :class:`MessageBatch`
(what the NDJSON reader gives for plain lines) spares the objects per message. While the dispatch
runs, a second thread writes (and with sync flush fsyncs) the commit log.

Atomic batches: the whole input is validated and encoded before any file changes. Before the first
change a journal ``<root>/.rmqstore/write.journal.json`` (with copies of every byte range the write may
overwrite that was not zero) is written and fsynced; it is removed once everything is written. A
failure rolls the store back at once; a killed run leaves the journal and the next ``write`` rolls it
back first (:func:`rollback_pending`), so the files are byte for byte as before the batch.

Where each part lives: :mod:`.validate` (what the broker accepts: topics, properties, hosts, the
HashMap order), :mod:`.append` (the plan's state: file roll-over, queue offsets, new topics),
:mod:`.encode_one` (the reference lane), :mod:`.encode_run` (the run lane), :mod:`.plan` (the
driver), :mod:`.columns` and :mod:`.uniq` (the planned records as columns, UNIQ_KEYs, key hashes),
:mod:`.journal` (journal, rollback), :mod:`.apply` (the checks before applying, and applying),
:mod:`.reading` (NDJSON parsed by worker processes while the plan goes on), :mod:`.spill` (the
planned bytes and column segments past their memory budgets, in a temporary file).
"""

from __future__ import annotations

from rmqstore.codec.messages import (
    Message,
    MessageBatch,
    message_from_json,
    read_ndjson,
    read_ndjson_blocks,
    read_ndjson_stream,
)
from rmqstore.dispatch.dispatcher import Dispatcher
from rmqstore.ops.write.append import FileWrite, WriteOptions, WritePlan
from rmqstore.ops.write.apply import (
    WriteResult,
    apply_write,
    default_quarantine_dir,
    input_digest,
    open_for_write,
    prepare_write,
    prepare_write_blocks,
    refuse_unsafe,
    write_messages,
)
from rmqstore.ops.write.columns import PlannedRecord, RecordColumns, UniqKeyColumn
from rmqstore.ops.write.journal import (
    LAST_WRITE,
    RollbackReport,
    last_write,
    pending_journal,
    rollback_pending,
)
from rmqstore.ops.write.plan import plan_blocks, plan_with, plan_write
from rmqstore.ops.write.reading import read_blocks
from rmqstore.ops.write.uniq import UniqKeySource
from rmqstore.ops.write.validate import (
    BROKER_MANAGED_TOPICS,
    DLQ_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    PROP_CLUSTER,
    RETRY_PREFIX,
    check_send_topic,
    java_hashmap_order,
    topic_for_new,
)

__all__ = [
    "BROKER_MANAGED_TOPICS",
    "DLQ_PREFIX",
    "LAST_WRITE",
    "NOT_ALLOWED_SEND_TOPICS",
    "PROP_CLUSTER",
    "RETRY_PREFIX",
    "Dispatcher",
    "FileWrite",
    "Message",
    "MessageBatch",
    "PlannedRecord",
    "RecordColumns",
    "RollbackReport",
    "UniqKeyColumn",
    "UniqKeySource",
    "WriteOptions",
    "WritePlan",
    "WriteResult",
    "apply_write",
    "check_send_topic",
    "default_quarantine_dir",
    "input_digest",
    "java_hashmap_order",
    "last_write",
    "message_from_json",
    "open_for_write",
    "pending_journal",
    "plan_blocks",
    "plan_with",
    "plan_write",
    "prepare_write",
    "prepare_write_blocks",
    "read_blocks",
    "read_ndjson",
    "read_ndjson_blocks",
    "read_ndjson_stream",
    "refuse_unsafe",
    "rollback_pending",
    "topic_for_new",
    "write_messages",
]
