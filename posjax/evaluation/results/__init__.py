"""The results record, what run/, derive and report/ share:

  record.py        results.json's typed record (TypedDicts: every section and cell)
  record_check.py  checks a record against those types
  results_file.py  reads (migrating older files), checks and writes results.json, and the small
                   readers of its cells
"""
