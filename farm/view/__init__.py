"""`farm view`: a run's trials, steps, patches and verifier output as HTML, from its Parquet alone.

``data`` reads the store (the trials once, a trial's steps on demand), ``pages`` draws the HTML,
``site`` writes a static site or serves the pages; docs/viewer.md describes what is shown.
"""

from farm.view.data import RunView, ViewError
from farm.view.site import ViewServer, open_view, write_site

__all__ = ["RunView", "ViewError", "ViewServer", "open_view", "write_site"]
