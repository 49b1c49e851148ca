"""`farm view RUN`: serve a run's pages on 127.0.0.1, or write them as a static site (--out)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from farm.errors import ConfigError
from farm.view.site import ViewServer, open_view, write_site

DEFAULT_PORT = 8765


def view_main(run_id: str, uri: str, endpoint: str | None, region: str | None, *, out: str | None = None,
              port: int = DEFAULT_PORT, console: Console | None = None) -> int:
    """Raises:
        ConfigError: ``port`` is out of range or ``out`` is a file.
        StoreError / ViewError: the store or the run cannot be read.
    """
    console = console or Console()
    if not 0 <= port <= 65535:
        raise ConfigError(f"invalid value {port!r} for '--port': expected 0..65535 (0: any free port)")
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise ConfigError(f"invalid value {out!r} for '--out': it is a file, expected a directory")
    view = open_view(uri, run_id, endpoint, region)
    if out is not None:
        def progress(done: int, total: int) -> None:
            console.print(f"  {done}/{total} trial pages", highlight=False)

        stats = write_site(view, Path(out), progress=progress if view.trials.num_rows >= 1000 else None)
        console.print(f"viewer written to {out}: {stats.trial_pages} trial pages, {stats.pair_pages} side-by-side "
                      f"pages in {stats.seconds:.1f}s; open {Path(out) / 'index.html'}", highlight=False)
        return 0
    try:
        server = ViewServer(view, port=port)
    except OSError as exc:
        raise ConfigError(f"invalid value {port!r} for '--port': cannot listen on 127.0.0.1:{port} ({exc})") from None
    console.print(f"serving run [bold]{run_id}[/] ({view.trials.num_rows} trials) at {server.url} "
                  "(Ctrl-C stops)", highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped")
    finally:
        server.server_close()
    return 0
