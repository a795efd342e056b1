"""The reference lane: the broker's append path for one message of any kind (§3.2, §3.5, §3.7, §4.3).

Every message the run lane cannot vouch for comes here; the run lane is tested against it."""

from __future__ import annotations

import struct
import zlib

from rmqstore.codec.commitlog import (
    BORNHOST_V6_FLAG,
    CRC32_RESERVED_LEN,
    HEAD_V4,
    INNER_BATCH_FLAG,
    MAGIC_V1,
    NEED_UNWRAP_FLAG,
    PROP_DELAY,
    PROP_KEYS,
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    PROP_WAIT,
    SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    cal_msg_length,
    encode_prop_crc,
    encode_record,
)
from rmqstore.codec.fields import INT_MAX
from rmqstore.codec.messages import Message
from rmqstore.dispatch.multiqueue import PROP_MULTI_DISPATCH
from rmqstore.errors import InputError
from rmqstore.ops.write.append import Planner
from rmqstore.ops.write.append_point import RECORD_SLACK as _RECORD_SLACK
from rmqstore.ops.write.validate import (
    _PROPS_MAX,
    _V1_TOPIC_MAX,
    PROP_CLUSTER,
    RETRY_PREFIX,
    _check_properties,
    _lmq_offsets_entry,
    _PropsFormat,
    utf8,
)
from rmqstore.walk.requests import delivery_tags_code

_PACK_HEAD = HEAD_V4.pack  # everything up to BODYLENGTH of a V1 record with IPv4 hosts (88 bytes, §3.1)
_PACK_SHORT = struct.Struct(">h").pack
_SCHEDULE_TOPIC_BYTES = SCHEDULE_TOPIC.encode()
_QUEUED = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)  # the types that take a queue offset
_Host = tuple[bytes, int]


def put_one(p: Planner, m: Message) -> None:
    """The broker's append path for one message (any kind of message)."""
    origin = m.origin
    topic, tc_bytes, qid, tt, born, store_hp, sys_flag = _queue_and_hosts(p, m)
    store_ts = m.store_timestamp_ms
    if store_ts is None:
        store_ts = p.now()
        if store_ts < p.last_ts:
            store_ts = p.last_ts
    p.last_ts = store_ts
    born_ts = store_ts if m.born_timestamp_ms is None else m.born_timestamp_ms
    if m.raw:
        props = dict(m.properties)
        if len(props) != len(m.properties):
            raise InputError(f"{origin}: a property is given twice")
        fmt = p.props_format(props, 0)
    else:
        props, fmt, topic, qid, tc_bytes = _producer_properties(p, m, topic, qid, tt, born_ts, born[0], tc_bytes)
    props_b = _properties_bytes(p, props, fmt, topic, qid, origin)
    qoff = 0
    if tt in _QUEUED:
        qkey = (topic, qid)
        qoff = p.next_qoff.get(qkey)
        if qoff is None:
            qoff = p.queue_offset(topic, qid)
        p.next_qoff[qkey] = qoff + 1
    body = m.body
    v2 = len(tc_bytes) > _V1_TOPIC_MAX
    if sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG) or v2:
        size = cal_msg_length(sys_flag, len(body), len(tc_bytes), len(props_b), v2=v2)
    else:
        size = 91 + len(body) + len(tc_bytes) + len(props_b)
    if p.rules.body_limit_only or size > p.cfg.max_message_size:
        _check_size(p, size, len(body), origin)
    out = p.out
    phy = out.base + out.pos if size + 8 <= out.fs - out.pos else out.place(size, origin)
    _encode(p, m, topic, tc_bytes, qid, qoff, phy, sys_flag, born_ts, born, store_ts, store_hp, props_b, size)
    # what the dispatcher reads back from this record (§3.11, §4.2), into the plan's columns
    tags = props.get(PROP_TAGS)
    tcode = p.tags_code(tags) if tags else 0
    if topic == SCHEDULE_TOPIC and PROP_DELAY in props:
        try:  # the delivery time; a DELAY that is not a number stops the broker's dispatcher
            tcode = delivery_tags_code(props[PROP_DELAY], store_ts, p.levels, tcode)
        except ValueError:
            raise InputError(f"{origin}: DELAY {props[PROP_DELAY]!r} is not a number") from None
    a_tid, a_qid, a_qoff, a_phy, a_size, a_ts, a_sys, a_tcode, a_keys, a_origin, a_uniq, a_host = p.appends
    a_tid(p.cols.topic_id(topic))
    a_qid(qid)
    a_qoff(qoff)
    a_phy(phy)
    a_size(size)
    a_ts(store_ts)
    a_sys(sys_flag)
    a_tcode(tcode)
    a_keys(props.get(PROP_KEYS) if props_b else "")
    a_origin(origin)
    a_uniq(props.get(PROP_UNIQ_KEY))
    a_host(store_hp)


def _queue_and_hosts(p: Planner, m: Message) -> tuple[str, bytes, int, int, _Host, _Host, int]:
    """The topic (checked at its first use), its name's bytes, the queue id, the transaction type;
    born and store host (ip bytes, port), and the sysFlag with the IPv6 bits set to match them."""
    origin, topic = m.origin, m.topic
    info = p.topic_info.get(topic)
    tc, tb = info if info is not None else p.topic_entry(topic, origin)
    if m.sys_flag & (INNER_BATCH_FLAG | NEED_UNWRAP_FLAG):
        raise InputError(f"{origin}: sysFlag {m.sys_flag:#x}: inner-batch records are not supported")
    qid = m.queue_id
    if qid is None:
        qid = p.pick_queue(topic, tc, origin)
    elif tc is not None and not m.raw and qid >= tc.write_queue_nums and qid >= tc.read_queue_nums:
        raise InputError(
            f"{origin}: queueId {qid} is not a queue of topic {topic!r} "
            f"({max(tc.read_queue_nums, tc.write_queue_nums)} queues)"
        )
    born = p.hosts.get_host(m.born_host, origin, "bornHost") if m.born_host else p.default_born
    store = p.hosts.get_host(m.store_host, origin, "storeHost") if m.store_host else p.default_store
    v6 = (BORNHOST_V6_FLAG if len(born[0]) == 16 else 0) | (STOREHOSTADDRESS_V6_FLAG if len(store[0]) == 16 else 0)
    if v6 and not p.rules.ipv6_hosts:
        raise InputError(f"{origin}: IPv6 hosts need a 4.6.0+ broker (this store is {p.cfg.broker})")
    sys_flag = (m.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)) | v6
    return topic, tb, qid, sys_flag & TRANSACTION_MASK, born, store, sys_flag


def _producer_properties(
    p: Planner, m: Message, topic: str, qid: int, tt: int, born_ts: int, born_addr: bytes, tb: bytes
) -> tuple[dict[str, str], _PropsFormat, str, int, bytes]:
    """The producer's property map and the broker's edits of it (§3.7): a delay message moves to
    SCHEDULE_TOPIC_XXXX (returned topic, queue and topic bytes), CLUSTER is added, WAIT dropped."""
    origin = m.origin
    props: dict[str, str] = {}
    if m.tags is not None:
        props[PROP_TAGS] = m.tags
    if m.keys is not None and m.keys.strip():
        props[PROP_KEYS] = m.keys
    props[PROP_WAIT] = "true" if m.wait else "false"
    uniq = m.uniq_key
    if uniq is None and m.properties:
        uniq = dict(m.properties).get(PROP_UNIQ_KEY)
    props[PROP_UNIQ_KEY] = uniq if uniq is not None else p.keys_gen.next(born_ts, born_addr)
    delay = m.delay_level
    if delay:
        if delay < 0:
            raise InputError(f"{origin}: delayTimeLevel {delay} is negative")
        props[PROP_DELAY] = str(delay)
    if m.properties:
        props.update(m.properties)
    fmt = p.props_format(props, 16)  # the producer's map
    rescheduled = False
    if PROP_DELAY in props and tt in _QUEUED:
        level = _delay_level(props[PROP_DELAY], origin)
        if level > 0:
            if level > len(p.levels):
                level = len(p.levels)
                props[PROP_DELAY] = str(level)
            props[PROP_REAL_TOPIC] = topic
            props[PROP_REAL_QID] = str(qid)
            topic, qid = SCHEDULE_TOPIC, level - 1  # the broker's own topic: no name check
            tb = _SCHEDULE_TOPIC_BYTES
            rescheduled = True
    rules = p.rules
    if rules.cluster_property or rescheduled:
        # the broker decodes the producer's string into a map, edits it and serialises it again
        names = list(fmt.names)
        if rules.cluster_property:
            props[PROP_CLUSTER] = p.cfg.broker_cluster_name
            if PROP_CLUSTER not in names:
                names.append(PROP_CLUSTER)
        if rules.drops_wait_property and PROP_WAIT in names:
            names.remove(PROP_WAIT)  # removed for the stored string, put back afterwards
            if rescheduled:
                names.append(PROP_WAIT)
        if rescheduled:
            names += [k for k in (PROP_REAL_TOPIC, PROP_REAL_QID) if k not in names]
        fmt = p.props_format(names, rules.properties_capacity)
    return props, fmt, topic, qid, tb


def _delay_level(text: str, origin: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{origin}: DELAY {text!r} is not a number") from None


def _properties_bytes(p: Planner, props: dict[str, str], fmt: _PropsFormat, topic: str, qid: int, origin: str) -> bytes:
    """The stored property string: checked, with the multi-dispatch offsets, the version's trailing
    separator and the room reserved for the CRC property."""
    text = fmt.render(props)
    n_props = len(fmt.names)
    if (
        text.count("\x01") != n_props
        or text.count("\x02") != n_props
        or "\x01\x02" in text
        or "\x02\x01" in text
        or text[:1] == "\x01"
    ):
        _check_properties(((k, props[k]) for k in fmt.names), origin)
        raise InputError(f"{origin}: the properties cannot be stored")
    lmq_names = props.get(PROP_MULTI_DISPATCH) if p.lmq else None
    if lmq_names is not None and not topic.startswith(RETRY_PREFIX):
        text += _lmq_offsets_entry(lmq_names, qid, p.cfg, p.queue_offset, p.next_qoff, p.lmq_keys)
    if not p.rules.props_trailing_separator and text.endswith("\x02"):
        text = text[:-1]  # 4.9.1-4.9.x: no separator after the last property
    props_b = utf8(text, origin, "the properties string")
    if p.prop_crc or (p.lmq_reserve and PROP_MULTI_DISPATCH in props):
        props_b += bytes(CRC32_RESERVED_LEN)  # the CRC entry goes here once the record is complete
    if len(props_b) > _PROPS_MAX:
        raise InputError(f"{origin}: properties are {len(props_b)} bytes; the broker allows at most {_PROPS_MAX}")
    return props_b


def _check_size(p: Planner, size: int, body_len: int, origin: str) -> None:
    """The version's size limits (§3.5)."""
    max_record = p.cfg.max_message_size
    if p.rules.body_limit_only:
        if body_len > max_record:
            raise InputError(f"{origin}: the body is {body_len} bytes; maxMessageSize is {max_record}")
        if p.rules.record_slack and size > max_record + _RECORD_SLACK:
            raise InputError(f"{origin}: the record is {size} bytes; at most maxMessageSize + 64 KiB")
    elif size > max_record:
        raise InputError(f"{origin}: the record is {size} bytes; maxMessageSize is {max_record}")


def _encode(
    p: Planner,
    m: Message,
    topic: str,
    tb: bytes,
    qid: int,
    qoff: int,
    phy: int,
    sys_flag: int,
    born_ts: int,
    born: _Host,
    store_ts: int,
    store: _Host,
    props_b: bytes,
    size: int,
) -> None:
    """The record's bytes, appended to the layout's chunk."""
    out = p.out
    chunk = out.chunk
    body = m.body
    crc = zlib.crc32(body) & INT_MAX
    if len(born[0]) == 4 and len(store[0]) == 4 and len(tb) <= _V1_TOPIC_MAX:
        born_addr, born_port = born
        store_addr, store_port = store
        chunk += _PACK_HEAD(
            size,
            MAGIC_V1,
            crc,
            qid,
            m.flag,
            qoff,
            phy,
            sys_flag,
            born_ts,
            born_addr,
            born_port,
            store_ts,
            store_addr,
            store_port,
            m.reconsume_times,
            m.prepared_transaction_offset,
            len(body),
        )
        chunk += body
        chunk.append(len(tb))
        chunk += tb
        chunk += _PACK_SHORT(len(props_b))
        chunk += props_b
    else:
        chunk += encode_record(
            topic=topic,
            queue_id=qid,
            flag=m.flag,
            queue_offset=qoff,
            phy_offset=phy,
            sys_flag=sys_flag,
            born_timestamp_ms=born_ts,
            born_addr=born[0],
            born_port=born[1],
            store_timestamp_ms=store_ts,
            store_addr=store[0],
            store_port=store[1],
            reconsume_times=m.reconsume_times,
            prepared_transaction_offset=m.prepared_transaction_offset,
            body=body,
            properties=props_b,
            v2=len(tb) > _V1_TOPIC_MAX,
            crc=crc,
        )
    if p.prop_crc:  # 5.2.0+ enabledAppendPropCRC: CRC32 of the record before its last 20 bytes
        end = len(chunk)
        chunk[end - CRC32_RESERVED_LEN : end] = encode_prop_crc(zlib.crc32(memoryview(chunk)[end - size : end - 20]))
    out.pos += size
