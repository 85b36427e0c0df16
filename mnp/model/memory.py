"""The dynamic context memory, DCM (eqs. 2–3).

Per modality m the memory C^m_X holds N_K = N^m // K rows of raw input features for each class k,
stored as a (K, N_K, d^m) buffer (an ``nn.Parameter`` when ``trainable``), so checkpoints restore
it. Row block k always carries label k: the memory is class-balanced by construction.

Initialisation (``init``): ``data`` draws N_K random training samples per class (the same samples
for every modality); a class with fewer than N_K training samples is sampled with replacement and a
warning is logged. ``uniform`` fills U(−1, 1) (official code).

Update rules (``update``), applied after every optimiser step with the batch's data:

* ``mse`` / ``ce`` (eqs. 2–3): the row i* of class k with the least attention averaged over the
  batch's targets is replaced by the target j* with the highest unimodal error. ``jstar``:
  ``all`` (paper) takes the single highest-error target of the batch and writes it into the block
  of its own class, so the memory stays correctly labelled (eq. 2 read literally would copy it into
  every class present, under the wrong label); ``same_class`` (official) takes, for each class k in
  the batch, the highest-error target of class k.
* ``fifo``: per-class first-in-first-out queue; the batch's targets of class k overwrite the oldest
  rows of block k (at most N_K of them, the newest win).
* ``random``: the context is re-sampled from the training set (N_K per class) at every call of
  :meth:`ContextMemory.context`; the stored rows are used only while no training set is attached.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mnp.checks import choice

log = logging.getLogger(__name__)

INITS = ("data", "uniform")
UPDATES = ("mse", "ce", "fifo", "random")
JSTARS = ("all", "same_class")


def sample_per_class(y: Tensor, num_classes: int, n: int) -> tuple[Tensor, list[int]]:
    """Indices (K, n) of n random samples per class, without replacement where the class has ≥ n.

    Returns the indices and the classes that had to be sampled with replacement. Vectorised: sort
    by (class, random key), then read n consecutive positions per class.
    """
    y = y.long()
    counts = class_counts(y, num_classes)
    idx = draw_per_class(y, counts, n)
    return idx, (counts < n).nonzero().flatten().tolist()


def class_counts(y: Tensor, num_classes: int) -> Tensor:
    """Samples per class (K,); fails when a class has none (reads the device)."""
    counts = torch.bincount(y.long(), minlength=num_classes)[:num_classes]
    empty = (counts == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"the context memory needs training samples of every class; classes {empty} have none")
    return counts


def draw_per_class(y: Tensor, counts: Tensor, n: int) -> Tensor:
    """The draw of :func:`sample_per_class` given the class counts: static shapes, no host sync."""
    num_classes = counts.shape[0]
    order = torch.argsort(y.double() + torch.rand(y.shape, dtype=torch.float64, device=y.device))
    starts = counts.cumsum(0) - counts
    short = counts < n
    offsets = torch.arange(n, device=y.device).expand(num_classes, n)
    drawn = (torch.rand((num_classes, n), device=y.device) * counts[:, None]).long().clamp_max(counts[:, None] - 1)
    offsets = torch.where(short[:, None], drawn, offsets)
    return order[starts[:, None] + offsets]


class ContextMemory(nn.Module):
    """Class-balanced context memory of raw features for every modality (see the module docstring)."""

    def __init__(
        self,
        view_dims: Sequence[int],
        num_classes: int,
        size: int,
        init: str = "data",
        trainable: bool = False,
        update: str = "mse",
        jstar: str = "all",
    ):
        super().__init__()
        self.num_classes, self.num_views = int(num_classes), len(view_dims)
        self.per_class = int(size) // self.num_classes
        if self.per_class < 1:
            raise ValueError(
                f"memory.size {size} is smaller than the number of classes {num_classes}; "
                "it is the total N^m over all classes"
            )
        self.init = choice("memory.init", init, INITS)
        self.update_rule = choice("memory.update", update, UPDATES)
        self.jstar = choice("memory.jstar", jstar, JSTARS)
        if trainable and update == "random":
            raise ValueError(
                "memory.trainable cannot be combined with memory.update=random (the context is re-sampled)"
            )
        for m, d in enumerate(view_dims):
            rows = torch.zeros(self.num_classes, self.per_class, int(d))
            if trainable:
                self.register_parameter(f"x{m}", nn.Parameter(rows))
            else:
                self.register_buffer(f"x{m}", rows)
        self.register_buffer("initialised", torch.tensor(False))
        self._seen_initialised = False  # host-side copy once true: no device sync per call of needs_data
        self.register_buffer("fifo_ptr", torch.zeros(self.num_classes, dtype=torch.long))
        self.register_buffer(
            "labels", torch.arange(self.num_classes).repeat_interleave(self.per_class), persistent=False
        )
        self.register_buffer(
            "labels_onehot", torch.nn.functional.one_hot(self.labels, self.num_classes).float(), persistent=False
        )  # (N, K): the context's one-hot labels, made once
        self._source: tuple[list[Tensor], Tensor] | None = None
        self._source_counts: Tensor | None = None  # samples per class of _source, counted once
        if init == "uniform":
            with torch.no_grad():
                for m in range(self.num_views):
                    self.rows(m).uniform_(-1.0, 1.0)
            self.initialised.fill_(True)

    # ------------------------------------------------------------------ access
    def rows(self, m: int) -> Tensor:
        """C^m_X as (K, N_K, d^m)."""
        return getattr(self, f"x{m}")

    @property
    def size(self) -> int:
        return self.num_classes * self.per_class

    def needs_data(self) -> bool:
        """True when the memory still waits for training data (``init=data``, not yet initialised)."""
        if self.init != "data" or self._seen_initialised:
            return False
        self._seen_initialised = bool(self.initialised)
        return not self._seen_initialised

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._seen_initialised = False  # read the loaded flag again

    def context(self) -> tuple[list[Tensor], Tensor]:
        """Context features per modality (N, d^m) and their labels (N,), rows ordered by class."""
        if self.update_rule == "random" and self._source is not None:
            views, y = self._source
            if self._source_counts is None:
                self._source_counts = class_counts(y, self.num_classes)
            idx = draw_per_class(y, self._source_counts, self.per_class).flatten()
            return [v[idx].to(self.labels.device) for v in views], self.labels
        return [self.rows(m).reshape(self.size, -1) for m in range(self.num_views)], self.labels

    # ------------------------------------------------------------------ initialisation
    def attach(self, views: Sequence[Tensor], y: Tensor) -> None:
        """Keep a reference to the training set (for ``update=random``); not saved in checkpoints."""
        self._source = ([torch.as_tensor(v, dtype=torch.float32) for v in views], torch.as_tensor(y).long())
        self._source_counts = None

    @torch.no_grad()
    def init_from_data(self, views: Sequence[Tensor], y: Tensor) -> None:
        """Fill every class block with N_K random training samples of that class (eq. 2's C^m_{X,k})."""
        y = torch.as_tensor(y).long()
        if len(views) != self.num_views:
            raise ValueError(f"init_memory got {len(views)} views, the model has {self.num_views}")
        idx, short = sample_per_class(y, self.num_classes, self.per_class)
        if short:
            log.warning(
                "context memory: classes %s have fewer than N_K=%d training samples; sampled with replacement",
                short,
                self.per_class,
            )
        for m, v in enumerate(views):
            v = torch.as_tensor(v, dtype=torch.float32)
            self.rows(m).copy_(v[idx.to(v.device)].to(self.rows(m).device))
        self.fifo_ptr.zero_()
        self.initialised.fill_(True)

    # ------------------------------------------------------------------ update (eqs. 2–3)
    @torch.no_grad()
    def update(
        self, views: Sequence[Tensor], y: Tensor, attn_sum: Tensor | None = None, err: Tensor | None = None
    ) -> None:
        """Apply the update rule with one batch: raw views (B, d^m), labels (B,), the attention summed
        over the batch's targets (M, N) and the unimodal errors (M, B)."""
        if self.update_rule == "fifo":
            self._push_fifo(views, y)
        elif self.update_rule in ("mse", "ce"):
            self._replace_least_attended(views, y, attn_sum, err)

    def _replace_least_attended(self, views, y, attn_sum, err) -> None:
        """Static shapes, no host sync: ``same_class`` writes a row of every class, the old value where the
        class is absent from the batch."""
        i_star = attn_sum.reshape(self.num_views, self.num_classes, self.per_class).argmin(-1)  # (M, K)
        if self.jstar == "same_class":
            k_all = torch.arange(self.num_classes, device=y.device)
            in_class = y[None, :] == k_all[:, None]  # (K, B)
            j_star = err[:, None, :].masked_fill(~in_class, float("-inf")).argmax(-1)  # (M, K)
            present = in_class.any(1)[:, None]  # (K, 1) classes present in the batch
            for m, v in enumerate(views):
                rows = self.rows(m)
                rows[k_all, i_star[m]] = torch.where(present, v[j_star[m]].to(rows.dtype), rows[k_all, i_star[m]])
        else:
            j_star = err.argmax(-1)  # (M,)
            k = y[j_star]  # (M,) class of each modality's chosen target
            row = k * self.per_class + i_star.gather(1, k[:, None]).squeeze(1)  # (M,) the row each modality replaces
            for m, (v, r, j) in enumerate(zip(views, row.view(-1, 1).unbind(0), j_star.view(-1, 1).unbind(0))):
                rows = self.rows(m).view(self.size, -1)
                rows.index_copy_(0, r, v.index_select(0, j).to(rows.dtype))

    def _push_fifo(self, views, y) -> None:
        """Static shapes, no host sync: every row learns which target (if any) lands in it, and keeps its
        value where none does."""
        n = self.per_class
        onehot = (y[:, None] == torch.arange(self.num_classes, device=y.device)).long()
        rank = (onehot.cumsum(0) - 1).gather(1, y[:, None]).squeeze(1)  # position of each target in its class
        count = onehot.sum(0)
        keep = rank >= count[y] - n  # only the newest N_K per class survive, each in its own slot
        slot = (self.fifo_ptr[y] + rank) % n
        target = torch.arange(y.shape[0], device=y.device)
        writer = torch.full((self.size,), -1, dtype=torch.long, device=y.device).scatter_reduce(
            0, y * n + slot, torch.where(keep, target, -1), "amax"
        )  # (N,) the target written into each row, or -1
        written = (writer >= 0)[:, None]
        for m, v in enumerate(views):
            rows = self.rows(m).view(self.size, -1)
            rows.copy_(torch.where(written, v[writer.clamp_min(0)].to(rows.dtype), rows))
        self.fifo_ptr.copy_((self.fifo_ptr + count) % n)


def gather_candidates(
    all_gather, world_size: int, views: list[Tensor], y: Tensor, attn_sum: Tensor, err: Tensor | None
):
    """Every rank's DCM update candidates (identity on one process), so all ranks apply the same update;
    ``all_gather``: the LightningModule's.

    Batches may differ in size across ranks: they are padded to the largest, gathered, and the
    padding (label −1) is dropped. Attention sums are added over ranks.
    """
    if world_size == 1:
        return views, y, attn_sum, err
    n = y.shape[0]
    pad = int(all_gather(torch.tensor(n, device=y.device)).max()) - n
    views = [v.flatten(0, 1) for v in all_gather([F.pad(v, (0, 0, 0, pad)) for v in views])]
    y = all_gather(F.pad(y, (0, pad), value=-1)).flatten()
    keep = y >= 0
    if err is not None:
        err = all_gather(F.pad(err, (0, pad))).permute(1, 0, 2).flatten(1)[:, keep]
    return [v[keep] for v in views], y[keep], all_gather(attn_sum).sum(0), err
