"""The committed files :mod:`mnp.tools.docgen` renders from: one that cannot be read (missing, cut short, not
text, a column missing, a value that is no number) stops docgen with one line naming it (:class:`SourceError`)."""

from __future__ import annotations

import csv
from contextlib import contextmanager
from pathlib import Path

from mnp.tools.report.report_runs import RecordFileError

ADVICE = "restore it (git checkout -- <file>) or write it again with the command mnp/tools/docgen/docgen.py's docstring names"


class SourceError(ValueError):
    """A source file of docgen, or a generated block of a doc file, that cannot be used."""


@contextmanager
def reading(path: Path):
    """Turn an error of reading ``path`` into a :class:`SourceError` naming it, with docgen's advice."""
    try:
        yield
    except RecordFileError as e:
        raise SourceError(f"{e.what}; {ADVICE}") from None
    except (OSError, ValueError, KeyError, TypeError, csv.Error) as e:  # UnicodeDecodeError is a ValueError
        if isinstance(e, KeyError):
            problem = f"it has no column or key {e}"
        else:
            problem = (e.strerror if isinstance(e, OSError) else None) or " ".join(str(e).split())[:160]
        raise SourceError(f"{path} cannot be read ({problem}); {ADVICE}") from None
