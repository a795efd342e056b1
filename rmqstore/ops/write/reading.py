"""NDJSON input parsed in a worker process while the plan is made.

The main process reads the input a chunk of whole lines at a time and hashes it in order (the
input's digest); a forked worker turns each chunk into messages (UTF-8 decode, JSON scan, the
batch's column checks) and the plan takes them in input order. Parsing is about as much work as
planning, so the two halves run on two cores. At most ``_IN_FLIGHT`` chunks are read ahead, so
memory stays bounded whatever the input's size. An input of one chunk is parsed in place (no worker).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future
from itertools import chain
from typing import Any, BinaryIO

from rmqstore.codec.messages import (
    Message,
    MessageBatch,
    ndjson_chunk_messages,
    ndjson_chunks,
    packed_messages,
    unpacked_messages,
)
from rmqstore.walk.workers import close_pool, worker_pool

_WORKERS = 2  # a chunk is parsed in about the time the plan takes for it: two keep the plan fed
_IN_FLIGHT = 2  # chunks read ahead of the plan (4 MiB each, and their parsed messages)


def read_blocks(
    stream: BinaryIO, digest: Any, *, source: str = "<stdin>"
) -> Generator[list[Message] | MessageBatch, None, None]:
    """:func:`rmqstore.codec.messages.read_ndjson_blocks`, the same blocks in the same order, each
    chunk parsed by a worker process while the caller plans the blocks before it. Errors (a bad
    line, bytes that are not UTF-8) are raised when their chunk's turn comes, as when read in place."""
    chunks = ndjson_chunks(stream, digest)
    first = next(chunks, None)
    if first is None:
        return
    second = next(chunks, None)
    if second is None:  # one chunk: no worker for it
        yield from _nonempty(ndjson_chunk_messages(first[1], first[0], source))
        return
    pool = worker_pool(_WORKERS, keep_heap=False)  # a killed write leaves no worker behind
    try:
        pending: deque[Future[bytes | list[Message]]] = deque()
        for line_no, data in chain((first, second), chunks):
            pending.append(pool.submit(_parsed, data, line_no, source))
            if len(pending) >= _IN_FLIGHT:
                yield from _nonempty(unpacked_messages(pending.popleft().result()))
        while pending:
            yield from _nonempty(unpacked_messages(pending.popleft().result()))
    finally:
        close_pool(pool)


def _parsed(data: bytes, line_no: int, source: str) -> bytes | list[Message]:
    """In a worker: the chunk's messages, packed for the way back."""
    return packed_messages(ndjson_chunk_messages(data, line_no, source))


def _nonempty(messages: list[Message] | MessageBatch) -> Iterator[list[Message] | MessageBatch]:
    if len(messages):
        yield messages
