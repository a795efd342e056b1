"""`rmqstore info`: the state of a store on one screen."""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from rmqstore.codec.describe import human_size
from rmqstore.errors import ProblemsFound, RmqstoreError
from rmqstore.ops.info import StoreInfo, store_info
from rmqstore.problems import Problem, absolute_path, shown_path, shutdown_word
from rmqstore.safety import journal
from rmqstore.store import open_store

from . import _stores as stores
from ._common import (
    BrokerConfigOpt,
    BrokerVersionOpt,
    Format,
    QuietOpt,
    default_format,
    err,
    format_time_ms,
    progress_bar,
    render_mapping,
    render_rows,
)
from ._options import StoresArg, command

app = typer.Typer()


class InfoFormat(enum.StrEnum):
    table = "table"
    plain = "plain"
    json = "json"


@command(
    app,
    "info",
    epilog="rmqstore info /var/lib/rocketmq/store\n"
    "rmqstore info /var/lib/rocketmq/store --format json | jq .commitLog.maxPhyOffset",
)
def info_command(
    store: StoresArg,
    broker_config: BrokerConfigOpt = None,
    broker_version: BrokerVersionOpt = "auto",
    fmt: Annotated[
        InfoFormat | None,
        typer.Option("--format", "-f", help="Output format (default: table on a terminal, else plain)."),
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """Show the state of a store: shutdown, lock, checkpoint, commit log, queues, index, config.

    Reads only, and cheaply: the end of the commit log is found by walking its last non-empty file the way the broker's recovery does (without the body CRC), queue ranges come from the first and last consume queue files, index files from their headers.

    Several stores (or globs): one summary row per store instead.

    The result is check's verdict on what info reads: clean, warnings, errors, or in use (a running broker holds the lock). Exits 3 when it finds errors (files the broker would refuse or misread); warnings, such as an unclean shutdown or messages not dispatched yet, are shown with exit 0 (check exits 3 on them).
    """
    targets = stores.expand(store)
    if len(targets) > 1:
        _info_many(targets, broker_config, broker_version, fmt, quiet)
        return
    info = _info_one(targets[0], broker_config, broker_version, quiet)
    pending = journal.pending(info.root)
    if fmt is InfoFormat.json:
        doc = info.to_json()
        if pending:
            doc["pendingOperations"] = [p.to_json() for p in pending]
        sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
    else:
        _render_text(info, default_format(None if fmt is None else Format(fmt.value)))
        for p in pending:
            err.print(f"pending: {p}; run `rmqstore {p.operation} {info.root}` to finish it")
    errors = info.errors()
    if errors:
        raise ProblemsFound(f"{len(errors)} error(s) found; the first: {errors[0]}")
    if pending:
        raise ProblemsFound(f"{pending[0]}; every other modifying command refuses the store until it is finished")


def _info_one(path: Path, broker_config: Path | None, broker_version: str, quiet: bool) -> StoreInfo:
    stores.refuse_parent_of_store(path)
    with open_store(path, broker_config=broker_config, broker=broker_version) as st:
        # the walk covers about one commit log file
        with progress_bar(st.config.commitlog_file_size, f"walking the commit log end of {path}", quiet=quiet) as adv:
            return store_info(st, progress=adv)


SUMMARY_COLUMNS = [
    "store", "result", "shutdown", "brokerRunning", "minPhyOffset", "maxPhyOffset", "dataSize", "lastStoreTime", "topics",
    "queues", "messages", "errors", "warnings",
]  # fmt: skip


def _summary_row(path: Path, info: StoreInfo, machine: bool) -> dict[str, Any]:
    clog, verdict = info.commitlog, info.verdict
    return {
        "store": absolute_path(path) if machine else str(path),
        "result": verdict.result,
        "shutdown": shutdown_word(info.clean_shutdown),
        "brokerRunning": info.broker_running,
        "minPhyOffset": clog.min_phy_offset,
        "maxPhyOffset": clog.max_phy_offset,
        "dataSize": human_size(max(clog.max_phy_offset - clog.min_phy_offset, 0)),
        "lastStoreTime": _time(clog.last_store_timestamp_ms),
        "topics": len({q.topic for q in info.queues}),
        "queues": len(info.queues),
        "messages": sum(q.message_total for q in info.queues),
        "errors": verdict.errors,
        "warnings": verdict.warnings,
    }


def _info_many(
    paths: list[Path], broker_config: Path | None, broker_version: str, fmt: InfoFormat | None, quiet: bool
) -> None:
    """One row per store; exit with the worst code (3 when a store has errors)."""
    rows, worst = [], 0
    out = default_format(None if fmt is None else Format(fmt.value))
    for path in paths:
        try:
            info = _info_one(path, broker_config, broker_version, quiet)
        except RmqstoreError as e:
            rows.append({"store": str(path), "error": str(e), "exitCode": e.exit_code})
            worst = max(worst, e.exit_code)
            continue
        rows.append(_summary_row(path, info, out is Format.json))
        worst = max(worst, info.verdict.exit_code(strict=False))
    cols = SUMMARY_COLUMNS + (["error"] if any("error" in r for r in rows) else [])
    render_rows(rows, out, columns=None if out is Format.json else cols, title="stores")
    if worst:
        raise typer.Exit(worst)


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{format_time_ms(ms)} ({ms})" if ms > 0 else str(ms)


def _version_line(v: dict[str, Any]) -> str:
    head = f"{v['family']} (rules of {v['broker']}, {v['source']}"
    if not v["settled"]:
        head += f"; could also be {', '.join(c for c in v['candidates'] if c != v['family'])}"
    facts = "; ".join(f"{e['why']}: {e['where']}" for e in v["evidence"][:6])
    return head + ")" + (f" from: {facts}" if facts else "")


def _summary(info: StoreInfo) -> dict[str, Any]:
    clog = info.commitlog
    data_files = [f for f in clog.files if f.state == "data"]
    empty = sum(1 for f in clog.files if f.state == "empty")
    files = f"{len(clog.files)} x {human_size(clog.file_size)}"
    if data_files:
        files += f", data in {data_files[0].name} .. {data_files[-1].name}"
    if empty:
        files += f", {empty} empty (preallocated)"
    shutdown = "clean" if info.clean_shutdown else "unclean (abort file present)"
    if info.abort_pid is not None:
        shutdown += f", written by pid {info.abort_pid}"
    out: dict[str, Any] = {
        "store": str(info.root),
        "broker config": str(info.broker_config) if info.broker_config else "none (broker defaults, sizes from files)",
        "broker version": _version_line(info.version) if info.version else info.broker,
        "shutdown": shutdown,
        "broker running": f"yes, pid {info.lock_holder_pid}" if info.broker_running else "no",
    }
    cp = info.checkpoint
    if cp is None:
        out["checkpoint"] = "missing"
    else:
        out["checkpoint physicMsgTimestamp"] = _time(cp.physic_msg_timestamp_ms)
        out["checkpoint logicsMsgTimestamp"] = _time(cp.logics_msg_timestamp_ms)
        out["checkpoint indexMsgTimestamp"] = _time(cp.index_msg_timestamp_ms)
        out["recovery min timestamp"] = _time(cp.min_timestamp_ms)
    out["commit log"] = f"{files} in {', '.join(clog.dirs)}"
    out["min phy offset"] = clog.min_phy_offset
    out["max phy offset"] = clog.max_phy_offset
    out["data size"] = human_size(max(clog.max_phy_offset - clog.min_phy_offset, 0))
    out["first store time"] = _time(clog.first_store_timestamp_ms)
    out["last store time"] = _time(clog.last_store_timestamp_ms)
    topics = {q.topic for q in info.queues}
    out["consume queues"] = (
        f"{len(info.queues)} in {len(topics)} topic(s), {sum(q.message_total for q in info.queues)} messages"
    )
    out["index files"] = len(info.index_files)
    if info.extra_parts:
        out["timer / compaction / ext files"] = ", ".join(f"{p} ({n} B)" for p, n in info.extra_parts)
    v = info.verdict
    out["result"] = f"{v.result} ({v.errors} error(s), {v.warnings} warning(s), {v.infos} info)"
    return out


def _dledger_summary(d: dict[str, Any]) -> dict[str, Any]:
    files = d["dataFiles"]
    return {
        "group / self id": f"{d['group'] or '(not set)'} / {d['selfId']}",
        "peers": d["peers"] or "(not set)",
        "term / vote": f"{d['currTerm']} / {d['voteLeader']}",
        "ledger index": f"{d['ledgerBeginIndex']} .. {d['ledgerEndIndex']} (term {d['ledgerEndTerm']})",
        "committed": f"index {d['committedIndex']}, position {d['committedPos']} (checkpoint endIndex {d['checkpointEndIndex']})",
        "data": f"{len(files)} file(s) from {d['dataMinOffset']}, written to {d['dataWritePos']} in {', '.join(d['dataDirs'])}",
        "index": f"{len(d['indexFiles'])} file(s), written to {d['indexWritePos']} in {d['indexDir']}",
        "migrated from commitlog/": f"DLedger data from {d['dividedCommitlogOffset']}"
        if d["dividedCommitlogOffset"]
        else "no",
    }


def _section(title: str, fmt: Format) -> str | None:
    """Tables carry their title; plain text gets a heading line of its own."""
    if fmt is Format.table:
        return title
    sys.stdout.write(f"\n[{title}]\n")
    return None


def _queue_row(q: Any) -> dict[str, Any]:
    return {
        "topic": q.topic, "queueId": q.queue_id, "minOffset": q.min_offset, "maxOffset": q.max_offset,
        "messages": q.message_total, "lastPhyEnd": q.last_offset, "files": q.files,
    }  # fmt: skip


def _index_row(f: Any) -> dict[str, Any]:
    h = f.header
    row: dict[str, Any] = {"name": f.name}
    if h is None:
        row.update(dict.fromkeys(("begin", "end", "beginPhyOffset", "endPhyOffset", "entries"), "-"))
    else:
        row.update(
            begin=format_time_ms(h.begin_timestamp_ms), end=format_time_ms(h.end_timestamp_ms),
            beginPhyOffset=h.begin_phy_offset, endPhyOffset=h.end_phy_offset, entries=h.entry_count,
        )  # fmt: skip
    row["full"] = "yes" if f.full else "no"
    return row


def _config_row(c: Any) -> dict[str, Any]:
    entries = "-" if c.entries is None else c.entries
    return {
        "file": c.name,
        "size": c.size,
        "loadedFrom": c.loaded_from,
        "entries": entries,
        "bak": "yes" if c.bak else "no",
    }


def _problem_row(p: Problem, root: Path) -> dict[str, Any]:
    return {"severity": p.severity, "where": _where(p, root), "what": p.what}


def _render_text(info: StoreInfo, fmt: Format) -> None:
    if fmt is not Format.table:
        sys.stdout.write("[Store]\n")
    render_mapping(_summary(info), fmt, title="Store" if fmt is Format.table else None)
    if info.dledger is not None:
        title = _section("DLedger", fmt)
        render_mapping(_dledger_summary(info.dledger), fmt, title=title)
    sections = (
        ("Consume queues", info.queues, _queue_row),
        ("Index files", info.index_files, _index_row),
        ("Config files", info.config_files, _config_row),
        ("Problems", info.problems, lambda p: _problem_row(p, info.root)),
    )
    for title, items, row in sections:
        if items:
            render_rows((row(x) for x in items), fmt, title=_section(title, fmt))


def _where(p: Problem, root: Path) -> str:
    at = "" if p.pos is None else f" @{p.pos}"
    phy = "" if p.phy_offset is None else f" (phy offset {p.phy_offset})"
    return f"{shown_path(p.path, root, absolute=False)}{at}{phy}"
