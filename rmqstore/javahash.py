"""Old import path of :mod:`rmqstore.codec.javahash` (the same module object)."""

import sys

from .codec import javahash as _codec

sys.modules[__name__] = _codec
