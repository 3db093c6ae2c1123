"""``templtune report``: tuning curves, error codes and per-task tables of tuning logs as one
self-contained HTML page: :func:`load_report_data` reads the logs, :func:`render_report`
draws the page."""

from __future__ import annotations

from .data import ReportData, ReportError, load_report_data, write_task_table
from .page import render_report

__all__ = ["ReportData", "ReportError", "load_report_data", "render_report", "write_task_table"]
