"""The one exception type for bad input data: its message is a single actionable line."""


class DataError(ValueError):
    """Bad or missing input data; the message names the file, view, row or key and what to do."""
