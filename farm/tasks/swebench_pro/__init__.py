"""SWE-bench Pro in its own format: instance rows and the per-instance scripts that grade them.

:mod:`rows` reads the rows as Scale publishes them (JSONL, a JSON list, Parquet, or the CSV the
official ``swe_bench_pro_eval.py`` takes); :mod:`scripts` finds each instance's ``run_script.sh``
and ``parser.py`` in a copy of ``scaleapi/SWE-bench_Pro-os`` the user names
(``benchmark.pro_scripts``); :mod:`task_dir` writes a row as a Harbor task directory whose
verifier runs the run script and leaves its logs for farm to grade on the host with the
instance's own parser (farm/grade/swebench_pro.py). Nothing here is fetched.
"""
