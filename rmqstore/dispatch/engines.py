"""The engines that rebuild consume queues and index files besides the local one (store-format.md §9).

``rmqstore.dispatch.rebuild`` runs the local engine itself and looks any other up in :data:`ENGINES`;
an engine's package registers it when imported (the library never imports the Spark package:
``rmqstore.spark.redispatch`` adds "spark"). Both sides share :class:`BuildScope`.
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
