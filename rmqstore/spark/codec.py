"""The one place the Spark package takes the store codecs from (the record codec and the columnar decoder);
the Arrow batch builder it reads records with is ``rmqstore.walk.arrow``."""

from __future__ import annotations

from rmqstore.codec.commitlog import Record, decode_record
from rmqstore.walk.columns import BATCH, Columns, decode_columns

__all__ = ["BATCH", "Columns", "Record", "decode_columns", "decode_record"]
