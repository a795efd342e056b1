"""On-disk formats of a RocketMQ store, bytes <-> values, with no file system access.

One module per format (store-format.md section in each docstring): ``commitlog`` (records, §3),
``columnar`` (the same records many at a time with numpy, derived from ``commitlog``'s
declaration), ``consumequeue`` (§4), ``indexfile`` (§5), ``checkpoint`` (§6), ``javahash`` and
``msgid``; ``framing`` (how records sit in a commit log file), ``topic`` (topic names the broker
accepts), ``describe`` (codes as words) and ``messages`` (messages given to ``write``).
"""
