"""Codes as words: sysFlag bits, tagsCodes, magics, permissions and consume queue entries."""

from __future__ import annotations

from rmqstore.codec.commitlog import BLANK_MAGIC, MAGIC_V1, MAGIC_V2
from rmqstore.codec.consumequeue import FILLER_SIZE
from rmqstore.codec.describe import (
    describe_cq_entry,
    describe_perm,
    describe_sys_flag,
    describe_tags_code,
    human_size,
    magic_name,
    perm_string,
    sys_flag_words,
    tags_code_kind,
)
from rmqstore.codec.javahash import tags_code


def test_sys_flag_words():
    assert sys_flag_words(0) == ["not transactional"]
    assert sys_flag_words(0x301) == ["not transactional", "compressed (zlib)"]
    assert sys_flag_words(0x101) == ["not transactional", "compressed (lz4)"]
    assert sys_flag_words(0x201) == ["not transactional", "compressed (zstd)"]
    assert sys_flag_words(0x1) == ["not transactional", "compressed (zlib)"]  # legacy producers set no type
    assert describe_sys_flag(0x8 | 0x30) == "transaction commit, born host IPv6, store host IPv6"
    assert sys_flag_words(0xC) == ["transaction rollback"]
    assert sys_flag_words(0x4 | 0x2) == ["transaction prepared", "multi tags"]
    assert sys_flag_words(0xC0) == ["not transactional", "inner batch", "needs unwrap"]
    assert sys_flag_words(0x1000) == ["not transactional", "unknown bits 0x1000"]
    assert sys_flag_words(-1)[-1].startswith("unknown bits 0xFFFFF8")


def test_tags_code_words():
    assert describe_tags_code(tags_code("TagA")) == "tag hash 2598919"
    assert describe_tags_code(0) == "no tag"
    assert describe_tags_code(1700000010123, "SCHEDULE_TOPIC_XXXX") == "delivery at 2023-11-14T22:13:30.123Z"
    assert tags_code_kind(-(2**63) + 4096) == "ext address"
    assert describe_tags_code(-(2**63) + 4096) == "ext address 4096"
    assert tags_code_kind(-(2**31)) == "tag hash"  # the smallest real hash is not an ext address


def test_magic_perm_and_entry_words():
    assert magic_name(MAGIC_V1) == "message V1"
    assert magic_name(MAGIC_V2).startswith("message V2")
    assert magic_name(BLANK_MAGIC) == "BLANK (end of file)"
    assert magic_name(0) == "zeros (unwritten space)"
    assert magic_name(0x12345678) == "unknown magic 0x12345678"
    assert [perm_string(p) for p in (0, 2, 4, 6, 7, 1)] == ["---", "-W-", "R--", "RW-", "RWX", "--X"]
    assert describe_perm(6) == "RW- (read, write)"
    assert describe_perm(0) == "--- (no access)"
    assert describe_cq_entry(0, FILLER_SIZE, 0) == "filler (fillPreBlank)"
    assert describe_cq_entry(0, 0, 0) == "end of data"
    assert describe_cq_entry(4096, 187, 1) == "message at 4096, 187 bytes"
    assert human_size(1073741824) == "1.0 GiB" and human_size(400) == "400 B"
