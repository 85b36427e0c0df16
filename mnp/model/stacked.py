"""Same-shaped parameters (and buffers) of many modules computed as one batched op, the modules left as they are.

A :class:`ParamStack` moves G parameters of equal shape into one (G, *shape) tensor, ``leaf``, and points
every parameter's data at its slice: the modules, their names, the state_dict, the optimisers, per-tensor
clipping and in-place edits keep working on the parameters, while a forward pass may read ``leaf`` and
compute all G modules at once (one bmm instead of G linears, forward and backward). After backward, a
hook on ``leaf`` hands each parameter its slice of ``leaf.grad`` (assigned where the parameter has no
gradient, added where it has one) and clears ``leaf.grad``: to every caller the gradients look as if
autograd had accumulated them into the parameters themselves.

The aliasing is checked before use (:meth:`ParamStack.valid`): moving or converting the model
(``to``, ``float``, ``load_state_dict(assign=True)``) gives the parameters new storage, and the stack is
then rebuilt from them. DDP hooks every parameter's own gradient accumulation, so models train without
stacks under ``torch.distributed``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


class ParamStack:
    """G parameters of equal shape, dtype and device as slices of one leaf tensor (module docstring)."""

    def __init__(self, params: Sequence[nn.Parameter]):
        self.params = list(params)
        shapes = {(p.shape, p.dtype, p.device, p.requires_grad) for p in self.params}
        if len(shapes) != 1:
            raise ValueError(
                f"a ParamStack needs parameters of one shape, dtype, device and requires_grad, got {shapes}"
            )
        # a normal tensor even when first built under inference_mode (a test pass before any training, as
        # after .to(device)): an inference tensor as the parameters' storage would fail every later backward
        with torch.inference_mode(False), torch.no_grad():
            data = torch.stack([p.detach() for p in self.params])
        self.leaf = data.requires_grad_(self.params[0].requires_grad)
        for p, view in zip(self.params, self.leaf.detach().unbind(0)):
            p.data = view
        if self.leaf.requires_grad:
            self.leaf.register_post_accumulate_grad_hook(self._hand_out)

    def valid(self, current: Sequence[Tensor] | None = None) -> bool:
        """Whether every parameter still lives in ``leaf`` (first and last checked: they move together), and
        (``current``: the tensors the modules hold now) is still the one the modules hold: moving a module
        replaces its buffers by new tensors, where it gives its parameters new data."""
        first, last = self.params[0], self.params[-1]
        if current is not None and (current[0] is not first or current[-1] is not last):
            return False
        size = first.numel() * first.element_size()
        return (
            first.device == self.leaf.device
            and first.dtype == self.leaf.dtype
            and first.requires_grad == self.leaf.requires_grad
            and first.data_ptr() == self.leaf.data_ptr()
            and last.data_ptr() == self.leaf.data_ptr() + (len(self.params) - 1) * size
        )

    def _hand_out(self, leaf: Tensor) -> None:
        grad, leaf.grad = leaf.grad, None
        for p, g in zip(self.params, grad.unbind(0)):
            if p.grad is None:
                p.grad = g
            else:
                p.grad.add_(g)


def stackable(params: Sequence[nn.Parameter]) -> bool:
    return len(params) > 1 and len({(p.shape, p.dtype, p.device, p.requires_grad) for p in params}) == 1


def distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


Slot = tuple[nn.Module, str]  # where a module keeps a parameter or buffer: (module, attribute name)


class Stacks:
    """Named :class:`ParamStack` s over groups of slots, each built on first use and again when stale (the
    slots' tensors read again then). Copies and pickles start empty: a copied tensor loses its hooks, so
    the copy builds its own stacks."""

    def __init__(self, slots: dict[str, Sequence[Slot]]):
        self.slots = {k: list(v) for k, v in slots.items()}
        self.stacks: dict[str, ParamStack] = {}

    def tensors(self, name: str) -> list[Tensor]:
        """The tensors the modules hold in the slots of group ``name`` now."""
        return [getattr(module, attr) for module, attr in self.slots[name]]

    def __getitem__(self, name: str) -> Tensor:
        """The (G, *shape) leaf of group ``name``, (re)built if needed (not checked while dynamo traces)."""
        stack = self.stacks.get(name)
        if stack is None or (not torch.compiler.is_compiling() and not stack.valid(self._ends(name))):
            stack = self.stacks[name] = ParamStack(self.tensors(name))
        return stack.leaf

    def members(self, name: str) -> list[Tensor]:
        """The parameters of group ``name`` (the stack built if needed)."""
        self[name]
        return self.stacks[name].params

    def _ends(self, name: str) -> list[Tensor]:
        (first, a), (last, b) = self.slots[name][0], self.slots[name][-1]
        return [getattr(first, a), getattr(last, b)]

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return (type(None), ())
