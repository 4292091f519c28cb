#!/usr/bin/env python3
"""The 5G side of chaos/bindings.sh: VoNR calls over N7 and N5 against a
PCF that is killed and restarted under them, a BSF, and the check that
no binding was lost or left behind. Independent of the Rust stack
(httpx over h2c for the SMF and the P-CSCF, hypercorn for the BSF and the
notification side).

Usage: bindings.py --sbi HOST:PORT --api URL --port N --work DIR
                   [--rate R] [--duration S] [--keep F] [--hold S]
                   [--bsf per-address|keep-all]

- Serves on 127.0.0.1:N, over h2c: the BSF under /bsf
  (Nbsf_Management: POST pcfBindings answers 201 with a Location
  .../pcfBindings/{id}; DELETE on it 204, or 404 for one it does not
  hold). `--bsf per-address` (the default) keeps one binding per UE
  address, as open5gs's BSF does: a registration for an address it
  holds updates that binding and answers with its id. `--bsf keep-all`
  keeps every binding it is given, two for one address too, so that a
  binding registered twice shows. Every other POST (the SMF's and the
  AF's notifications) is answered 204.
- Provisions 2000 subscribers through the API, then writes
  DIR/provisioned.
- Starts R calls a second for S seconds, each with its own UE address:
  the SMF's N7 Create, the P-CSCF's N5 Create of a voice session, the
  call's hold time, the N5 delete, the N7 Delete. A share F of the calls
  is never released: those sessions stay open to the end.
  A request that gets no answer (the PCF was killed), a 5xx or a 503 is
  sent again until it is answered, for at most 120 s; a 404 to a repeated
  delete means the first one was applied.
- Writes DIR/load-done when the last call has finished, then waits for
  DIR/check-now (the script has killed and restarted the PCF once more)
  and compares, for up to 60 s until they agree:
  - the PCF's open N7 sessions (REST API) with the BSF's bindings: a
    UE address with an open session and no binding is a binding
    **lost**, one with a binding and no open session a binding **left
    behind** (keep-all: per UE address, as many bindings as open
    sessions, since a Create sent again after a kill may have opened a
    second session for one address);
  - every PDU session and AF session the load created: one acknowledged
    open must be there (else **lost**), one whose delete (or whose PDU
    session's delete) was acknowledged must be gone (else **left
    behind**).
  Prints the counts and writes DIR/bindings-verdict.json; exits 1 when
  any count is not 0.
"""

import argparse
import asyncio
import json
import os
import random
import sys
import time

import httpx
from hypercorn.asyncio import serve
from hypercorn.config import Config

SM = "/npcf-smpolicycontrol/v1/sm-policies"
APP = "/npcf-policyauthorization/v1/app-sessions"
BSF = "/bsf/nbsf-management/v1/pcfBindings"
IMSI_FIRST = 1_010_900_000_000  # 001010900000000 + n (not the Gx population)
SUBSCRIBERS = 2000
RETRY_FOR = 120.0

bindings = {}  # id -> PcfBinding
PER_ADDRESS = [True]
next_binding = [0]
counts = {"calls": 0, "failed": 0, "retries": 0, "kept": 0}
pdu = {}  # PDU session id -> {"ue", "open"}
apps = {}  # app session id -> {"pdu", "open"}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif m["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            break
    path, method = scope["path"], scope["method"]
    status, headers = 204, []
    if path == BSF and method == "POST":
        binding = json.loads(body)
        held = [k for k, b in bindings.items() if b.get("ipv4Addr") == binding.get("ipv4Addr")]
        if held and PER_ADDRESS[0]:
            bid = held[0]
        else:
            next_binding[0] += 1
            bid = str(next_binding[0])
        bindings[bid] = binding
        status = 201
        headers = [(b"location", f"http://127.0.0.1{BSF}/{bid}".encode())]
    elif path.startswith(BSF + "/") and method == "DELETE":
        status = 204 if bindings.pop(path[len(BSF) + 1:], None) is not None else 404
    elif method != "POST":
        status = 404
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def imsi(n):
    return f"{IMSI_FIRST + n:015d}"


async def send(client, method, path, body, repeat_ok_404=False):
    """The answer (status, headers, JSON) to a request sent until answered."""
    deadline = time.monotonic() + RETRY_FOR
    tries = 0
    while True:
        tries += 1
        try:
            r = await client.request(method, path, json=body, timeout=5.0)
            if r.status_code < 500:
                if r.status_code == 404 and tries > 1 and repeat_ok_404:
                    return 204, r.headers, None
                data = r.json() if r.content and r.headers.get("content-type", "").endswith("json") else None
                return r.status_code, r.headers, data
        except (httpx.TransportError, httpx.RemoteProtocolError):
            pass
        if time.monotonic() > deadline:
            return 0, {}, None
        counts["retries"] += 1
        await asyncio.sleep(0.2 + random.random() * 0.3)


async def call(client, n, args, notify):
    ue = f"10.{100 + (n >> 16) % 100}.{(n >> 8) % 256}.{n % 256}"
    sub = imsi(n % SUBSCRIBERS)
    create = {
        # Each call its own (SUPI, PDU session id): a Create for a pair
        # already served replaces that association (PCF resource cleanup).
        "supi": f"imsi-{sub}", "pduSessionId": 1 + (n // SUBSCRIBERS) % 15, "pduSessionType": "IPV4", "dnn": "internet",
        "notificationUri": f"{notify}/smf/{n}", "sliceInfo": {"sst": 1, "sd": "000001"},
        "accessType": "3GPP_ACCESS", "ratType": "NR", "ipv4Address": ue,
        "servingNetwork": {"mcc": "001", "mnc": "01"}, "suppFeat": "4000000",
        "subsDefQos": {"5qi": 9, "arp": {"priorityLevel": 8, "preemptCap": "NOT_PREEMPT",
                                          "preemptVuln": "NOT_PREEMPTABLE"}},
    }
    st, h, _ = await send(client, "POST", SM, create)
    if st != 201:
        counts["failed"] += 1
        print(f"call {n}: N7 Create answered {st}", file=sys.stderr)
        return
    sm = h["location"].rsplit("/", 1)[-1]
    pdu[sm] = {"ue": ue, "open": True}
    fd = lambda a, b: [f"permit out 17 from 192.0.2.9 {b} to {ue} {a}",
                       f"permit in 17 from {ue} {a} to 192.0.2.9 {b}"]
    asc = {"ascReqData": {
        "afAppId": "IMS Services", "notifUri": f"{notify}/af/{n}", "ueIpv4": ue, "dnn": "internet",
        "supi": f"imsi-{sub}", "suppFeat": "0",
        "medComponents": {"1": {
            "medCompN": 1, "medType": "AUDIO", "marBwUl": "64 Kbps", "marBwDl": "48 Kbps",
            "fStatus": "ENABLED",
            "medSubComps": {"1": {"fNum": 1, "fDescs": fd(4000, 5000)},
                            "2": {"fNum": 2, "fDescs": fd(4001, 5001), "flowUsage": "RTCP"}},
        }},
    }}
    st, h, _ = await send(client, "POST", APP, asc)
    if st != 201:
        counts["failed"] += 1
        print(f"call {n}: N5 Create answered {st}", file=sys.stderr)
    else:
        a = h["location"].rsplit("/", 1)[-1]
        apps[a] = {"pdu": sm, "open": True}
    if random.random() < args.keep:
        counts["kept"] += 1
        return
    await asyncio.sleep(args.hold * (0.5 + random.random()))
    if st == 201:
        st2, _, _ = await send(client, "POST", f"{APP}/{a}/delete", None, repeat_ok_404=True)
        if st2 in (200, 204):
            apps[a]["open"] = False
        else:
            counts["failed"] += 1
            print(f"call {n}: N5 delete answered {st2}", file=sys.stderr)
    st3, _, _ = await send(client, "POST", f"{SM}/{sm}/delete", {}, repeat_ok_404=True)
    if st3 == 204:
        pdu[sm]["open"] = False
        for a_ in apps.values():
            if a_["pdu"] == sm:
                a_["open"] = False
    else:
        counts["failed"] += 1
        print(f"call {n}: N7 Delete answered {st3}", file=sys.stderr)


async def check(args, client):
    api = httpx.AsyncClient(base_url=args.api, timeout=30.0)
    deadline = time.monotonic() + 60
    while True:
        r = await api.get("/v1/sessions", params={"limit": 100000})
        listed = r.json()["sessions"]
        open_n7 = {s["id"]: s for s in listed if s.get("n7") and s.get("state", "open") == "open"}
        ues = {}
        for s in open_n7.values():
            ues.setdefault(s["n7"].get("ipv4Address"), []).append(s["id"])
        bound = {}
        for b in bindings.values():
            bound.setdefault(b.get("ipv4Addr"), 0)
            bound[b.get("ipv4Addr")] += 1
        # Per UE address, as many bindings as open sessions (a Create
        # repeated after a kill may have opened a second one); one, for a
        # BSF that keeps one per address.
        addrs = set(ues) | set(bound)
        if PER_ADDRESS[0]:
            ues = {ue: ids[:1] for ue, ids in ues.items()}
        lost = sorted(ue for ue in addrs if len(ues.get(ue, [])) > bound.get(ue, 0))
        behind = sorted(ue for ue in addrs if bound.get(ue, 0) > len(ues.get(ue, [])))
        n_lost = sum(len(ues.get(ue, [])) - bound.get(ue, 0) for ue in lost)
        n_behind = sum(bound.get(ue, 0) - len(ues.get(ue, [])) for ue in behind)
        if (not lost and not behind) or time.monotonic() > deadline:
            break
        await asyncio.sleep(1)
    sessions_lost = sessions_behind = afs_lost = afs_behind = 0
    for sm, p in pdu.items():
        r = await client.get(f"{SM}/{sm}", timeout=10.0)
        if p["open"] and r.status_code != 200:
            sessions_lost += 1
            print(f"lost PDU session {sm} ({p['ue']}): {r.status_code}", file=sys.stderr)
        if not p["open"] and r.status_code != 404:
            sessions_behind += 1
            print(f"PDU session {sm} still there after its Delete: {r.status_code}", file=sys.stderr)
    for a, s in apps.items():
        r = await client.get(f"{APP}/{a}", timeout=10.0)
        if s["open"] and r.status_code != 200:
            afs_lost += 1
            print(f"lost AF session {a}: {r.status_code}", file=sys.stderr)
        if not s["open"] and r.status_code != 404:
            afs_behind += 1
            print(f"AF session {a} still there after its delete: {r.status_code}", file=sys.stderr)
    verdict = {
        "bsf": "per-address" if PER_ADDRESS[0] else "keep-all",
        "calls": counts["calls"], "calls_kept_open": counts["kept"], "calls_failed": counts["failed"],
        "retries": counts["retries"], "open_n7_sessions": len(open_n7), "bsf_bindings": len(bindings),
        "bindings_lost": n_lost, "bindings_left_behind": n_behind,
        "pdu_sessions_lost": sessions_lost, "pdu_sessions_left_behind": sessions_behind,
        "af_sessions_lost": afs_lost, "af_sessions_left_behind": afs_behind,
        "examples": {"lost": lost[:5], "left_behind": behind[:5]},
    }
    return verdict


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbi", required=True)
    ap.add_argument("--api", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--keep", type=float, default=0.1)
    ap.add_argument("--hold", type=float, default=3.0)
    ap.add_argument("--bsf", choices=["per-address", "keep-all"], default="per-address")
    args = ap.parse_args()
    PER_ADDRESS[0] = args.bsf == "per-address"
    cfg = Config()
    cfg.bind = [f"127.0.0.1:{args.port}"]
    cfg.accesslog = None
    cfg.errorlog = None
    stop = asyncio.Event()
    server = asyncio.create_task(serve(app, cfg, shutdown_trigger=stop.wait))
    notify = f"http://127.0.0.1:{args.port}"

    api = httpx.AsyncClient(base_url=args.api, timeout=30.0)
    async def provision(i):
        r = await api.put(f"/v1/subscribers/{imsi(i)}", json={"plan": "basic"})
        if r.status_code >= 300:
            sys.exit(f"provisioning {imsi(i)}: {r.status_code} {r.text}")
    for first in range(0, SUBSCRIBERS, 50):
        await asyncio.gather(*(provision(i) for i in range(first, min(first + 50, SUBSCRIBERS))))
    # The script starts the Gx load and the kills once this is there.
    open(os.path.join(args.work, "provisioned"), "w").close()

    limits = httpx.Limits(max_connections=8)
    client = httpx.AsyncClient(base_url=f"http://{args.sbi}", http1=False, http2=True, limits=limits)
    started = time.monotonic()
    tasks = []
    n = 0
    while time.monotonic() - started < args.duration:
        due = started + n / args.rate
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        counts["calls"] += 1
        tasks.append(asyncio.create_task(call(client, n, args, notify)))
        n += 1
    await asyncio.gather(*tasks)
    open(os.path.join(args.work, "load-done"), "w").close()
    print(f"calls {counts['calls']} ({counts['kept']} kept open, {counts['failed']} failed), "
          f"retries {counts['retries']}", file=sys.stderr)
    flag = os.path.join(args.work, "check-now")
    while not os.path.exists(flag):
        await asyncio.sleep(0.2)
    client = httpx.AsyncClient(base_url=f"http://{args.sbi}", http1=False, http2=True, limits=limits)
    verdict = await check(args, client)
    with open(os.path.join(args.work, "bindings-verdict.json"), "w") as f:
        json.dump(verdict, f, indent=1)
    print(json.dumps(verdict))
    stop.set()
    await server
    bad = [k for k in verdict if k.endswith(("_lost", "_left_behind", "_failed")) and verdict[k]]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    asyncio.run(main())
