"""A quiet console: drop third-party noise that says nothing about the run, keep real warnings.

Dropped: Lightning's GPU/TPU availability lines and its litlogger tip, its ``LeafSpec is deprecated``
warning (raised inside Lightning itself), the ``torch.jit.script`` deprecation raised when gpytorch is
imported (MGP), wandb's ``The anonymous setting has no effect``, and on a resume Lightning's notes that the
checkpoint directory is not empty and that states were restored (the pipeline logs one line instead), and its
notes of a SIGTERM or a Ctrl-C (the run's error line says it). A failed run's traceback goes to its log file only
(:func:`traceback_to_log_file`).
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from pathlib import Path

# (message start, category) of warnings raised inside libraries, not by anything the user did
NOISY_WARNINGS = [
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", None),
    (r"`torch.jit.script` is deprecated", FutureWarning),
    (r"Checkpoint directory .* exists and is not empty", None),  # every resume; the run says it resumes
]
# Lightning's info lines that describe the machine or advertise a product
NOISY_LINES = (
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "💡 Tip:",
    "Restoring states from the checkpoint path",
    "Restored all states from the checkpoint",
    # "[rank: 0] Received SIGTERM: 15", "Detected KeyboardInterrupt, attempting graceful shutdown ...":
    # the run's error line says what happens next
    "Received SIGTERM",
    "Detected KeyboardInterrupt",
)


class _DropLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not re.sub(r"^\[rank: \d+\] ", "", str(record.getMessage()).lstrip()).startswith(NOISY_LINES)


def quiet() -> None:
    """Install the filters (idempotent): warnings filters and a filter on Lightning's rank-zero logger.
    A log handler that cannot write (a full disk) stays silent instead of printing a traceback block
    per record; the error that stops the run is still printed as one line."""
    logging.raiseExceptions = False
    for message, category in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category or Warning)
    for name in (
        "pytorch_lightning.utilities.rank_zero",
        "lightning.pytorch.utilities.rank_zero",
        "wandb",
        "pytorch_lightning.trainer.connectors.signal_connector",
    ):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropLines) for f in logger.filters):
            logger.addFilter(_DropLines())


def to_log_file(message: str, e: BaseException | None = None) -> Path | None:
    """Write ``message`` (and ``e``'s full traceback) to the run's log file (Hydra's ``<run dir>/<job name>.log``,
    a handler of the root logger) and not to the console; return that file, or None when the process has none."""
    files = [
        h
        for h in logging.getLogger().handlers
        if isinstance(h, logging.FileHandler)
        and h.baseFilename != os.devnull  # pytest attaches one on /dev/null
        and not getattr(h, "dropped", False)
    ]  # a refused job's log (runrecord.DeferredFileHandler) stays as it was
    record = logging.getLogger("mnp").makeRecord(
        "mnp", logging.ERROR, __file__, 0, "%s", (message,), None if e is None else (type(e), e, e.__traceback__)
    )
    for handler in files:
        handler.handle(record)
    return Path(files[0].baseFilename) if files else None


def traceback_to_log_file(e: BaseException) -> Path | None:
    """:func:`to_log_file` of a failed run: ``run failed: <type>: <message>`` and the traceback."""
    return to_log_file(f"run failed: {type(e).__name__}: {e}", e)
