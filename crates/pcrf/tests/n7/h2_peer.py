"""What the tests' Python HTTP/2 peers share (smf_callback.py,
nrf_emulator.py): serving an ASGI handler with hypercorn over h2c on a
loopback port, and reading each request whole, printed as one JSON line
({"method", "path", "http_version", "content_type", "body"}, the body
parsed as JSON when it is) for the Rust test to read.

A peer defines `handle(request) -> (status, headers, body bytes)` and
calls `run(handle)`.
"""

import asyncio
import json
import sys

from hypercorn.asyncio import serve
from hypercorn.config import Config


def run(handle):
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
        request = {
            "method": scope["method"],
            "path": scope["path"],
            "http_version": scope["http_version"],
            "content_type": headers.get("content-type"),
            "body": parsed,
        }
        print(json.dumps(request), flush=True)
        status, out_headers, out = handle(request)
        await send({"type": "http.response.start", "status": status, "headers": out_headers})
        await send({"type": "http.response.body", "body": out})

    config = Config()
    config.bind = [f"127.0.0.1:{sys.argv[1]}"]
    config.accesslog = None
    config.errorlog = "-"
    asyncio.run(serve(app, config))
