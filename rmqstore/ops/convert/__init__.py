"""Conversions of a store into a new store, each in its own module: :mod:`.dledger` (the commit log's framing,
``--to``) and :mod:`.cq` (the consume queue layout, ``--cq``)."""
