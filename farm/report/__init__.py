"""Reproduction tables and ablation reports, computed from the result store's Parquet alone."""

from farm.report.claims import ClaimsRegistry, load_claims
from farm.report.data import RunData, RunStore, load_run
from farm.report.render import ReportPaths, build_report
from farm.report.summary import summary_table
from farm.report.tables import ReportOptions

__all__ = [
    "ClaimsRegistry",
    "ReportOptions",
    "ReportPaths",
    "RunData",
    "RunStore",
    "build_report",
    "load_claims",
    "load_run",
    "summary_table",
]
