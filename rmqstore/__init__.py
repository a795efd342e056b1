"""rmqstore: offline tools for Apache RocketMQ broker store directories.

The library is pure: codecs per on-disk format (``commitlog``, ``consumequeue``, ``indexfile``,
``checkpoint``, ``config``), store access (``layout``, ``store``), and one module per operation
(``dispatch``, ``recover``, ``query``, ``expire``, ...). It never prints; the command line lives in
the separate ``commands`` package and the Spark pipeline in ``rmqstore.spark``.
"""

__version__ = "0.1.0"
