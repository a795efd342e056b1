"""Every decision that depends on the broker version, in one place (store-format.md §8.6 and the notes
of each section). Code elsewhere asks ``rules_for(broker).<decision>``; no other module compares versions.
"""

from __future__ import annotations

import functools
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
    # config files and expiry (§10, §11)
    five: bool  # 5.x config file names, topic rules, system topics
    config_write_via_tmp: bool  # before 5.1: config written to NAME.tmp, then renamed
    expire_ratio_rounds_up: bool  # 5.x: used/(used+usable) rounded up to a whole percent, like df
    expire_forced_level_triggers: bool  # 5.x: crossing the forced/warning level alone triggers deletion
    expire_levels_in_config: bool  # 5.x: diskSpace*Ratio are broker.conf keys
    expire_batch_max_in_config: bool  # 5.x: deleteFileBatchMax key; 4.x hard-codes 10


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
        five=five,
        config_write_via_tmp=v < (5, 1),
        expire_ratio_rounds_up=five,
        expire_forced_level_triggers=five,
        expire_levels_in_config=five,
        expire_batch_max_in_config=five,
    )
