"""The checkpoint file (§6): the §15.9 vector, its minimum timestamps, and both ways over random pages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import INT64, hx

from rmqstore.codec import checkpoint as cpmod
from rmqstore.errors import CorruptData

# ----------------------------------------------------------------------------------------- §15.9


def test_checkpoint_vector():
    cp = cpmod.Checkpoint(1700000000123, 1700000000100, 1699999990000)
    data = cpmod.encode(cp)
    assert len(data) == 4096
    assert data[:24] == hx("0000018B CFE5687B 0000018B CFE56864 0000018B CFE540F0")
    assert data[24:] == bytes(4096 - 24)
    back = cpmod.decode(data)
    assert back == cp
    assert back.min_timestamp_ms == 1699999997100
    assert back.min_timestamp_index_ms == 1699999990000


def test_checkpoint_min_timestamp_never_negative():
    assert cpmod.Checkpoint(1000, 5000, 0).min_timestamp_ms == 0
    assert cpmod.Checkpoint(0, 0, 0).min_timestamp_index_ms == 0


def test_checkpoint_truncated_is_corrupt_data():
    with pytest.raises(CorruptData) as e:
        cpmod.decode(bytes(10), path="/s/checkpoint")
    assert (str(e.value.path), e.value.pos) == ("/s/checkpoint", 10)


# ----------------------------------------------------------------------------------- round trips


@given(st.tuples(INT64, INT64, INT64, INT64, INT64))
def test_checkpoint_round_trip(values):
    cp = cpmod.Checkpoint(*values)
    assert cpmod.decode(cpmod.encode(cp)) == cp


PAGE = st.binary(min_size=1, max_size=64).map(lambda b: (b * cpmod.FILE_SIZE)[: cpmod.FILE_SIZE])


@given(INT64, INT64, INT64, INT64, INT64, PAGE)
def test_checkpoint_both_ways(a: int, b: int, c: int, d: int, e: int, page: bytes) -> None:
    cp = cpmod.Checkpoint(a, b, c, d, e)
    data = cpmod.encode(cp)
    assert len(data) == cpmod.FILE_SIZE and cpmod.decode(data) == cp
    over = cpmod.encode_timestamps(page, a, b, c)
    old = cpmod.decode(page)
    assert cpmod.decode(over) == cpmod.Checkpoint(a, b, c, old.master_flushed_offset, old.confirm_phy_offset)
    assert over[24:] == page[24:]
