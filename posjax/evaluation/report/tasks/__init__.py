"""The task cells' tables (tasks.md / tasks.csv, tables.py) and figures (plots.py)."""
