"""Engines that dispatch a commit log into fresh consume queue and index files (a re-dispatch's build).

The local engine is ``rmqstore.ops.redispatch.build``; any other registers itself here when its
package is imported (the library never imports the Spark package): ``rmqstore.spark.redispatch``
adds "spark".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rmqstore.dispatch.dispatcher import DispatchStats


@dataclass(frozen=True)
class BuildScope:
    """What a build dispatches: from which commit log offset (None: the first record), the consume
    queues of which topics (None: all), and which kinds of files."""

    from_phy: int | None = None
    topics: tuple[str, ...] | None = None
    consume_queue: bool = True
    index: bool = True


BuildEngine = Callable[..., tuple[DispatchStats, int, str]]  # (store, build root, scope, master=...)

ENGINES: dict[str, BuildEngine] = {}
