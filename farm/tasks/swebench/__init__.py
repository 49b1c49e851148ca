"""SWE-bench in its own format: instance rows, the repository mirror, the ``swebench`` package's specs.

The data flow: :mod:`rows` reads the rows as SWE-bench publishes them (JSONL or Parquet);
:mod:`mirror` finds each row's repository in a local mirror (``benchmark.repos``);
:mod:`spec` asks the pinned ``swebench`` package for the instance's specs and evaluation script,
serving the files it would fetch from GitHub out of the mirror; :mod:`task_dir` writes each row
as a Harbor task directory, so a row and a Harbor copy of the same instance run as one task.
"""
