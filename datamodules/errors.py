"""The one exception type for bad input data: its message is a single actionable line."""


class DataError(ValueError):
    """Bad or missing input data; the message names the file, view, row or key and what to do."""


class MissingData(DataError, FileNotFoundError):
    """A dataset file is absent or cannot be fetched: a sweep skips the job instead of failing it (mnp.cli.sweep)."""


CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def torchvision(module: str, needed_for: str):
    """``torchvision.<module>``: torchvision is the ``images`` extra (CIFAR10-C and the Inception-v3 features
    only), so the default install has no CUDA torch pulled by its pin and no torchvision in the import chain."""
    import importlib

    try:
        return importlib.import_module(f"torchvision.{module}")
    except ImportError as e:
        raise DataError(
            f"{needed_for} needs torchvision ({e}): pip install -e '.[images]' (on a CPU-only machine "
            f"with --extra-index-url {CPU_INDEX})"
        ) from None
