"""HTML of the viewer's pages: the run table, one trial with every step, two arms side by side.

Every page is one self-contained file (CSS and JS inlined, links relative), so the same bytes
are served by ``farm view`` and written by ``farm view --out``. Long text (prompts, reasoning,
tool observations, artifacts) is folded in ``<details>`` so that a step list stays scannable.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any
from urllib.parse import quote

from farm.view.assets import CSS, PAGE_JS, PAIR_JS, RUN_JS
from farm.view.data import PATCH, VERIFIER, RunView, flags_of, page_name

# Text longer than this is folded (its first line stays visible in the summary).
FOLD_LINES, FOLD_CHARS = 20, 2000
# An artifact is shown up to this many bytes (a multi-megabyte build log would swamp the page).
ARTIFACT_BYTES = 256 * 1024


def _page(title: str, body: str, script: str = "", head: str = "") -> str:
    return (f"<!doctype html>\n<html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{CSS}</style>{head}</head><body>\n{body}\n<script>{PAGE_JS}{script}</script></body></html>\n")


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


# -- run page -----------------------------------------------------------------------------
RUN_HEADERS = (("task", "task_id"), ("benchmark", "benchmark"), ("seed", "seed"), ("arm", "arm"),
               ("model", "model_preset"), ("status", "status"), ("reward", "reward"), ("exit", "exit_reason"),
               ("error class", "error_class"), ("steps", "steps"), ("tool calls", "tool_calls"),
               ("tokens", "prompt_tokens"), ("wall s", "wall_s"), ("flags", ""), ("compare", ""))


def run_page(view: RunView) -> str:
    """index.html: the rows come from trials.js (see :func:`trials_js`)."""
    meta = view.meta
    exp = ((meta.get("config") or {}).get("experiment") or {}).get("name", "")
    facts = " · ".join(escape(str(x)) for x in (
        f"config {meta.get('config_hash', '?')}", f"created {meta.get('created_at', '?')}",
        f"farm {meta.get('farm_version', '?')}", f"experiment {exp}" if exp else "",
        f"{view.trials.num_rows} trials, {view.attempts.num_rows} attempts") if x)
    selects = "".join(f'<label>{escape(label)}<select name="{name}"><option value="">all</option></select></label>'
                      for label, name in (("benchmark", "benchmark"), ("arm", "arm"), ("status", "status"),
                                          ("exit reason", "exit_reason"), ("scanner flag", "flag")))
    heads = "".join(f'<th data-col="{col}">{escape(label)}</th>' if col else f"<th>{escape(label)}</th>"
                    for label, col in RUN_HEADERS)
    body = f"""<h1>run {escape(view.run_id)}</h1><p class=note>{facts}</p>
<form class=filters id=filters>{selects}<label>task contains<input name=q type=search size=24></label></form>
<p class=note id=count>loading…</p>
<noscript><p>The run table is drawn by JavaScript from trials.js; trial pages are under t/.</p></noscript>
<table id=trials><thead><tr>{heads}</tr></thead><tbody></tbody></table>
<nav><button id=prev type=button>‹ prev</button> <span id=pageinfo></span>
<button id=next type=button>next ›</button></nav>
<script src="trials.js"></script>"""
    return _page(f"farm view · {view.run_id}", body, RUN_JS)


def trials_js(view: RunView) -> str:
    """trials.js: the run table's rows as one assignment (a <script src> loads it from file://,
    where a fetch of JSON is refused)."""
    return "window.FARM_TRIALS=" + json.dumps(view.list_rows(), separators=(",", ":")) + ";\n"


TOGGLES = ("<p><button type=button data-toggle=open>expand all</button> "
           "<button type=button data-toggle=close>collapse all</button></p>")


# -- a trial ------------------------------------------------------------------------------
def _text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return json.dumps(content, indent=1)


def _fold(label: str, text: str, cls: str = "", force_closed: bool = False) -> str:
    lines = text.count("\n") + 1
    long = lines > FOLD_LINES or len(text) > FOLD_CHARS
    first = text.strip().splitlines()[0][:120] if text.strip() else ""
    summary = f"{escape(label)} · {lines} lines, {len(text)} chars" + (f" · <i>{escape(first)}</i>" if long else "")
    opened = "" if long or force_closed else " open"
    return f'<details class="{cls}"{opened}><summary>{summary}</summary><pre>{escape(text)}</pre></details>'


def _args(raw: Any) -> str:
    if isinstance(raw, str):
        try:
            return json.dumps(json.loads(raw), indent=1, ensure_ascii=False)
        except json.JSONDecodeError:
            return raw  # the model's own malformed arguments are evidence: show them as sent
    return json.dumps(raw, indent=1, ensure_ascii=False)


def _messages(step: dict[str, Any]) -> str:
    out, names = [], {}
    durations = list(step.get("tool_durations_s") or [])
    n_obs = 0
    for msg in step["messages"]:
        if not isinstance(msg, dict):
            out.append(f"<pre>{escape(json.dumps(msg))}</pre>")
            continue
        role = str(msg.get("role", "?"))
        if role in ("system", "user"):
            out.append(_fold(role, _text(msg.get("content")), f"msg-{role}", force_closed=True))
        elif role == "assistant":
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            if reasoning:
                out.append(_fold("reasoning", _text(reasoning), "reasoning"))
            text = _text(msg.get("content"))
            if text:
                out.append(f'<div class=assistant><span class=role>assistant</span><pre>{escape(text)}</pre></div>')
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                names[call.get("id")] = fn.get("name", "?")
                out.append(f'<div class=call><span class=tool>{escape(str(fn.get("name", "?")))}</span> '
                           f'<span class=note>{escape(str(call.get("id", "")))}</span>'
                           f'<pre>{escape(_args(fn.get("arguments")))}</pre></div>')
        elif role == "tool":
            name = names.get(msg.get("tool_call_id")) or msg.get("name") or "tool"
            took = f" · {durations[n_obs]:.2f} s" if n_obs < len(durations) and durations[n_obs] is not None else ""
            n_obs += 1
            out.append(_fold(f"observation · {name}{took}", _text(msg.get("content")), "obs"))
        else:
            out.append(_fold(role, _text(msg.get("content")), "msg-other"))
    return "\n".join(out)


def _step_meta(step: dict[str, Any]) -> str:
    parts = [f"latency {_fmt(step.get('latency_s'))} s",
             f"prompt {_fmt(step.get('prompt_tokens'))} · completion {_fmt(step.get('completion_tokens'))} tokens"]
    for key, label in (("cached_tokens", "cached"), ("reasoning_tokens", "reasoning"), ("context_tokens", "context")):
        if step.get(key) is not None:
            parts.append(f"{label} {step[key]}")
    if step.get("finish_reason"):
        parts.append(f"finish {step['finish_reason']}")
    if step.get("tool_s") is not None:
        parts.append(f"tools {step['tool_s']:.2f} s")
    return " · ".join(escape(p) for p in parts)


def steps_html(steps: list[dict[str, Any]], flags: list[str], anchor: str = "step") -> str:
    """Every step of one attempt; a step the hack scan flagged (``rule@step``) is marked."""
    flagged: dict[int, list[str]] = {}
    for f in flags:
        rule, _, at = str(f).partition("@")
        if at.isdigit():
            flagged.setdefault(int(at), []).append(rule)
    if not steps:
        return "<p class=note>no steps recorded for this attempt</p>"
    out = []
    for s in steps:
        rules = flagged.get(s["step"], [])
        marks = "".join(f'<span class=flag>{escape(r)}</span>' for r in rules)
        out.append(f'<section class="step{" flagged" if rules else ""}" id="{anchor}-{s["step"]}">'
                   f'<h3><a href="#{anchor}-{s["step"]}">step {s["step"]}</a> {marks}</h3>'
                   f'<div class=smeta>{_step_meta(s)}</div>{_messages(s)}</section>')
    return '<div class=steps>' + "\n".join(out) + "</div>"


def _diff(text: str) -> str:
    out = []
    for line in text.splitlines():
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") and not line.startswith("+++")
               else "del" if line.startswith("-") and not line.startswith("---") else "")
        out.append(f'<span class="{cls}">{escape(line)}</span>' if cls else escape(line))
    return '<pre class=diff>' + "\n".join(out) + "</pre>"


def artifacts_html(view: RunView, trial: dict[str, Any], anchor: str = "") -> str:
    out = []
    names = view.artifacts_of(trial)
    for name in names:
        data = view.artifact(trial, name) or b""
        cut = len(data) > ARTIFACT_BYTES
        text = data[:ARTIFACT_BYTES].decode("utf-8", errors="replace")
        note = f"<p class=note>first {ARTIFACT_BYTES} of {len(data)} bytes</p>" if cut else ""
        if name == PATCH:
            body = _diff(text) if text.strip() else "<p class=note>empty patch</p>"
            out.append(f'<h2 id="{anchor}patch">patch ({len(data)} bytes)</h2>{note}{body}')
        elif name == VERIFIER:
            out.append(f'<h2 id="{anchor}verifier">verifier output</h2>{note}<pre class=verifier>{escape(text)}</pre>')
        else:
            out.append(f'<details class=artifact><summary>{escape(name)} ({len(data)} bytes)</summary>{note}'
                       f'<pre>{escape(text)}</pre></details>')
    if not any(n in (PATCH, VERIFIER) for n in names):
        out.insert(0, "<p class=note>no patch or verifier output stored for this attempt</p>")
    return "\n".join(out)


# sandbox limits / loss cause (issue 40): which limits the agent's commands met, and whose a lost sandbox was
FACTS = (("benchmark", "benchmark"), ("task", "task_id"), ("seed", "seed"), ("arm", "arm"), ("status", "status"),
         ("reward", "reward"), ("exit reason", "exit_reason"), ("error class", "error_class"),
         ("sandbox limits met", "sandbox_limits"), ("loss cause", "loss_cause"),
         ("model (answered)", "model"), ("model preset", "model_preset"), ("policy", "policy"),
         ("grading", "grading_mode"), ("steps", "steps"), ("tool calls", "tool_calls"),
         ("prompt tokens", "prompt_tokens"), ("completion tokens", "completion_tokens"),
         ("cached tokens", "cached_tokens"), ("reasoning tokens", "reasoning_tokens"), ("wall s", "wall_s"),
         ("llm s", "llm_s"), ("tool s", "tool_s"), ("verify s", "verify_s"), ("image", "image"),
         ("sandbox", "sandbox_backend"), ("fresh status", "fresh_status"), ("attempt", "attempt"),
         ("trial key", "trial_key"), ("attempt uid", "attempt_uid"))


def _facts(trial: dict[str, Any], keys: tuple[tuple[str, str], ...] = FACTS) -> str:
    rows = []
    for label, key in keys:
        v = trial.get(key)
        if v is None or v == "" or v == []:  # unset, and rows written before the column existed
            continue
        if isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        cls = f' class="s-{escape(str(v))}"' if key == "status" else ""
        rows.append(f"<dt>{escape(label)}</dt><dd{cls}>{escape(_fmt(v, 3))}</dd>")
    flags = flags_of(trial)
    if flags:
        rows.append("<dt>scanner flags</dt><dd>" + " ".join(
            f'<span class=flag>{escape(f)}</span>' for f in trial.get("hack_flags") or []) +
            (" <span class=flag>tamper_suspect</span>" if trial.get("tamper_suspect") else "") + "</dd>")
    facts = "<dl class=facts>" + "".join(rows) + "</dl>"
    if trial.get("error"):
        facts += _fold("error", str(trial["error"]), "error")
    return facts


ATTEMPT_FACTS = (("status", "status"), ("reward", "reward"), ("exit reason", "exit_reason"),
                 ("error class", "error_class"), ("sandbox limits met", "sandbox_limits"),
                 ("loss cause", "loss_cause"), ("model (answered)", "model"), ("steps", "steps"), ("wall s", "wall_s"),
                 ("worker", "worker"), ("attempt uid", "attempt_uid"))


def _is(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.get("attempt_uid") or b.get("attempt_uid"):
        return a.get("attempt_uid") == b.get("attempt_uid")
    return a.get("attempt") == b.get("attempt")


def _attempt_label(a: dict[str, Any]) -> str:
    return " · ".join(str(x) for x in (f"attempt {a['attempt']}", a["status"], a.get("error_class")) if x)


def earlier_attempts_html(view: RunView, trial: dict[str, Any], attempts: list[dict[str, Any]]) -> str:
    """The attempts before ``trial`` (the latest), newest first, each folded under its number,
    status and error class: its row, every step, its artifacts (retries are infra errors, whose
    steps say where the sandbox or endpoint gave out)."""
    out = []
    for a in reversed([a for a in attempts if not _is(a, trial)]):
        tag = f"attempt{a['attempt']}-"
        steps = view.steps_of(a)
        out.append(f'<details class=attempt id="{tag}top"><summary>{escape(_attempt_label(a))} · {len(steps)} '
                   f'steps</summary>{_facts(a, ATTEMPT_FACTS)}'
                   f'{steps_html(steps, list(a.get("hack_flags") or []), anchor=f"{tag}step")}'
                   f'{artifacts_html(view, a, anchor=tag)}</details>')
    if not out:
        return ""
    return f"<h2>earlier attempts ({len(out)})</h2>\n" + "\n".join(out)


def trial_page(view: RunView, trial: dict[str, Any]) -> str:
    """t/<page>.html: one trial's latest attempt, every step, its patch and verifier output; then
    every earlier attempt of the trial, folded."""
    steps = view.steps_of(trial)
    cell = (trial["benchmark"], trial["task_id"], trial["seed"])
    pair = ""
    if cell in view.cells():
        href = f"../c/{view.cells()[cell]}.html?a={quote(trial['arm'], safe='')}"
        pair = f' · <a href="{escape(href)}">other arms on this task and seed</a>'
    attempts = view.attempts_of(trial)
    listed = ""
    if len(attempts) > 1:
        rows = "".join(
            f"<tr><td>{_attempt_link(a, trial)}</td><td class=\"s-{escape(a['status'])}\">{escape(a['status'])}</td>"
            f"<td>{escape(a.get('error_class') or '')}</td><td>{escape((a.get('error') or '')[:200])}</td></tr>"
            for a in reversed(attempts))
        listed = (f"<h2>attempts ({len(attempts)})</h2><p class=note>latest first: its steps are below, the "
                  f"earlier ones' after them, folded (the report counts the latest; all count for cost)</p>"
                  f"<table><tr><th>attempt</th><th>status</th><th>error class</th><th>error</th></tr>{rows}</table>")
    walk = f'<span id=walk data-page="{page_name(trial["trial_key"])}"></span>'
    label = f" of attempt {trial['attempt']}" if len(attempts) > 1 else ""
    body = f"""<nav><a data-back href="../index.html">← run {escape(view.run_id)}</a>{walk}{pair}</nav>
<h1>{escape(trial['task_id'])} · {escape(trial['arm'])} · seed {trial['seed']}</h1>
{_facts(trial)}{listed}
<h2>steps{label} ({len(steps)})</h2>
{TOGGLES}
{steps_html(steps, list(trial.get('hack_flags') or []))}
{artifacts_html(view, trial)}
{earlier_attempts_html(view, trial, attempts)}"""
    return _page(f"{trial['task_id']} · {trial['arm']} · {view.run_id}", body)


def _attempt_link(a: dict[str, Any], latest: dict[str, Any]) -> str:
    n = escape(str(a["attempt"]))
    return f"{n} (latest)" if _is(a, latest) else f'<a href="#attempt{n}-top">{n}</a>'


SHORT_FACTS = (("status", "status"), ("reward", "reward"), ("exit reason", "exit_reason"),
               ("error class", "error_class"), ("model preset", "model_preset"), ("steps", "steps"),
               ("tool calls", "tool_calls"), ("prompt tokens", "prompt_tokens"),
               ("completion tokens", "completion_tokens"), ("wall s", "wall_s"))


def pair_page(view: RunView, name: str) -> str:
    """c/<cell>.html: every arm's trial on one (benchmark, task, seed); two are shown side by side."""
    trials = view.cell(name)
    first = trials[0]
    arms = []
    for i, t in enumerate(trials):
        arms.append(f'<div class=arm data-arm="{escape(t["arm"])}"><h2>arm {escape(t["arm"])} · '
                    f'<a href="../t/{page_name(t["trial_key"])}.html">trial page</a></h2>'
                    f'{_facts(t, SHORT_FACTS)}<h2>steps</h2>'
                    f'{steps_html(view.steps_of(t), list(t.get("hack_flags") or []), anchor=f"a{i}-step")}'
                    f'{artifacts_html(view, t, anchor=f"a{i}-")}</div>')
    body = f"""<nav><a data-back href="../index.html">← run {escape(view.run_id)}</a></nav>
<h1>{escape(first['task_id'])} · seed {first['seed']} · {escape(first['benchmark'])}: arms side by side</h1>
<form class=filters><label>left<select id=arm-a></select></label><label>right<select id=arm-b></select></label>
{TOGGLES}</form>
<div class=pair>{''.join(arms)}</div>"""
    return _page(f"{first['task_id']} · seed {first['seed']} · arms · {view.run_id}", body, PAIR_JS)
