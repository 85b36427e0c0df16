"""A run on disk: its directory and name, record, checkpoints, stored config and preprocessing, outputs, signals,
and what older versions of the project wrote, read as today's."""
