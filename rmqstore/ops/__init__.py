"""The operations: one module or package each (check, dump, expire, info, offsets, query,
recover, redispatch, timercompaction, write). An operation reads a store through store/ and walk/,
writes through dispatch/ and safety/, and never imports another operation."""
