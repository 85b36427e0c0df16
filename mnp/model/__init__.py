"""The MNP model (docs/method.md): its parts, blocks, training and fast paths. ``mnp.model.MNP`` is the class the
configs and stored checkpoints name; it is imported on first use, so ``mnp.model.migrations``-style imports of a
submodule stay free of the whole model."""


def __getattr__(name):
    if name == "MNP":
        from mnp.model.model import MNP

        return MNP
    raise AttributeError(f"module 'mnp.model' has no attribute {name!r}")
