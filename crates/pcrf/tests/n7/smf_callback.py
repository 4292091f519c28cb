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

import asyncio
import json
import sys

from hypercorn.asyncio import serve
from hypercorn.config import Config

seen = set()


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = body.decode(errors="replace")
    path = scope["path"]
    print(
        json.dumps(
            {
                "method": scope["method"],
                "path": path,
                "http_version": scope["http_version"],
                "content_type": headers.get("content-type"),
                "body": parsed,
            }
        ),
        flush=True,
    )
    headers = []
    if path.endswith("/pcfBindings") and scope["method"] == "POST":
        seen.add(path + str(len(seen)))
        status = 201
        headers = [(b"location", f"http://127.0.0.1{path}/b{len(seen)}".encode())]
    elif "/pcfBindings/" in path and scope["method"] == "DELETE":
        status = 204
    elif path.startswith("/gone/"):
        status = 404
    elif path.startswith("/flaky/") and path not in seen:
        seen.add(path)
        status = 503
    elif scope["method"] == "POST" and path.endswith(("/update", "/terminate", "/notify")):
        status = 204
    else:
        status = 404
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def main():
    config = Config()
    config.bind = [f"127.0.0.1:{sys.argv[1]}"]
    config.accesslog = None
    config.errorlog = "-"
    asyncio.run(serve(app, config))


if __name__ == "__main__":
    main()
