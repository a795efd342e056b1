"""Records a window at a time, entries through cursors: check in bounded memory (store-format.md §4, §5).

The commit log walk gives check its records in windows (columns of at most ``WINDOW`` records, in
commit log order). A window answers for the entries whose commit log offset lies in ``[lo, hi)``:
the windows of one walk cover every offset once, so each consume queue unit and index entry is
matched with the records exactly once, whatever the size of the store.

Consume queue units and index entries are written in commit log order, so their files are read
through :class:`Cursors`: blocks of entries, each with the lowest and highest offset it still has
to match; a block in order is read from where the last window left it, a block out of order
(a damaged file) is read whole in each window its offsets reach. Memory is one window, one block
being read and a few numbers per block: never the store's records or entries at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

OFFSET_MIN = -(1 << 63)
OFFSET_MAX = (1 << 63) - 1
READ_UNITS = 1 << 16  # entries read at a time from a block in order


@dataclass
class Window:
    """The records of one stretch of the commit log: check's columns (``phy`` ascending), the
    index key pairs ``record number << 32 | keyHash`` of those records (sorted, unique), and the
    offsets ``[lo, hi)`` whose entries this window matches."""

    first: int  # record number of the window's first record
    phy: np.ndarray
    cols: dict[str, np.ndarray]
    keys: np.ndarray
    lo: int
    hi: int
    last: bool  # no record after it: entries past the data are this window's

    @property
    def count(self) -> int:
        return int(self.phy.size)

    def lookup(self, phys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Window row of each offset and whether a record starts exactly there."""
        n = self.count
        idx = np.searchsorted(self.phy, phys)
        safe = np.minimum(idx, max(n - 1, 0))
        hit = (idx < n) & (self.phy[safe] == phys) if n else np.zeros(len(phys), bool)
        return safe, hit


@dataclass
class Block:
    """Entries ``start``..``stop`` of one file (``part``) of one queue or index file (``owner``)."""

    owner: int
    part: int
    start: int
    stop: int
    in_order: bool  # the entries to match are in commit log order


# a block's entries start..stop to match, as (entry numbers within the block's file, offsets, rows)
Reader = Callable[[Block, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


@dataclass
class Cursors:
    """Blocks of entries and, per block, the lowest offset still to match and the highest one."""

    blocks: list[Block] = field(default_factory=list)
    _low: list[int] = field(default_factory=list)
    _high: list[int] = field(default_factory=list)
    low: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    high: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    at: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # where a block in order resumes

    def add(self, block: Block, phys: np.ndarray) -> None:
        """A block whose entries to match have offsets ``phys`` (in entry order)."""
        if not phys.size:
            return
        block.in_order = bool(phys.size < 2 or (np.diff(phys) >= 0).all())
        self.blocks.append(block)
        self._low.append(int(phys.min()))
        self._high.append(int(phys.max()))

    def freeze(self) -> None:
        self.low = np.asarray(self._low, dtype=np.int64)
        self.high = np.asarray(self._high, dtype=np.int64)
        self.at = np.asarray([b.start for b in self.blocks], dtype=np.int64)
        self._low, self._high = [], []

    def pieces(self, lo: int, hi: int, read: Reader) -> Iterator[tuple[Block, np.ndarray, np.ndarray, np.ndarray]]:
        """The entries of every block with an offset in ``[lo, hi)``, a piece at a time."""
        for b in np.flatnonzero((self.low < hi) & (self.high >= lo)).tolist():
            block = self.blocks[b]
            if block.in_order:
                yield from self._ordered(b, block, hi, read)
                continue
            num, phy, rows = read(block, block.start, block.stop)
            keep = (phy >= lo) & (phy < hi)
            if keep.any():
                yield block, num[keep], phy[keep], rows[keep]

    def _ordered(
        self, b: int, block: Block, hi: int, read: Reader
    ) -> Iterator[tuple[Block, np.ndarray, np.ndarray, np.ndarray]]:
        """A block in order, from where it stopped: its entries below ``hi``; then it waits there."""
        at = int(self.at[b])
        while at < block.stop:
            end = min(at + READ_UNITS, block.stop)
            num, phy, rows = read(block, at, end)
            cut = int(np.searchsorted(phy, hi))
            if cut:
                yield block, num[:cut], phy[:cut], rows[:cut]
            if cut < phy.size:
                at = int(num[cut])
                self.low[b] = phy[cut]
                break
            at = end
        self.at[b] = at
        if at >= block.stop:
            self.low[b] = OFFSET_MAX
            self.high[b] = OFFSET_MIN
