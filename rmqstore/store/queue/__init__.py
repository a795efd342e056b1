"""A store's consume queues behind one interface (RocketMQ's ``store.queue`` package).

:mod:`.interface` declares what every kind of consume queue answers; :mod:`.consumequeue` (the
``consumequeue/`` files), :mod:`.batchconsumequeue` (the 5.x ``batchconsumequeue/`` files) and
:mod:`.rocksdbconsumequeue` (the 5.x RocksDB database in ``consumequeue/``) implement it; :mod:`.kinds` picks
the file or the RocksDB one, which :class:`rmqstore.store.Store` hands out.
"""
