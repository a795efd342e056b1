"""Spark pipeline (extra ``spark``): commit logs and consume queues of many stores as DataFrames.

``source`` holds the PySpark Python data sources ``rocketmq`` (commit log records) and
``rocketmq_consumequeue`` (consume queue entries), ``reader`` the columnar batch builder of the
first, ``codec`` the one import of the store codecs, ``jobs`` the bulk jobs (export, stats, find),
``redispatch`` the Spark engine of ``rmqstore redispatch`` and ``session`` the SparkSession set-up
(local or a cluster: master checks, the package shipped to the executors, executor checks).
Everything here needs ``pip install 'rmqstore[spark]'`` and a Java runtime; the core never imports
this package: importing ``redispatch`` registers the Spark engine in ``rmqstore.dispatch.engines.ENGINES``
(the ``redispatch`` command does that for ``--engine spark``).
"""

from __future__ import annotations

from rmqstore.errors import MissingExtra

_HOW = "install the spark extra: pip install 'rmqstore[spark]'"

try:
    import pyarrow  # noqa: F401
    import pyspark
    from pyspark.sql.datasource import DataSource  # noqa: F401  # 4.0+: the Python Data Source API
except ImportError as e:
    raise MissingExtra(f"the Spark commands need pyspark>=4.1 and pyarrow ({e.name or e} missing); {_HOW}") from None

if tuple(int(x) for x in pyspark.__version__.split(".")[:2] if x.isdigit()) < (4, 1):
    raise MissingExtra(f"pyspark {pyspark.__version__} is too old (filter pushdown needs 4.1+); {_HOW}")
