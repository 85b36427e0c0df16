"""The errors whose message already says what is wrong and what to do: the CLIs print them as one line."""
from __future__ import annotations

USER_ERRORS = (ValueError, KeyError, FileNotFoundError, PermissionError, OSError, FloatingPointError)
