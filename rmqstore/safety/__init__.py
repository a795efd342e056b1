"""What makes a change safe to run and re-run: opening a store's file whatever stands there
(``openfile``), atomic file writes (``files``), the journal of a
modifying operation (``journal``), the quarantine of removed bytes (``quarantine``) and the
planned actions shown before anything is done (``actions``)."""
