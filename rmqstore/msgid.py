"""Old import path of :mod:`rmqstore.codec.msgid` (the same module object)."""

import sys

from .codec import msgid as _codec

sys.modules[__name__] = _codec
