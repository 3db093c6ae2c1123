"""The report as one self-contained HTML page: figures inline as base64 PNG, no external
resources, so it opens offline and can be mailed as one file."""

from __future__ import annotations

import base64
import html
import math
import os
from pathlib import Path

from .data import ReportData, TaskCurve
from .figures import Figure, network_figure, task_figures

# NOTE: marks <body data-images="ok|failed"> once every figure decoded, so a headless browser
# test (or a human) can tell a broken image from a slow one.
_SCRIPT = """<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.length > 0 && imgs.every(function (i) { return i.complete && i.naturalWidth > 0; });
  document.body.setAttribute("data-images", ok ? "ok" : "failed");
  document.body.setAttribute("data-image-count", String(imgs.length));
});
</script>"""

_STYLE = """<style>
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child, .l { text-align: left; }
figure { margin: 0.5em 0 1.5em; }
figcaption { font-size: 0.9em; color: #555; }
code { font-size: 0.85em; word-break: break-all; }
</style>"""


def _img(fig: Figure) -> str:
    data = base64.b64encode(fig.png).decode("ascii")
    return (f'<figure id="{fig.name}"><img alt="{html.escape(fig.caption)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{html.escape(fig.caption)}'
            "</figcaption></figure>")


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _network_table(data: ReportData) -> str:
    tasks = data.tasks
    total = sum(t.weight * t.best_cost_s for t in tasks if t.best_cost_s is not None)
    complete = all(t.best_cost_s is not None for t in tasks)
    rows = ["<tr><th>#</th><th class=l>task</th><th>MFLOP</th><th>weight</th><th>trials</th>"
            "<th>errors</th>"
            "<th>best (ms)</th><th>best GFLOPS</th><th>share of latency</th></tr>"]
    for i, t in enumerate(tasks):
        cost = t.best_cost_s
        share = t.weight * cost / total if cost is not None and total > 0 else None
        rows.append(f"<tr><td>{i}</td><td class=l>{html.escape(t.label)}</td>"
                    f"<td>{_fmt(t.flop / 1e6 if t.flop else None, '.4g')}</td><td>{t.weight:g}</td><td>{len(t.trials)}</td><td>{t.errors}</td>"
                    f"<td>{_fmt(cost * 1e3 if cost else None, '.4f')}</td>"
                    f"<td>{_fmt(t.best_gflops, '.4g')}</td><td>{_fmt(share, '.1%')}</td></tr>")
    est = f"{total * 1e3:.4f} ms" if complete else "- (a task has no successful trial)"
    return (f"<p>Estimated latency (sum of weight &times; best latency): <b>{est}</b></p>"
            f"<table>{''.join(rows)}</table>")


def _task_section(i: int, t: TaskCurve, figs: list[Figure]) -> str:
    if t.best_cost_s is None:
        best = "no successful trial"
    elif t.best_gflops is None:
        best = f"{t.best_cost_s * 1e3:.4f} ms (FLOP count unknown: the workload is not registered)"
    else:
        best = f"{t.best_gflops:.4g} GFLOPS, {t.best_cost_s * 1e3:.4f} ms"
    return (f'<section class="task"><h2>Task {i}: {html.escape(t.label)}</h2>'
            f"<p>{len(t.trials)} trials, {t.errors} failed; best: {best}</p>"
            f"<p>Best config: <code>{html.escape(t.best_config)}</code></p>"
            + "".join(_img(f) for f in figs) + "</section>")


def render_report(data: ReportData, png_dir: str | os.PathLike[str] | None = None
                  ) -> tuple[str, list[Figure]]:
    """The HTML page of ``data`` and its figures; with ``png_dir`` each figure is also
    written there as ``NAME.png``."""
    figures: list[Figure] = []
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>templtune report</title>"
             f"{_STYLE}</head><body><h1>templtune tuning report</h1>"
             f"<p>Logs: {html.escape(', '.join(data.logs))}; {len(data.tasks)} task(s), "
             f"{sum(len(t.trials) for t in data.tasks)} trials.</p>"]
    if data.network is not None:
        fig = network_figure(data.network)
        figures.append(fig)
        parts.append("<section class='network'><h2>Network</h2>" + _img(fig)
                     + _network_table(data) + "</section>")
    for i, t in enumerate(data.tasks):
        figs = task_figures(t, i)
        figures += figs
        parts.append(_task_section(i, t, figs))
    parts.append(_SCRIPT + "</body></html>\n")
    if png_dir is not None:
        out = Path(png_dir)
        out.mkdir(parents=True, exist_ok=True)
        for fig in figures:
            (out / f"{fig.name}.png").write_bytes(fig.png)
    return "".join(parts), figures
