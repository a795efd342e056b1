"""Old import path of :mod:`rmqstore.codec.indexfile` (the same module object)."""

import sys

from .codec import indexfile as _codec

sys.modules[__name__] = _codec
