"""MNP's inference cache of the context encodings: on the fast path, computed once per parameter state."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class ContextEncodingCache:
    """The context encodings ``(contexts, r, s, u, q)`` of :meth:`mnp.model.MNP._encode`, kept while nothing they
    depend on changes: the ``encoders``' parameters and buffers and the ``memory``'s rows.

    At inference the context encodings depend only on the parameters and the memory, not on the targets: they
    are computed once per parameter state. Nothing is cached unless the caller ``allows`` it (the model: on the
    fast path, at inference), with gradients on, or with memory update ``random`` (it re-samples the context at
    every call).
    """

    def __init__(self, encoders: nn.Module, memory: nn.Module):
        self.encoders, self.memory = encoders, memory
        self.entry: tuple | None = None  # (key, contexts, r, s, u, q)

    def usable(self, allowed: bool) -> bool:
        return allowed and not torch.is_grad_enabled() and self.memory.update_rule != "random"

    def key(self, x: Tensor) -> tuple:
        """Identity and version of every tensor the context encodings depend on, plus dtype and autocast.

        In-place changes bump a tensor's version, except writes through ``.data`` and fused optimiser
        kernels: MNP's own optimisers clear the cache after every step, ``train()`` clears it, and
        code writing parameters through ``.data`` must call :meth:`clear` (``model.clear_context_cache()``).
        """
        dev = x.device.type
        state = [
            *self.encoders.parameters(),
            *self.encoders.buffers(),
            *(self.memory.rows(m) for m in range(self.memory.num_views)),
        ]
        return (
            x.device,
            x.dtype,
            torch.is_autocast_enabled(dev),
            torch.get_autocast_dtype(dev),
            tuple((t.data_ptr(), t._version) for t in state),
        )

    def get(self, x: Tensor, allowed: bool):
        """The cached (contexts, r, s, u, q) for targets like ``x``, or None."""
        if self.entry is None or not self.usable(allowed):
            return None
        key, *context = self.entry
        return context if key == self.key(x) else None

    def put(self, x: Tensor, context: tuple, allowed: bool) -> None:
        """Cache (contexts, r, s, u, q) computed for targets like ``x``, where caching is allowed."""
        if self.usable(allowed):
            contexts = context[0]
            detached = contexts.detach() if isinstance(contexts, Tensor) else [c.detach() for c in contexts]
            self.entry = (self.key(x), detached, *context[1:])

    def clear(self) -> None:
        self.entry = None

    def __getstate__(self):
        return {**self.__dict__, "entry": None}
