"""The one place the Spark package takes the store codecs from (the record codec, the record arrays and the columnar decoder)."""

from __future__ import annotations

from rmqstore.codec.arrays import (
    PropertyItems,
    RecordArrays,
    duplicate_name_rows,
    host_codes_v4,
    key_tokens,
    msg_id_hex,
    named,
    property_items,
    record_arrays,
)
from rmqstore.codec.commitlog import (
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    Record,
    body_crc,
    decode_record,
    host_str,
)
from rmqstore.walk.columns import BATCH, Columns, decode_columns

__all__ = [
    "BATCH",
    "PROP_KEYS",
    "PROP_TAGS",
    "PROP_UNIQ_KEY",
    "Columns",
    "PropertyItems",
    "Record",
    "RecordArrays",
    "body_crc",
    "decode_columns",
    "decode_record",
    "duplicate_name_rows",
    "host_codes_v4",
    "host_str",
    "key_tokens",
    "msg_id_hex",
    "named",
    "property_items",
    "record_arrays",
]
