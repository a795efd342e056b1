"""Records to consume queue entries and index keys: the writers of a re-dispatch (``dispatcher``),
LMQ and batch consume queue units (``multiqueue``), and the scope of a rebuild with the engines
other than the local one (``engines``)."""
