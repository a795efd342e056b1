"""The walk of the commit log chain: the only code that steps from record to record.

``chain`` (typed stops, the chain rule, the plain record walk), ``checked`` (recovery's checked walk),
``starts`` (record starts and resync after damage, where data ends), ``requests`` and ``columns``
(what the dispatcher reads of each record, one at a time or as columns), ``workers`` (the process
pool of the parallel walks). Every walk steps frames through the segment's framing
(``rmqstore.codec.framing``), so a new framing of the commit log changes nothing here.
"""
