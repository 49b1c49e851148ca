"""Write a report: report.md, a self-contained report.html (PNG figures inlined) and CSV tables."""

from __future__ import annotations

import base64
import csv
import html
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from farm.report.caveats import run_caveats
from farm.report.claims import load_claims
from farm.report.data import RunData
from farm.report.main_table import MAIN
from farm.report.plots import all_figures
from farm.report.prompt_line import prompt_line, tool_rules_line
from farm.report.tables import ReportContent, ReportOptions, Table, compute

CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f2f4f7} tr:nth-child(even) td{background:#fafafa}
td.trace{color:#666;font-family:monospace;font-size:11px}
.note{color:#555;font-size:12px} figure{margin:12px 0} img{max-width:100%;border:1px solid #eee}
figcaption{font-size:12px;color:#444} footer{margin-top:32px;font-size:11px;color:#666}
.v-reproduced{color:#2e7d32;font-weight:bold} .v-below,.v-above{color:#c62828;font-weight:bold}
.v-incomplete{color:#6a1b9a;font-weight:bold}
.warning{background:#fff4e5;border-left:4px solid #e65100;padding:6px 10px;margin:8px 0;font-size:13px}
"""


@dataclass
class ReportPaths:
    markdown: Path
    html: Path
    csv: dict[str, Path] = field(default_factory=dict)
    figures: dict[str, Path] = field(default_factory=dict)


def _csv_value(v: Any) -> Any:
    if isinstance(v, float):
        return "" if math.isnan(v) else round(v, 6)
    return v


def write_csv(table: Table, path: Path) -> None:
    cols: list[str] = []
    for row in table.rows:
        cols += [k for k in row if k not in cols]
    if not cols:
        cols = ["run_id", "config_hash"]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for row in table.rows:
            w.writerow({k: _csv_value(row.get(k)) for k in cols})


def _runs_meta(runs: list[RunData]) -> list[dict[str, str]]:
    out = []
    for r in runs:
        exp = (r.config.get("experiment") or {}).get("name", "")
        out.append(
            {
                "run_id": r.run_id,
                "config_hash": r.config_hash,
                "created_at": str(r.meta.get("created_at", "")),
                "farm_version": str(r.meta.get("farm_version", "")),
                "model": r.served_by(),
                "experiment": str(exp),
            }
        )
    return out


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> list[str]:
    lines = ["", f"## {t.title}", ""]
    if not t.rows:
        return lines + ["_none_"]
    lines.append("| " + " | ".join(h for h, _ in t.display) + " |")
    lines.append("|" + "---|" * len(t.display))
    for row in t.rows:
        lines.append("| " + " | ".join(_md_cell(f(row)) for _, f in t.display) + " |")
    if t.note:
        lines += ["", f"_{t.note}_"]
    return lines


def _first_and_rest(c: ReportContent) -> tuple[list[Table], list[Table]]:
    """The main table goes before everything else (the runs included): it answers the question."""
    shown = [t for t in c.tables if t.display]
    return [t for t in shown if t.name == MAIN], [t for t in shown if t.name != MAIN]


def render_markdown(c: ReportContent, figures: list[tuple[str, str, bytes]], generated: str) -> str:
    lines = ["# farm report", "", f"Generated {generated}.", "", prompt_line(c.runs), "", tool_rules_line(c.runs), ""]
    caveats = run_caveats(c.runs)
    if caveats:
        lines += ["## Warnings", ""] + [f"> **Warning.** {cv.text}" for cv in caveats] + [""]
    first, rest = _first_and_rest(c)
    for t in first:
        lines += _md_table(t)[1:]
    lines += ["", "## Runs", ""]
    meta = _runs_meta(c.runs)
    lines += ["| run | config hash | created | farm | model | experiment |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {m['run_id']} | `{m['config_hash']}` | {m['created_at']} | {m['farm_version']} "
        f"| {_md_cell(m['model'])} | {m['experiment']} |"
        for m in meta
    ]
    for t in rest:
        lines += _md_table(t)
    if figures:
        lines += ["", "## Figures", ""]
        for stem, caption, _ in figures:
            lines += [f"![{caption}](plots/{stem}.png)", "", f"_{caption}_", ""]
    lines += ["", f"CSV tables: {', '.join(t.name + '.csv' for t in c.tables)}. "
              "Every row names the run id and config hash it came from.", ""]
    return "\n".join(lines)


def _html_table(t: Table) -> str:
    e = html.escape
    if not t.rows:
        return '<p class="note">none</p>'
    head = "".join(f"<th>{e(h)}</th>" for h, _ in t.display)
    body = []
    for row in t.rows:
        cells = []
        for h, f in t.display:
            text = f(row)
            if h == "config":
                cells.append(f'<td class="trace" title="{e(str(row["config_hash"]))}">{e(text)}</td>')
            elif h == "run":
                cells.append(f'<td class="trace">{e(text)}</td>')
            elif h in ("verdict", "verdict vs ceiling"):
                key = "verdict" if h == "verdict" else "verdict_vs_ceiling"
                cells.append(f'<td class="v-{e(str(row.get(key, "")))}">{e(text)}</td>')
            else:
                cells.append(f"<td>{e(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="note">{e(t.note)}</p>' if t.note else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{note}"


def _html_warnings(c: ReportContent) -> list[str]:
    caveats = run_caveats(c.runs)
    if not caveats:
        return []
    return ["<h2>Warnings</h2>"] + [f'<p class="warning"><b>Warning.</b> {html.escape(cv.text)}</p>' for cv in caveats]


def render_html(c: ReportContent, figures: list[tuple[str, str, bytes]], generated: str) -> str:
    e = html.escape
    meta = _runs_meta(c.runs)
    first, rest = _first_and_rest(c)
    run_rows = "".join(
        f"<tr><td class='trace'>{e(m['run_id'])}</td><td class='trace'>{e(m['config_hash'])}</td>"
        f"<td>{e(m['created_at'])}</td><td>{e(m['farm_version'])}</td><td>{e(m['model'])}</td>"
        f"<td>{e(m['experiment'])}</td></tr>"
        for m in meta
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>farm report</title>',
        f"<style>{CSS}</style></head><body>",
        "<h1>farm report</h1>",
        f'<p class="note">Generated {e(generated)}.</p>',
        f'<p class="note">{e(prompt_line(c.runs))}</p>',
        f'<p class="note">{e(tool_rules_line(c.runs))}</p>',
        *_html_warnings(c),
        *[f'<h2 id="{e(t.name)}">{e(t.title)}</h2>' + _html_table(t) for t in first],
        "<h2>Runs</h2>",
        "<table><thead><tr><th>run</th><th>config hash</th><th>created</th><th>farm</th>"
        f"<th>model</th><th>experiment</th></tr></thead><tbody>{run_rows}</tbody></table>",
    ]
    for t in rest:
        parts += [f"<h2>{e(t.title)}</h2>", _html_table(t)]
    if figures:
        parts.append("<h2>Figures</h2>")
        for stem, caption, png in figures:
            data = base64.b64encode(png).decode("ascii")
            parts.append(
                f'<figure id="fig-{e(stem)}"><img alt="{e(caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{e(caption)}</figcaption></figure>"
            )
    trace = "; ".join(f"{m['run_id']} (config {m['config_hash']})" for m in meta)
    parts += [f"<footer>Every number above comes from the Parquet rows of: {e(trace)}.</footer>", "</body></html>"]
    return "\n".join(parts)


def build_report(
    runs: list[RunData],
    out_dir: Path,
    claims_dir: Path | None = None,
    options: ReportOptions | None = None,
) -> ReportPaths:
    """Compute and write the report of ``runs`` (first = the run, others = --compare) to ``out_dir``.

    ``options`` default to ``report.*`` of the first run's config.
    """
    if not runs:
        raise ValueError("build_report: no runs given")
    options = options or ReportOptions.from_config(runs[0].config)
    if claims_dir is None:
        cd = (runs[0].config.get("report") or {}).get("claims_dir")
        claims_dir = Path(cd) if cd else None
    content = compute(runs, load_claims(claims_dir), options)
    return write_report(content, out_dir, all_figures(content))


def write_report(content: ReportContent, out_dir: Path, figures: list[tuple[str, str, bytes]]) -> ReportPaths:
    """Write a computed report (``tables.compute``) and its figures (``plots.all_figures``) to ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")

    paths = ReportPaths(markdown=out_dir / "report.md", html=out_dir / "report.html")
    plot_dir = out_dir / "plots"
    plot_dir.mkdir(exist_ok=True)
    for stem, _, png in figures:
        p = plot_dir / f"{stem}.png"
        p.write_bytes(png)
        paths.figures[stem] = p
    for t in content.tables:
        p = out_dir / f"{t.name}.csv"
        write_csv(t, p)
        paths.csv[t.name] = p
    paths.markdown.write_text(render_markdown(content, figures, generated))
    paths.html.write_text(render_html(content, figures, generated))
    return paths
