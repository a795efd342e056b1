"""Message ids (§15.10): the offset message id both ways and the fields of a UNIQ_KEY."""

from __future__ import annotations

from strategies import UNIQ

from rmqstore.codec.commitlog import offset_msg_id, parse_host
from rmqstore.codec.msgid import decode_offset_msg_id, decode_uniq_key


def test_message_id_vectors():
    assert offset_msg_id(bytes([192, 168, 1, 2]), 10911, 4096) == "C0A8010200002A9F0000000000001000"
    v6, _ = parse_host("[2001:db8::2]:10911")
    assert offset_msg_id(v6, 10911, 4096) == "20010DB800000000000000000000000200002A9F0000000000001000"
    d4 = decode_offset_msg_id("C0A8010200002A9F0000000000001000")
    assert (d4.store_host, d4.store_port, d4.phy_offset) == ("192.168.1.2", 10911, 4096)
    d6 = decode_offset_msg_id("20010DB800000000000000000000000200002A9F0000000000001000")
    assert (d6.store_host, d6.store_port, d6.phy_offset) == ("2001:db8::2", 10911, 4096)


def test_uniq_key_vector():
    uk = decode_uniq_key(UNIQ)
    assert (uk.ip, uk.pid, uk.class_loader_hash, uk.month_ms, uk.counter) == (
        "192.168.1.10",
        12345,
        0x18B4AAC2,
        2142611685,
        0,
    )
    # 24 d 19:10:11.685 after the start of the producer's month
    assert uk.month_ms == ((24 * 24 + 19) * 3600 + 10 * 60 + 11) * 1000 + 685
