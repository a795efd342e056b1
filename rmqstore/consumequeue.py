"""Old import path of :mod:`rmqstore.codec.consumequeue` (the same module object)."""

import sys

from .codec import consumequeue as _codec

sys.modules[__name__] = _codec
