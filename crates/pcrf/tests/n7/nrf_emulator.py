#!/usr/bin/env python3
"""An NRF emulator (TS 29.510 NFManagement) for the NRF client's test,
served by hypercorn over h2c (HTTP/2 with prior knowledge), independent of
the Rust stack.

Usage: nrf_emulator.py PORT

- PUT /nnrf-nfm/v1/nf-instances/{id}: stores the profile; 201 the first
  time, 200 after; answers the profile with heartBeatTimer 1.
- PATCH on it: 204 while registered; the 2nd heartbeat of the first
  registration is answered 404 and the instance forgotten (as an NRF that
  restarted), so the client must register again.
- DELETE on it: 204.
Each request is printed as one JSON line: {"method", "path", "http_version",
"content_type", "body"} (the body parsed as JSON when it is).
"""

import json

from h2_peer import run

PREFIX = "/nnrf-nfm/v1/nf-instances/"
state = {"profiles": {}, "heartbeats": 0, "forgot": False}


def handle(request):
    path = request["path"]
    status, answer = 404, None
    if path.startswith(PREFIX):
        nf_id = path[len(PREFIX):]
        method = request["method"]
        if method == "PUT":
            status = 200 if nf_id in state["profiles"] else 201
            profile = dict(request["body"] or {})
            profile["heartBeatTimer"] = 1
            state["profiles"][nf_id] = profile
            answer = profile
        elif method == "PATCH":
            if nf_id not in state["profiles"]:
                status = 404
            else:
                state["heartbeats"] += 1
                if state["heartbeats"] == 2 and not state["forgot"]:
                    state["forgot"] = True
                    del state["profiles"][nf_id]
                    status = 404
                else:
                    status = 204
        elif method == "DELETE":
            status = 204 if state["profiles"].pop(nf_id, None) is not None else 404
    out = json.dumps(answer).encode() if answer is not None else b""
    hs = [(b"content-type", b"application/json")] if out else []
    return status, hs, out


if __name__ == "__main__":
    run(handle)
