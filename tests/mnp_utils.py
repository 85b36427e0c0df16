"""Small MNPs for tests, written with the constructor's flat names of before the parts (``d_e=8, memory_size=6``):
:func:`mnp.runs.migrations.nest_flat` (the same mapping that reads old checkpoints) turns them into the parts' nodes."""

from __future__ import annotations

from mnp.model import MNP
from mnp.runs.migrations import nest_flat


def flat_mnp(num_classes: int, view_dims, **flat) -> MNP:
    """``MNP(num_classes, view_dims, **parts)`` from flat settings (``optim`` a mapping, as before)."""
    return MNP(num_classes, view_dims, **nest_flat(flat))
