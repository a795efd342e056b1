"""Hypothesis strategies and byte helpers shared by the codec tests and the damaged-store tests."""

from __future__ import annotations

from hypothesis import strategies as st

from rmqstore.codec.commitlog import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, encode_properties, encode_record

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# the UNIQ_KEY of the first message of the §15 vectors
UNIQ = "C0A8010A303918B4AAC27FB5A8E50000"

hosts_v4 = st.binary(min_size=4, max_size=4)
hosts_v6 = st.binary(min_size=16, max_size=16)
prop_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), min_size=1, max_size=12
)


def hx(text: str) -> bytes:
    """The bytes of a hex dump as store-format.md prints them (spaces and line breaks ignored)."""
    return bytes.fromhex("".join(text.split()))


@st.composite
def records(draw):
    """The fields of one commit log record (V1 or V2, IPv4 or IPv6 hosts) as ``encode_record`` takes them."""
    sys_flag = draw(INT32)
    v2 = draw(st.booleans())
    topic = draw(st.text(min_size=0, max_size=40 if v2 else 30).filter(lambda t: len(t.encode("utf-8")) <= 127))
    props = draw(st.dictionaries(prop_text, prop_text, max_size=4))
    return dict(
        topic=topic,
        queue_id=draw(INT32),
        flag=draw(INT32),
        queue_offset=draw(INT64),
        phy_offset=draw(INT64),
        sys_flag=sys_flag,
        born_timestamp_ms=draw(INT64),
        born_addr=draw(hosts_v6 if sys_flag & BORNHOST_V6_FLAG else hosts_v4),
        born_port=draw(INT32),
        store_timestamp_ms=draw(INT64),
        store_addr=draw(hosts_v6 if sys_flag & STOREHOSTADDRESS_V6_FLAG else hosts_v4),
        store_port=draw(INT32),
        reconsume_times=draw(INT32),
        prepared_transaction_offset=draw(INT64),
        body=draw(st.binary(max_size=300)),
        properties=encode_properties(props),
        v2=v2,
    )


@st.composite
def damaged(draw):
    """The bytes of one record with bits flipped, cut short, partly overwritten, or random bytes instead."""
    fields = draw(records())
    data = bytearray(encode_record(**fields))
    how = draw(st.sampled_from(["flip", "truncate", "overwrite", "garbage"]))
    if how == "flip":
        for _ in range(draw(st.integers(1, 8))):
            bit = draw(st.integers(0, len(data) * 8 - 1))
            data[bit // 8] ^= 1 << (bit % 8)
    elif how == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == "overwrite":
        start = draw(st.integers(0, len(data) - 1))
        chunk = draw(st.binary(min_size=1, max_size=16))
        data[start : start + len(chunk)] = chunk
    else:
        data = bytearray(draw(st.binary(max_size=400)))
    return bytes(data)
