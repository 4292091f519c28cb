#!/usr/bin/env python3
"""An SMF's side of N7 with httpx (HTTP/2), independent of the Rust stack:
the Create bodies open5gs's and free5gc's SMFs send, then Get, free5gc's
Update and Delete, each answer checked against what the SMFs need.

Usage: sbi_smf.py BASE_URL CA_FILE_OR_- OPEN5GS_JSON FREE5GC_JSON UPDATE_JSON

Prints one JSON line per step: {"step", "status", "http_version", ...}.
"""

import json
import re
import sys

import httpx

# free5gc's SMF reads the SM policy id out of Location with this.
FREE5GC_LOCATION = re.compile(r"http[s]?://.*/npcf-smpolicycontrol/v\d+/sm-policies/(.*)")


def main():
    base, ca, open5gs, free5gc, update = sys.argv[1:6]
    verify = ca if ca != "-" else False
    http1 = False
    http2 = True
    client = httpx.Client(http1=http1, http2=http2, verify=verify, timeout=10)
    root = base.rstrip("/") + "/npcf-smpolicycontrol/v1/sm-policies"
    for name, path in (("open5gs", open5gs), ("free5gc", free5gc)):
        body = open(path, "rb").read()
        r = client.post(root, content=body, headers={"content-type": "application/json"})
        location = r.headers.get("location", "")
        m = FREE5GC_LOCATION.match(location)
        decision = r.json() if r.status_code == 201 else {}
        sess = list(decision.get("sessRules", {}).values())
        rules = decision.get("pccRules", {})
        qos = decision.get("qosDecs", {})
        # open5gs skips a rule whose refQosData[0] names no qosDecs key or
        # that has no flowInfos (predefined rules, with only an id, aside).
        dynamic = [r for r in rules.values() if len(r) > 1]
        applied = [
            r for r in dynamic
            if r.get("refQosData") and r["refQosData"][0] in qos
            and r.get("flowInfos") and all("flowDirection" in f and "flowDescription" in f for f in r["flowInfos"])
        ]
        print(json.dumps({
            "step": f"create_{name}",
            "status": r.status_code,
            "http_version": r.http_version,
            "location_id": m.group(1) if m else None,
            "session_rule_complete": any("authSessAmbr" in s and "authDefQos" in s for s in sess),
            "triggers": decision.get("policyCtrlReqTriggers", []),
            "dynamic_rules": len(dynamic),
            "dynamic_rules_applied": len(applied),
        }), flush=True)
        if not m:
            continue
        url = f"{root}/{m.group(1)}"
        r = client.get(url)
        ctx = r.json().get("context", {}) if r.status_code == 200 else {}
        print(json.dumps({"step": f"get_{name}", "status": r.status_code, "supi": ctx.get("supi"),
                          "has_policy": "policy" in (r.json() if r.status_code == 200 else {})}), flush=True)
        if name == "free5gc":
            r = client.post(url + "/update", content=open(update, "rb").read(),
                            headers={"content-type": "application/json"})
            print(json.dumps({"step": "update_free5gc", "status": r.status_code,
                              "content_type": r.headers.get("content-type")}), flush=True)
        r = client.post(url + "/delete", content=b"{}", headers={"content-type": "application/json"})
        print(json.dumps({"step": f"delete_{name}", "status": r.status_code}), flush=True)
        r = client.get(url)
        print(json.dumps({"step": f"get_deleted_{name}", "status": r.status_code,
                          "content_type": r.headers.get("content-type"),
                          "cause": r.json().get("cause") if r.content else None}), flush=True)


if __name__ == "__main__":
    main()
