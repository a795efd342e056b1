"""The Python daemon of a local session's executors: pyspark's own daemon, loaded from the installed
pyspark rather than from the source zips Spark puts first on the workers' path.

Python compiles a module imported from a zip of sources on every import (nothing is cached), so
each daemon and each worker it forks compiled pyspark again: about a second before a session's first
task ran. Here the zips of the pyspark installation found further down the path (the same files,
with their compiled modules beside them) move to the end of the path, and the worker module is
imported once, before the forks. A zip of another Spark home (a cluster's) stays where it is.

The session copies this file alone to a directory of its own on the workers' path and starts it as
``rmqstore_spark_daemon``: it imports no rmqstore module, because pyspark must not be imported first.
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib.machinery import PathFinder


def installed_first(path: list[str]) -> list[str]:
    """``path`` with the source zips of the pyspark found outside them (its ``python/lib/*.zip``) last."""
    zips = [p for p in path if p.endswith(".zip")]
    spec = PathFinder.find_spec("pyspark", [p for p in path if p not in zips])
    if spec is None or spec.origin is None:
        return path
    lib = os.path.join(os.path.dirname(spec.origin), "python", "lib")
    own = [p for p in zips if os.path.dirname(p) == lib]
    return [p for p in path if p not in own] + own


def main() -> None:
    sys.path[:] = installed_first(sys.path)
    from pyspark import daemon

    if len(sys.argv) > 1 and sys.argv[1].startswith("pyspark"):
        importlib.import_module(sys.argv[1])  # the worker module, as the daemon's forks import it
    daemon.manager()


if __name__ == "__main__":
    main()
