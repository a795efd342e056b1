"""Every decision that depends on the broker version, in one place (store-format.md §8.6 and the notes
of each section). Code elsewhere asks ``rules_for(broker).<decision>``; no other module compares versions.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass


@functools.lru_cache(maxsize=64)
def version_tuple(broker: str) -> tuple[int, ...]:
    """``"4.9.7"`` -> ``(4, 9, 7)``; unknown parts count as 0."""
    out = []
    for part in broker.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class BrokerRules:
    """What a broker of one version does, as named decisions."""

    broker: str
    # records (§3)
    v2_magic: bool  # 5.1.0+ reads and writes 0xDAA320AB records (2-byte topic length)
    ipv6_hosts: bool  # 4.6.0+: the IPv6 sysFlag bits select 16-byte addresses
    new_properties_parser: bool  # 4.9.1+: properties split by index, not String.split (§3.7)
    cluster_property: bool  # 4.6.0+: the broker adds CLUSTER to a message's properties
    drops_wait_property: bool  # 4.9.1-4.x: WAIT=true is not stored
    properties_capacity: int  # initial capacity of the broker's properties map (Java HashMap order)
    body_limit_only: bool  # 4.9.4+: maxMessageSize limits the body, not the whole record
    record_slack: bool  # 4.9.5+: a record may exceed maxMessageSize by 64 KiB
    # consume queues (§4, §8.4)
    cq_max_includes_size: bool  # 4.5.1+: a queue's maxPhysicOffset is offset + size, not offset
    empty_queue_min_is_max: bool  # 5.x: a queue wholly below the commit log has min offset = max offset
    # index files (§5)
    index_counts_new_slots_only: bool  # 4.7.1+: hashSlotCount counts only newly used slots
    # recovery (§2.4, §8)
    normal_start_from_cq_max: bool  # 5.3.2+: normal recovery starts at the last file <= CQ max
    normal_dispatch_beyond_cq: bool  # 5.3.2+: normal recovery dispatches records past the CQ max
    start_catches_up: bool  # 4.5.1-4.9.x: start() re-dispatches from the CQ maximum
    restart_dispatches_from_stop: bool  # 5.x: the dispatch after a restart starts at the recovery end
    normal_destroys_logics: bool  # normal recovery with no commit log file deletes every CQ
    deletes_empty_last_file: bool  # 5.1.3+: an empty last commit log file is deleted at load
    loads_prefix_only: bool  # 4.4.0 and 4.9.2 stop loading at a file of the wrong size; others refuse
    props_trailing_separator: bool  # the property string ends with 0x02 (not 4.9.1-4.9.x)
    mapped_keys: bool  # 4.5.2+: broker.conf spells mappedFileSize* (mapedFileSize* before)
    blank_stale_tail: bool  # before 4.9.1 an end-of-file blank is written with the reused record buffer's bytes
    multi_dispatch: bool  # 4.9.3+: enableMultiDispatch / enableLmq (INNER_MULTI_DISPATCH)
    lmq_reserves_crc_bytes: bool  # 5.2.0+: an LMQ record's re-encoded properties keep 20 CRC bytes reserved
    prop_crc: bool  # 5.2.0+: the __CRC32# property (enabledAppendPropCRC, forceVerifyPropCRC)
    checkpoint_confirm_offset: bool  # 5.1.1+: recovery's confirm offset (last valid record) is checkpointed
    # config files and expiry (§10, §11)
    five: bool  # 5.x config file names, topic rules, system topics
    config_write_via_tmp: bool  # before 5.1: config written to NAME.tmp, then renamed
    expire_ratio_rounds_up: bool  # 5.x: used/(used+usable) rounded up to a whole percent, like df
    expire_forced_level_triggers: bool  # 5.x: crossing the forced/warning level alone triggers deletion
    expire_levels_in_config: bool  # 5.x: diskSpace*Ratio are broker.conf keys
    expire_batch_max_in_config: bool  # 5.x: deleteFileBatchMax key; 4.x hard-codes 10
    # DLedger mode: DLedgerCommitLog and the DLedger library the broker ships (4.9.4: 0.2.6, 5.2.0: 0.3.1.2)
    dledger_check_ratio_from_broker: bool  # 4.9.4+: DLedger checks expiry above diskMaxUsedSpaceRatio, not its 0.70
    dledger_ratio_rounds_up: bool  # dledger 0.2.6+: a disk's used ratio rounded up to a whole percent, like df


@functools.lru_cache(maxsize=64)
def rules_for(broker: str) -> BrokerRules:
    """The rules of broker version ``broker`` (e.g. ``"4.4.0"``)."""
    v = version_tuple(broker)
    five = v >= (5,)
    return BrokerRules(
        broker=broker,
        v2_magic=v >= (5, 1, 0),
        ipv6_hosts=v >= (4, 6, 0),
        new_properties_parser=v >= (4, 9, 1),
        cluster_property=v >= (4, 6, 0),
        drops_wait_property=(4, 9, 1) <= v < (5,),
        properties_capacity=128 if v >= (4, 9, 1) else 16,
        body_limit_only=v >= (4, 9, 4),
        record_slack=v >= (4, 9, 5),
        cq_max_includes_size=v >= (4, 5, 1),
        empty_queue_min_is_max=five,
        index_counts_new_slots_only=v >= (4, 7, 1),
        normal_start_from_cq_max=v >= (5, 3, 2),
        normal_dispatch_beyond_cq=v >= (5, 3, 2),
        start_catches_up=(4, 5, 1) <= v < (5, 0, 0),
        restart_dispatches_from_stop=five,
        # 4.4.0's recoverNormally has no branch for an empty commit log; later 4.x and 5.x destroy
        # the CQs there too (the first version with the branch is not pinned down: 4.5.1 assumed).
        normal_destroys_logics=v >= (4, 5, 1),
        deletes_empty_last_file=v >= (5, 1, 3),
        loads_prefix_only=v < (4, 5, 1) or v[:3] == (4, 9, 2),
        checkpoint_confirm_offset=v >= (5, 1, 1),
        prop_crc=v >= (5, 2, 0),
        props_trailing_separator=not (4, 9, 1) <= v < (5,),
        mapped_keys=v >= (4, 5, 2),
        blank_stale_tail=v < (4, 9, 1),
        multi_dispatch=v >= (4, 9, 3),
        lmq_reserves_crc_bytes=v >= (5, 2, 0),
        five=five,
        config_write_via_tmp=v < (5, 1),
        expire_ratio_rounds_up=five,
        expire_forced_level_triggers=five,
        expire_levels_in_config=five,
        expire_batch_max_in_config=five,
        dledger_check_ratio_from_broker=v >= (4, 9, 4),  # apache/rocketmq#4212, April 2022
        dledger_ratio_rounds_up=v >= (4, 9, 4),  # openmessaging/dledger#110, in the 0.2.6 that 4.9.4 ships
    )


# ---------------------------------------------------------------------------------------------
# Version families and what a store's own contents say about them (``rmqstore.detect`` finds the
# facts; which families each fact admits is version knowledge and lives here).

FAMILIES: tuple[str, ...] = ("4.4", "4.9", "5.0-5.3.1", "5.3.2+")
# the version whose rules stand for a family when only the family is known (the judged engines)
REPRESENTATIVE: dict[str, str] = {"4.4": "4.4.0", "4.9": "4.9.4", "5.0-5.3.1": "5.2.0", "5.3.2+": "5.3.3"}
_FIVE = frozenset({"5.0-5.3.1", "5.3.2+"})


def _evidence(table: str) -> dict[str, tuple[frozenset[str], str]]:
    """``fact  families  why`` lines: the families a fact admits (``5``: both 5.x families)."""
    out = {}
    for line in table.strip().splitlines():
        fact, families, why = line.split(None, 2)
        admits = frozenset(f for name in families.split(",") for f in (_FIVE if name == "5" else {name}))
        out[fact] = (admits, why)
    return out


# fact -> (families it admits, why); 4.9.1 dropped the separator after the last property and the
# 5.x encoder writes it again (the props-* facts)
EVIDENCE: dict[str, tuple[frozenset[str], str]] = _evidence(
    """
    v2-record                    5          a V2 record (magic 0xDAA320AB) is written by 5.1.0+
    crc32-property               5          the __CRC32# property is written by 5.2.0+
    abort-pid                    5          abort holds a process id (5.x writes it)
    abort-bak                    5          abort.bak exists (5.x writes abort through a temporary file)
    checkpoint-5x                5          checkpoint bytes 24-39 (masterFlushedOffset, confirmPhyOffset) are set by 5.x
    batchconsumequeue            5          batchconsumequeue/ exists (5.x batch consume queues)
    timer-store                  5          a timer store (timerwheel, timerlog/, config/timercheck) exists (5.x)
    compaction                   5          compaction/ exists (5.x compaction service)
    config-5x                    5          a 5.x config file exists (topicQueueMapping.json, messageRequestMode.json, timer files)
    topic-attributes             5          topics.json has topic attributes (5.x)
    lmq-queue                    4.9,5      a %LMQ% consume queue exists (4.9.3+)
    lmq-offsets                  4.9,5      config/lmqConsumerOffset.json exists (4.9.3+)
    ipv6-host                    4.4,4.9,5  a 16-byte IPv6 host (4.6.0+)
    props-no-trailing-separator  4.9        a property string without the trailing 0x02 (4.9.1-4.9.x)
    props-trailing-separator     4.4,5      a property string ending with 0x02 (before 4.9.1, or 5.x)
    blank-zero-tail              4.9,5      an end-of-file blank of 8 bytes with a zero tail (4.9.1+)
    blank-stale-tail             4.4        an end-of-file blank with stale bytes after its header (before 4.9.1)
    conf-mapped-keys             4.9,5      broker.conf uses mappedFileSize* (4.5.2+)
    conf-maped-keys              4.4        broker.conf uses mapedFileSize* (before 4.5.2)
    """
)
# broker.conf keys describe what the operator configured, not what wrote the store: weaker than the store
WEAK_EVIDENCE = frozenset({"conf-mapped-keys", "conf-maped-keys", "blank-zero-tail"})


def family_of(broker: str) -> str:
    """The family of version ``broker``; raises ValueError for a version rmqstore does not know."""
    v = version_tuple(broker) if re.fullmatch(r"\d+\.\d+(\.\d+)?(-[A-Za-z0-9.]+)?", broker) else ()
    if len(v) < 2 or not (4, 4) <= v[:2] <= (5, 9) or any(p > 99 for p in v):
        raise ValueError(
            f"unknown broker version {broker!r}: rmqstore follows 4.4 to 5.x "
            "(a family: 4.4, 4.9, 5.x; or a version: 4.4.0, 4.9.7, 5.3.3)"
        )
    if v < (4, 9, 1):
        return "4.4"
    if v < (5,):
        return "4.9"
    return "5.0-5.3.1" if v < (5, 3, 2) else "5.3.2+"


# --broker-version names a family as well as a version: each name stands for the family's
# representative (the judged engine); "5" is the 5.x family auto-detection picks, as no store fact
# tells 5.3.2+ apart (5.3.2 or later is given as a full version)
FAMILY_NAMES: dict[str, str] = {
    "4.4": "4.4", "4.4.x": "4.4",
    "4.9": "4.9", "4.9.x": "4.9",
    "5": "5.0-5.3.1", "5.x": "5.0-5.3.1", "5.0-5.3.1": "5.0-5.3.1", "5.3.2+": "5.3.2+",
}  # fmt: skip


def version_for(text: str) -> str:
    """The version whose rules ``--broker-version TEXT`` selects: a family name (``4.4``, ``4.9``,
    ``4.9.x``, ``5``, ``5.x``, ...) gives its representative, a full version itself; ValueError for
    anything else."""
    name = text.strip().lower()
    if name in FAMILY_NAMES:
        return REPRESENTATIVE[FAMILY_NAMES[name]]
    family_of(name)
    return name


def families_for(facts: list[str]) -> tuple[tuple[str, ...], bool]:
    """The families consistent with ``facts`` (oldest first) and whether the store's facts contradict
    each other. Weak facts (broker.conf keys first, then the blank's tail) narrow the choice only where
    they agree with what is left."""
    strong = set(FAMILIES)
    for f in facts:
        if f not in WEAK_EVIDENCE:
            strong &= EVIDENCE[f][0]
    conflict = not strong
    narrowed = set(FAMILIES) if conflict else strong
    for f in sorted((f for f in facts if f in WEAK_EVIDENCE), key=lambda f: not f.startswith("conf-")):
        if narrowed & EVIDENCE[f][0]:
            narrowed &= EVIDENCE[f][0]
    return tuple(f for f in FAMILIES if f in narrowed), conflict


def differing_rules(a: str, b: str) -> list[str]:
    """Names of the decisions on which versions ``a`` and ``b`` differ."""
    ra, rb = rules_for(a), rules_for(b)
    return [n for n in BrokerRules.__dataclass_fields__ if n != "broker" and getattr(ra, n) != getattr(rb, n)]


# The decisions each modifying operation depends on (recover compares whole plans instead).
OPERATION_RULES: dict[str, frozenset[str]] = {
    "write": frozenset(
        {
            "v2_magic", "ipv6_hosts", "cluster_property", "drops_wait_property", "properties_capacity",
            "body_limit_only", "record_slack", "props_trailing_separator", "prop_crc", "multi_dispatch",
            "lmq_reserves_crc_bytes", "cq_max_includes_size", "index_counts_new_slots_only", "five",
            "config_write_via_tmp",
        }
    ),
    "redispatch": frozenset(
        {"new_properties_parser", "cq_max_includes_size", "index_counts_new_slots_only", "multi_dispatch", "v2_magic"}
    ),
    "expire": frozenset(
        {
            "expire_ratio_rounds_up", "expire_forced_level_triggers", "expire_levels_in_config",
            "expire_batch_max_in_config", "empty_queue_min_is_max", "cq_max_includes_size",
            "dledger_check_ratio_from_broker", "dledger_ratio_rounds_up",
        }
    ),
}  # fmt: skip
