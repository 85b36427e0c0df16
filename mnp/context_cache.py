"""MNP's inference cache of the context encodings: on the fast path, computed once per parameter state."""

from __future__ import annotations

import torch
from torch import Tensor


class ContextCache:
    """Keeps the context encodings of :meth:`mnp.model.MNP._encode` in ``_ctx_cache`` while nothing they
    depend on changes; a mixin placed before Routine, using the model's ``spec``, ``encoders`` and
    ``memory``.

    At inference the context encodings depend only on the parameters and the memory, not on the
    targets: they are computed once per parameter state (not for memory_update=random, which re-samples).
    """

    def _context_cacheable(self) -> bool:
        return (
            self.spec.fast and not self.training and not torch.is_grad_enabled() and self.memory.update_rule != "random"
        )

    def _context_key(self, x: Tensor) -> tuple:
        """Identity and version of every tensor the context encodings depend on, plus dtype and autocast.

        In-place changes bump a tensor's version, except writes through ``.data`` and fused optimiser
        kernels: MNP's own optimisers clear the cache after every step, ``train()`` clears it, and
        code writing parameters through ``.data`` must call :meth:`clear_context_cache`.
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

    def _cached_context(self, x: Tensor):
        """The cached (contexts, r, s, u, q) for targets like ``x``, or None."""
        if self._ctx_cache is None or not self._context_cacheable():
            return None
        key, *context = self._ctx_cache
        return context if key == self._context_key(x) else None

    def _store_context(self, x: Tensor, context: tuple) -> None:
        """Cache (contexts, r, s, u, q) computed for targets like ``x``, where caching is allowed."""
        if self._context_cacheable():
            contexts = context[0]
            detached = contexts.detach() if isinstance(contexts, Tensor) else [c.detach() for c in contexts]
            self._ctx_cache = (self._context_key(x), detached, *context[1:])

    def clear_context_cache(self) -> None:
        self._ctx_cache = None

    def train(self, mode: bool = True):
        if mode:
            self._ctx_cache = None
        return super().train(mode)

    def __getstate__(self):
        return {**super().__getstate__(), "_ctx_cache": None}
