"""The selection protocol (``python -m mnp.tools.select``): a default chosen on validation rows (``select``) and its
decision record and choice rule (``decision_record``)."""
