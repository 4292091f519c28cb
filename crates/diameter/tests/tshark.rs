//! Wireshark's Diameter dissector, an implementation independent of ours,
//! reads the messages our builder writes: realistic base and Gx messages go
//! into a pcap (our `pcap` writer), and tshark must find nothing malformed
//! or worth a warning, decode as many Diameter messages as we wrote, and name
//! every AVP as we meant it, in the same order.

#[path = "interop/support.rs"]
mod support;

use bytes::BytesMut;
use diameter::codec::{AvpIter, FLAG_R};
use diameter::dict::{self, app, avp, cmd};
use diameter::pcap::{read_pcap, Direction, PcapWriter};
use diameter::{Message, MessageBuilder};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;
use support::{require_tool, TempDir};

const GX: u32 = 16_777_238;
const TGPP: u32 = 10_415;

/// One message to write, with the AVP names tshark must show for it.
struct Case {
    what: &'static str,
    dir: Direction,
    bytes: Vec<u8>,
    must_show: &'static [&'static str],
}

fn build(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut buf = BytesMut::new();
    f(&mut buf);
    Message::parse(buf.clone().freeze())
        .expect("our own message parses")
        .validate()
        .expect("our own message validates");
    buf.to_vec()
}

fn parse(b: &[u8]) -> Message {
    Message::parse(b.to_vec().into()).expect("parses")
}

fn cer() -> Vec<u8> {
    build(|buf| {
        let mut b = MessageBuilder::new(
            buf,
            FLAG_R,
            cmd::CAPABILITIES_EXCHANGE,
            app::DIAMETER_COMMON_MESSAGES,
            0x1000_0001,
            0x5000_0001,
        );
        b.origin("pcef1.epc.example.net", "epc.example.net")
            .address(avp::HOST_IP_ADDRESS, IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1)))
            .u32(avp::VENDOR_ID, TGPP)
            .str(avp::PRODUCT_NAME, "emulated-pcef")
            .u32(avp::ORIGIN_STATE_ID, 1_767_225_600)
            .u32(avp::SUPPORTED_VENDOR_ID, TGPP)
            .u32(avp::AUTH_APPLICATION_ID, GX)
            .u32(avp::INBAND_SECURITY_ID, 0)
            .group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                g.u32(avp::VENDOR_ID, TGPP)
                    .u32(avp::AUTH_APPLICATION_ID, GX);
            })
            .u32(avp::FIRMWARE_REVISION, 1);
        b.finish();
    })
}

fn cea(req: &[u8]) -> Vec<u8> {
    let req = parse(req);
    build(|buf| {
        let mut b = MessageBuilder::answer(buf, &req);
        b.result_code(2001)
            .origin("pcrf1.epc.example.net", "epc.example.net")
            .address(avp::HOST_IP_ADDRESS, IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)))
            .u32(avp::VENDOR_ID, 0)
            .str(avp::PRODUCT_NAME, "pcrf")
            .u32(avp::ORIGIN_STATE_ID, 1_767_225_601)
            .u32(avp::SUPPORTED_VENDOR_ID, TGPP)
            .group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                g.u32(avp::VENDOR_ID, TGPP)
                    .u32(avp::AUTH_APPLICATION_ID, GX);
            });
        b.finish();
    })
}

fn dwr() -> Vec<u8> {
    build(|buf| {
        let mut b = MessageBuilder::new(
            buf,
            FLAG_R,
            cmd::DEVICE_WATCHDOG,
            app::DIAMETER_COMMON_MESSAGES,
            0x1000_0002,
            0x5000_0002,
        );
        b.origin("pcef1.epc.example.net", "epc.example.net")
            .u32(avp::ORIGIN_STATE_ID, 1_767_225_600);
        b.finish();
    })
}

fn dwa(req: &[u8]) -> Vec<u8> {
    let req = parse(req);
    build(|buf| {
        let mut b = MessageBuilder::answer(buf, &req);
        b.result_code(2001)
            .origin("pcrf1.epc.example.net", "epc.example.net")
            .u32(avp::ORIGIN_STATE_ID, 1_767_225_601);
        b.finish();
    })
}

fn dpr() -> Vec<u8> {
    build(|buf| {
        let mut b = MessageBuilder::new(
            buf,
            FLAG_R,
            cmd::DISCONNECT_PEER,
            app::DIAMETER_COMMON_MESSAGES,
            0x1000_0003,
            0x5000_0003,
        );
        b.origin("pcef1.epc.example.net", "epc.example.net")
            .i32(avp::DISCONNECT_CAUSE, 0);
        b.finish();
    })
}

fn dpa(req: &[u8]) -> Vec<u8> {
    let req = parse(req);
    build(|buf| {
        let mut b = MessageBuilder::answer(buf, &req);
        b.result_code(2001)
            .origin("pcrf1.epc.example.net", "epc.example.net");
        b.finish();
    })
}

fn cases() -> Vec<Case> {
    let cer = cer();
    let dwr = dwr();
    let dpr = dpr();
    vec![
        Case {
            what: "CER",
            dir: Direction::ToServer,
            bytes: cer.clone(),
            must_show: &[
                "Origin-Host",
                "Origin-Realm",
                "Host-IP-Address",
                "Vendor-Id",
                "Product-Name",
                "Origin-State-Id",
                "Supported-Vendor-Id",
                "Auth-Application-Id",
                "Inband-Security-Id",
                "Vendor-Specific-Application-Id",
                "Firmware-Revision",
            ],
        },
        Case {
            what: "CEA",
            dir: Direction::ToClient,
            bytes: cea(&cer),
            must_show: &[
                "Result-Code",
                "Origin-Host",
                "Origin-Realm",
                "Host-IP-Address",
                "Product-Name",
                "Vendor-Specific-Application-Id",
                "Auth-Application-Id",
            ],
        },
        Case {
            what: "DWR",
            dir: Direction::ToServer,
            bytes: dwr.clone(),
            must_show: &["Origin-Host", "Origin-Realm", "Origin-State-Id"],
        },
        Case {
            what: "DWA",
            dir: Direction::ToClient,
            bytes: dwa(&dwr),
            must_show: &["Result-Code", "Origin-Host", "Origin-Realm"],
        },
        Case {
            what: "DPR",
            dir: Direction::ToServer,
            bytes: dpr.clone(),
            must_show: &["Origin-Host", "Origin-Realm", "Disconnect-Cause"],
        },
        Case {
            what: "DPA",
            dir: Direction::ToClient,
            bytes: dpa(&dpr),
            must_show: &["Result-Code", "Origin-Host", "Origin-Realm"],
        },
    ]
}

fn write_pcap(path: &Path, cases: &[Case]) {
    let mut w = PcapWriter::loopback(Vec::new()).expect("pcap header");
    for c in cases {
        w.message(c.dir, &c.bytes).expect("write message");
    }
    let file = w.finish().expect("finish");
    std::fs::write(path, &file).expect("write pcap");
    // Our reader must give back exactly what was written.
    let cap = read_pcap(&file).expect("read back");
    assert!(cap.problems.is_empty(), "{:?}", cap.problems);
    let back: Vec<&[u8]> = cap.messages.iter().map(|m| &m.bytes[..]).collect();
    let want: Vec<&[u8]> = cases.iter().map(|c| &c.bytes[..]).collect();
    assert_eq!(back, want, "pcap reader disagrees with the writer");
}

/// Runs tshark on the capture with checksum validation on (so a wrong IPv4
/// or TCP checksum is an expert error too).
fn tshark(pcap: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .args([
            "-n",
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "tcp.check_checksum:TRUE",
        ])
        .arg("-r")
        .arg(pcap)
        .args(args)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One AVP as tshark shows it: its name and, for a leaf, the value text.
#[derive(Debug, PartialEq)]
struct Shown {
    name: String,
    val: Option<String>,
}

/// The AVPs tshark shows, packet by packet, depth first, from PDML.
fn tshark_avps(pdml: &str) -> Vec<Vec<Shown>> {
    pdml.split("<packet>")
        .skip(1)
        .map(|pkt| {
            pkt.lines()
                .filter_map(|l| {
                    let l = l.trim_start();
                    if !l.starts_with("<field name=\"diameter.avp\"") {
                        return None;
                    }
                    // showname="AVP: Origin-Host(264) l=29 f=-M- val=pcef1..."
                    let s = l.split("showname=\"AVP: ").nth(1)?;
                    let s = &s[..s.find('"')?];
                    let name = s.split('(').next()?.to_owned();
                    let val = s.split_once(" val=").map(|(_, v)| unescape(v));
                    Some(Shown { name, val })
                })
                .collect::<Vec<_>>()
        })
        .filter(|avps| !avps.is_empty())
        .collect()
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Our dictionary's view of every AVP of a message, depth first: the name,
/// and the value text tshark should show for the types whose text is
/// unambiguous (strings, integers, addresses; enumerations end in "(n)").
fn our_avps(msg: &[u8]) -> Vec<(String, Option<String>)> {
    fn walk(it: AvpIter<'_>, out: &mut Vec<(String, Option<String>)>) {
        for a in it {
            let a = a.expect("well-formed");
            let d = dict::avp(a.code(), a.vendor()).expect("AVP in our dictionary");
            use dict::AvpType as T;
            let val = match d.ty {
                T::UTF8String | T::DiameterIdentity | T::DiameterURI => {
                    Some(a.as_str().expect("string").to_owned())
                }
                T::Unsigned32 => Some(a.as_u32().expect("u32").to_string()),
                T::Integer32 => Some(a.as_i32().expect("i32").to_string()),
                T::Unsigned64 => Some(a.as_u64().expect("u64").to_string()),
                T::Integer64 => Some(a.as_i64().expect("i64").to_string()),
                T::Enumerated => Some(format!("({})", a.as_enum().expect("enum"))),
                T::Address => Some(a.as_address().expect("address").to_string()),
                _ => None,
            };
            out.push((d.name.to_owned(), val));
            if d.ty == T::Grouped {
                walk(a.grouped(), out);
            }
        }
    }
    let m = parse(msg);
    let mut v = Vec::new();
    walk(m.avps(), &mut v);
    v
}

/// Whether tshark's value text shows our value. Numbers it has a name for
/// (enumerations, application ids) appear as "NAME (n)".
fn same_value(shown: &str, ours: &str) -> bool {
    if ours.starts_with('(') {
        shown.ends_with(&format!(" {ours}")) || shown == ours.trim_matches(['(', ')'])
    } else {
        shown == ours || (ours.parse::<i64>().is_ok() && shown.ends_with(&format!(" ({ours})")))
    }
}

#[test]
fn tshark_decodes_our_messages_cleanly_and_names_every_avp() {
    require_tool("tshark");
    let dir = TempDir::new("tshark");
    let pcap = dir.join("messages.pcap");
    let cases = cases();
    write_pcap(&pcap, &cases);

    let bad = tshark(
        &pcap,
        &["-Y", "_ws.malformed || _ws.expert.severity >= 0x00600000"],
    );
    assert!(
        bad.trim().is_empty(),
        "tshark reports malformed or warning packets:\n{bad}\n{}",
        tshark(&pcap, &["-V", "-Y", "_ws.expert"])
    );

    // One Diameter PDU per message, with our command codes and R bits.
    let fields = tshark(
        &pcap,
        &[
            "-Y",
            "diameter",
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            "-e",
            "diameter.cmd.code",
            "-e",
            "diameter.flags.request",
        ],
    );
    let got: Vec<String> = fields.lines().map(|l| l.replace('\t', " ")).collect();
    let want: Vec<String> = cases
        .iter()
        .map(|c| {
            let m = parse(&c.bytes);
            let r = if m.is_request() { "True" } else { "False" };
            format!("{} {r}", m.command_code())
        })
        .collect();
    assert_eq!(got.len(), want.len(), "tshark saw: {got:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!(
            g.eq_ignore_ascii_case(w) || g == &w.replace("True", "1").replace("False", "0"),
            "tshark saw {g}, we wrote {w}"
        );
    }

    let pdml = tshark(&pcap, &["-Y", "diameter", "-T", "pdml"]);
    let seen = tshark_avps(&pdml);
    assert_eq!(seen.len(), cases.len(), "one packet per message");
    for (c, shown) in cases.iter().zip(&seen) {
        for n in c.must_show {
            assert!(
                shown.iter().any(|s| s.name == *n),
                "{}: tshark does not show {n}; it shows {shown:?}",
                c.what
            );
        }
        let ours = our_avps(&c.bytes);
        let names: Vec<&str> = shown.iter().map(|s| s.name.as_str()).collect();
        let our_names: Vec<&str> = ours.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names, our_names,
            "{}: tshark names the AVPs differently from our dictionary",
            c.what
        );
        for (s, (name, val)) in shown.iter().zip(&ours) {
            if let Some(v) = val {
                let sv = s.val.as_deref().unwrap_or("");
                assert!(
                    same_value(sv, v),
                    "{}: {name} is {v} for us, tshark shows {sv}",
                    c.what
                );
            }
        }
    }
}
