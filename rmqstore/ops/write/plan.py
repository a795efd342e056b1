"""Planning a write: every message validated, encoded and laid out after the end of the commit log
(reads only). Plain runs go through the run lane, every other message through the reference lane."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from itertools import groupby
from typing import Any

from rmqstore.codec.messages import BATCH_FIELDS, Message, MessageBatch, optional_columns, producer_columns
from rmqstore.codec.messages import paused_gc as _paused_gc
from rmqstore.ops.write.append import Planner, WriteOptions, WritePlan
from rmqstore.ops.write.encode_one import put_one
from rmqstore.ops.write.encode_run import PLAIN_DEFAULTS, PLAIN_FIELDS, Block, RunLane
from rmqstore.store import Store

_FAST_BLOCK = 32768  # messages classified at a time
_FAST_MIN_RUN = 8  # shorter runs of plain messages go one by one
_PLAIN_GETTERS = [(operator.attrgetter(f), d) for f, d in zip(PLAIN_FIELDS, PLAIN_DEFAULTS, strict=True)]
_PLAIN_VALUES = operator.attrgetter(*PLAIN_FIELDS)


def plan_write(st: Store, messages: Sequence[Message] | MessageBatch, **options: Any) -> WritePlan:
    """Validate and encode ``messages`` and lay them out after the end of the commit log (reads only).

    ``options``: the fields of :class:`WriteOptions` (clock, dispatch, store_host, born_host,
    allow_system_topic, max_topic_length, uniq_keys, topic_queue_nums).

    Raises:
        InputError: a message the broker would refuse (names its origin), or a bad option.
        UnsafePlan: the store has data the write would have to destroy, or an interrupted write.
        UnsupportedStore, CorruptData, ConfigError: the store or its topics.json cannot be used.
    """
    return plan_with(st, messages, WriteOptions(**options))


def plan_with(st: Store, messages: Sequence[Message] | MessageBatch, opts: WriteOptions) -> WritePlan:
    """:func:`plan_write` with its options as one value."""
    return _paused_gc(_plan, st, messages, opts)


def plan_blocks(st: Store, blocks: Iterable[Sequence[Message] | MessageBatch], opts: WriteOptions) -> WritePlan:
    """:func:`plan_with` of messages given a block at a time (read as the plan goes: only the
    encoded records are kept, never the whole input)."""
    return _paused_gc(_plan_blocks, st, blocks, opts)


def _plan(st: Store, messages: Sequence[Message] | MessageBatch, opts: WriteOptions) -> WritePlan:
    return _plan_blocks(st, [messages], opts)


def _plan_blocks(st: Store, blocks: Iterable[Sequence[Message] | MessageBatch], opts: WriteOptions) -> WritePlan:
    p = Planner(st, opts)
    lane = RunLane(p)
    for messages in blocks:
        _plan_block(p, lane, messages)
    return p.finish()


def _plan_block(p: Planner, lane: RunLane, messages: Sequence[Message] | MessageBatch) -> None:
    batch = messages if isinstance(messages, MessageBatch) else None
    for s0 in range(0, len(messages), _FAST_BLOCK):
        s1 = min(len(messages), s0 + _FAST_BLOCK)
        if batch is not None:
            blk = _batch_block(batch, s0, s1)
            codes = lane.codes(blk) if lane.usable else [-1] * (s1 - s0)
        elif lane.usable:
            codes, blk = _message_block(lane, messages[s0:s1])  # type: ignore[arg-type]
        else:
            for m in messages[s0:s1]:
                put_one(p, m)  # type: ignore[arg-type]
            p.out.settle()
            p.cols.settle()
            continue
        i = 0
        for code, group in groupby(codes):
            k = len(list(group))
            if code < 0 or k < _FAST_MIN_RUN:
                for j in range(i, i + k):
                    put_one(p, blk.message(j))
            else:
                lane.put_run(blk, i, i + k, code)
            i += k
        p.out.settle()
        p.cols.settle()


def _batch_block(batch: MessageBatch, s0: int, s1: int) -> Block:
    origin = None if batch.origin is None else batch.origin[s0:s1]
    cut = slice(s0, s1)
    optional = [None if (c := getattr(batch, name)) is None else c[cut] for name in BATCH_FIELDS[6:]]
    return Block(
        batch.topic[cut],
        batch.body[cut],
        batch.queue_id[cut],
        batch.tags[cut],
        batch.keys[cut],
        origin,
        batch,
        s0,
        optional,
    )


def _message_block(lane: RunLane, block: Sequence[Message]) -> tuple[list[int], Block]:
    """Per message: -1 for the reference lane, else its run code; and the block's columns."""
    k = len(block)
    blk = Block(*producer_columns(block), block, 0, optional_columns(block))
    codes = lane.codes(blk)
    for get, default in _PLAIN_GETTERS:  # a field at a time: cheaper than a tuple per message
        values = list(map(get, block))
        if values.count(default) != k:
            return [
                c if f == PLAIN_DEFAULTS else -1 for c, f in zip(codes, map(_PLAIN_VALUES, block), strict=True)
            ], blk
    return codes, blk
