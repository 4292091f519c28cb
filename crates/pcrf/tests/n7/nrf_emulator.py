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
- GET /nnrf-disc/v1/nf-instances?target-nf-type=BSF...: a SearchResult
  offering one BSF, this server under /bsf (a suspended one of better
  priority beside it, which must not be chosen).
- POST /bsf/nbsf-management/v1/pcfBindings: 201 with a Location
  .../pcfBindings/{n}; DELETE on it: 204 (the BSF's role).
Each request is printed as one JSON line: {"method", "path", "http_version",
"content_type", "body"} (the body parsed as JSON when it is).
"""

import json
import sys

from h2_peer import run

PREFIX = "/nnrf-nfm/v1/nf-instances/"
DISCOVERY = "/nnrf-disc/v1/nf-instances"
BINDINGS = "/bsf/nbsf-management/v1/pcfBindings"
state = {"profiles": {}, "heartbeats": 0, "forgot": False, "bindings": 0}


def search_result():
    port = int(sys.argv[1])
    bsf = lambda status, priority, prefix: {
        "nfInstanceId": f"bsf-{status.lower()}", "nfType": "BSF", "nfStatus": status,
        "priority": priority,
        "nfServices": [{"serviceInstanceId": "1", "serviceName": "nbsf-management",
                        "versions": [{"apiVersionInUri": "v1", "apiFullVersion": "1.0.0"}],
                        "scheme": "http", "nfServiceStatus": "REGISTERED", "apiPrefix": prefix}],
    }
    return {"validityPeriod": 3600, "nfInstances": [
        bsf("SUSPENDED", 1, "http://127.0.0.1:9/bsf"),
        bsf("REGISTERED", 10, f"http://127.0.0.1:{port}/bsf"),
    ]}


def handle(request):
    path = request["path"]
    status, answer, headers = 404, None, []
    if path == DISCOVERY and request["method"] == "GET":
        status, answer = 200, search_result()
    elif path == BINDINGS and request["method"] == "POST":
        state["bindings"] += 1
        status = 201
        headers = [(b"location", f"http://127.0.0.1{BINDINGS}/{state['bindings']}".encode())]
    elif path.startswith(BINDINGS + "/") and request["method"] == "DELETE":
        status = 204
    elif path.startswith(PREFIX):
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
    hs = headers + ([(b"content-type", b"application/json")] if out else [])
    return status, hs, out


if __name__ == "__main__":
    run(handle)
