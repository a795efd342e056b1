"""Old import path of :mod:`rmqstore.codec.checkpoint` (the same module object)."""

import sys

from .codec import checkpoint as _codec

sys.modules[__name__] = _codec
