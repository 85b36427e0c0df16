"""The errors whose message already says what is wrong and what to do: the CLIs print them as one line."""

from __future__ import annotations


class OutOfMemory(MemoryError):
    """An allocation failed; the message names the sizes involved and what to reduce (:mod:`mnp.cli.oom`)."""


class StoppedEarly(RuntimeError):
    """Training ended before ``trainer.max_epochs`` (``trainer.max_time``, a callback): not a finished run."""


class UnfinishedRun(ValueError):
    """A run directory whose last.ckpt does not hold the run's end state (:func:`mnp.cli.run_loading.load_finished_run`)."""


USER_ERRORS = (
    ValueError,
    KeyError,
    FileNotFoundError,
    PermissionError,
    OSError,
    FloatingPointError,
    OutOfMemory,
    StoppedEarly,
)


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key (:mod:`mnp.cli.validate`)."""
