import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .handler import handle


def make_handler(root):
    class Handler(BaseHTTPRequestHandler):
        def _respond(self):
            response = handle(root, self.path, self.command)
            self.send_response(response.status)
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(response.body)

        do_GET = do_HEAD = _respond

    return Handler


if __name__ == "__main__":
    root, port = sys.argv[1], int(sys.argv[2])
    ThreadingHTTPServer(("127.0.0.1", port), make_handler(root)).serve_forever()
