//! Replays every input of every PCRF fuzz corpus (`fuzz/corpus/<target>/`)
//! through the same function the fuzzer runs (`pcrf::fuzz::*`), so each
//! crash the fuzzer ever found, and each seed, stays fixed in CI without a
//! nightly toolchain. A corpus directory that is empty fails the run.
//!
//! The Gx seeds are built here with the load generator's message builders
//! (`pcrf_bench::gx`, what a P-GW sends) plus deliberate mutations; the text
//! seeds are small variations of the shipped files. The test checks the
//! corpus holds them byte for byte; `WRITE_SEEDS=1 cargo test -p pcrf --test
//! suite fuzz_corpus::` rewrites them after a codec or format change. The shipped
//! files themselves (`config/*.toml`, `policies/*`) are replayed from where
//! they are, so editing them never needs the corpus rewritten.

use bytes::BytesMut;
use diameter::codec::{AvpCode, MessageBuilder};
use diameter::dict::{app, avp, cmd};
use pcrf::fuzz::{IMSI_BASIC, IMSI_BLOCKED, IMSI_VIP};
use pcrf_bench::gx::{self as bench_gx, Gateway, Request, Subscriber, Usage};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// A target: its name, its function, and the shipped files it reads.
type Target = (&'static str, fn(&[u8]), &'static [&'static str]);

const TARGETS: [Target; 9] = [
    ("gx_handler", pcrf::fuzz::gx_handler, &[]),
    ("rx_handler", pcrf::fuzz::rx_handler, &[]),
    ("sy_handler", pcrf::fuzz::sy_handler, &[]),
    ("config", pcrf::fuzz::config, &["config/pcrf.example.toml"]),
    (
        "n7_decoder",
        pcrf::fuzz::n7_decoder,
        &[
            "crates/pcrf/tests/n7/open5gs-create.json",
            "crates/pcrf/tests/n7/free5gc-create.json",
            "crates/pcrf/tests/n7/free5gc-update.json",
        ],
    ),
    (
        "n5_decoder",
        pcrf::fuzz::n5_decoder,
        &[
            "crates/pcrf/tests/n5/voice-create.json",
            "crates/pcrf/tests/n5/video-patch.json",
            "crates/pcrf/tests/n5/video-remove-patch.json",
        ],
    ),
    ("usage_file", pcrf::fuzz::usage_file, &["config/usage.toml"]),
    (
        "policy_cases",
        pcrf::fuzz::policy_cases,
        &["policies/default.cases.toml"],
    ),
    (
        "policy_script",
        pcrf::fuzz::policy_script,
        &["policies/default.lua"],
    ),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn gateway() -> Gateway {
    Gateway {
        origin_host: "pgw.fuzz.test".into(),
        origin_realm: "fuzz.test".into(),
        destination_realm: "pcrf.fuzz.test".into(),
        destination_host: None,
        origin_state_id: 1,
        pgw_address: Ipv4Addr::new(192, 0, 2, 1),
        sgw_address: Ipv4Addr::new(192, 0, 2, 2),
        mcc_mnc: "00101".into(),
        apn: "internet".into(),
    }
}

fn subscriber(imsi: &str) -> Subscriber {
    Subscriber {
        imsi: imsi.into(),
        msisdn: "491700000001".into(),
        ue_ip: Ipv4Addr::new(10, 45, 0, 2),
        imeisv: "3534900698733190".into(),
        cell_id: 0x101,
        tac: 1,
    }
}

/// One CCR of session `sid` for `imsi`, request number `number`.
fn ccr(
    sid: &str,
    imsi: &str,
    number: u32,
    build: impl FnOnce(&mut MessageBuilder<'_>, &Request<'_>),
) -> Vec<u8> {
    let gw = gateway();
    let sub = subscriber(imsi);
    let r = Request {
        session_id: sid,
        gateway: &gw,
        destination_host: None,
        subscriber: &sub,
        number,
        charging_id: 7,
    };
    bench_gx::encode(number + 1, number + 1, |b| build(b, &r)).to_vec()
}

fn usage(key: &str, input: u64, output: u64) -> Usage {
    Usage {
        monitoring_key: key.into(),
        input_octets: input,
        output_octets: output,
    }
}

fn set_len(v: &mut [u8], len: u32) {
    v[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
}

/// Appends a raw AVP to a whole message and fixes the message length.
fn with_avp(mut v: Vec<u8>, avp: &[u8]) -> Vec<u8> {
    v.extend_from_slice(avp);
    let n = v.len() as u32;
    set_len(&mut v, n);
    v
}

/// A TDF's CCR on Sd for session `sid` (UE 10.45.0.2, the Gx seeds' address).
fn sd_ccr(
    sid: &str,
    request_type: i32,
    number: u32,
    extra: impl FnOnce(&mut MessageBuilder<'_>),
) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::request(
        &mut buf,
        cmd::CREDIT_CONTROL,
        app::SD,
        100 + number,
        100 + number,
    );
    b.str(avp::SESSION_ID, sid)
        .u32(avp::AUTH_APPLICATION_ID, app::SD)
        .origin("tdf.fuzz.test", "fuzz.test")
        .str(avp::DESTINATION_REALM, "pcrf.fuzz.test")
        .i32(avp::CC_REQUEST_TYPE, request_type)
        .u32(avp::CC_REQUEST_NUMBER, number);
    extra(&mut b);
    b.finish();
    buf.to_vec()
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

fn gx_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let sid = "pgw.fuzz.test;1;1";
    let init = ccr(sid, IMSI_BASIC, 0, bench_gx::ccr_initial);
    let update = ccr(sid, IMSI_BASIC, 1, |b, r| {
        bench_gx::ccr_update(b, r, &[usage("total", 10_000_000, 50_000_000)])
    });
    let term = ccr(sid, IMSI_BASIC, 2, |b, r| {
        bench_gx::ccr_terminate(b, r, &[usage("total", 1_000, 2_000)], 1)
    });
    let vip = "pgw.fuzz.test;2;1";
    let vip_init = ccr(vip, IMSI_VIP, 0, bench_gx::ccr_initial);
    let vip_update = ccr(vip, IMSI_VIP, 1, |b, r| {
        bench_gx::ccr_update(b, r, &[usage("total", 5, 6), usage("vip", 70_000_000, 1)])
    });
    let absurd = ccr(sid, IMSI_BASIC, 1, |b, r| {
        bench_gx::ccr_update(
            b,
            r,
            &[
                usage("total", u64::MAX / 2, u64::MAX / 2),
                usage("no-such-key", u64::MAX / 2, 1),
            ],
        )
    });
    let mut s = vec![
        ("seed-ccr-i", init.clone()),
        ("seed-ccr-u-usage", update.clone()),
        ("seed-ccr-t-usage", term.clone()),
        (
            "seed-session-i-u-t",
            cat(&[init.clone(), update.clone(), term.clone()]),
        ),
        (
            "seed-retransmitted-ccr-u",
            cat(&[init.clone(), update.clone(), update.clone()]),
        ),
        ("seed-vip-i-u", cat(&[vip_init, vip_update])),
        (
            "seed-blocked-ccr-i",
            ccr("pgw.fuzz.test;3;1", IMSI_BLOCKED, 0, bench_gx::ccr_initial),
        ),
        (
            "seed-unknown-subscriber-ccr-i",
            ccr(
                "pgw.fuzz.test;4;1",
                "001019999999999",
                0,
                bench_gx::ccr_initial,
            ),
        ),
        ("seed-absurd-volumes", cat(&[init.clone(), absurd])),
        (
            "seed-ccr-u-unknown-session",
            ccr("pgw.fuzz.test;9;9", IMSI_BASIC, 5, |b, r| {
                bench_gx::ccr_update(b, r, &[usage("total", 1, 1)])
            }),
        ),
    ];
    // Sd: a TDF binds to the Gx session by address, reports an application
    // and usage, ends; and a report for a session nobody knows.
    let tdf = "tdf.fuzz.test;1";
    let sd_i = sd_ccr(tdf, 1, 0, |b| {
        b.bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
    });
    let sd_u = sd_ccr(tdf, 2, 1, |b| {
        b.i32(avp::EVENT_TRIGGER, 39)
            .group(avp::APPLICATION_DETECTION_INFORMATION, |g| {
                g.bytes(avp::TDF_APPLICATION_IDENTIFIER, b"video-streaming");
            })
            .group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"total")
                    .group(avp::USED_SERVICE_UNIT, |u| {
                        u.u64(avp::CC_TOTAL_OCTETS, 1_000);
                    });
            });
    });
    let sd_t = sd_ccr(tdf, 3, 2, |_| {});
    s.push((
        "seed-sd-i-u-t",
        cat(&[init.clone(), sd_i, sd_u.clone(), sd_t]),
    ));
    s.push(("seed-sd-unknown-session", sd_u));
    // Unknown AVP with the M bit (5001), and without it (ignored).
    let unknown_m = AvpCode::new(4_000_000, 0, true);
    let mut b = BytesMut::new();
    {
        let mut m = MessageBuilder::request(&mut b, cmd::CREDIT_CONTROL, app::GX, 1, 1);
        m.bytes(unknown_m, b"?");
        m.finish();
    }
    let unknown_avp = b[20..].to_vec();
    s.push((
        "seed-unknown-m-bit-avp",
        with_avp(init.clone(), &unknown_avp),
    ));
    let mut no_m = unknown_avp.clone();
    no_m[4] &= !0x40;
    s.push(("seed-unknown-avp-no-m-bit", with_avp(init.clone(), &no_m)));
    // Bad lengths: the first AVP (Session-Id) too long, too short; the
    // message length not a multiple of 4.
    let mut v = init.clone();
    v[20 + 5] = 0x01;
    s.push(("seed-avp-len-too-long", v));
    let mut v = init.clone();
    v[20 + 5..20 + 8].copy_from_slice(&[0, 0, 4]);
    s.push(("seed-avp-len-too-short", v));
    let mut v = init.clone();
    set_len(&mut v, init.len() as u32 - 2);
    s.push(("seed-msg-len-not-aligned", v));
    // A CCR with neither CC-Request-Type nor Subscription-Id (5005), and
    // a request that is not a CCR (3001).
    let mut b = BytesMut::new();
    {
        let mut m = MessageBuilder::request(&mut b, cmd::CREDIT_CONTROL, app::GX, 2, 2);
        m.str(avp::SESSION_ID, "pgw.fuzz.test;5;5")
            .u32(avp::AUTH_APPLICATION_ID, app::GX)
            .origin("pgw.fuzz.test", "fuzz.test")
            .str(avp::DESTINATION_REALM, "pcrf.fuzz.test");
        m.finish();
    }
    s.push(("seed-ccr-missing-avps", b.to_vec()));
    let mut b = BytesMut::new();
    {
        let mut m = MessageBuilder::request(&mut b, cmd::RE_AUTH, app::GX, 3, 3);
        m.str(avp::SESSION_ID, sid)
            .origin("pgw.fuzz.test", "fuzz.test");
        m.finish();
    }
    s.push(("seed-rar-not-ccr", b.to_vec()));
    s
}

/// One Rx request (AAR or STR) of AF session `sid`, built by `f` after
/// the common AVPs.
fn rx_request(command: u32, sid: &str, f: impl FnOnce(&mut MessageBuilder<'_>)) -> Vec<u8> {
    let mut b = BytesMut::new();
    {
        let mut m = MessageBuilder::request(&mut b, command, app::RX, 7, 7);
        m.str(avp::SESSION_ID, sid)
            .u32(avp::AUTH_APPLICATION_ID, app::RX)
            .origin("pcscf.fuzz.test", "fuzz.test")
            .str(avp::DESTINATION_REALM, "pcrf.fuzz.test");
        f(&mut m);
        m.finish();
    }
    b.to_vec()
}

/// An AAR for the seeds' UE (10.45.0.2) with one audio component whose
/// flow is `flow` and whose Media-Type is `media_type`.
fn aar(sid: &str, flow: &str, media_type: i32) -> Vec<u8> {
    rx_request(cmd::AA, sid, |m| {
        m.bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2])
            .i32(avp::SPECIFIC_ACTION, 9)
            .group(avp::MEDIA_COMPONENT_DESCRIPTION, |g| {
                g.u32(avp::MEDIA_COMPONENT_NUMBER, 1)
                    .i32(avp::MEDIA_TYPE, media_type)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 64_000)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 64_000)
                    .group(avp::MEDIA_SUB_COMPONENT, |s| {
                        s.u32(avp::FLOW_NUMBER, 1).str(avp::FLOW_DESCRIPTION, flow);
                    });
            });
    })
}

fn rx_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let sid = "pgw.fuzz.test;1;1";
    let init = ccr(sid, IMSI_BASIC, 0, bench_gx::ccr_initial);
    let term = ccr(sid, IMSI_BASIC, 1, |b, r| {
        bench_gx::ccr_terminate(b, r, &[], 1)
    });
    let flow = "permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000";
    let call = aar("pcscf.fuzz.test;call;1", flow, 0);
    let str_ = rx_request(cmd::SESSION_TERMINATION, "pcscf.fuzz.test;call;1", |m| {
        m.i32(avp::TERMINATION_CAUSE, 1);
    });
    vec![
        ("seed-aar-before-gx", call.clone()),
        (
            "seed-ccr-i-aar-str",
            cat(&[init.clone(), call.clone(), str_.clone()]),
        ),
        (
            "seed-ccr-i-aar-ccr-t-str",
            cat(&[init.clone(), call.clone(), term, str_.clone()]),
        ),
        (
            "seed-bad-flow-description",
            cat(&[
                init.clone(),
                aar("pcscf.fuzz.test;call;2", "permit out 17 from", 0),
            ]),
        ),
        (
            "seed-unknown-media-type",
            cat(&[init.clone(), aar("pcscf.fuzz.test;call;3", flow, 99)]),
        ),
        ("seed-str-unknown", str_),
        (
            "seed-aar-update-unknown",
            rx_request(cmd::AA, "pcscf.fuzz.test;call;4", |m| {
                m.i32(avp::RX_REQUEST_TYPE, 1);
            }),
        ),
    ]
}

fn text_seeds(target: &str) -> Vec<(&'static str, &'static str)> {
    match target {
        "config" => vec![
            ("seed-empty", ""),
            (
                "seed-minimal",
                "[node]\norigin_host = \"pcrf.test\"\norigin_realm = \"test\"\n",
            ),
            ("seed-wrong-type", "[node]\norigin_host = 5\n"),
            ("seed-unknown-key", "[nodes]\nx = 1\n"),
            (
                "seed-policy-limits",
                "[policy]\ninstruction_limit = 0\nmemory_limit_mib = 99999999\ntime_zone = \"Mars/Olympus\"\nunknown_subscriber = \"default_policy\"\n",
            ),
            (
                "seed-peers-usage",
                "[[peers]]\norigin_host = \"pgw\"\naddresses = [\"::1\", \"300.1.1.1\"]\n[usage]\nboundaries = [\"25:61\", \"00:00\"]\n",
            ),
            (
                "seed-store",
                "[store]\nkind = \"postgres\"\nurl = \"postgres://x\"\nqueue_depth = 0\n",
            ),
        ],
        "n7_decoder" => vec![
            ("seed-empty", ""),
            ("seed-empty-object", "{}"),
            ("seed-deep", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"),
            ("seed-not-object", "[1, \"a\"]"),
            (
                "seed-create-minimal",
                r#"{"supi":"imsi-1","pduSessionId":5,"pduSessionType":"IPV4","dnn":"internet","notificationUri":"http://smf/cb","sliceInfo":{"sst":1}}"#,
            ),
            (
                "seed-create-wrong-types",
                r#"{"supi":1,"pduSessionId":"5","pduSessionType":7,"dnn":[],"notificationUri":"x","sliceInfo":{"sst":-1,"sd":"zz"}}"#,
            ),
            (
                "seed-update-reports",
                r#"{"accuUsageReports":[{"refUmIds":"k","volUsage":18446744073709551615},{"volUsage":1}],"ipv6AddressPrefix":"2001:db8::/129","ueTimeZone":"+25:00+3"}"#,
            ),
            (
                "seed-strings",
                r#"{"supi":"\u0000","dnn":"\ud800","ueTimeZone":"+08:00+1","subsSessAmbr":{"uplink":"1.5 Gbps","downlink":"9999999999999999999999 Tbps"}}"#,
            ),
        ],
        "n5_decoder" => vec![
            ("seed-empty", ""),
            ("seed-empty-object", "{}"),
            ("seed-deep", "{\"ascReqData\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"),
            (
                "seed-create-minimal",
                r#"{"ascReqData":{"notifUri":"http://af/cb","suppFeat":"0","ueIpv6":"2001:db8::1"}}"#,
            ),
            (
                "seed-create-wrong-types",
                r#"{"ascReqData":{"notifUri":5,"suppFeat":"zz","ueIpv4":"10.0.0.300","medComponents":[1]}}"#,
            ),
            (
                "seed-unknown-enums",
                r#"{"ascReqData":{"notifUri":"http://af/cb","suppFeat":"0","ueIpv4":"10.0.0.1","medComponents":{"1":{"medCompN":1,"medType":"HOLOGRAM","fStatus":"ON","medSubComps":{"1":{"fNum":1,"flowUsage":"VOICE","marBwUl":"9999999999999 Tbps"}}}}}}"#,
            ),
            (
                "seed-patch-remove",
                r#"{"ascReqData":{"afAppId":"x","medComponents":{"1":null,"x":null},"evSubsc":{"events":[{"event":"ANI_REPORT"},{"event":"ANI_REPORT"}],"notifUri":"not a uri"}}}"#,
            ),
        ],
        "usage_file" => vec![
            ("seed-empty", ""),
            (
                "seed-minimal",
                "time_zone = \"UTC\"\n[keys.total]\nchunk = \"100 MB\"\n[accumulators.monthly]\nreset = \"monthly\"\nsources = [\"total\"]\n",
            ),
            (
                "seed-bad-units",
                "[keys.k]\nchunk = \"12 XB\"\n[keys.j]\nchunk = -1\n[keys.i]\nchunk = \"18446744073709551615 TiB\"\n",
            ),
            (
                "seed-dangling-source",
                "[accumulators.a]\nreset = \"weekly\"\nsources = [\"nope\", \"gx:nope\"]\nhours = \"23-01\"\n",
            ),
            (
                "seed-plans",
                "billing_day = 31\n[keys.t]\nchunk = 1\n[accumulators.m]\nreset = \"never\"\nsources = [\"t\"]\n[plans.basic]\nm = \"1 GB\"\n[plans.gold]\nx = \"1 GB\"\n",
            ),
        ],
        "policy_cases" => vec![
            ("seed-empty", ""),
            (
                "seed-one-case",
                "[[case]]\nname = \"basic\"\ninput.subscriber = { known = true, plan = \"basic\" }\nexpect.rules = [\"internet\"]\n",
            ),
            (
                "seed-defaults-absent",
                "[defaults.input.subscriber]\nknown = true\n[[case]]\ninput.time = { hour = 3, minute = 0, weekday = 2, date = \"2026-01-06\" }\nexpect_absent = [\"reject\"]\n",
            ),
            ("seed-bad-shape", "case = 5\n[defaults]\ninput = 1\n"),
            (
                "seed-deep-expect",
                "[[case]]\nexpect.definitions = [{ qos = { qci = 4, arp = { priority = 5 } } }]\nexpect.apn_ambr = { ul = 1.5, dl = -1 }\n",
            ),
        ],
        "policy_script" => vec![
            (
                "seed-ok",
                "function decide(input) return { rules = { 'internet' } } end\n",
            ),
            (
                "seed-uses-input",
                "function decide(input)\n  local r = {}\n  for k, v in pairs(input.subscriber) do r[#r + 1] = tostring(k) end\n  table.sort(r)\n  return { rules = r, apn_ambr = { ul = #r * 1000, dl = 2e6 }, revalidation_secs = 60.0 }\nend\n",
            ),
            ("seed-syntax-error", "function decide(input\n"),
            ("seed-no-decide", "local x = 1\n"),
            (
                "seed-runtime-error",
                "function decide(input) return input.nope.field end\n",
            ),
            (
                "seed-loop",
                "function decide(input) while true do pcall(function() while true do end end) end end\n",
            ),
            (
                "seed-memory",
                "local t = {}\nfunction decide(input) for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end end\n",
            ),
            (
                "seed-strings",
                "function decide(input)\n  local s = ('%s-%d'):format(input.session.apn or 'x', 7)\n  local a, b = s:match('^(%w+)%-(%d+)$')\n  return { rules = { a, (s:gsub('%d', 'n')) }, event_triggers = { tonumber(b) } }\nend\n",
            ),
            (
                "seed-pattern-bomb",
                "function decide(input) return { rules = { tostring(string.find(string.rep('a', 30), ('a*'):rep(30) .. 'b')) } } end\n",
            ),
            (
                "seed-c-loops",
                "function decide(input)\n  local r = string.rep('', 1 << 62) .. ('%b()'):rep(3)\n  pcall(table.move, {}, 1, math.maxinteger - 1, 1, {})\n  return { rules = { r, (('x'):rep(9):gsub('(x)%1', '%%1')) } }\nend\n",
            ),
            (
                "seed-escape-attempts",
                "local ok = pcall(function() return io.open('/tmp/x', 'w') end)\nlocal mt = getmetatable('')\nfunction decide(input) rawset(_G, 'x', 1) return { rules = { tostring(ok), mt } } end\n",
            ),
        ],
        _ => Vec::new(),
    }
}

/// One SNR from an OCS; `build` adds the AVPs after the common ones.
fn snr(sid: Option<&str>, build: impl FnOnce(&mut MessageBuilder<'_>)) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::request(&mut buf, cmd::SPENDING_STATUS_NOTIFICATION, SY, 1, 1);
    if let Some(sid) = sid {
        b.str(avp::SESSION_ID, sid);
    }
    b.u32(avp::AUTH_APPLICATION_ID, SY)
        .origin("ocs.fuzz.test", "fuzz.test")
        .str(avp::DESTINATION_REALM, "pcrf.fuzz.test")
        .str(avp::DESTINATION_HOST, "pcrf.fuzz.test");
    build(&mut b);
    b.finish();
    buf.to_vec()
}

const SY: u32 = 16_777_302;

fn sy_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let sid = Some("pcrf.fuzz.test;sy;1;1");
    let report = |b: &mut MessageBuilder<'_>, id: &[u8], status: Option<&str>| {
        b.group(avp::POLICY_COUNTER_STATUS_REPORT, |g| {
            g.bytes(avp::POLICY_COUNTER_IDENTIFIER, id);
            if let Some(st) = status {
                g.str(avp::POLICY_COUNTER_STATUS, st);
            }
        });
    };
    vec![
        (
            "seed-snr",
            snr(sid, |b| {
                report(b, b"monthly-data", Some("exhausted"));
                b.group(avp::POLICY_COUNTER_STATUS_REPORT, |g| {
                    g.str(avp::POLICY_COUNTER_IDENTIFIER, "roaming")
                        .str(avp::POLICY_COUNTER_STATUS, "valid")
                        .group(avp::PENDING_POLICY_COUNTER_INFORMATION, |p| {
                            p.str(avp::POLICY_COUNTER_STATUS, "blocked")
                                .u32(avp::PENDING_POLICY_COUNTER_CHANGE_TIME, 3_976_214_400);
                        });
                });
            }),
        ),
        (
            "seed-snr-no-session-id",
            snr(None, |b| report(b, b"x", Some("valid"))),
        ),
        (
            "seed-snr-report-without-status",
            snr(sid, |b| report(b, b"x", None)),
        ),
        (
            "seed-snr-counter-not-utf8",
            snr(sid, |b| report(b, &[0xff, 0xfe], Some("valid"))),
        ),
        (
            "seed-snr-unknown-m-avp",
            with_avp(
                snr(sid, |b| report(b, b"x", Some("valid"))),
                &[0, 0, 0x99, 0x99, 0x40, 0, 0, 12, 0, 0, 0, 1],
            ),
        ),
    ]
}

/// Every generated seed of `target`: (file name, bytes).
fn seeds(target: &str) -> Vec<(&'static str, Vec<u8>)> {
    if target == "gx_handler" {
        return gx_seeds();
    }
    if target == "rx_handler" {
        return rx_seeds();
    }
    if target == "sy_handler" {
        return sy_seeds();
    }
    text_seeds(target)
        .into_iter()
        .map(|(n, t)| (n, t.as_bytes().to_vec()))
        .collect()
}

#[test]
fn corpus_holds_the_seeds() {
    let write = std::env::var_os("WRITE_SEEDS").is_some();
    for (target, _, _) in TARGETS {
        let dir = corpus_dir(target);
        if write {
            std::fs::create_dir_all(&dir).expect("corpus dir");
        }
        for (name, bytes) in seeds(target) {
            let path = dir.join(name);
            if write {
                std::fs::write(&path, &bytes).expect("write seed");
            }
            let on_disk = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("{}: {e} (run with WRITE_SEEDS=1)", path.display()));
            assert_eq!(
                on_disk, bytes,
                "{target}/{name} differs; run with WRITE_SEEDS=1"
            );
        }
    }
}

#[test]
fn no_corpus_directory_is_empty() {
    for (target, _, _) in TARGETS {
        let dir = corpus_dir(target);
        let n = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .count();
        assert!(n > 0, "{} is empty", dir.display());
        assert!(
            n >= seeds(target).len(),
            "{}: {n} inputs, fewer than its seeds",
            dir.display()
        );
    }
}

/// Runs `f` on every file of `target`'s corpus (and its shipped files);
/// every failure is reported, not only the first.
fn replay(target: &str) {
    let (_, f, shipped) = TARGETS
        .iter()
        .find(|(t, _, _)| *t == target)
        .expect("known target");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus_dir(target))
        .expect("corpus dir")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    paths.extend(shipped.iter().map(|p| repo().join(p)));
    let mut failed = Vec::new();
    for path in &paths {
        let data = std::fs::read(path).expect("read input");
        if std::panic::catch_unwind(|| f(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "{target}: failing inputs {failed:#?}");
    assert!(!paths.is_empty(), "{target}: nothing replayed");
}

#[test]
fn gx_handler_corpus() {
    replay("gx_handler");
}

#[test]
fn rx_handler_corpus() {
    replay("rx_handler");
}

#[test]
fn sy_handler_corpus() {
    replay("sy_handler");
}

#[test]
fn config_corpus() {
    replay("config");
}

#[test]
fn n7_decoder_corpus() {
    replay("n7_decoder");
}

#[test]
fn n5_decoder_corpus() {
    replay("n5_decoder");
}

/// The N5 bodies the tests send are seeds, and they decode: the Create
/// as a Create, the PATCHes as PATCHes.
#[test]
fn n5_seeds_decode() {
    use pcrf::n5::decode::{decode_create, decode_patch};
    use pcrf::sbi::body::DecodeLimits;
    let limits = DecodeLimits::default();
    let read = |name: &str| {
        std::fs::read(repo().join("crates/pcrf/tests/n5").join(name)).expect("n5 fixture")
    };
    let create = decode_create(&read("voice-create.json"), &limits).expect("the Create decodes");
    assert_eq!(create.med_components.len(), 1);
    let video = decode_patch(&read("video-patch.json"), &limits).expect("the PATCH decodes");
    assert!(video.med_components["2"].is_some());
    let removal = decode_patch(&read("video-remove-patch.json"), &limits).expect("removal");
    assert_eq!(removal.med_components["2"], None);
}

#[test]
fn usage_file_corpus() {
    replay("usage_file");
}

#[test]
fn policy_cases_corpus() {
    replay("policy_cases");
}

#[test]
fn policy_script_corpus() {
    replay("policy_script");
}

/// The Gx seeds reach the paths they are for: a quick check through the
/// codec that a seed meant to be valid is, and one meant to fail does.
#[test]
fn gx_seeds_are_what_they_say() {
    use diameter::Message;
    let all = gx_seeds();
    let get = |name: &str| {
        let b = &all.iter().find(|(n, _)| *n == name).expect("seed").1;
        Message::parse(bytes::Bytes::copy_from_slice(b))
    };
    for ok in [
        "seed-ccr-i",
        "seed-ccr-u-usage",
        "seed-ccr-t-usage",
        "seed-unknown-avp-no-m-bit",
    ] {
        let m = get(ok).expect(ok);
        assert!(m.validate().is_ok(), "{ok}");
    }
    let invalid = |name: &str| {
        get(name)
            .expect(name)
            .validate()
            .err()
            .map(|e| e.result_code)
    };
    assert_eq!(invalid("seed-unknown-m-bit-avp"), Some(5001));
    assert_eq!(invalid("seed-avp-len-too-long"), Some(5014));
    assert_eq!(invalid("seed-avp-len-too-short"), Some(5014));
    assert!(get("seed-msg-len-not-aligned").is_err());
}

/// The Sy seeds are what their names say: the valid SNR validates and
/// decodes, each broken one fails with its RFC 6733 code.
#[test]
fn sy_seeds_are_what_they_say() {
    use diameter::Message;
    let all = sy_seeds();
    let outcome = |name: &str| {
        let b = &all.iter().find(|(n, _)| *n == name).expect("seed").1;
        let m = Message::parse(bytes::Bytes::copy_from_slice(b)).expect("frames");
        m.validate()
            .and_then(|_| pcrf::sy::decode_snr(&m))
            .map(|_| ())
            .map_err(|e| e.result_code)
    };
    assert_eq!(outcome("seed-snr"), Ok(()));
    assert_eq!(outcome("seed-snr-no-session-id"), Err(5005));
    assert_eq!(outcome("seed-snr-report-without-status"), Err(5005));
    assert_eq!(outcome("seed-snr-counter-not-utf8"), Err(5004));
    assert_eq!(outcome("seed-snr-unknown-m-avp"), Err(5001));
}
