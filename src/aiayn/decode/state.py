"""The decoding state: what incremental decoding (§3.2.3) carries from one step to the next, and who owns it.

    state = step_model.start(src)                 # encoder keys/values once, empty self-attention caches
    log_probs, state = step_model.step(tokens, state)   # the caches grow by one position
    state = state.index_select(rows, sentences)   # beams reordered, finished sentences dropped

Ownership. A `DecoderState` owns its caches' buffers until it is passed on: `step` writes the new
position into them and returns a new state that owns them from then on; `index_select` reorders the
kept rows (through the `RowTable` where the state has one, else by copying them into a spare buffer)
and returns a new state holding those. Either way the state passed in is used up, and touching it
again raises `UsedState` instead of reading buffers that now belong to another state. The encoder
keys/values (`memory_kv`) are never written after `start`, so states may share them.

Dimension legend: B sentences, K hypotheses per sentence, N = B x K rows, h heads, S source length,
t positions decoded so far.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..model import KeyValue


class UsedState(RuntimeError):
    """A decoding state was used again after `step` or `index_select` handed its buffers on."""


class RowTable:
    """Which buffer row holds each hypothesis's keys and values at each position, for every layer at once.

    rows[j, n] is the row of the buffers where hypothesis n's position j was written. A new position is
    written at row n (rows[t, n] = n); reordering hypotheses gathers the first t positions of the table
    (t x N integers) instead of copying t x N x h x d floats per buffer, and an attention kernel that reads
    through it (aiayn.cpu's) finds each hypothesis's rows. The live hypotheses are the first N of the R columns.
    """

    def __init__(self, capacity: int, R: int, device: torch.device):
        self.rows = torch.arange(R, device=device).repeat(capacity, 1)  # (capacity, R), every row in place

    @property
    def width(self) -> int:
        """R, the buffers' rows: at most this many hypotheses."""
        return self.rows.size(1)

    def grow(self, capacity: int) -> None:
        """Room for capacity positions (new positions' rows in place)."""
        if capacity > self.rows.size(0):
            more = torch.arange(self.width, device=self.rows.device).repeat(capacity - self.rows.size(0), 1)
            self.rows = torch.cat([self.rows, more])

    def reorder(self, t: int, rows: Tensor) -> None:
        """Hypothesis n' is now old hypothesis rows[n'] (N' <= R), in its first t positions."""
        self.rows[:t, : len(rows)] = self.rows[:t].index_select(1, rows)


class KVBuffer:
    """One decoder layer's self-attention keys and values of the positions so far, written in place.

    The buffers are time-major, (capacity, R, h, d), so positions 0..t-1 form one contiguous block:
    appending writes one slab, and with no `table` reordering hypotheses copies only the filled block.
    With a table (`RowTable`, which a step model with such a kernel asks for), reordering copies nothing, and
    the kernel reads each hypothesis's rows through it. The capacity doubles when full (a GPU commits
    all it allocates; on a CPU, pages past t are never touched).
    """

    def __init__(self, k: Tensor, v: Tensor, length: int = 0, table: RowTable | None = None, rows: int | None = None):
        self.k, self.v, self.length = k, v, length  # (capacity, R, h, d_k), (capacity, R, h, d_v)
        self.table = table
        self.rows = k.size(1) if rows is None else rows  # N, the live hypotheses: the first N rows (with a table)

    @classmethod
    def empty(
        cls, rows: int, heads: int, d_k: int, d_v: int, capacity: int, like: Tensor, table: RowTable | None = None
    ) -> KVBuffer:
        """A buffer for rows hypotheses, in like's dtype and device."""
        return cls(like.new_empty(capacity, rows, heads, d_k), like.new_empty(capacity, rows, heads, d_v), table=table)

    def write(self, new: KeyValue) -> None:
        """Write new (N, h, T, d) after the cached positions, in rows 0..N-1 (N: the live hypotheses)."""
        if new.k.size(0) != self.rows:
            raise ValueError(f"{new.k.size(0)} rows given to a decoding state of {self.rows} hypotheses")
        start, end = self.length, self.length + new.k.size(2)
        if end > self.k.size(0):  # grow by doubling
            capacity = max(end, 2 * self.k.size(0))
            for name in ("k", "v"):
                old = getattr(self, name)
                grown = old.new_empty((capacity, *old.shape[1:]))
                grown[:start] = old[:start]
                setattr(self, name, grown)
            if self.table is not None:
                self.table.grow(capacity)
        N = new.k.size(0)
        self.k[start:end, :N] = new.k.permute(2, 0, 1, 3)
        self.v[start:end, :N] = new.v.permute(2, 0, 1, 3)
        self.length, self.rows = end, N

    def append(self, new: KeyValue) -> KeyValue:
        """Write new (N, h, T, d) after the cached positions; return all of them, (N, h, t, d): views, or
        with a table, the rows gathered through it (a copy; a kernel reading through the table needs none)."""
        self.write(new)
        t, N = self.length, self.rows
        if self.table is None:
            return KeyValue(self.k[:t].permute(1, 2, 0, 3), self.v[:t].permute(1, 2, 0, 3))
        k, v = self.gather(self.table.rows[:t, :N])
        return KeyValue(k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3))

    def gather(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        """The keys and values at positions 0..t-1 of buffer rows rows (t, N'): (t, N', h, d) copies."""
        positions = torch.arange(rows.size(0), device=self.k.device)[:, None]  # (t, 1)
        return self.k[positions, rows], self.v[positions, rows]


@dataclass
class DecoderState:
    """The decoder's state after t steps; rows are hypotheses, rows b*K .. b*K+K-1 those of sentence b.

    All K hypotheses of a sentence read that sentence's one copy of the encoder keys/values.
    """

    src_mask: Tensor  # (B, 1, 1, S), True = may attend
    memory_kv: list[KeyValue]  # per decoder layer, encoder keys/values (B, h, S, d), written once by start
    caches: list[KVBuffer]  # per decoder layer, t positions of (N, h, d); owned by this state
    spare: Tensor | None = None  # a free buffer shaped like a cache's, which index_select copies into
    used: bool = False  # set once step or index_select has handed the buffers on

    @property
    def length(self) -> int:
        """Target positions decoded so far."""
        return self.caches[0].length

    @property
    def rows(self) -> int:
        """Hypotheses (N = B x K)."""
        return self.caches[0].rows

    def take(self) -> DecoderState:
        """This state's contents for the next one; this state is used up (a second take raises)."""
        if self.used:
            raise UsedState("this decoding state was used up by step() or index_select(); use the state they returned")
        self.used = True
        return DecoderState(self.src_mask, self.memory_kv, self.caches, self.spare)

    def index_select(self, rows: Tensor, sentences: Tensor | None = None) -> DecoderState:
        """Keep or reorder rows (reorder beams, drop finished sentences); this state is used up.

        rows (N',) are the hypotheses kept, in their new order; sentences (B',) the sentences kept,
        in order (None: every sentence stays), which the encoder side follows. With a row table, the
        table is reordered and no cache is copied (unless N' is more than the buffers' rows, as at a
        beam search's first step: then they are copied once into buffers of N' rows). Without, each
        cache is copied once, into the spare buffer, whose place the old buffer then takes.
        """
        state = self.take()
        memory_kv, src_mask = state.memory_kv, state.src_mask
        if sentences is not None:
            memory_kv = [kv.index_select(sentences) for kv in memory_kv]
            src_mask = src_mask.index_select(0, sentences)
        t, table = state.length, state.caches[0].table
        if table is not None and len(rows) <= table.width:
            table.reorder(t, rows)
            return DecoderState(src_mask, memory_kv, [KVBuffer(c.k, c.v, t, table, len(rows)) for c in state.caches])
        if table is not None:  # more hypotheses than rows: each buffer copied once, through the table, into a wider one
            picked = table.rows[:t].index_select(1, rows)  # (t, N')
            table = RowTable(state.caches[0].k.size(0), len(rows), rows.device)
            caches = []
            for cache in state.caches:
                k, v = (b.new_empty(b.size(0), len(rows), *b.shape[2:]) for b in (cache.k, cache.v))
                k[:t], v[:t] = cache.gather(picked)
                caches.append(KVBuffer(k, v, t, table))
            return DecoderState(src_mask, memory_kv, caches)
        spare, buffers = state.spare, []
        # Row j of position p sits at p * N + j of a (t * N, h * d) view: one row-wise select per
        # buffer instead of an index_select along dim 1 of (t, N, h, d) (docs/studies/translation-speed.md).
        flat = (torch.arange(t, device=rows.device)[:, None] * state.rows + rows).view(-1)  # (t * N',)
        for buffer in (b for cache in state.caches for b in (cache.k, cache.v)):
            shape = (buffer.size(0), len(rows), *buffer.shape[2:])
            if spare is None or spare.shape != shape:
                spare = buffer.new_empty(shape)
            torch.index_select(buffer[:t].flatten(0, 1).flatten(1), 0, flat, out=spare[:t].flatten(0, 1).flatten(1))
            buffers.append(spare)
            spare = buffer if buffer.shape == shape else None
        caches = [KVBuffer(k, v, t) for k, v in zip(buffers[::2], buffers[1::2])]
        return DecoderState(src_mask, memory_kv, caches, spare)
