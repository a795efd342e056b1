"""Old import path of :mod:`rmqstore.codec.commitlog` (the same module object)."""

import sys

from .codec import commitlog as _codec

sys.modules[__name__] = _codec
