import os
from urllib.parse import unquote


class NotFound(Exception):
    pass


def resolve(root, request_path):
    """The file below ``root`` that ``request_path`` (from the request line) names."""
    path = unquote(request_path.split("?", 1)[0].split("#", 1)[0])
    if path.endswith("/"):
        path += "index.html"
    candidate = os.path.join(root, path.lstrip("/"))
    if os.path.isdir(candidate):
        candidate = os.path.join(candidate, "index.html")
    if not os.path.isfile(candidate):
        raise NotFound(request_path)
    return candidate
