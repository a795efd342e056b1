"""What the broker accepts: topic names and the topics.json entry of a new topic, property strings,
hosts, and the order a Java ``HashMap`` gives property names (store-format.md §3.5, §3.7, §11.3, §12)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import replace

from rmqstore.codec.commitlog import SCHEDULE_TOPIC, parse_host
from rmqstore.codec.javahash import java_hash
from rmqstore.codec.topic import TOPIC_VALIDATOR_RE, queue_name_problem, shown
from rmqstore.dispatch.multiqueue import LMQ_PREFIX, PROP_MULTI_QUEUE_OFFSET
from rmqstore.errors import ConfigError, InputError
from rmqstore.rules import rules_for
from rmqstore.store import config as cfgmod
from rmqstore.store.layout import StoreConfig

PROP_CLUSTER = "CLUSTER"
_PROPS_MAX = 32767  # Short.MAX_VALUE: PROPERTIES_SIZE_EXCEEDED above it
_V1_TOPIC_MAX = 127  # TOPICLENGTH is a signed byte in V1


# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET (4.9.x/5.x; 4.4.0 refuses SCHEDULE_TOPIC_XXXX and TBW102)
# plus the auto-create template: a producer cannot send to these.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        cfgmod.AUTO_CREATE_TEMPLATE,
    }
)
# Topics the broker registers itself (§12): never added to topics.json by a write.
BROKER_MANAGED_TOPICS = NOT_ALLOWED_SEND_TOPICS | {"BenchmarkTest", "RMQ_SYS_TRACE_TOPIC"}
_SYSTEM_PREFIX = "rmq_sys_"  # 5.x system topics
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


# ---------------------------------------------------------------------------------------------
# Java HashMap iteration order


def _table_size_for(cap: int) -> int:
    n = 1
    while n < cap:
        n <<= 1
    return max(n, 1)


def java_hashmap_order(keys: Iterable[str], *, initial_capacity: int = 16) -> list[str]:
    """Iteration order of a Java 8+ ``HashMap<String, ?>`` after putting ``keys`` in this order.

    ``new HashMap<>()`` is ``initial_capacity=16``; ``new HashMap<>(n)`` rounds ``n`` up to a power
    of two. The table doubles whenever the size exceeds 0.75 x capacity; iteration walks the buckets
    in index order, ``(h ^ (h >>> 16)) & (capacity - 1)`` with ``h = key.hashCode()``, and each bucket
    in insertion order (a resize keeps the relative order). A key put twice keeps its first place.
    Tree bins (8+ keys in one bucket of a 64+ table) are not modelled: property maps never get there.
    """
    order = list(dict.fromkeys(keys))
    cap = _table_size_for(initial_capacity)
    while len(order) > cap * 3 // 4:
        cap <<= 1
    mask = cap - 1

    def bucket(item: tuple[int, str]) -> tuple[int, int]:
        h = java_hash(item[1]) & 0xFFFFFFFF
        return ((h ^ (h >> 16)) & mask, item[0])

    return [k for _, k in sorted(enumerate(order), key=bucket)]


# ---------------------------------------------------------------------------------------------
# Topics


def check_send_topic(
    topic: str, *, allow_system: bool = False, max_length: int = _V1_TOPIC_MAX, any_script: bool = False
) -> None:
    """RocketMQ's topic rules: ``^[%|a-zA-Z0-9_-]+$``, at most ``max_length`` characters, and not a
    topic producers may not send to (unless ``allow_system``). ``any_script``: a broker that does not
    check the characters (4.4.0) stores any name that is one directory name (``queue_name_problem``).
    Raises InputError."""
    if any_script:
        why = queue_name_problem(topic)
        if why is not None:
            raise InputError(f"topic '{shown(topic)}' is not allowed: {why}")
    elif not topic or not TOPIC_VALIDATOR_RE.match(topic):
        raise InputError(f"topic {topic!r} is not allowed: only the characters %|a-zA-Z0-9_- may be used")
    if len(topic) > max_length:
        raise InputError(f"topic {topic!r} is {len(topic)} characters long; at most {max_length} are allowed")
    if not allow_system and (topic in NOT_ALLOWED_SEND_TOPICS or topic.startswith(_SYSTEM_PREFIX)):
        raise InputError(f"topic {topic!r} is reserved for the broker; pass --allow-system-topic to write it")


def _is_broker_managed(topic: str, cfg: StoreConfig) -> bool:
    return (
        topic in BROKER_MANAGED_TOPICS
        or topic.startswith(_SYSTEM_PREFIX)
        or topic in (cfg.broker_cluster_name, cfg.broker_name)
    )


def topic_for_new(
    topic: str, cfg: StoreConfig, template: cfgmod.TopicConfig | None, *, queue_nums: int = 4
) -> cfgmod.TopicConfig | None:
    """topics.json entry the broker creates on the first send to ``topic`` (None: broker-managed).

    * ordinary topic: ``createTopicInSendMessageMethod`` from ``TBW102`` (:func:`config.auto_create_topic`):
      min(``queue_nums`` (the producer's ``defaultTopicQueueNums``, 4), the template's write queues
      (``defaultTopicQueueNums`` of the broker, 8)) read and write queues, the template's perm without INHERIT (6),
      SINGLE_TAG, sysflag 0;
    * ``%RETRY%group``: 1 queue, perm 6 (``createTopicInSendMessageBackMethod``, retryQueueNums 1);
    * ``%DLQ%group``: 1 queue, perm 2 (write only) on 4.x, 6 on 5.x;
    * the broker's own topics (``SCHEDULE_TOPIC_XXXX``, transaction and trace topics, ``rmq_sys_*``,
      the cluster and broker names): None, the broker registers them itself at start.
    """
    if _is_broker_managed(topic, cfg):
        return None
    five = rules_for(cfg.broker).five
    attrs: dict[str, str] | None = {} if five else None
    if topic.startswith(RETRY_PREFIX):
        return cfgmod.TopicConfig(topic, 1, 1, cfgmod.PERM_READ | cfgmod.PERM_WRITE, attributes=attrs)
    if topic.startswith(DLQ_PREFIX):
        perm = cfgmod.PERM_READ | cfgmod.PERM_WRITE if five else cfgmod.PERM_WRITE
        return cfgmod.TopicConfig(topic, 1, 1, perm, attributes=attrs)
    # auto_create_topic checks the default 127-character limit; a longer name was checked already
    tc = cfgmod.auto_create_topic(
        topic if len(topic) <= _V1_TOPIC_MAX else "T",
        template=template,
        default_queue_nums=cfg.default_topic_queue_nums,
        client_queue_nums=queue_nums,
        broker_version=cfg.broker,
    )
    return replace(tc, topic_name=topic)


def _load_topics(cfg: StoreConfig) -> tuple[dict[str, cfgmod.TopicConfig], cfgmod.ConfigFile]:
    cf = cfgmod.read_config(cfg.config_dir, "topics.json")
    if cf.skipped is not None:
        raise ConfigError(f"unusable, not overwriting it: {cf.skipped.what}", path=cf.path, line=cf.skipped.line)
    return cfgmod.load_topics(cf.data, path=cf.path), cf


class _HostCache(dict[str, tuple[bytes, int]]):
    def get_host(self, text: str, origin: str, what: str) -> tuple[bytes, int]:
        v = self.get(text)
        if v is None:
            try:
                v = parse_host(text)
            except ValueError as e:
                raise InputError(f"{origin}: {what} {text!r} is not ip:port ({e})") from None
            self[text] = v
        return v


def utf8(text: str, origin: str, what: str) -> bytes:
    """``text`` as UTF-8; text that is not valid Unicode (a lone surrogate, as JSON's ``\\ud800``
    gives) is refused, as a body that is not valid text is."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(
            f"{origin}: {what} is not valid Unicode text (a lone surrogate at character {e.start})"
        ) from None


def _check_properties(items: Iterable[tuple[str, str]], origin: str) -> None:
    """The reason a property string is unusable (raised), for the names and values given."""
    for k, v in items:
        if not k:
            raise InputError(f"{origin}: a property name is empty")
        if not v:
            raise InputError(f"{origin}: property {k!r} has an empty value (the broker drops it when reading)")
        for ch, name in (("\x01", "0x01"), ("\x02", "0x02")):
            if ch in k or ch in v:
                raise InputError(f"{origin}: property {k!r} contains the separator byte {name}")


def _lmq_offsets_entry(
    names: str,
    qid: int,
    cfg: StoreConfig,
    queue_offset: Callable[[str, int], int],
    next_qoff: dict,
    used: set[tuple[str, int]],
) -> str:
    """``INNER_MULTI_QUEUE_OFFSET`` for the queues a record names, taking their next offsets (§9.1)."""
    offsets = []
    for name in names.split(","):
        check_send_topic(name)
        lqid = 0 if cfg.enable_lmq and name.startswith(LMQ_PREFIX) else qid
        off = next_qoff.get((name, lqid))
        if off is None:
            off = queue_offset(name, lqid)
        next_qoff[(name, lqid)] = off + 1
        used.add((name, lqid))
        offsets.append(str(off))
    return f"{PROP_MULTI_QUEUE_OFFSET}\x01{','.join(offsets)}\x02"


class _PropsFormat:
    """Serialises property maps with one key set: the HashMap order, as one %-format (cached per key set)."""

    __slots__ = ("names", "getter", "fmt", "single")

    def __init__(self, names: list[str]):
        self.names = names
        self.getter = operator.itemgetter(*names) if names else None
        self.single = len(names) == 1
        self.fmt = "".join(k.replace("%", "%%") + "\x01%s\x02" for k in names)

    def render(self, props: dict[str, str]) -> str:
        if self.getter is None:
            return ""
        vals = self.getter(props)
        return self.fmt % ((vals,) if self.single else vals)
