"""`rmqstore redispatch`: rebuild consume queues and index files from the commit log."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from rmqstore.ops import redispatch as op

from ._common import QuietOpt, StorePath, err, progress_bar, step_hook
from ._options import Changing, Keeping, command
from ._plan import plan_view, render_plan, resume_interrupted, show_and_apply

app = typer.Typer()


class Only(str, enum.Enum):
    consumequeue = "consumequeue"
    index = "index"


class Engine(str, enum.Enum):
    local = "local"
    spark = "spark"


FromOffsetOpt = Annotated[
    int | None,
    typer.Option("--from-offset", help="Re-dispatch from this physical offset, continuing the current files."),
]
TopicOpt = Annotated[list[str] | None, typer.Option("--topic", help="Only these topics' consume queues (repeatable).")]
OnlyOpt = Annotated[Only | None, typer.Option("--only", help="Rebuild only consume queues or only index files.")]
OutputOpt = Annotated[
    Path | None, typer.Option("--output", help="Build into this directory beside the store and swap nothing.")
]
EngineOpt = Annotated[Engine, typer.Option("--engine", help="local (numpy, default) or spark (PySpark).")]
MasterOpt = Annotated[
    str | None, typer.Option("--master", help="Spark master URL for --engine spark (default local[*]).")
]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Swap in a rebuild that holds far fewer consume queue entries than the store."),
]


@command(app, "redispatch", Changing, Keeping)
def redispatch_command(
    store: StorePath,
    from_offset: FromOffsetOpt = None,
    topic: TopicOpt = None,
    only: OnlyOpt = None,
    output: OutputOpt = None,
    engine: EngineOpt = Engine.local,
    master: MasterOpt = None,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
    *,
    changing: Changing,
    keeping: Keeping,
) -> None:
    """Rebuild consume queues and index files from the commit log and swap them in atomically.

    The rebuild is written to a scratch directory, compared with the current files (per queue:
    entries missing, extra, different) and then swapped in by directory renames; the replaced
    directories are moved to a fresh folder of the quarantine. A run killed midway is finished by
    re-running. Refuses a store whose lock a running broker holds (exit 4), and a rebuild holding
    far fewer consume queue entries than the store has now unless --force (exit 8). A dry run builds
    in a temporary folder outside the store and writes nothing in it.
    """
    fmt, dry_run = changing.format, changing.dry_run
    if engine is Engine.spark:
        import rmqstore.spark.redispatch  # noqa: F401  # registers the spark engine
    with changing.open(store, "redispatch", writable=output is None) as st:
        resumed = resume_interrupted(st, "redispatch", dry_run=dry_run)
        if resumed is not None:
            err.print(resumed.message)
            return
        segs, _ = st.commitlog_segments()
        total = sum(s.size for s in segs)
        with progress_bar(total, "re-dispatching", quiet=quiet) as advance:
            plan = op.plan_redispatch(
                st,
                from_phy=from_offset,
                topics=tuple(topic) if topic else None,
                only=only.value if only else None,
                output=output,
                engine=engine.value,
                progress=advance,
                spark_master=master,
                dry_run=dry_run,
                keep_old=keeping.keep,
                quarantine=keeping.quarantine,
            )
        view = plan_view(plan, _TABLES)
        for note in plan.notes:
            err.print(f"note: {note}")
        if dry_run or output is not None or not plan.changed:
            render_plan(view, fmt)
            if output is not None:
                err.print(f"built into {output}; the store was not changed")
                return
            op.discard(plan)
            if not dry_run:
                err.print("nothing to do: the rebuilt files are identical to the current ones")
            return

        applied: list[bool] = []

        def apply() -> tuple[Path | None, dict[str, str | None]]:
            q = op.apply_redispatch(plan, st, force=force, on_step=step_hook())
            applied.append(True)
            return q, {"quarantine": str(q) if q else None}

        q = show_and_apply(view, fmt, dry_run=False, apply=apply, ask=changing.ask)
        if not applied:  # the answer was no: the rebuild is not kept either
            op.discard(plan)
            return
        if q is not None:
            err.print(f"swapped in; replaced files are in {q}")


_TABLES = {"queues": (None, "queues that differ from the current files")}
