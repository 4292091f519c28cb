//! Replays every input of the `decode` fuzz corpus through the same function
//! the fuzzer runs (`diameter_tools::fuzz::decode_one`), so each crash the fuzzer
//! ever found, and each seed, stays fixed in CI without a nightly toolchain.
//!
//! The seeds (realistic Gx/Rx/Sy/Sd messages and deliberately malformed
//! ones) are built here with the codec's own builder; the test checks that
//! the corpus holds them byte for byte. `WRITE_SEEDS=1 cargo test -p
//! pcrf-diameter --test fuzz_corpus` rewrites them after a codec change.

use bytes::BytesMut;
use diameter::codec::{AvpCode, MessageBuilder, FLAG_E};
use diameter::dict::{app, avp, cmd, enums};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode")
}

fn build(
    command: u32,
    application: u32,
    request: bool,
    f: impl FnOnce(&mut MessageBuilder<'_>),
) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let flags = if request { 0xc0 } else { 0x40 };
    let mut b = MessageBuilder::new(&mut buf, flags, command, application, 0x1234, 0x5678);
    f(&mut b);
    b.finish();
    buf.to_vec()
}

fn origin(b: &mut MessageBuilder<'_>) {
    b.origin("pcef.test", "test");
}

fn cer() -> Vec<u8> {
    build(cmd::CAPABILITIES_EXCHANGE, 0, true, |b| {
        origin(b);
        b.address(avp::HOST_IP_ADDRESS, IpAddr::V4(Ipv4Addr::LOCALHOST))
            .address(avp::HOST_IP_ADDRESS, IpAddr::V6(Ipv6Addr::LOCALHOST))
            .u32(avp::VENDOR_ID, 10415)
            .str(avp::PRODUCT_NAME, "fuzz-seed")
            .u32(avp::ORIGIN_STATE_ID, 7)
            .u32(avp::SUPPORTED_VENDOR_ID, 10415)
            .u32(avp::AUTH_APPLICATION_ID, app::GX)
            .group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                g.u32(avp::VENDOR_ID, 10415)
                    .u32(avp::AUTH_APPLICATION_ID, app::RX);
            })
            .u32(avp::FIRMWARE_REVISION, 1);
    })
}

/// A CCR-I as a P-GW sends it: 30 top-level AVPs, several grouped.
fn ccr_i() -> Vec<u8> {
    build(cmd::CREDIT_CONTROL, app::GX, true, |b| {
        b.str(avp::SESSION_ID, "pgw.test;1;2;3");
        b.u32(avp::AUTH_APPLICATION_ID, app::GX);
        origin(b);
        b.str(avp::DESTINATION_REALM, "pcrf.test")
            .i32(
                avp::CC_REQUEST_TYPE,
                enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            )
            .u32(avp::CC_REQUEST_NUMBER, 0)
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(
                    avp::SUBSCRIPTION_ID_TYPE,
                    enums::SUBSCRIPTION_ID_TYPE::END_USER_IMSI,
                )
                .str(avp::SUBSCRIPTION_ID_DATA, "001010000000001");
            })
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(
                    avp::SUBSCRIPTION_ID_TYPE,
                    enums::SUBSCRIPTION_ID_TYPE::END_USER_E164,
                )
                .str(avp::SUBSCRIPTION_ID_DATA, "79990000001");
            })
            .group(avp::SUPPORTED_FEATURES, |g| {
                g.u32(avp::VENDOR_ID, 10415)
                    .u32(avp::FEATURE_LIST_ID, 1)
                    .u32(avp::FEATURE_LIST, 0x0000_000b);
            })
            .i32(avp::NETWORK_REQUEST_SUPPORT, 1)
            .bytes(avp::FRAMED_IP_ADDRESS, &[127, 0, 0, 9])
            .bytes(
                avp::FRAMED_IPV6_PREFIX,
                &[0, 64, 0x20, 1, 0x0d, 0xb8, 0, 0, 0, 1],
            )
            .i32(avp::IP_CAN_TYPE, 5)
            .i32(avp::RAT_TYPE, 1004)
            .group(avp::QOS_INFORMATION, |g| {
                g.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 50_000_000)
                    .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 150_000_000);
            })
            .group(avp::DEFAULT_EPS_BEARER_QOS, |g| {
                g.i32(avp::QOS_CLASS_IDENTIFIER, 9).group(
                    avp::ALLOCATION_RETENTION_PRIORITY,
                    |a| {
                        a.u32(avp::PRIORITY_LEVEL, 8)
                            .i32(avp::PRE_EMPTION_CAPABILITY, 1)
                            .i32(avp::PRE_EMPTION_VULNERABILITY, 0);
                    },
                );
            })
            .bytes(
                avp::_3GPP_USER_LOCATION_INFO,
                &[
                    0x82, 0x00, 0xf1, 0x10, 0x00, 0x01, 0x00, 0xf1, 0x10, 0x00, 0x00, 0x01, 0x01,
                ],
            )
            .bytes(avp::_3GPP_MS_TIMEZONE, &[0x40, 0x00])
            .str(avp::_3GPP_SGSN_MCC_MNC, "00101")
            .str(avp::CALLED_STATION_ID, "internet")
            .group(avp::USER_EQUIPMENT_INFO, |g| {
                g.i32(avp::USER_EQUIPMENT_INFO_TYPE, 0)
                    .bytes(avp::USER_EQUIPMENT_INFO_VALUE, b"3534900698733201");
            })
            .address(avp::AN_GW_ADDRESS, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)))
            .str(avp::_3GPP_SELECTION_MODE, "0")
            .str(avp::_3GPP_CHARGING_CHARACTERISTICS, "0800")
            .i32(avp::BEARER_USAGE, 0)
            .i32(avp::ONLINE, 0)
            .i32(avp::OFFLINE, 1)
            .address(
                avp::ACCESS_NETWORK_CHARGING_ADDRESS,
                IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4)),
            )
            .group(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_GX, |g| {
                g.bytes(
                    avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE,
                    &[0, 0, 0, 42],
                );
            })
            .time(
                avp::EVENT_TIMESTAMP,
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_600),
            )
            .u32(avp::ORIGIN_STATE_ID, 1);
    })
}

fn cca_i() -> Vec<u8> {
    build(cmd::CREDIT_CONTROL, app::GX, false, |b| {
        b.str(avp::SESSION_ID, "pgw.test;1;2;3")
            .u32(avp::AUTH_APPLICATION_ID, app::GX)
            .origin("pcrf.test", "test")
            .u32(avp::RESULT_CODE, 2001)
            .i32(avp::CC_REQUEST_TYPE, 1)
            .u32(avp::CC_REQUEST_NUMBER, 0)
            .i32(avp::EVENT_TRIGGER, 33)
            .i32(avp::EVENT_TRIGGER, 13)
            .group(avp::CHARGING_RULE_INSTALL, |g| {
                g.group(avp::CHARGING_RULE_DEFINITION, |d| {
                    d.bytes(avp::CHARGING_RULE_NAME, b"rule-1")
                        .group(avp::FLOW_INFORMATION, |fi| {
                            fi.str(
                                avp::FLOW_DESCRIPTION,
                                "permit out 17 from 127.0.0.1 to 127.0.0.9 5060",
                            )
                            .i32(avp::FLOW_DIRECTION, 3);
                        })
                        .i32(avp::FLOW_STATUS, 2)
                        .u32(avp::PRECEDENCE, 100)
                        .bytes(avp::MONITORING_KEY, b"mk1");
                })
                .bytes(avp::CHARGING_RULE_NAME, b"predefined");
            })
            .group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"mk1")
                    .group(avp::GRANTED_SERVICE_UNIT, |u| {
                        u.u64(avp::CC_TOTAL_OCTETS, 1 << 30);
                    })
                    .i32(avp::USAGE_MONITORING_LEVEL, 0);
            })
            .group(avp::EXPERIMENTAL_RESULT, |g| {
                g.u32(avp::VENDOR_ID, 10415)
                    .u32(avp::EXPERIMENTAL_RESULT_CODE, 5142);
            });
    })
}

fn ccr_u() -> Vec<u8> {
    build(cmd::CREDIT_CONTROL, app::GX, true, |b| {
        b.str(avp::SESSION_ID, "pgw.test;1;2;3");
        origin(b);
        b.i32(avp::CC_REQUEST_TYPE, 2)
            .u32(avp::CC_REQUEST_NUMBER, 1)
            .i32(avp::EVENT_TRIGGER, 33)
            .group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"mk1")
                    .group(avp::USED_SERVICE_UNIT, |u| {
                        u.u64(avp::CC_INPUT_OCTETS, 1000)
                            .u64(avp::CC_OUTPUT_OCTETS, 2000)
                            .u64(avp::CC_TOTAL_OCTETS, 3000)
                            .u32(avp::CC_TIME, 60);
                    });
            });
    })
}

fn ccr_t() -> Vec<u8> {
    build(cmd::CREDIT_CONTROL, app::GX, true, |b| {
        b.str(avp::SESSION_ID, "pgw.test;1;2;3");
        origin(b);
        b.i32(avp::CC_REQUEST_TYPE, 3)
            .u32(avp::CC_REQUEST_NUMBER, 2)
            .i32(avp::TERMINATION_CAUSE, 1);
    })
}

fn rar() -> Vec<u8> {
    build(cmd::RE_AUTH, app::GX, true, |b| {
        b.str(avp::SESSION_ID, "pgw.test;1;2;3")
            .origin("pcrf.test", "test")
            .str(avp::DESTINATION_HOST, "pgw.test")
            .i32(avp::RE_AUTH_REQUEST_TYPE, 0)
            .group(avp::CHARGING_RULE_REMOVE, |g| {
                g.bytes(avp::CHARGING_RULE_NAME, b"rule-1");
            })
            .group(avp::PROXY_INFO, |g| {
                g.str(avp::PROXY_HOST, "dra.test")
                    .bytes(avp::PROXY_STATE, b"state");
            });
    })
}

fn aar() -> Vec<u8> {
    build(cmd::AA, app::RX, true, |b| {
        b.str(avp::SESSION_ID, "pcscf.test;9");
        b.origin("pcscf.test", "test")
            .bytes(avp::AF_APPLICATION_IDENTIFIER, b"IMS Services")
            .group(avp::MEDIA_COMPONENT_DESCRIPTION, |m| {
                m.u32(avp::MEDIA_COMPONENT_NUMBER, 1)
                    .i32(avp::MEDIA_TYPE, 0)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 64_000)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 64_000)
                    .bytes(
                        avp::CODEC_DATA,
                        b"uplink\noffer\nm=audio 49152 RTP/AVP 116\n",
                    )
                    .group(avp::MEDIA_SUB_COMPONENT, |s| {
                        s.u32(avp::FLOW_NUMBER, 1)
                            .str(
                                avp::FLOW_DESCRIPTION,
                                "permit in 17 from 127.0.0.9 49152 to 127.0.0.1 50000",
                            )
                            .i32(avp::FLOW_USAGE, 0);
                    });
            })
            .i32(avp::SPECIFIC_ACTION, 2)
            .bytes(avp::FRAMED_IP_ADDRESS, &[127, 0, 0, 9])
            .i32(avp::RESERVATION_PRIORITY, 0);
    })
}

fn slr() -> Vec<u8> {
    build(cmd::SPENDING_LIMIT, app::SY, true, |b| {
        b.str(avp::SESSION_ID, "pcrf.test;sy;1");
        b.origin("pcrf.test", "test")
            .i32(avp::SL_REQUEST_TYPE, 0)
            .str(avp::POLICY_COUNTER_IDENTIFIER, "pc-1")
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                    .str(avp::SUBSCRIPTION_ID_DATA, "001010000000001");
            });
    })
}

fn tsr() -> Vec<u8> {
    build(cmd::TDF_SESSION, app::SD, true, |b| {
        b.str(avp::SESSION_ID, "pcrf.test;sd;1");
        b.origin("pcrf.test", "test")
            .group(avp::ADC_RULE_INSTALL, |g| {
                g.group(avp::ADC_RULE_DEFINITION, |d| {
                    d.bytes(avp::ADC_RULE_NAME, b"video")
                        .bytes(avp::TDF_APPLICATION_IDENTIFIER, b"youtube");
                });
            });
    })
}

fn set_len(v: &mut [u8], len: u32) {
    v[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
}

/// Nested Proxy-Info AVPs (Grouped), `depth` levels, built inside out.
fn nested(depth: usize) -> Vec<u8> {
    let mut inner: Vec<u8> = b"\x00\x00\x00\x21\x40\x00\x00\x0cdeep".to_vec(); // Proxy-State
    for _ in 0..depth {
        let mut v = 284u32.to_be_bytes().to_vec();
        v.push(0x40);
        v.extend_from_slice(&((8 + inner.len()) as u32).to_be_bytes()[1..]);
        v.extend_from_slice(&inner);
        inner = v;
    }
    build(cmd::RE_AUTH, app::GX, true, |b| {
        b.raw_avp(&inner);
    })
}

/// Every seed: (file name, bytes).
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let ccr = ccr_i();
    let mut s = vec![
        ("seed-cer", cer()),
        ("seed-dwr", build(cmd::DEVICE_WATCHDOG, 0, true, origin)),
        ("seed-ccr-i-gx", ccr.clone()),
        ("seed-cca-i-gx", cca_i()),
        ("seed-ccr-u-usage", ccr_u()),
        ("seed-ccr-t", ccr_t()),
        ("seed-rar-proxy-info", rar()),
        ("seed-aar-rx", aar()),
        ("seed-slr-sy", slr()),
        ("seed-tsr-sd", tsr()),
        ("seed-nested-10", nested(10)),
        ("seed-nested-40", nested(40)),
    ];

    // Truncated: the header promises more than arrives.
    s.push(("seed-truncated-body", ccr[..ccr.len() / 2].to_vec()));
    s.push(("seed-truncated-header", ccr[..10].to_vec()));
    // Length field not a multiple of 4, and shorter than the header.
    let mut v = ccr.clone();
    set_len(&mut v, ccr.len() as u32 - 2);
    s.push(("seed-len-not-aligned", v));
    let mut v = ccr.clone();
    set_len(&mut v, 12);
    s.push(("seed-len-below-header", v));
    // Version 2, and the E bit on a request.
    let mut v = ccr.clone();
    v[0] = 2;
    s.push(("seed-version-2", v));
    let mut v = ccr.clone();
    v[4] |= FLAG_E;
    s.push(("seed-e-bit-request", v));
    // First AVP (Session-Id) claims 64 KiB more than the message has.
    let mut v = ccr.clone();
    v[20 + 5] = 0x01;
    s.push(("seed-avp-len-too-long", v));
    // First AVP claims a length below its header.
    let mut v = ccr.clone();
    v[20 + 5..20 + 8].copy_from_slice(&[0, 0, 4]);
    s.push(("seed-avp-len-too-short", v));
    // A V-flagged AVP at the very end with no room for its Vendor-ID.
    let mut v = build(cmd::DEVICE_WATCHDOG, 0, true, origin);
    v.extend_from_slice(&[0, 0, 3, 0xe9, 0x80, 0, 0, 8]);
    let n = v.len() as u32;
    set_len(&mut v, n);
    s.push(("seed-vendor-flag-no-vendor", v));
    // Unknown AVP with the M bit, bad UTF-8, bad Address, bad Unsigned32 size.
    s.push((
        "seed-bad-values",
        build(cmd::CREDIT_CONTROL, app::GX, true, |b| {
            b.bytes(avp::SESSION_ID, &[0xc3, 0x28])
                .bytes(avp::AN_GW_ADDRESS, &[0, 1, 127])
                .bytes(avp::CC_REQUEST_NUMBER, &[0, 0, 1])
                .bytes(AvpCode::new(4_000_000, 0, true), b"?");
        }),
    ));
    // Two messages back to back: framing must take only the first.
    let mut v = build(cmd::DEVICE_WATCHDOG, 0, true, origin);
    v.extend_from_slice(&ccr);
    s.push(("seed-two-messages", v));
    s
}

#[test]
fn corpus_holds_the_seeds() {
    let dir = corpus_dir();
    let write = std::env::var_os("WRITE_SEEDS").is_some();
    if write {
        std::fs::create_dir_all(&dir).expect("corpus dir");
    }
    for (name, bytes) in seeds() {
        let path = dir.join(name);
        if write {
            std::fs::write(&path, &bytes).expect("write seed");
        }
        let on_disk = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run with WRITE_SEEDS=1)", path.display()));
        assert_eq!(on_disk, bytes, "{name} differs; run with WRITE_SEEDS=1");
    }
}

#[test]
fn every_corpus_input_decodes_without_panic() {
    let mut n = 0;
    for entry in std::fs::read_dir(corpus_dir()).expect("corpus dir") {
        let path = entry.expect("entry").path();
        let data = std::fs::read(&path).expect("read input");
        let result = std::panic::catch_unwind(|| diameter_tools::fuzz::decode_one(&data));
        assert!(result.is_ok(), "{} fails decode_one", path.display());
        n += 1;
    }
    assert!(n >= seeds().len(), "only {n} corpus inputs");
}

#[test]
fn seeds_reach_the_paths_they_are_for() {
    use diameter::Message;
    let parse = |b: &[u8]| Message::parse(bytes::Bytes::copy_from_slice(b));
    let all = seeds();
    let get = |name: &str| {
        all.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| b.clone())
            .expect("seed")
    };
    let ccr = parse(&get("seed-ccr-i-gx")).expect("ccr parses");
    assert!(ccr.avps().count() >= 30);
    assert!(ccr.validate().is_ok());
    for ok in [
        "seed-cer",
        "seed-cca-i-gx",
        "seed-aar-rx",
        "seed-slr-sy",
        "seed-tsr-sd",
    ] {
        let m = parse(&get(ok)).expect(ok);
        assert_eq!(m.validate().map_err(|e| e.to_string()).err(), None, "{ok}");
    }
    let code = |name: &str| parse(&get(name)).err().map(|e| e.result_code);
    assert_eq!(code("seed-truncated-body"), Some(5015));
    assert_eq!(code("seed-version-2"), Some(5011));
    assert_eq!(code("seed-e-bit-request"), Some(3008));
    let invalid = |name: &str| {
        parse(&get(name))
            .expect(name)
            .validate()
            .err()
            .map(|e| e.result_code)
    };
    assert_eq!(invalid("seed-avp-len-too-long"), Some(5014));
    assert_eq!(invalid("seed-avp-len-too-short"), Some(5014));
    assert_eq!(invalid("seed-vendor-flag-no-vendor"), Some(5014));
    assert_eq!(invalid("seed-nested-40"), Some(5004));
    assert_eq!(invalid("seed-nested-10"), None);
    assert_eq!(invalid("seed-bad-values"), Some(5004));
}
