"""A quiet console: drop third-party noise that says nothing about the run, keep real warnings.

Dropped: Lightning's GPU/TPU availability lines and its litlogger tip, its ``LeafSpec is deprecated``
warning (raised inside Lightning itself), the ``torch.jit.script`` deprecation raised when gpytorch is
imported (MGP), wandb's ``The anonymous setting has no effect``, and on a resume Lightning's notes that the
checkpoint directory is not empty and that states were restored (the pipeline logs one line instead), and its
note of a SIGTERM (the run's error line says it).
"""
from __future__ import annotations

import logging
import re
import warnings

# (message start, category) of warnings raised inside libraries, not by anything the user did
NOISY_WARNINGS = [
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", None),
    (r"`torch.jit.script` is deprecated", FutureWarning),
    (r"The anonymous setting has no effect", None),
    (r"Checkpoint directory .* exists and is not empty", None),  # every resume; the run says it resumes
]
# Lightning's info lines that describe the machine or advertise a product
NOISY_LINES = ("GPU available:", "TPU available:", "HPU available:", "💡 Tip:",
               "Restoring states from the checkpoint path", "Restored all states from the checkpoint",
               "Received SIGTERM")  # "[rank: 0] Received SIGTERM: 15": the run's error line says what happens next


class _DropLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not re.sub(r"^\[rank: \d+\] ", "", str(record.getMessage())).startswith(NOISY_LINES)


def quiet() -> None:
    """Install the filters (idempotent): warnings filters and a filter on Lightning's rank-zero logger.
    A log handler that cannot write (a full disk) stays silent instead of printing a traceback block
    per record; the error that stops the run is still printed as one line."""
    logging.raiseExceptions = False
    for message, category in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category or Warning)
    for name in ("pytorch_lightning.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero", "wandb",
                 "pytorch_lightning.trainer.connectors.signal_connector"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropLines) for f in logger.filters):
            logger.addFilter(_DropLines())
