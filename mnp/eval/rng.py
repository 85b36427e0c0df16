"""The random streams a checkpoint carries, so a resumed run draws what the uninterrupted run would have."""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_states() -> dict:
    """Every RNG a training step may draw from, so a resumed run continues the same streams."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    states = {
        "torch": torch.get_rng_state(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": random.getstate(),
    }  # plain types and tensors: loadable with weights_only=True
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    name, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])
