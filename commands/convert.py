"""`rmqstore convert`: a new store from a store, with its commit log in another framing (``--to``) or its
consume queues in another layout (``--cq``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rmqstore.codec.dledger import DEFAULT_INDEX_FILE_SIZE
from rmqstore.errors import UsageError
from rmqstore.ops.convert import cq as cq_op
from rmqstore.ops.convert import dledger as op

from ._common import QuietOpt, StorePath, err, progress_bar, step_hook
from ._options import Changing, command
from ._plan import plan_view, show_and_apply

app = typer.Typer()


CqOpt = Annotated[
    str | None,
    typer.Option(
        "--cq", help="rocksdb: the consume queues as a RocksDB database (storeType=defaultRocksDB); file: as files."
    ),
]
ToOpt = Annotated[
    str | None,
    typer.Option("--to", help="commitlog: a DLedger store into a plain commit log; dledger: a plain one into DLedger."),
]
OutputOpt = Annotated[
    Path | None, typer.Option("--output", "-o", help="The new store's directory (must not exist, or be empty).")
]
WriteConfOpt = Annotated[
    bool,
    typer.Option("--write-broker-conf", help="Write the new store's broker.conf beside it (default: print it)."),
]
TermOpt = Annotated[int, typer.Option("--term", help="--to dledger: the term of every entry.", min=0)]
GroupOpt = Annotated[
    str | None, typer.Option("--dleger-group", help="--to dledger: dLegerGroup (default: brokerName).")
]
SelfIdOpt = Annotated[str, typer.Option("--dleger-self-id", help="--to dledger: dLegerSelfId, the member's id.")]
PeersOpt = Annotated[
    str | None,
    typer.Option("--dleger-peers", help="--to dledger: dLegerPeers, id-host:port;... (default: this member alone)."),
]
IndexSizeOpt = Annotated[
    int,
    typer.Option("--dledger-index-file-size", help="--to dledger: bytes per DLedger index file.", min=32),
]


@command(app, "convert", Changing)
def convert_command(
    store: StorePath,
    to: ToOpt = None,
    cq: CqOpt = None,
    output: OutputOpt = None,
    write_broker_conf: WriteConfOpt = False,
    term: TermOpt = 0,
    dleger_group: GroupOpt = None,
    dleger_self_id: SelfIdOpt = "n0",
    dleger_peers: PeersOpt = None,
    dledger_index_file_size: IndexSizeOpt = DEFAULT_INDEX_FILE_SIZE,
    quiet: QuietOpt = False,
    *,
    changing: Changing,
) -> None:
    """Write STORE again as a new store in another layout: the commit log's framing, or the consume queues'.

    --to commitlog: a DLedger store (enableDLegerCommitLog=true, a migrated store's old commitlog/
    included) becomes a plain commit log; --to dledger: a plain store becomes a single DLedger member.
    Records move to new offsets (PHYSICALOFFSET and transaction offsets rewritten), consume queues
    and index files are dispatched again, the checkpoint follows, config/ is copied as it is. Message
    ids change with the offsets: msgid-map.ndjson beside the new store pairs old and new ids. STORE is
    only read (refused while a broker holds its lock, exit 4); the new store is built in a hidden
    folder beside --output and renamed into place last, so a killed run leaves nothing that looks
    complete: run the same command again to finish it.

    --cq rocksdb|file: the same records, offsets and message ids, with every consume queue unit at its
    queue offset in the other layout (a RocksDB database, needing the rocksdb extra, or consume queue
    files); the commit log, index files, checkpoint and config/ (consumer offsets) are copied as they
    are. A store with abort is refused (exit 8): recover it first.
    """
    if (to is None) == (cq is None) or output is None:
        raise UsageError("convert needs --to commitlog|dledger or --cq rocksdb|file, and --output NEW_STORE")
    if cq is not None:
        _convert_cq(store, cq, output, write_broker_conf, changing)
        return
    if to not in (op.COMMITLOG, op.DLEDGER):
        raise UsageError("convert needs --to commitlog|dledger or --cq rocksdb|file, and --output NEW_STORE")
    fmt, dry_run = changing.format, changing.dry_run
    with changing.open(store, "convert", writable=False) as st:
        member = None
        if to == op.DLEDGER:
            group = dleger_group if dleger_group is not None else st.config.broker_name
            peers = dleger_peers if dleger_peers is not None else f"{dleger_self_id}-127.0.0.1:40911"
            member = op.Member(group, dleger_self_id, peers, term, dledger_index_file_size)
        plan = op.plan_convert(st, output, to, member=member, write_broker_conf=write_broker_conf)
        view = plan_view(plan, _TABLES)

        def apply() -> tuple[op.ConvertResult, dict[str, object]]:
            with progress_bar(2 * plan.source_bytes, "converting", quiet=quiet) as advance:
                res = op.apply_convert(plan, st, on_step=step_hook(), progress=advance)
            return res, res.to_json()

        res = show_and_apply(view, fmt, dry_run=dry_run, apply=apply, ask=changing.ask)
    if not write_broker_conf:
        _print_conf(plan.broker_conf)
    if res is None:
        return
    err.print(
        f"converted {res.records} records into {res.output} (offsets {res.min_offset}..{res.max_offset}); "
        f"message ids changed with the offsets: old -> new in {res.msgid_map}"
    )
    if res.unnamed_prepared:
        err.warning(
            f"{res.unnamed_prepared} prepared transaction offsets name no record of the store: kept as they are"
        )
    if res.broker_conf_path is not None:
        err.print(f"broker.conf written to {res.broker_conf_path}")


def _print_conf(text: str) -> None:
    err.print("broker.conf for the new store (--write-broker-conf writes it beside the store):")
    for line in text.splitlines():
        err.print(f"  {line}")


def _convert_cq(store: Path, cq: str, output: Path, write_broker_conf: bool, changing: Changing) -> None:
    """``--cq``: the consume queues in the other layout; the store is only read."""
    fmt, dry_run = changing.format, changing.dry_run
    with changing.open(store, "convert", writable=False) as st:
        plan = cq_op.plan_convert_cq(st, cq, output, write_broker_conf=write_broker_conf)
        view = plan_view(plan, _CQ_TABLES)

        def apply() -> tuple[Path, dict[str, str]]:
            out = cq_op.apply_convert_cq(plan, st, on_step=step_hook())
            return out, {"output": str(out)}

        done = show_and_apply(view, fmt, dry_run=dry_run, apply=apply, ask=changing.ask)
    if not write_broker_conf:
        _print_conf(plan.broker_conf)
    if done is not None:
        err.print(f"converted: the new store is {done}; {st.root} was not changed")


_TABLES = {"notes": (None, "notes")}
_CQ_TABLES = {"queues": (None, "queues written in the new layout")}
