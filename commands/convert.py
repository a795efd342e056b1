"""`rmqstore convert`: the same store in another layout, written as a new store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rmqstore.errors import UsageError
from rmqstore.ops.convert import cq as cq_op
from rmqstore.store import open_store

from ._common import StorePath, err, step_hook
from ._options import Changing, command
from ._plan import plan_view, show_and_apply
from ._render import Format

app = typer.Typer()


CqOpt = Annotated[
    str | None,
    typer.Option(
        "--cq", help="Consume queues in this layout: rocksdb (storeType=defaultRocksDB) or file.", show_default=False
    ),  # fmt: skip
]
OutputOpt = Annotated[
    Path | None, typer.Option("--output", help="The new store's root directory (absent or empty).", show_default=False)
]


@command(app, "convert", Changing)
def convert_command(
    store: StorePath,
    cq: CqOpt = None,
    output: OutputOpt = None,
    *,
    changing: Changing,
) -> None:
    """Write the same store in another layout as a new store; the store itself is not changed.

    --cq rocksdb|file: the consume queues as a RocksDB database (storeType=defaultRocksDB, needs the
    rocksdb extra) or as consume queue files, every unit at its queue offset, with a copy of the commit
    log, index files, checkpoint and config files (consumer offsets unchanged) and the new store's
    broker.conf (written as OUTPUT/broker.conf and shown in the plan). The store is read only (exit 4 while a
    broker holds its lock); a store with abort is refused (exit 8: recover it first). The new
    store is built beside OUTPUT and renamed to it when complete: a run killed at any step is run again.
    """
    if cq is None:
        raise UsageError("say which layout to convert to: --cq rocksdb or --cq file")
    if output is None:
        raise UsageError("--output NEW_STORE is required")
    fmt = changing.format
    # read-only: the store is not changed; refused like a modifying run while a broker holds its lock
    with open_store(store, broker_config=changing.broker_config, broker=changing.broker_version,
                    dry_run=True) as st:  # fmt: skip
        plan = cq_op.plan_convert_cq(st, cq, output)
        view = plan_view(plan, _TABLES)
        if fmt is not Format.json:
            err.note("broker.conf of the new store (written as OUTPUT/broker.conf):")
            for line in plan.broker_conf.splitlines():
                err.print(line)

        def apply() -> tuple[Path, dict[str, str]]:
            out = cq_op.apply_convert_cq(plan, st, on_step=step_hook())
            return out, {"output": str(out)}

        done = show_and_apply(view, fmt, dry_run=changing.dry_run, apply=apply)
        if done is not None:
            err.print(f"converted: the new store is {done}; {st.root} was not changed")


_TABLES = {"queues": (None, "queues written in the new layout")}
