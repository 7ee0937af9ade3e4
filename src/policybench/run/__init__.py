"""A run directory, beneath every front: its layout and files, the one record builder, the one
"latest record per rollout" rule. Knows no front (the pytest plugin, wrap, evaluate, the pages,
the report) and imports no pytest."""
