"""Batching by index: a whole batch is sliced from in-memory tensors (no per-sample collation), in an order
that a seed and the epoch fix (the official code's streaming order is one switch, ``stream``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset


class IndexBatchDataset(Dataset):
    """A dataset indexed by a whole list of indices at once: returns a full batch."""

    def __init__(self, views: Sequence[Tensor], y: Tensor):
        self.views, self.y = list(views), y

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __getitem__(self, idx):
        idx = torch.as_tensor(idx, dtype=torch.long)
        return [v[idx] for v in self.views], self.y[idx]


class EpochBatchSampler:
    """Yields index batches; the shuffle depends only on (seed, epoch), so a resumed run sees the
    same batches as an uninterrupted one. Lightning calls ``set_epoch`` before every epoch. With
    ``world_size`` > 1 each rank takes every world_size-th index of the permutation, padded (like
    torch's DistributedSampler) by repeating its first indices to a multiple of world_size: every rank
    yields the same number of batches, so no rank waits forever in a collective (gradient all-reduce,
    the context-memory gather).

    ``stream`` (the official code's ``shuffle().repeat().batch()`` with ``N // batch_size`` steps per
    epoch): epoch e yields the full batches at positions [e·S·B, (e+1)·S·B) of one endless stream made
    of shuffled passes over the data, so no batch is short, a batch may straddle two passes, and the
    samples left over at an epoch's end open the next epoch. Still a function of (seed, epoch) only.
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
        stream: bool = False,
    ):
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
        self.drop_last, self.rank, self.world_size, self.epoch = drop_last, rank, world_size, 0
        self.stream = stream

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _permutation(self, epoch: int) -> Tensor:
        if not self.shuffle:
            return torch.arange(self.n)
        return torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed * 100_003 + epoch))

    def _indices(self) -> Tensor:
        idx = self._permutation(self.epoch)
        pad = -self.n % self.world_size
        if pad:
            idx = torch.cat([idx, idx.repeat(-(-pad // self.n))[:pad]])
        return idx[self.rank :: self.world_size]

    def _stream_batches(self):
        steps, b = max(self.n // self.batch_size, 1), self.batch_size
        start = self.epoch * steps * b
        first, last = start // self.n, (start + steps * b - 1) // self.n  # passes this epoch touches
        idx = torch.cat([self._permutation(p) for p in range(first, last + 1)])[start - first * self.n :][: steps * b]
        for i in range(steps):
            yield idx[i * b : (i + 1) * b][self.rank :: self.world_size]

    def __iter__(self):
        if self.stream:
            yield from self._stream_batches()
            return
        idx = self._indices()
        stop = len(idx) - len(idx) % self.batch_size if self.drop_last else len(idx)
        for i in range(0, stop, self.batch_size):
            yield idx[i : i + self.batch_size]

    def __len__(self) -> int:
        if self.stream:
            return max(self.n // self.batch_size, 1)
        m = -(-self.n // self.world_size)
        return m // self.batch_size if self.drop_last else -(-m // self.batch_size)


def index_loader(
    views: Sequence[Tensor],
    y: Tensor,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    drop_last: bool = False,
    rank: int = 0,
    world_size: int = 1,
    stream: bool = False,
) -> DataLoader:
    """A DataLoader yielding whole batches sliced by index (no per-sample collation)."""
    sampler = EpochBatchSampler(len(y), batch_size, shuffle, seed, drop_last, rank, world_size, stream)
    return DataLoader(IndexBatchDataset(views, y), sampler=sampler, batch_size=None)
