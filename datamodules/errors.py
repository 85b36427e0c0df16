"""The one exception type for bad input data: its message is a single actionable line."""


class DataError(ValueError):
    """Bad or missing input data; the message names the file, view, row or key and what to do."""


class MissingData(DataError, FileNotFoundError):
    """A dataset file is absent or cannot be fetched: a sweep skips the job instead of failing it (mnp.core.sweep)."""
