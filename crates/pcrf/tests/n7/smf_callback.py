#!/usr/bin/env python3
"""An SMF's notification side (TS 29.512 §4.2.3, §4.2.4) for the N7
session tests, served by hypercorn over h2c (HTTP/2 with prior
knowledge), independent of the Rust stack.

Usage: smf_callback.py PORT

- POST {anything}/update: 204 (the SMF applied the notification).
- POST {anything}/terminate: 204.
- POST {anything}/notify: 204 (an AF's event notification, N5).
- Any path under /gone/: 404, as an SMF that no longer has the session.
- POST .../pcfBindings: 201 with Location .../pcfBindings/{n} (a BSF);
  DELETE .../pcfBindings/{n}: 204.
- Under /flaky/: 503 the first time a path is asked, then as above (an
  SMF restarting: the PCF must try again).
Each request is printed as one JSON line: {"method", "path",
"http_version", "content_type", "body"} (the body parsed as JSON).
"""

from h2_peer import run

seen = set()


def handle(request):
    path, method = request["path"], request["method"]
    headers = []
    if path.endswith("/pcfBindings") and method == "POST":
        seen.add(path + str(len(seen)))
        status = 201
        headers = [(b"location", f"http://127.0.0.1{path}/b{len(seen)}".encode())]
    elif "/pcfBindings/" in path and method == "DELETE":
        status = 204
    elif path.startswith("/gone/"):
        status = 404
    elif path.startswith("/flaky/") and path not in seen:
        seen.add(path)
        status = 503
    elif method == "POST" and path.endswith(("/update", "/terminate", "/notify")):
        status = 204
    else:
        status = 404
    return status, headers, b""


if __name__ == "__main__":
    run(handle)
