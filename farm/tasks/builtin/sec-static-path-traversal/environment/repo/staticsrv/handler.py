import mimetypes
from dataclasses import dataclass, field

from .files import NotFound, resolve


@dataclass
class Response:
    status: int
    headers: dict = field(default_factory=dict)
    body: bytes = b""


def handle(root, request_path, method="GET"):
    if method not in ("GET", "HEAD"):
        return Response(405, {"Allow": "GET, HEAD"})
    try:
        path = resolve(root, request_path)
    except NotFound:
        return Response(404, {"Content-Type": "text/plain"}, b"not found\n")
    with open(path, "rb") as fh:
        body = fh.read()
    ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
    headers = {"Content-Type": ctype, "Content-Length": str(len(body))}
    return Response(200, headers, b"" if method == "HEAD" else body)
