"""Records to consume queue entries and index keys: the writers of a re-dispatch (``dispatcher``), and
LMQ and batch consume queue units (``multiqueue``)."""
