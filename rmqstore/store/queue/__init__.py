"""A store's consume queues behind one interface (RocketMQ's ``store.queue`` package).

:mod:`.interface` declares what every kind of consume queue answers; :mod:`.consumequeue` (the
``consumequeue/`` files) and :mod:`.batchconsumequeue` (the 5.x ``batchconsumequeue/`` files)
implement it. :class:`rmqstore.store.Store` hands out the right one.
"""
