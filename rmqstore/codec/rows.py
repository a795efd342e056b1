"""A commit log record as a row of named fields: the one field list of a message in every output.

``dump commitlog`` (every format, its fast ndjson lines included), ``query`` and ``spark find`` show a
message with the fields of :data:`ROW_FIELDS`, in that order. Light on purpose (no numpy): a key query
imports it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

from rmqstore.codec.commitlog import Record
from rmqstore.timeparse import format_time_ms

# The fields of a message row, in this order, in every format of every command that shows records (dump,
# query, spark find): RocketMQ's names, with the kind of row, a readable store time and what the
# properties say of keys, tags and the unique key; crcOk when bodies are checked, why when one is not right.
ROW_FIELDS = (
    "kind", "commitLogOffset", "storeSize", "topic", "queueId", "queueOffset", "bodyCRC", "flag", "sysFlag",
    "bornTimestamp", "bornHost", "storeTimestamp", "storeTime", "storeHost", "reconsumeTimes",
    "preparedTransactionOffset", "msgId", "keys", "tags", "uniqKey", "properties", "bodyLength", "body", "crcOk", "why",
)  # fmt: skip
CRC_MISMATCH = "CRC MISMATCH"
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a csv cell starting so gets a leading ' (OWASP's advice)


def message_row(
    rec: Record, *, body: str = "base64", verify_crc: bool = False, path: str = "<buffer>", local_time: bool = False
) -> dict[str, Any]:
    """A record as a row of ``ROW_FIELDS`` (``crcOk`` with ``verify_crc``, ``why`` when there is one)."""
    row = rec.to_row(body=body, verify_crc=verify_crc, path=path)
    error = row.pop("bodyError", None)
    why = CRC_MISMATCH if row.get("crcOk") is False else error
    row.update(
        kind="message",
        storeTime=store_time(rec.store_timestamp_ms, local_time),
        keys=rec.keys,
        tags=rec.tags,
        uniqKey=rec.uniq_key,
    )
    if why:
        row["why"] = why
    return {k: row[k] for k in ROW_FIELDS if k in row}


def store_time(ms: int, local: bool = False) -> str | None:
    """``format_time_ms``, or None for a time no calendar holds (a damaged or hostile field)."""
    try:
        return format_time_ms(ms, local=local)
    except (ValueError, OverflowError, OSError):
        return None


def cell(v: Any) -> Any:
    """A value as one cell: containers as compact JSON, None as empty."""
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    if v is None:
        return ""
    return v


def csv_cell(v: Any) -> Any:
    """A value as one csv cell: booleans as JSON spells them, a text a spreadsheet would run as a formula
    behind a leading ``'``."""
    if isinstance(v, bool):  # JSON's spelling, which spreadsheets and CSV readers take as booleans
        return "true" if v else "false"
    v = cell(v)
    if isinstance(v, str) and v.startswith(FORMULA_START):
        return "'" + v
    return v


def csv_cells(row: dict[str, Any], columns: Sequence[str]) -> tuple[list[Any], bool]:
    """The cells of a row's columns, and whether one holds a carriage return: the csv module quotes a lone
    ``\r`` only when it is in the line terminator, so such a row has every cell quoted."""
    cells = [csv_cell(row.get(k)) for k in columns]
    return cells, any(isinstance(v, str) and "\r" in v for v in cells)


def csv_line(row: dict[str, Any], columns: Sequence[str]) -> bytes:
    """One csv record (UTF-8, with its newline) of a row, as ``render_rows`` writes it."""
    import csv  # here, as in the command line's csv output: no other format loads it

    out = io.StringIO()
    cells, lone_cr = csv_cells(row, columns)
    csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL if lone_cr else csv.QUOTE_MINIMAL).writerow(cells)
    return out.getvalue().encode()
