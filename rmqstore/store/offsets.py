"""Committed consumer offsets as the broker loads them: consumerOffset.json, or lmqConsumerOffset.json
when its offset manager is the LMQ one (store-format.md §11.4)."""

from __future__ import annotations

from rmqstore.rules import rules_for
from rmqstore.store import Store
from rmqstore.store import config as cfgjson

CONSUMER_OFFSET_FILE = "consumerOffset.json"
LMQ_OFFSET_FILE = "lmqConsumerOffset.json"


def lmq_offset_manager(st: Store) -> bool:
    """Whether the broker keeps its offsets in lmqConsumerOffset.json: with ``enableLmq`` (4.9.3+) its
    offset manager is ``LmqConsumerOffsetManager``, which persists every group there (consumerOffset.json
    is then neither read nor written) and an LMQ group's one offset per queue in ``lmqOffsetTable``."""
    return st.config.enable_lmq and rules_for(st.config.broker).multi_dispatch


def offsets_file(st: Store) -> str:
    """The name of the committed offsets file the broker of this store loads and persists."""
    return LMQ_OFFSET_FILE if lmq_offset_manager(st) else CONSUMER_OFFSET_FILE


def _offset_table(cf: cfgjson.ConfigFile, lmq: bool) -> dict[tuple[str, str], dict[int, int]]:
    path = cf.path if cf.source != "bak" else cf.path.with_name(cf.path.name + ".bak")
    table = cfgjson.load_consumer_offsets(cf.data, path=path)
    if lmq:
        table.update(cfgjson.load_lmq_offsets(cf.data, path=path))
    return table


def read_consumer_offsets(st: Store) -> tuple[cfgjson.ConfigFile, dict[tuple[str, str], dict[int, int]]]:
    """The committed offsets file as the broker loads it (:func:`offsets_file`), and its table
    ``{(topic, group): {queue: offset}}`` (an LMQ group's offset from lmqOffsetTable at queue 0)."""
    name = offsets_file(st)
    cf = cfgjson.read_config(st.config.config_dir, name)
    return cf, _offset_table(cf, name == LMQ_OFFSET_FILE)


def read_lmq_offsets(st: Store) -> dict[tuple[str, str], dict[int, int]]:
    """4.9.3+/5.x ``lmqConsumerOffset.json`` (``offsetTable`` as in consumerOffset.json, plus
    ``lmqOffsetTable``: ``topic@group`` -> one offset, shown at queue 0); empty when the file is absent."""
    d = st.config.config_dir
    if not (d / LMQ_OFFSET_FILE).exists() and not (d / f"{LMQ_OFFSET_FILE}.bak").exists():
        return {}
    return _offset_table(cfgjson.read_config(d, LMQ_OFFSET_FILE), True)
