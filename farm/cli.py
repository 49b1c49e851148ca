"""The `farm` command: run, grade, report, tasks, images, validate, serve, gc.

Every subcommand takes config overrides as trailing ``key=value`` words (``benchmark=builtin``,
``run.seeds=3``). Errors farm raises on purpose are printed as one line naming the field and
the value, with exit code 2; tracebacks are for bugs only.

Exit codes of ``farm run`` (RUN_EXIT_CODES, also in ``farm run --help`` and docs/architecture.md).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from farm.config import FarmConfig, load_config
from farm.errors import FarmError

# Tables are wide; when the output is a file or a pipe (CI logs), do not squeeze them to 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def _cfg(args: argparse.Namespace) -> FarmConfig:
    strict = ["benchmark.strict=true"] if getattr(args, "strict", False) else []
    overrides = list(args.overrides)
    if getattr(args, "command", None) == "grade":  # `farm run agent=predictions agent.predictions=FILE ...`
        from farm.run.predictions import grade_overrides

        overrides = grade_overrides(args.predictions_file, overrides)
    return load_config(overrides + strict, config_file=getattr(args, "config", None))


EXIT_OK, EXIT_CONFIG, EXIT_PREFLIGHT, EXIT_INFRA, EXIT_BREAKER, EXIT_STORE = 0, 2, 3, 4, 5, 6
EXIT_TERM = 143  # 128 + SIGTERM, as a shell reports a process the signal ended
RUN_EXIT_CODES = f"""exit codes:
  {EXIT_OK}    every trial was graded (resolved / unresolved / model_error), or was refused by the
       backend before it started ("not run" in the report)
  {EXIT_CONFIG}    bad configuration or input (one line naming the field and the value)
  {EXIT_PREFLIGHT}    preflight failed: endpoint, served model id, tool call, store or sandbox; nothing ran
  {EXIT_INFRA}    some trials are still infra_error after their retries (re-run the command to resume)
  {EXIT_BREAKER}    the circuit breaker stopped the run (run.breaker_consecutive attempts in a row in one
       infra class); the trials it did not finish re-run on resume
  {EXIT_STORE}    the result store failed for good (S3 still throttling / failing after store.retry_budget_s,
       a full disk): one line names the bucket or directory and the error; what was committed
       stays, the trials in flight are recorded as attempt_lost on resume
  130  interrupted
  {EXIT_TERM}  stopped by SIGTERM (`ray job stop`, a CI timeout, kill): the sandboxes it started were
       stopped first; finished trials are stored, run the same command again to resume"""

STRICT_HELP = "fail if any task fails to load (benchmark.strict=true); default: report them at the end"


# -- run -------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from farm.run.driver import run_experiment
    from farm.run.progress import RunProgress
    from farm.run.stop import stop_on_sigterm
    from farm.run.summary_line import summary_line

    cfg = _cfg(args)
    from farm.run.predictions import require_inputs

    require_inputs(cfg)  # before loading tasks or starting anything: one line naming the fix
    loaded = None
    if not cfg.experiment.benchmarks:  # several benchmarks: the driver loads them and logs their failures
        from farm.tasks.benchmark import load_benchmark_report

        loaded = load_benchmark_report(cfg.benchmark)
    tasks = loaded.tasks if loaded is not None else None

    terminated: list[bool] = []  # SIGTERM came: the run was cancelled, its sandboxes closed

    async def main() -> Any:
        stop_on_sigterm(terminated, lambda text: err_console.print(text, highlight=False))
        with RunProgress(enabled=cfg.run.progress and not args.quiet, console=console,
                         interval_s=cfg.run.progress_interval_s) as progress:
            if cfg.serve.enabled:
                from farm.serve.cli import served

                async with served(cfg) as base_url:
                    cfg.model.base_url = base_url
                    return await run_experiment(cfg, tasks=tasks, progress=progress.hook)
            return await run_experiment(cfg, tasks=tasks, progress=progress.hook)

    try:
        summary = asyncio.run(main())
    except asyncio.CancelledError:
        if not terminated:
            raise
        err_console.print("[bold red]stopped by SIGTERM:[/] the sandboxes this run started are stopped; finished "
                          "trials are stored (re-run the same command to resume)", highlight=False, soft_wrap=True)
        return EXIT_TERM
    console.print(summary_line(summary))
    _print_report(cfg.store.uri, cfg.store.endpoint_url, cfg.store.region, [summary.run_id])
    if loaded is not None:
        from farm.tasks.cli import print_report

        print_report(loaded.report, err_console)  # tasks that did not load, at the end of the output
    if summary.breaker:
        err_console.print(f"[bold red]stopped:[/] {summary.breaker}; {summary.unfinished} trials unfinished, "
                          f"{summary.infra_left} infra_error (re-run the same command to resume)",
                          highlight=False, soft_wrap=True)
        return EXIT_BREAKER
    if summary.infra_left > 0:
        err_console.print(f"[bold red]incomplete:[/] {summary.infra_left} trials still infra_error after "
                          f"{cfg.run.max_attempts} attempts (re-run the same command to retry them)",
                          highlight=False, soft_wrap=True)
        return EXIT_INFRA
    return EXIT_OK


def _print_report(uri: str, endpoint: str | None, region: str | None, run_ids: list[str], out: str | None = None,
                  overrides: list[str] | None = None, claims_dir: str | None = None,
                  official: str | None = None) -> None:
    from farm.report.cli import print_and_render, report_overrides

    print_and_render(uri, endpoint, region, run_ids, out_dir=out, console=console,
                     overrides=report_overrides(overrides or []), claims_dir=claims_dir, official=official)


def cmd_report(args: argparse.Namespace) -> int:
    cfg = _cfg(args)  # validates the overrides (a bad report.* value is an error naming it)
    uri = args.store or cfg.store.uri
    _print_report(uri, cfg.store.endpoint_url, cfg.store.region, [args.run, *args.compare], out=args.out,
                  overrides=list(args.overrides), claims_dir=args.claims_dir, official=args.official)
    return 0


def cmd_regrade(args: argparse.Namespace) -> int:
    from farm.run.regrade import regrade_command

    store_cfg = _cfg(args)  # only store.* is read from here: the rest is the run's stored config
    summary = regrade_command(args.run, list(args.overrides), store_cfg=store_cfg, only=args.only)
    skipped = ", ".join(f"{why}: {n}" for why, n in sorted(summary.skipped.items()))
    counts = ", ".join(f"{k}={v}" for k, v in sorted(summary.counts.items())) or "none"
    console.print(f"regraded {summary.regraded} of {summary.selected} selected trials of run [bold]{summary.run_id}[/] "
                  f"({counts}); {summary.changed} verdicts changed" + (f"; skipped {skipped}" if skipped else ""))
    _print_report(store_cfg.store.uri, store_cfg.store.endpoint_url, store_cfg.store.region, [summary.run_id])
    return EXIT_INFRA if summary.counts.get("infra_error") else EXIT_OK


# -- view ------------------------------------------------------------------------------------
def cmd_view(args: argparse.Namespace) -> int:
    from farm.view.cli import view_main

    cfg = _cfg(args)  # only store.* is read: where the run is
    return view_main(args.run, args.store or cfg.store.uri, cfg.store.endpoint_url, cfg.store.region,
                     out=args.out, port=args.port, console=console)


# -- tasks -----------------------------------------------------------------------------------
def cmd_tasks(args: argparse.Namespace) -> int:
    from farm.tasks import cli as tasks_cli

    cfg = _cfg(args).benchmark
    if args.tasks_command == "fetch":
        return tasks_cli.fetch(cfg, out=console)
    return tasks_cli.list_tasks(cfg, as_json=args.json, out=console, err=err_console, path=args.path)


# -- validate --------------------------------------------------------------------------------
def cmd_validate(args: argparse.Namespace) -> int:
    from farm.config import config_hash, require_endpoint, to_yaml
    from farm.errors import UnsupportedTaskError
    from farm.sandbox.registry import check_environment, check_task
    from farm.tasks.benchmark import load_benchmark_report
    from farm.tasks.cli import by_language, print_report

    cfg = _cfg(args)
    require_endpoint(cfg)  # what `farm run` would refuse, `farm validate` refuses too
    loaded = load_benchmark_report(cfg.benchmark)
    tasks = loaded.tasks
    if args.show:
        console.print(to_yaml(cfg))
        from farm.config.arms import arms_of, budget_rows, render_budgets

        arms = arms_of(cfg)
        console.print(render_budgets(budget_rows(arms, cfg.experiment.benchmarks)), markup=False,
                      highlight=False, soft_wrap=True)
        from farm.run.serving_facts import render_serving

        console.print(render_serving(arms), markup=False, highlight=False, soft_wrap=True)
    check_environment(cfg.sandbox)
    refused: dict[str, list[str]] = {}
    for task in tasks:
        try:
            check_task(task, cfg.sandbox)
        except UnsupportedTaskError as exc:
            refused.setdefault(exc.reason, []).append(task.task_id)
    runnable = len(tasks) - sum(map(len, refused.values()))
    console.print(f"config ok (hash {config_hash(cfg)}); benchmark {cfg.benchmark.name!r}: {len(tasks)} tasks"
                  f"{by_language(tasks)}; sandbox.backend={cfg.sandbox.backend}: {runnable} runnable")
    for reason, ids in sorted(refused.items()):
        shown = ", ".join(ids[:5]) + (f", ... ({len(ids)} in all)" if len(ids) > 5 else "")
        console.print(f"  not runnable (task_unsupported:{reason}): {shown}")
    print_report(loaded.report, err_console)
    return 0


# -- serve / gc ------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    from farm.serve.cli import serve_main

    return serve_main(_cfg(args))


def cmd_gc(args: argparse.Namespace) -> int:
    from farm.run.gc import gc_main

    return gc_main(_cfg(args), dry_run=args.dry_run, console=console)


def cmd_images(args: argparse.Namespace) -> int:
    from farm.sandbox.images.cli import build_images, prune_images

    if args.images_command == "prune":
        return prune_images(_cfg(args), everything=args.all, out=console, err=err_console)
    if args.images_command == "check":
        from farm.sandbox.images.check import check_images

        return check_images(_cfg(args), offline=args.offline, jobs=args.jobs, out=console, err=err_console,
                            lock=args.lock)
    if args.images_command == "prepull":
        from farm.sandbox.images.cli import prepull_images

        return prepull_images(_cfg(args), next_n=args.next, out=console, err=err_console)
    return build_images(_cfg(args), push=args.push, jobs=args.jobs, out=console, err=err_console)


# -- export / diff --------------------------------------------------------------------------
def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from farm.report.atif import export_store_run
    from farm.store.results import ResultStore

    cfg = _cfg(args)  # only store.* is read: where the run is
    store = ResultStore.open(args.store or cfg.store.uri, cfg.store.endpoint_url, cfg.store.region, create=False)
    summary = export_store_run(store, args.run, Path(args.out))  # steps streamed, never the whole table
    console.print(f"exported {len(summary.written)} ATIF trajectories of run [bold]{args.run}[/] to {summary.out_dir}"
                  + (f"; {len(summary.without_steps)} trials have no steps (the agent never ran), listed in "
                     "index.jsonl" if summary.without_steps else ""), highlight=False, soft_wrap=True)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    import json

    from farm.report.cli import report_overrides
    from farm.report.data import load_run
    from farm.report.diff import diff_runs, print_diff
    from farm.report.tables import ReportOptions
    from farm.store.results import ResultStore

    cfg = _cfg(args)
    uri = args.store or cfg.store.uri
    stores = [ResultStore.open(u, cfg.store.endpoint_url, cfg.store.region, create=False)
              for u in (uri, args.store_b or uri)]
    run_a, run_b = load_run(stores[0], args.run_a), load_run(stores[1], args.run_b)
    report = {**(run_a.config.get("report") or {}), **report_overrides(list(args.overrides))}
    diff = diff_runs(run_a, run_b, ReportOptions.from_config({"report": report}).bootstrap_options)
    if args.json:
        print(json.dumps(diff.to_json(), indent=1))
    else:
        print_diff(diff, console)
    return 0


# -- plan (forecast) ---------------------------------------------------------------------------
def cmd_plan(args: argparse.Namespace) -> int:
    import json

    from farm.forecast.cli import print_forecast
    from farm.forecast.model import forecast, load_plan_spec
    from farm.forecast.pilot import load_pilot
    from farm.store.results import ResultStore

    spec = load_plan_spec(args.plan, list(args.overrides))
    pilot = None
    if args.run:
        cfg = load_config([], config_file=args.config)  # only store.* is read: where the pilot is
        store = ResultStore.open(args.store or cfg.store.uri, cfg.store.endpoint_url, cfg.store.region, create=False)
        pilot = load_pilot(store, args.run)
    fc = forecast(spec, pilot)
    if args.json:
        print(json.dumps(fc.to_json(), indent=1, default=str))
    else:
        print_forecast(fc, console)
    return 0


# -- leaf ------------------------------------------------------------------------------------
def cmd_leaf(args: argparse.Namespace) -> int:
    from pathlib import Path

    from farm.agent.leaf_import import import_leaf

    out = Path(args.out).expanduser().resolve()
    manifest = import_leaf(Path(args.path), out)
    console.print(f"imported the vendor's system prompt and {manifest['tools_file']} from {manifest['module']}",
                  markup=False, highlight=False)
    console.print(f"  system prompt sha256 {manifest['system_prompt_sha256']}\n  tools sha256 "
                  f"{manifest['tools_sha256']}\nrun with:\n  agent.system_prompt_file={out / 'system_prompt.txt'} "
                  f"agent.tools_file={out / 'tools.json'}", markup=False, highlight=False, soft_wrap=True)
    return 0


def _add(sub: Any, name: str, fn: Any, help: str, epilog: str | None = None,
         first: tuple[str, str] | None = None) -> argparse.ArgumentParser:
    """A command that takes config overrides and --config, as `farm run` does (``first``: a positional before them)."""
    sp = sub.add_parser(name, help=help, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    if first:
        sp.add_argument(first[0], help=first[1])
    sp.add_argument("overrides", nargs="*", help="config overrides: group=name or dotted.key=value")
    sp.add_argument("--config", help="a YAML file merged over the defaults (before the overrides)")
    sp.set_defaults(fn=fn)
    return sp


def _run_commands(sub: Any) -> None:
    """run, plan, report."""
    r = _add(sub, "run", cmd_run, "run an evaluation (resumes if the run exists)", epilog=RUN_EXIT_CODES)
    r.add_argument("--strict", action="store_true", help=STRICT_HELP)
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    g = _add(sub, "grade", cmd_run, "grade a SWE-bench predictions file as a run (agent=predictions; default "
             "benchmark=swebench-verified)", RUN_EXIT_CODES, ("predictions_file", "JSONL, JSON list or JSON by id"))
    g.add_argument("--strict", action="store_true", help=STRICT_HELP)
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    pl = sub.add_parser("plan", help="forecast a full run's wall time, GPU- and pod-hours, tokens and cost from a "
                        "pilot run and a plan file (docs/scale.md)")
    pl.add_argument("run", nargs="?", help="pilot run id (omit: every benchmark needs a workload.<name> profile)")
    pl.add_argument("--plan", help="plan file (YAML): run, cluster, llm, prices, workload, sensitivity")
    pl.add_argument("--store", help="store URI of the pilot (default: store.uri of the config)")
    pl.add_argument("--json", action="store_true", help="print the forecast as JSON")
    pl.add_argument("--config", help="farm config file whose store.* locates the pilot")
    pl.add_argument("overrides", nargs="*", default=[], help="plan overrides: dotted.key=value (run.seeds=3)")
    pl.set_defaults(fn=cmd_plan)
    rep = sub.add_parser("report", help="summarise and render a run from its Parquet")
    rep.add_argument("run", help="run id")
    rep.add_argument("--compare", nargs="*", default=[], help="more run ids to compare")
    rep.add_argument("--store", help="store URI (default: store.uri of the config)")
    rep.add_argument("--out", help="directory for report.md / report.html / CSVs")
    rep.add_argument("--claims-dir", help="a directory of claims YAML files (same as report.claims_dir=DIR)")
    rep.add_argument("--official", metavar="RESULTS_JSON", help="a SWE-bench harness results.json: both verdicts "
                     "per instance, the agreement and the disagreements (with --out: official-agreement.csv/.json)")
    rep.add_argument("overrides", nargs="*", default=[])
    rep.add_argument("--config")
    rep.set_defaults(fn=cmd_report)


def _task_commands(sub: Any) -> None:
    """tasks list|fetch, images build|prune|check|prepull."""
    t = sub.add_parser("tasks", help="task operations")
    tsub = t.add_subparsers(dest="tasks_command", required=True)
    tl = tsub.add_parser("list", help="list the tasks of a benchmark or directory")
    tl.add_argument("--path", help="a directory of Harbor-format tasks (same as benchmark.path=DIR)")
    tl.add_argument("--json", action="store_true", help="print the tasks and the load report as JSON")
    tl.add_argument("--strict", action="store_true", help=STRICT_HELP)
    tl.add_argument("overrides", nargs="*", default=[])
    tl.add_argument("--config")
    tl.set_defaults(fn=cmd_tasks)
    tf = tsub.add_parser("fetch", help="fetch a pinned source into the cache (benchmark=NAME [benchmark.mirror=...])")
    tf.add_argument("overrides", nargs="*", default=[])
    tf.add_argument("--config")
    tf.set_defaults(fn=cmd_tasks)
    im = sub.add_parser("images", help="task images: build each task's environment/Dockerfile (docs/sandboxes.md)")
    isub = im.add_subparsers(dest="images_command", required=True)
    ib = isub.add_parser("build", help="build every selected task's image with sandbox.docker.engine; exit 1 if "
                         "any build failed", formatter_class=argparse.RawDescriptionHelpFormatter)
    ib.add_argument("--push", metavar="REGISTRY", help="also tag REGISTRY/farm-task/<task>:<hash> and push it "
                    "(what sandbox.kubernetes.build_registry=REGISTRY runs)")
    ib.add_argument("--jobs", type=int, default=1, help="builds at once (default 1)")
    ib.add_argument("overrides", nargs="*", default=[])
    ib.add_argument("--config")
    ib.set_defaults(fn=cmd_images)
    ip = isub.add_parser("prune", help="remove the selected tasks' builds whose Dockerfile or context changed since")
    ip.add_argument("--all", action="store_true", help="remove every build of the selected tasks")
    ip.add_argument("overrides", nargs="*", default=[])
    ip.add_argument("--config")
    ip.set_defaults(fn=cmd_images)
    ic = isub.add_parser("check", help="say how every selected task's image would be had (pulled: present or in "
                         "the registry, with its digest; built: tag, cached, FROM bases), without pulling or "
                         "building; exit 1 if any task cannot resolve")
    ic.add_argument("--offline", action="store_true", help="do not ask the registry (absent images: 'not checked')")
    ic.add_argument("--jobs", type=int, default=4, help="tasks checked at once (default 4)")
    ic.add_argument("--lock", metavar="PATH", help="also write every task's digest as an image lock "
                    "(sandbox.kubernetes.image_lock=PATH); exit 1 naming the tasks without one")
    ic.add_argument("overrides", nargs="*", default=[])
    ic.add_argument("--config")
    ic.set_defaults(fn=cmd_images)
    ipp = isub.add_parser("prepull", help="print a DaemonSet that pulls the run's next N images onto every "
                          "sandbox node (kubectl apply -f -)")
    ipp.add_argument("--next", type=int, default=20, help="how many distinct images, in plan order (default 20)")
    ipp.add_argument("overrides", nargs="*", default=[])
    ipp.add_argument("--config")
    ipp.set_defaults(fn=cmd_images)


def _run_history_commands(sub: Any) -> None:
    """regrade, view, validate, serve, gc."""
    rg = sub.add_parser("regrade", help="re-grade a finished run's stored patches in fresh sandboxes, without "
                        "re-running agents (docs/integrity.md)")
    rg.add_argument("run", help="run id")
    rg.add_argument("--only", choices=("all", "infra", "verifier"), default="all",
                    help="all graded trials and grading failures (default), every infra_error, or only trials "
                         "whose grading failed")
    rg.add_argument("overrides", nargs="*", default=[],
                    help="on top of the run's stored config (store.* also says where the run is)")
    rg.add_argument("--config")
    rg.set_defaults(fn=cmd_regrade)
    vw = sub.add_parser("view", help="browse a run's trials, steps, patches and verifier output as HTML, from its "
                        "Parquet (docs/viewer.md)")
    vw.add_argument("run", help="run id")
    vw.add_argument("--store", help="store URI (default: store.uri of the config)")
    vw.add_argument("--out", help="write a static site to this directory instead of serving")
    vw.add_argument("--port", type=int, default=8765, help="serve on 127.0.0.1:PORT (default 8765; 0: any free port)")
    vw.add_argument("overrides", nargs="*", default=[])
    vw.add_argument("--config")
    vw.set_defaults(fn=cmd_view)
    v = _add(sub, "validate", cmd_validate, "load and validate the config and the benchmark")
    v.add_argument("--strict", action="store_true", help=STRICT_HELP)
    v.add_argument("--show", action="store_true", help="print the resolved config")
    _add(sub, "serve", cmd_serve, "serve a model with Ray Serve LLM + vLLM (blocks; Ctrl-C stops)")
    g = _add(sub, "gc", cmd_gc, "delete sandboxes (pods, containers, local dirs) of runs that are no longer alive")
    g.add_argument("--dry-run", action="store_true")


def _export_commands(sub: Any) -> None:
    """export, diff, leaf import."""
    ex = sub.add_parser("export", help="write a run's trajectories in another format (docs/export.md)")
    ex.add_argument("run", help="run id")
    ex.add_argument("out", help="output directory (one document per trial, and index.jsonl)")
    ex.add_argument("--format", choices=("atif",), required=True,
                    help="atif: Agent Trajectory Interchange Format (Harbor RFC 0001), one JSON per trial")
    ex.add_argument("--store", help="store URI (default: store.uri of the config)")
    ex.add_argument("overrides", nargs="*", default=[])
    ex.add_argument("--config")
    ex.set_defaults(fn=cmd_export)
    df = sub.add_parser("diff", help="compare two runs trial by trial: same / regrade / rerun, and the paired "
                        "difference of the outcome (docs/export.md)")
    df.add_argument("run_a", help="run id of the reference run (A)")
    df.add_argument("run_b", help="run id of the run compared with it (B)")
    df.add_argument("--store", help="store URI (default: store.uri of the config)")
    df.add_argument("--store-b", help="store of RUN_B when it is not the store of RUN_A")
    df.add_argument("--json", action="store_true", help="print the diff as JSON (per arm and per trial)")
    df.add_argument("overrides", nargs="*", default=[], help="report.bootstrap=N / report.seed=N (default: run A's)")
    df.add_argument("--config")
    df.set_defaults(fn=cmd_diff)
    lf = sub.add_parser("leaf", help="the vendor's Leaf prompt and tool schemas, from your copy of its package")
    lsub = lf.add_subparsers(dest="leaf_command", required=True)
    li = lsub.add_parser("import", help="read SYSTEM_PROMPT and OPENAI_TOOLS from a checkout or installed copy of "
                         "the vendor's package (without running it) into local files, with their hashes")
    li.add_argument("path", help="the checkout, the installed package (site-packages/frognano) or its tools.py")
    li.add_argument("--out", default="farm-leaf", help="directory to write them to (default ./farm-leaf)")
    li.set_defaults(fn=cmd_leaf)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="farm", description="Evaluation farm for tool-calling coding agents.")
    sub = p.add_subparsers(dest="command", required=True)
    # the order here is the order `farm --help` lists the commands in
    _run_commands(sub)
    _task_commands(sub)
    _run_history_commands(sub)
    _export_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse gives a trailing `key=value` after an option (`farm report RUN --out d report.seed=1`)
    # to nobody: such items are overrides like the others; anything else stays an error
    stray = [a for a in extra if "=" in a and not a.startswith("-")]
    if len(stray) != len(extra) or (stray and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if stray:
        args.overrides = [*args.overrides, *stray]
    try:
        return int(args.fn(args) or 0)
    except FarmError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return int(getattr(exc, "exit_code", EXIT_CONFIG))
    except KeyboardInterrupt:
        err_console.print("interrupted: finished trials are stored; run the same command again to resume")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
