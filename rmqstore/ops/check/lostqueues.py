"""Consume queues the broker's abnormal recovery would not rebuild (their directory is gone).

With ``abort`` present the broker re-dispatches the commit log from the checkpoint's file on
(``dispatch_from``), into the queues it finds or creates. A queue whose directory was deleted is
re-created from there: its first slots are blank and the messages stored before are never served.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rmqstore.codec.commitlog import Blank
from rmqstore.problems import WARNING, Problem
from rmqstore.walk.chain import iter_commitlog, queued

if TYPE_CHECKING:
    from rmqstore.ops.check import CheckReport
    from rmqstore.store import Store

REMEDY = "run `rmqstore redispatch` (rebuilds every consume queue from the commit log) before starting the broker"


@dataclass(frozen=True, slots=True)
class LostQueue:
    topic: str
    queue_id: int
    messages: int  # dispatchable messages stored before dispatch_from
    first_phy: int
    dispatch_from: int

    def problem(self, st: Store) -> Problem:
        what = (
            f"consume queue {self.topic}/{self.queue_id} is missing while abort is present: the broker's "
            f"abnormal recovery re-dispatches only from phy offset {self.dispatch_from} on, so the queue would "
            f"start with blank slots and its {self.messages} earlier message(s) would never be served; {REMEDY}"
        )
        return Problem(
            st.consume_queues.queue(self.topic, self.queue_id).directory, None, what, WARNING, self.first_phy
        )


def lost_queues(st: Store, dispatch_from: int) -> list[LostQueue]:
    """Queues with dispatchable messages before ``dispatch_from`` whose directory does not exist."""

    seen: dict[tuple[str, int], list[int]] = {}  # (topic, queue) -> [messages, first phy]
    exists: dict[tuple[str, int], bool] = {}
    for _, rec in iter_commitlog(st):
        if isinstance(rec, Blank):
            continue
        if rec.phy_offset >= dispatch_from:
            break
        if not queued(rec.sys_flag):
            continue
        key = (rec.topic, rec.queue_id)
        if key not in exists:
            # a name that cannot be a directory is never turned into a path (check reports it as skipped)
            refused = st.consume_queues.path_problem(*key) is not None
            exists[key] = refused or st.consume_queues.queue(*key).exists()
        if not exists[key]:
            got = seen.setdefault(key, [0, rec.phy_offset])
            got[0] += 1
    return [LostQueue(t, q, n, first, dispatch_from) for (t, q), (n, first) in sorted(seen.items())]


def with_lost_queues(st: Store, report: CheckReport) -> CheckReport:
    """``report`` plus one warning per queue an abnormal recovery would leave without its messages."""
    rec = report.recovery
    if rec is None or rec.last_exit_ok:
        return report
    found = [q.problem(st) for q in lost_queues(st, rec.dispatch_from)]
    if not found:
        return report
    counts = dict(report.found)
    counts[WARNING] = counts.get(WARNING, 0) + len(found)
    return replace(report, problems=(*report.problems, *found), found=counts)
