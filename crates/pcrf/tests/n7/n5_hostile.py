#!/usr/bin/env python3
"""Hostile AFs for the N5 routes (Npcf_PolicyAuthorization) of the SBI
listener: the frames are built by hand with sbi_hostile.py's tools
(hyperframe, hpack), so the requests can break the rules a client library
would keep.

Usage: n5_hostile.py HOST PORT CREATE_BODY_FILE PATCH_BODY_FILE

The node must hold a PDU session for the Create's UE address and limit
bodies to 32 KiB. Prints one JSON object per line, {"case": NAME, ...};
after each case an ordinary Create and its delete are made on a new
connection ("others_served": both answered 201 and 204). The Rust test
(tests/suite/sbi_hostile.rs) judges the results.
"""

import json
import sys

from sbi_hostile import Conn, request, summary

ROOT = "/npcf-policyauthorization/v1/app-sessions"
MERGE = "application/merge-patch+json"


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    create = open(sys.argv[3], "rb").read()
    patch = open(sys.argv[4], "rb").read()
    good = json.loads(create)

    def req(method, path, body=None, content_type="application/json"):
        return request(host, port, method, path, body, content_type=content_type)

    def app_id(answer):
        return (answer or {}).get("location", "").rsplit("/", 1)[-1]

    def others_served():
        a = req("POST", ROOT, create)
        if a is None or a["status"] != 201:
            return False
        d = req("POST", f"{ROOT}/{app_id(a)}/delete")
        return d is not None and d["status"] == 204

    def report(name, **obs):
        obs["case"] = name
        obs["others_served"] = others_served()
        print(json.dumps(obs), flush=True)

    def variant(path, value):
        """The Create with the field at `path` (keys) set, or removed (None)."""
        v = json.loads(create)
        at = v
        for k in path[:-1]:
            at = at[k]
        if value is None:
            at.pop(path[-1], None)
        else:
            at[path[-1]] = value
        return json.dumps(v).encode()

    media = ["ascReqData", "medComponents", "1"]
    sub = media + ["medSubComps", "1"]

    # The ordinary operations first: create, read, change, end.
    a = req("POST", ROOT, create)
    one = app_id(a)
    got = req("GET", f"{ROOT}/{one}")
    patched = req("PATCH", f"{ROOT}/{one}", patch, content_type=MERGE)
    deleted = req("POST", f"{ROOT}/{one}/delete")
    report("create", answer=a, get=got, patch=patched, delete=deleted)

    report("malformed_json", answer=req("POST", ROOT, b'{"ascReqData": {"notifUri": '))
    report("wrong_type", answer=req("POST", ROOT, variant(["ascReqData", "ueIpv4"], 10)))
    report("wrong_type_media", answer=req("POST", ROOT, variant(media + ["medCompN"], "one")))
    report("not_an_object", answer=req("POST", ROOT, b'["ascReqData"]'))
    report("missing_asc_req_data", answer=req("POST", ROOT, b'{"ascRespData": {}}'))
    report("missing_notif_uri", answer=req("POST", ROOT, variant(["ascReqData", "notifUri"], None)))
    report("missing_supp_feat", answer=req("POST", ROOT, variant(["ascReqData", "suppFeat"], None)))
    report("missing_ue_address", answer=req("POST", ROOT, variant(["ascReqData", "ueIpv4"], None)))
    report("missing_med_comp_n", answer=req("POST", ROOT, variant(media + ["medCompN"], None)))
    report("unknown_med_type", answer=req("POST", ROOT, variant(media + ["medType"], "HOLOGRAM")))
    report("unknown_f_status", answer=req("POST", ROOT, variant(media + ["fStatus"], "HALF_OPEN")))
    report("unknown_flow_usage", answer=req("POST", ROOT, variant(sub + ["flowUsage"], "VOICE")))
    report("bad_flow_description", answer=req("POST", ROOT, variant(sub + ["fDescs"], ["allow all"])))
    report("bad_bit_rate", answer=req("POST", ROOT, variant(media + ["marBwUl"], "fast")))
    report("bad_notif_uri", answer=req("POST", ROOT, variant(["ascReqData", "notifUri"], "ftp://af/x")))
    report("no_pdu_session", answer=req("POST", ROOT, variant(["ascReqData", "ueIpv4"], "10.99.0.1")))
    report("deep_nesting", answer=req("POST", ROOT, b'{"ascReqData": ' + b"[" * 15000 + b"]" * 15000 + b"}"))
    report("wrong_content_type", answer=req("POST", ROOT, create, content_type="text/plain"))
    report("create_as_merge_patch", answer=req("POST", ROOT, create, content_type=MERGE))

    # A PATCH must say it is a merge patch; on a session that exists.
    a = req("POST", ROOT, create)
    live = app_id(a)
    report("patch_plain_json", answer=req("PATCH", f"{ROOT}/{live}", patch))
    report("patch_text_plain", answer=req("PATCH", f"{ROOT}/{live}", patch, content_type="text/plain"))
    report("patch_malformed", answer=req("PATCH", f"{ROOT}/{live}", b"{]", content_type=MERGE))
    report("patch_remove_by_name", answer=req("PATCH", f"{ROOT}/{live}", b'{"ascReqData": {"medComponents": {"voice": null}}}', content_type=MERGE))
    report("delete_malformed_body", answer=req("POST", f"{ROOT}/{live}/delete", b'{"events": '))
    report("delete_wrong_type_body", answer=req("POST", f"{ROOT}/{live}/delete", b'{"events": 5}'))
    report("wrong_method", answer=req("PUT", f"{ROOT}/{live}", create))
    report("delete_live", answer=req("POST", f"{ROOT}/{live}/delete"))

    # Unknown ids, and ids no session could have.
    unknown = "0123456789abcdef0123456789abcdef"
    report("get_unknown", answer=req("GET", f"{ROOT}/{unknown}"))
    report("patch_unknown", answer=req("PATCH", f"{ROOT}/{unknown}", patch, content_type=MERGE))
    report("delete_unknown", answer=req("POST", f"{ROOT}/{unknown}/delete"))
    report("delete_twice", answer=req("POST", f"{ROOT}/{live}/delete"))
    report("id_too_long", answer=req("GET", f"{ROOT}/{'a' * 4000}"))
    odd = {
        "id_dot_dot": "..",
        "id_percent_nul": "ab%00cd",
        "id_encoded_slash": "ab%2F..%2Fsm-policies",
        "id_quote": "x'%20OR%201=1",
        "id_utf8": "%C3%A9t%C3%A9",
        "id_raw_utf8": "\u00e9t\u00e9",
        "id_space": "a b",
    }
    for name, id_ in odd.items():
        report(name, answer=req("GET", f"{ROOT}/{id_}"), delete=req("POST", f"{ROOT}/{id_}/delete"))

    # A huge body announced by Content-Length: refused before it is read.
    c = Conn(host, port)
    sid, h = c.headers("POST", ROOT, [("content-type", "application/json"), ("content-length", str(100 << 20))])
    c.send(h, c.data(sid, b" " * 16000, end=False))
    out, goaway, closed, resets = c.answers(1)
    c.close()
    report("huge_body_declared", answer=summary(out.get(sid)))

    # A huge body without a length: refused once past the limit.
    c = Conn(host, port)
    sid, h = c.headers("POST", ROOT, [("content-type", "application/json")])
    c.send(h)
    try:
        for _ in range(3):
            c.send(c.data(sid, b" " * 16000, end=False))
    except OSError:
        pass
    out, goaway, closed, resets = c.answers(1)
    c.close()
    report("huge_body_streamed", answer=summary(out.get(sid)))

    # A thousand Creates for the one UE on one connection, as many streams
    # at a time as the connection's initial flow-control window (65535
    # bytes) carries: each answered, none left hanging; then every session
    # created is deleted.
    c = Conn(host, port)
    statuses, causes, created = {}, {}, []
    goaway = None
    batch = max(1, 60000 // len(create))
    left = 1000
    while left > 0:
        sids = []
        for _ in range(min(batch, left)):
            sid, h = c.headers("POST", ROOT, [("content-type", "application/json")])
            c.send_quietly(h, c.data(sid, create))
            sids.append(sid)
        left -= len(sids)
        out, goaway, closed, resets = c.answers(len(sids), timeout=60)
        for sid in sids:
            a = summary(out.get(sid))
            st = str(a["status"]) if a else ("reset" if sid in resets else "none")
            statuses[st] = statuses.get(st, 0) + 1
            if a and a.get("problem"):
                cause = a["problem"].get("cause")
                causes[cause] = causes.get(cause, 0) + 1
            if a and a["status"] == 201:
                created.append(app_id(a))
        if goaway is not None or closed:
            break
    c.close()
    deletes = {}
    for one in created:
        d = req("POST", f"{ROOT}/{one}/delete")
        st = str(d["status"]) if d else "none"
        deletes[st] = deletes.get(st, 0) + 1
    report("thousand_creates", answered=statuses, causes=causes, goaway=goaway, deletes=deletes)


if __name__ == "__main__":
    main()
