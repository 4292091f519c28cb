#!/usr/bin/env python3
"""A CHF's Nchf_SpendingLimitControl (TS 29.594) for the N28 tests, served
by hypercorn over h2c (HTTP/2 with prior knowledge), independent of the
Rust stack. The PCF is its client; the test plays the CHF's notifications
itself, to the notifUri this CHF was given.

Usage: chf_emulator.py PORT [TABLE]

TABLE is JSON {policy counter id: status} (default {"monthly-data":
"valid"}); a counter it lacks is one the CHF does not know.

- POST /nchf-spendinglimitcontrol/v1/subscriptions (SpendingLimitContext):
  201 with Location .../subscriptions/sub-N (N counts the subscriptions
  made, from 1) and a SpendingLimitStatus
  with the table's status of each counter asked; 400 with cause
  UNKNOWN_POLICY_COUNTERS (invalidParams /policyCounterIds/{index}) when
  one is not in the table.
- PUT .../subscriptions/{id}: the same, 200 (404 for an unknown id).
- DELETE .../subscriptions/{id}: 204 (404 for an unknown id).
Each request is printed as one JSON line: {"method", "path",
"http_version", "content_type", "body"} (the body parsed as JSON).
"""

import json
import sys

from h2_peer import run

COLLECTION = "/nchf-spendinglimitcontrol/v1/subscriptions"
TABLE = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {"monthly-data": "valid"}
subscriptions = {}
made = 0


def answer(status, body, headers=None, content_type=b"application/json"):
    out = [(b"content-type", content_type)] + (headers or [])
    return status, out, json.dumps(body).encode()


def problem(status, cause, detail, invalid=None):
    body = {"status": status, "cause": cause, "detail": detail}
    if invalid:
        body["invalidParams"] = invalid
    return answer(status, body, content_type=b"application/problem+json")


def statuses(ctx):
    """SpendingLimitStatus for ctx's counters, or the 400 for unknown ones."""
    counters = (ctx or {}).get("policyCounterIds") or []
    if not counters:
        return None, problem(400, "MANDATORY_IE_MISSING", "policyCounterIds")
    unknown = [{"param": f"/policyCounterIds/{i}"} for i, c in enumerate(counters) if c not in TABLE]
    if unknown:
        return None, problem(400, "UNKNOWN_POLICY_COUNTERS", "unknown policy counters", unknown)
    infos = {c: {"policyCounterId": c, "currentStatus": TABLE[c]} for c in counters}
    return {"supi": ctx.get("supi"), "statusInfos": infos}, None


def handle(request):
    path, method, body = request["path"], request["method"], request["body"]
    if path == COLLECTION and method == "POST":
        status, refused = statuses(body)
        if refused:
            return refused
        global made
        made += 1
        sid = f"sub-{made}"
        subscriptions[sid] = body
        location = f"http://127.0.0.1:{sys.argv[1]}{COLLECTION}/{sid}".encode()
        return answer(201, status, [(b"location", location)])
    if path.startswith(COLLECTION + "/"):
        sid = path[len(COLLECTION) + 1:]
        if sid not in subscriptions:
            return problem(404, "SUBSCRIPTION_NOT_FOUND", sid)
        if method == "PUT":
            status, refused = statuses(body)
            if refused:
                return refused
            subscriptions[sid] = body
            return answer(200, status)
        if method == "DELETE":
            del subscriptions[sid]
            return 204, [], b""
    return problem(404, "RESOURCE_URI_STRUCTURE_NOT_FOUND", path)


if __name__ == "__main__":
    run(handle)
