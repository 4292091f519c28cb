//! Cross-checks every AVP of our dictionary against Wireshark's Diameter
//! dictionary, an independent transcription of the same specifications.
//!
//! For each AVP we look up Wireshark's entries with the same code and vendor
//! and compare the facts that do not depend on naming: that the AVP exists
//! and its data type. Any disagreement fails with the full list. Where
//! Wireshark lacks an AVP or is itself wrong, `ALLOWED` records the
//! exception with the specification clause that settles it; an exception
//! that no longer applies also fails, so the list cannot rot. Application
//! ids and command codes (and command names) are checked the same way.
//!
//! Wireshark's XML is read with a small tag scanner rather than an XML crate:
//! `dictionary.xml` pulls the other files in through external entities, which
//! general-purpose parsers refuse, and we need only a few attributes of three
//! element kinds, so each file is scanned on its own.
//!
//! The files come from the `tshark` package (`apt-get install tshark`);
//! `WIRESHARK_DICT_DIR` overrides the default /usr/share/wireshark/diameter.

use diameter::dict::{self, AvpType};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Why an AVP may disagree with Wireshark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exception {
    /// Wireshark has no entry with this code and vendor.
    Missing,
    /// Wireshark has the entry with another type; ours follows the spec.
    TypeDiffers,
}

/// Known, justified exceptions: (our AVP name, exception, reason with the
/// specification clause).
const ALLOWED: &[(&str, Exception, &str)] = &[
    // Wireshark declares these Enumerated so that it can print value names;
    // the RFC types them Unsigned32 (our dictionary names values through
    // enum lines on Unsigned32 AVPs instead).
    (
        "Result-Code",
        Exception::TypeDiffers,
        "RFC 6733 §7.1: Unsigned32",
    ),
    (
        "Experimental-Result-Code",
        Exception::TypeDiffers,
        "RFC 6733 §7.7: Unsigned32",
    ),
    (
        "Session-Binding",
        Exception::TypeDiffers,
        "RFC 6733 §8.17: Unsigned32 bit mask",
    ),
    (
        "Inband-Security-Id",
        Exception::TypeDiffers,
        "RFC 6733 §6.10: Unsigned32",
    ),
    (
        "Presence-Reporting-Area-Status",
        Exception::TypeDiffers,
        "TS 29.212 §5.3.110: Unsigned32",
    ),
    (
        "NetLoc-Access-Support",
        Exception::TypeDiffers,
        "TS 29.212 §5.3.111: Unsigned32",
    ),
    (
        "PCSCF-Restoration-Indication",
        Exception::TypeDiffers,
        "TS 29.212 §5.3.113: Unsigned32",
    ),
    // Wireshark is wrong.
    (
        "Authorization-Lifetime",
        Exception::TypeDiffers,
        "RFC 6733 §8.9: Unsigned32, not Integer32",
    ),
    // RADIUS-derived addresses: 4 raw octets, no Address family prefix;
    // Wireshark's IPAddress type is a display choice.
    (
        "Framed-IP-Address",
        Exception::TypeDiffers,
        "RFC 7155 §4.4.10.5.1: OctetString",
    ),
    (
        "Framed-IP-Netmask",
        Exception::TypeDiffers,
        "RFC 7155 §4.4.10.5.2: OctetString",
    ),
    (
        "3GPP-CG-Address",
        Exception::TypeDiffers,
        "TS 29.061 §16.4.7.2: OctetString (IPv4 octets)",
    ),
    (
        "3GPP-SGSN-Address",
        Exception::TypeDiffers,
        "TS 29.061 §16.4.7.2: OctetString (IPv4 octets)",
    ),
    (
        "3GPP-GGSN-Address",
        Exception::TypeDiffers,
        "TS 29.061 §16.4.7.2: OctetString (IPv4 octets)",
    ),
    (
        "3GPP-NSAPI",
        Exception::TypeDiffers,
        "TS 29.061 §16.4.7.2: OctetString",
    ),
    (
        "3GPP-Session-Stop-Indicator",
        Exception::TypeDiffers,
        "TS 29.061 §16.4.7.2: OctetString",
    ),
    (
        "Codec-Data",
        Exception::TypeDiffers,
        "TS 29.214 §5.3.7: OctetString (SDP lines, any octets)",
    ),
    // Newer than Wireshark's dictionary.
    (
        "Media-Component-Status",
        Exception::Missing,
        "TS 29.214 §5.3.48: code 549, Unsigned32",
    ),
    (
        "TCP-Source-Port",
        Exception::Missing,
        "TS 29.212 §5.3.129: code 2843, Unsigned32",
    ),
    (
        "SN-Request-Type",
        Exception::Missing,
        "TS 29.219 §5.3.7: code 2907, Unsigned32 bit mask",
    ),
];

/// One Wireshark AVP entry.
#[derive(Debug, Clone)]
struct WsAvp {
    name: String,
    type_name: String,
    file: String,
}

/// Wireshark's dictionary, indexed by (code, vendor id).
struct WsDict {
    avps: HashMap<(u32, u32), Vec<WsAvp>>,
    /// Application ids.
    applications: Vec<u32>,
    /// Command code -> names (a code may appear in several files).
    commands: HashMap<u32, Vec<String>>,
    /// typedefn name -> parent name, to resolve derived types.
    parents: HashMap<String, String>,
}

fn dict_dir() -> PathBuf {
    std::env::var_os("WIRESHARK_DICT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/wireshark/diameter"))
}

/// Attributes of one start tag, e.g. `avp name="X" code="1"`.
fn attrs(tag: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = tag;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq]
            .split_whitespace()
            .last()
            .unwrap_or("")
            .to_string();
        let after = rest[eq + 1..].trim_start();
        let Some(quote) = after.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            break;
        };
        let body = &after[1..];
        let Some(end) = body.find(quote) else {
            break;
        };
        out.insert(key, body[..end].to_string());
        rest = &body[end + 1..];
    }
    out
}

/// One tag: its name (`avp`, `/avp`...), its attribute text, self-closing.
type Tag = (String, String, bool);

/// The tags of an XML text in order, as (name, attribute text, self-closing),
/// skipping comments, processing instructions and the DOCTYPE.
fn tags(text: &str) -> Vec<Tag> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = text[i..].find('<') {
        let start = i + off;
        let rest = &text[start..];
        let skip_to = |pat: &str| rest.find(pat).map(|e| start + e + pat.len());
        let next = if rest.starts_with("<!--") {
            skip_to("-->")
        } else if rest.starts_with("<!DOCTYPE") {
            skip_to("]>").or_else(|| skip_to(">"))
        } else if rest.starts_with("<?") {
            skip_to("?>")
        } else {
            let end = rest.find('>').map(|e| start + e);
            if let Some(end) = end {
                let inner = &text[start + 1..end];
                let self_closing = inner.ends_with('/');
                let inner = inner.trim_end_matches('/');
                let name_end = inner
                    .find(|c: char| c.is_whitespace())
                    .unwrap_or(inner.len());
                out.push((
                    inner[..name_end].to_string(),
                    inner[name_end..].to_string(),
                    self_closing,
                ));
            }
            end.map(|e| e + 1)
        };
        match next {
            Some(n) => i = n,
            None => break,
        }
    }
    out
}

fn load(dir: &Path) -> Result<WsDict, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    files.sort();
    if !files.iter().any(|f| f.ends_with("dictionary.xml")) {
        return Err(format!("{} has no dictionary.xml", dir.display()));
    }
    let texts: Vec<(String, Vec<Tag>)> = files
        .iter()
        .map(|f| {
            let t = std::fs::read(f).map_err(|e| format!("{}: {e}", f.display()))?;
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            Ok((name, tags(&String::from_utf8_lossy(&t))))
        })
        .collect::<Result<_, String>>()?;

    // Vendors first: AVPs in one file name vendors defined in another.
    let mut vendors: HashMap<String, u32> = HashMap::new();
    let mut parents = HashMap::new();
    for (_, ts) in &texts {
        for (name, a, _) in ts {
            let a = attrs(a);
            match name.as_str() {
                "vendor" => {
                    if let (Some(id), Some(code)) = (a.get("vendor-id"), a.get("code")) {
                        if let Ok(code) = code.parse() {
                            vendors.insert(id.clone(), code);
                        }
                    }
                }
                "typedefn" => {
                    if let (Some(n), Some(p)) = (a.get("type-name"), a.get("type-parent")) {
                        parents.insert(n.clone(), p.clone());
                    }
                }
                _ => {}
            }
        }
    }

    let mut applications = Vec::new();
    let mut commands: HashMap<u32, Vec<String>> = HashMap::new();
    let mut avps: HashMap<(u32, u32), Vec<WsAvp>> = HashMap::new();
    for (file, ts) in &texts {
        let mut current: Option<((u32, u32), WsAvp)> = None;
        for (name, a, self_closing) in ts {
            match name.as_str() {
                "avp" => {
                    let a = attrs(a);
                    let code: u32 = a
                        .get("code")
                        .and_then(|c| c.parse().ok())
                        .ok_or_else(|| format!("{file}: avp without a numeric code: {a:?}"))?;
                    let vendor = match a.get("vendor-id").map(String::as_str) {
                        None | Some("None") | Some("") => 0,
                        Some(v) => *vendors
                            .get(v)
                            .ok_or_else(|| format!("{file}: unknown vendor-id {v}"))?,
                    };
                    let entry = WsAvp {
                        name: a.get("name").cloned().unwrap_or_default(),
                        type_name: String::new(),
                        file: file.clone(),
                    };
                    if *self_closing {
                        avps.entry((code, vendor)).or_default().push(entry);
                    } else {
                        current = Some(((code, vendor), entry));
                    }
                }
                "application" => {
                    if let Some(id) = attrs(a).get("id").and_then(|i| i.parse().ok()) {
                        applications.push(id);
                    }
                }
                "command" => {
                    let a = attrs(a);
                    if let (Some(code), Some(name)) =
                        (a.get("code").and_then(|c| c.parse().ok()), a.get("name"))
                    {
                        commands.entry(code).or_default().push(name.clone());
                    }
                }
                "type" => {
                    if let Some((_, e)) = current.as_mut() {
                        e.type_name = attrs(a).get("type-name").cloned().unwrap_or_default();
                    }
                }
                "grouped" => {
                    if let Some((_, e)) = current.as_mut() {
                        e.type_name = "Grouped".into();
                    }
                }
                "/avp" => {
                    if let Some((k, e)) = current.take() {
                        avps.entry(k).or_default().push(e);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(WsDict {
        avps,
        applications,
        commands,
        parents,
    })
}

/// Whether Wireshark's type name describes our type. Wireshark adds a few
/// names of its own (AppId, VendorId, IPAddress, OctetStringOrUTF8,
/// MIPRegistrationRequest) and writes the RFC's derived types as typedefns.
fn type_agrees(ws: &WsDict, ws_type: &str, ours: AvpType) -> bool {
    let direct = match ws_type {
        "AppId" | "VendorId" => Some(AvpType::Unsigned32),
        "IPAddress" => Some(AvpType::Address),
        "MIPRegistrationRequest" => Some(AvpType::OctetString),
        // Wireshark's name for an OctetString it shows as text when it can.
        "OctetStringOrUTF8" => {
            return matches!(ours, AvpType::OctetString | AvpType::UTF8String);
        }
        _ => None,
    };
    if let Some(t) = direct {
        return t == ours;
    }
    if ws_type == ours.name() {
        return true;
    }
    // A name that is not an RFC 6733 type is one of Wireshark's derived
    // types: compare its declared parent. RFC type names are compared
    // exactly (DiameterIdentity is not an OctetString for our purposes).
    let rfc_type = RFC_TYPES.contains(&ws_type);
    match ws.parents.get(ws_type) {
        Some(parent) if !rfc_type => parent == ours.name(),
        _ => false,
    }
}

const RFC_TYPES: &[&str] = &[
    "OctetString",
    "Integer32",
    "Integer64",
    "Unsigned32",
    "Unsigned64",
    "Float32",
    "Float64",
    "Grouped",
    "Address",
    "Time",
    "UTF8String",
    "DiameterIdentity",
    "DiameterURI",
    "Enumerated",
    "IPFilterRule",
    "QoSFilterRule",
];

/// Compares our dictionary with Wireshark's; returns the problems found.
fn compare(
    ws: &WsDict,
    ours: &[dict::AvpDef],
    exceptions: &[(&'static str, Exception, &'static str)],
) -> Vec<String> {
    let allowed: BTreeMap<&str, (Exception, &str)> =
        exceptions.iter().map(|(n, e, r)| (*n, (*e, *r))).collect();
    let mut used: Vec<&str> = Vec::new();
    let mut problems = Vec::new();
    for d in ours {
        let exception = allowed.get(d.name).map(|(e, _)| *e);
        let found = ws.avps.get(&(d.code, d.vendor));
        let problem = match found {
            None => Some((Exception::Missing, "Wireshark has no such AVP".to_string())),
            Some(entries) if !entries.iter().any(|e| type_agrees(ws, &e.type_name, d.ty)) => {
                let theirs: Vec<String> = entries
                    .iter()
                    .map(|e| format!("{} is {} in {}", e.name, e.type_name, e.file))
                    .collect();
                Some((
                    Exception::TypeDiffers,
                    format!("we say {}, Wireshark: {}", d.ty.name(), theirs.join("; ")),
                ))
            }
            Some(_) => None,
        };
        match (problem, exception) {
            (Some((kind, _)), Some(e)) if kind == e => used.push(d.name),
            (Some((_, what)), _) => problems.push(format!(
                "{} (code {}, vendor {}): {what}",
                d.name, d.code, d.vendor
            )),
            (None, Some(_)) => problems.push(format!(
                "{} (code {}, vendor {}): allow-listed but Wireshark now agrees; remove the entry",
                d.name, d.code, d.vendor
            )),
            (None, None) => {}
        }
    }
    for name in allowed.keys() {
        if !ours.iter().any(|d| d.name == *name) {
            problems.push(format!(
                "allow-list names {name}, which our dictionary lacks"
            ));
        }
    }
    problems
}

fn wireshark() -> WsDict {
    let dir = dict_dir();
    match load(&dir) {
        Ok(d) => d,
        Err(e) => panic!(
            "cannot read Wireshark's Diameter dictionary ({e}). Install it with \
             `apt-get install -y tshark` (it provides /usr/share/wireshark/diameter), \
             or point WIRESHARK_DICT_DIR at a copy."
        ),
    }
}

#[test]
fn every_avp_agrees_with_wireshark() {
    let ws = wireshark();
    let ours = dict::avps();
    let problems = compare(&ws, ours, ALLOWED);
    assert!(
        problems.is_empty(),
        "{} of {} AVPs disagree with Wireshark:\n  {}",
        problems.len(),
        ours.len(),
        problems.join("\n  ")
    );
}

#[test]
fn applications_and_commands_agree_with_wireshark() {
    let ws = wireshark();
    let mut problems = Vec::new();
    for a in dict::applications() {
        if !ws.applications.contains(&a.id) {
            problems.push(format!(
                "application {} ({}) unknown to Wireshark",
                a.id, a.name
            ));
        }
    }
    for c in dict::commands() {
        match ws.commands.get(&c.code) {
            None => problems.push(format!(
                "command {} ({}) unknown to Wireshark",
                c.code, c.name
            )),
            Some(names) if !names.iter().any(|n| n == c.name) => problems.push(format!(
                "command {} is {} here, {names:?} in Wireshark",
                c.code, c.name
            )),
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_detects_disagreement() {
    let ws = wireshark();
    // Session-Id is UTF8String in both; claiming Unsigned32 must be caught,
    // as must an AVP Wireshark does not have.
    let wrong = [
        dict::AvpDef {
            name: "Session-Id",
            code: 263,
            vendor: 0,
            ty: AvpType::Unsigned32,
            m: true,
            v: false,
            enums: &[],
        },
        dict::AvpDef {
            name: "No-Such-AVP",
            code: 4_000_000,
            vendor: 0,
            ty: AvpType::OctetString,
            m: false,
            v: false,
            enums: &[],
        },
    ];
    let problems = compare(&ws, &wrong, &[]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("we say Unsigned32"), "{problems:?}");
    assert!(problems[1].contains("no such AVP"), "{problems:?}");
}

#[test]
fn wireshark_type_names_map_to_ours() {
    let ws = wireshark();
    assert!(type_agrees(&ws, "AppId", AvpType::Unsigned32));
    assert!(type_agrees(&ws, "VendorId", AvpType::Unsigned32));
    assert!(type_agrees(&ws, "IPAddress", AvpType::Address));
    assert!(type_agrees(&ws, "OctetStringOrUTF8", AvpType::UTF8String));
    assert!(type_agrees(&ws, "OctetStringOrUTF8", AvpType::OctetString));
    assert!(!type_agrees(&ws, "IPAddress", AvpType::OctetString));
    assert!(!type_agrees(&ws, "Unsigned32", AvpType::Enumerated));
    assert!(type_agrees(&ws, "Grouped", AvpType::Grouped));
}

#[test]
fn tag_scanner_reads_attributes_and_skips_comments() {
    let t = tags(
        r#"<?xml version="1.0"?><!DOCTYPE d [ <!ENTITY x SYSTEM "x.xml"> ]>
        <!-- <avp name="Hidden" code="1"/> -->
        <avp name="A-B" code='7' vendor-id="TGPP"><type type-name="Time"/></avp>"#,
    );
    let names: Vec<&str> = t.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["avp", "type", "/avp"]);
    let a = attrs(&t[0].1);
    assert_eq!(a.get("name").map(String::as_str), Some("A-B"));
    assert_eq!(a.get("code").map(String::as_str), Some("7"));
    assert!(t[1].2, "type is self-closing");
}
