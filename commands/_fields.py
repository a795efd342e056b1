"""One field list per record kind, used by every output format.

json and ndjson carry every field of a row; plain and csv show exactly the same list, in this
order; the terminal table shows the ``*_TABLE`` subset of the same names (a terminal is narrow).
"""

from __future__ import annotations

# A commit log message as `dump` and `query` decode it: RocketMQ's field names (Record.to_row).
MESSAGE = (
    "topic", "queueId", "queueOffset", "commitLogOffset", "storeSize", "bodyCRC", "flag", "sysFlag",
    "bornTimestamp", "bornHost", "storeTimestamp", "storeHost", "reconsumeTimes", "preparedTransactionOffset",
    "properties", "bodyLength", "msgId", "body",
)  # fmt: skip
# Read from the properties (KEYS, TAGS, UNIQ_KEY) for people and spreadsheets.
MESSAGE_DERIVED = ("keys", "tags", "uniqKey")

# `dump commitlog`: one row per record, BLANK and damaged ranges included (kind, why); a message's fields
# are rmqstore.codec.rows.ROW_FIELDS (tests/cli/test_cli_output.py holds the two lists equal).
COMMITLOG = (
    "kind", "commitLogOffset", "storeSize", "topic", "queueId", "queueOffset", "bodyCRC", "flag", "sysFlag",
    "bornTimestamp", "bornHost", "storeTimestamp", "storeTime", "storeHost", "reconsumeTimes",
    "preparedTransactionOffset", "msgId", "keys", "tags", "uniqKey", "properties", "bodyLength", "body", "crcOk", "why",
)  # fmt: skip
COMMITLOG_TABLE = (
    "kind", "commitLogOffset", "storeSize", "topic", "queueId", "queueOffset", "storeTime", "tags", "keys", "body",
    "why",
)  # fmt: skip

# `dump dledger-entries`: a DLedger data file's frames: entry headers (DLedger's field names), blanks, damage.
DLEDGER_ENTRY = (
    "kind", "offset", "file", "filePos", "index", "term", "pos", "size", "magic", "channel", "chainCrc", "bodyCrc",
    "bodyLength", "committed", "why",
)  # fmt: skip
DLEDGER_ENTRY_TABLE = ("kind", "offset", "file", "index", "term", "pos", "size", "bodyLength", "committed", "why")
# `dump dledger-index`: a DLedger index unit (one per entry, at entry index x 32).
DLEDGER_INDEX = ("file", "filePos", "indexOffset", "index", "term", "pos", "size", "magic")

# `query ...` and `spark find`: the messages found, the fields of `dump commitlog` in the same order.
QUERY = COMMITLOG
QUERY_TABLE = (
    "commitLogOffset", "topic", "queueId", "queueOffset", "storeTime", "msgId", "uniqKey", "keys", "tags",
    "bodyLength", "body",
)  # fmt: skip
# `query id`: which id found the message, and how it was read.
QUERY_ID = ("id", "idKind", *QUERY)
QUERY_ID_TABLE = ("id", "idKind", *QUERY_TABLE)
# `query time`: the queue offset found for a time, then the message there.
QUERY_TIME = ("queueOffset", "timestamp", *(f for f in QUERY if f != "queueOffset"))
QUERY_TIME_TABLE = ("queueOffset", "timestamp", *(f for f in QUERY_TABLE if f != "queueOffset"))

# A planned action of a modifying command (write, recover, redispatch, expire, offsets set): the keys of
# rmqstore.safety.PlannedAction.to_json; from/to is the byte range of an append or zero, bytes its size
# (or the size of a deleted file), kept whether the removed bytes go to the quarantine folder first.
PLAN_ACTION = ("operation", "action", "path", "from", "to", "bytes", "kept", "why")
PLAN_ACTION_TABLE = ("action", "path", "from", "to", "bytes", "kept", "why")

assert set(COMMITLOG) >= set(MESSAGE) | set(MESSAGE_DERIVED)
assert set(QUERY) >= set(MESSAGE) | set(MESSAGE_DERIVED)

# `dump timercheck`: the 5.x timer checkpoint (one row), the data version flattened.
TIMER_CHECKPOINT = (
    "lastReadTimeMs", "lastReadTime", "lastTimerLogFlushPos", "lastTimerQueueOffset", "masterTimerQueueOffset",
    "stateVersion", "dataVersionTimestamp", "dataVersionCounter",
)  # fmt: skip
# `dump compaction-log`: a compaction log record (commit log format) or its file's closing blank.
COMPACTION_LOG = ("kind", "file", "pos", *MESSAGE, *MESSAGE_DERIVED)
COMPACTION_LOG_TABLE = ("kind", "file", "pos", "commitLogOffset", "storeSize", "queueOffset", "keys", "tags", "body")
# `dump compaction-cq`: a compactionCq unit (46 bytes) or the end unit that closes a file.
COMPACTION_CQ = (
    "kind", "file", "pos", "compactionLogOffset", "size", "tagsCode", "storeTimestamp", "queueOffset", "batchSize",
    "compactedOffset",
)  # fmt: skip

# `diff`: one row per queue with a message on either side (rmqstore.ops.diff.QueueDiff), and each side's
# commit log range and what it holds past commonEnd (rmqstore.ops.diff.Side).
DIFF_QUEUE = ("topic", "queueId", "commonEnd", "onlyA", "onlyB", "maxOffsetA", "maxOffsetB")
DIFF_SIDE = (
    "side", "store", "minPhyOffset", "maxPhyOffset", "recordsAfterCommonEnd", "messagesAfterCommonEnd",
    "bytesAfterCommonEnd", "matchingAfterCommonEnd", "firstStoreTimestamp", "lastStoreTimestamp", "topics",
)  # fmt: skip
DIFF_DAMAGED = ("side", "file", "pos", "commitLogOffset", "resume", "why")
