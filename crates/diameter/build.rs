//! Compiles the dictionary data in `dict/*.dict` into static Rust tables.
//!
//! The dictionary is data so that it can be reviewed against the
//! specifications line by line and cross-checked against Wireshark's; the
//! generated code gives the codec constant-time, allocation-free lookups.
//! Any inconsistency in the data (unknown type, duplicate code, enum for an
//! unknown AVP) fails the build with the file and line.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

const TYPES: &[&str] = &[
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

struct Avp {
    name: String,
    code: u32,
    vendor: u32,
    ty: String,
    m: bool,
    v: bool,
    enums: Vec<(i64, String)>,
    at: String,
}

struct Command {
    code: u32,
    name: String,
    req: String,
    ans: String,
}

fn main() {
    let dir = Path::new("dict");
    println!("cargo:rerun-if-changed=dict");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| fail(&format!("cannot read dict/: {e}")))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "dict"))
        .collect();
    files.sort();

    let mut vendors: BTreeMap<u32, String> = BTreeMap::new();
    let mut apps: BTreeMap<u32, (String, String)> = BTreeMap::new();
    let mut commands: BTreeMap<u32, Command> = BTreeMap::new();
    let mut avps: Vec<Avp> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut pending_enums: Vec<(String, i64, String, String)> = Vec::new();

    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| fail(&format!("{}: {e}", file.display())));
        for (n, raw) in text.lines().enumerate() {
            let at = format!("{}:{}", file.display(), n + 1);
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            match f[0] {
                "vendor" if f.len() == 3 => {
                    vendors.insert(num(f[1], &at), f[2].to_string());
                }
                "application" if f.len() == 4 => {
                    apps.insert(num(f[1], &at), (f[2].to_string(), f[3].to_string()));
                }
                "command" if f.len() == 5 => {
                    let code = num(f[1], &at);
                    if let Some(c) = commands.get(&code) {
                        if c.name != f[2] {
                            fail(&format!("{at}: command {code} already named {}", c.name));
                        }
                        continue;
                    }
                    commands.insert(
                        code,
                        Command {
                            code,
                            name: f[2].to_string(),
                            req: f[3].to_string(),
                            ans: f[4].to_string(),
                        },
                    );
                }
                "avp" if f.len() == 6 => {
                    let ty = f[4];
                    if !TYPES.contains(&ty) {
                        fail(&format!("{at}: unknown type {ty}"));
                    }
                    let flags = f[5];
                    if !flags.chars().all(|c| c == 'M' || c == 'V' || c == '-') {
                        fail(&format!("{at}: flags must be M, V, MV or -"));
                    }
                    let vendor = num(f[3], &at);
                    let v = flags.contains('V');
                    if v != (vendor != 0) {
                        fail(&format!(
                            "{at}: V flag must be set exactly when vendor is not 0"
                        ));
                    }
                    if by_name.contains_key(f[1]) {
                        fail(&format!("{at}: AVP {} defined twice", f[1]));
                    }
                    by_name.insert(f[1].to_string(), avps.len());
                    avps.push(Avp {
                        name: f[1].to_string(),
                        code: num(f[2], &at),
                        vendor,
                        ty: ty.to_string(),
                        m: flags.contains('M'),
                        v,
                        enums: Vec::new(),
                        at,
                    });
                }
                "enum" if f.len() == 4 => {
                    let value: i64 = f[2]
                        .parse()
                        .unwrap_or_else(|_| fail(&format!("{at}: bad enum value {}", f[2])));
                    pending_enums.push((f[1].to_string(), value, f[3].to_string(), at));
                }
                _ => fail(&format!("{at}: cannot parse `{line}`")),
            }
        }
    }
    for (avp, value, name, at) in pending_enums {
        let Some(&i) = by_name.get(&avp) else {
            fail(&format!("{at}: enum for unknown AVP {avp}"));
        };
        let a = &mut avps[i];
        if !matches!(a.ty.as_str(), "Enumerated" | "Unsigned32" | "Integer32") {
            fail(&format!("{at}: enum values on {} of type {}", a.name, a.ty));
        }
        if a.enums.iter().any(|(v, _)| *v == value) {
            fail(&format!("{at}: enum value {value} of {avp} defined twice"));
        }
        a.enums.push((value, name));
    }

    let mut keys: HashMap<(u32, u32), &str> = HashMap::new();
    for a in &avps {
        if let Some(other) = keys.insert((a.vendor, a.code), &a.name) {
            fail(&format!(
                "{}: AVP {} has the same code {} and vendor {} as {other}",
                a.at, a.name, a.code, a.vendor
            ));
        }
    }

    let mut out = String::new();
    out.push_str("// Generated by build.rs from dict/*.dict. Do not edit.\n\n");

    out.push_str("/// AVP codes, vendor ids and the M flag we set when sending.\npub mod avp {\n    use crate::codec::AvpCode;\n");
    for a in &avps {
        let _ = writeln!(
            out,
            "    /// {} ({}, code {}, vendor {}).\n    pub const {}: AvpCode = AvpCode::new({}, {}, {});",
            a.name,
            a.ty,
            a.code,
            a.vendor,
            ident(&a.name),
            a.code,
            a.vendor,
            a.m
        );
    }
    out.push_str("}\n\n");

    out.push_str("/// Enumerated values, one module per AVP that has them.\n#[allow(non_snake_case)]\npub mod enums {\n");
    for a in avps.iter().filter(|a| !a.enums.is_empty()) {
        let rust_ty = if a.ty == "Unsigned32" { "u32" } else { "i32" };
        let _ = writeln!(
            out,
            "    /// Values of {}.\n    pub mod {} {{",
            a.name,
            ident(&a.name)
        );
        for (v, n) in &a.enums {
            let _ = writeln!(out, "        pub const {}: {rust_ty} = {v};", ident(n));
        }
        out.push_str("    }\n");
    }
    out.push_str("}\n\n");

    out.push_str("/// Application ids.\npub mod app {\n");
    for (id, (name, _)) in &apps {
        let _ = writeln!(out, "    pub const {}: u32 = {id};", ident(name));
    }
    out.push_str("}\n\n");

    out.push_str("/// Command codes.\npub mod cmd {\n");
    for c in commands.values() {
        let _ = writeln!(out, "    pub const {}: u32 = {};", ident(&c.name), c.code);
    }
    out.push_str("}\n\n");

    out.push_str("/// Vendor ids.\npub mod vendor {\n");
    for (id, name) in &vendors {
        let _ = writeln!(out, "    pub const {}: u32 = {id};", ident(name));
    }
    out.push_str("}\n\n");

    // Sorted by (vendor, code) for binary search.
    let mut sorted: Vec<&Avp> = avps.iter().collect();
    sorted.sort_by_key(|a| (a.vendor, a.code));
    out.push_str("pub(crate) static AVPS: &[AvpDef] = &[\n");
    for a in &sorted {
        let mut enums: Vec<&(i64, String)> = a.enums.iter().collect();
        enums.sort_by_key(|(v, _)| *v);
        let list: Vec<String> = enums.iter().map(|(v, n)| format!("({v}, {n:?})")).collect();
        let _ = writeln!(
            out,
            "    AvpDef {{ name: {:?}, code: {}, vendor: {}, ty: AvpType::{}, m: {}, v: {}, enums: &[{}] }},",
            a.name,
            a.code,
            a.vendor,
            a.ty,
            a.m,
            a.v,
            list.join(", ")
        );
    }
    out.push_str("];\n\n");

    out.push_str("pub(crate) static APPLICATIONS: &[ApplicationDef] = &[\n");
    for (id, (name, kind)) in &apps {
        let _ = writeln!(
            out,
            "    ApplicationDef {{ id: {id}, name: {name:?}, accounting: {} }},",
            kind == "acct"
        );
    }
    out.push_str("];\n\n");

    out.push_str("pub(crate) static COMMANDS: &[CommandDef] = &[\n");
    for c in commands.values() {
        let _ = writeln!(
            out,
            "    CommandDef {{ code: {}, name: {:?}, request: {:?}, answer: {:?} }},",
            c.code, c.name, c.req, c.ans
        );
    }
    out.push_str("];\n\n");

    out.push_str("pub(crate) static VENDORS: &[(u32, &str)] = &[\n");
    for (id, name) in &vendors {
        let _ = writeln!(out, "    ({id}, {name:?}),");
    }
    out.push_str("];\n");

    let dest = Path::new(&std::env::var("OUT_DIR").unwrap_or_else(|_| fail("OUT_DIR not set")))
        .join("dict.rs");
    std::fs::write(&dest, out)
        .unwrap_or_else(|e| fail(&format!("writing {}: {e}", dest.display())));
}

fn ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

fn num(s: &str, at: &str) -> u32 {
    s.parse()
        .unwrap_or_else(|_| fail(&format!("{at}: bad number {s}")))
}

fn fail(msg: &str) -> ! {
    eprintln!("dictionary error: {msg}");
    std::process::exit(1)
}
