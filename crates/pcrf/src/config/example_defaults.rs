//! Checks that config/pcrf.example.toml tells the truth about defaults.
//!
//! The example says of itself: "the value shown is the default unless the
//! comment says otherwise". Each key it shows (set, or commented out as
//! `# key = value`) is checked against the code: leaving the key out of
//! its section must parse to the same configuration as writing the value
//! shown. A comment "default V" states V instead; a comment that says
//! "no default", or speaks of the default in any other way ("Default: the
//! cores"), exempts the key. Keys without which their section does not
//! parse (a TLS section's certificate) have no default to check. Arrays of
//! tables (`[[peers]]`, `[[notifications.sinks]]`) are examples, not
//! defaults.

use super::Config;

const EXAMPLE: &str = include_str!("../../../../config/pcrf.example.toml");

/// One key the example shows.
struct Shown {
    /// 1-based line in the example.
    line: usize,
    key: String,
    /// The value as written.
    value: String,
    /// What the comment makes of it: `Some(v)`: v is the stated default;
    /// `None`: the comment says the value shown is not the default.
    stated: Option<String>,
}

/// The value at the start of `rest` (a TOML value followed by an optional
/// comment) and what follows it.
fn split_value(rest: &str) -> Option<(String, String)> {
    let cuts = rest
        .char_indices()
        .filter(|&(_, c)| c == '#')
        .map(|(i, _)| i)
        .chain(std::iter::once(rest.len()));
    for cut in cuts {
        let value = rest[..cut].trim();
        if !value.is_empty() && toml::from_str::<toml::Table>(&format!("k = {value}")).is_ok() {
            return Some((
                value.to_owned(),
                rest[cut..].trim_start_matches('#').to_owned(),
            ));
        }
    }
    None
}

/// What a key's comment says its default is: `Ok(None)`: nothing (the value
/// shown is the default); `Ok(Some(v))`: "default v"; `Err(())`: the value
/// shown is not the default, or the default is not one value.
fn stated_default(comment: &str) -> Result<Option<String>, ()> {
    let lower = comment.to_ascii_lowercase();
    if lower.contains("no default") {
        return Err(());
    }
    // The word, not a part of one ("default_policy", "default.lua").
    let word = |at: usize| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + "default".len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '"' || c == '/')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '"')
    };
    let Some(at) = lower
        .match_indices("default")
        .map(|(at, _)| at)
        .find(|&at| word(at))
    else {
        return Ok(None);
    };
    let after = &comment[at + "default".len()..];
    // "(default)": the value shown is the default.
    if after.starts_with(')') {
        return Ok(None);
    }
    let after = after.strip_prefix(' ').ok_or(())?;
    // The longest prefix that is a TOML value and ends the phrase.
    for end in (1..=after.len()).rev() {
        if !after.is_char_boundary(end) {
            continue;
        }
        let (value, tail) = after.split_at(end);
        let tail = tail.trim_start();
        let ends_phrase = tail.is_empty() || tail.starts_with([';', ',', ')']);
        if ends_phrase && toml::from_str::<toml::Table>(&format!("k = {value}")).is_ok() {
            return Ok(Some(value.trim().to_owned()));
        }
    }
    Err(())
}

/// A line that continues the comment of the key above it.
fn continues_comment(line: &str) -> bool {
    line.starts_with(char::is_whitespace) && line.trim_start().starts_with('#')
        || line
            .strip_prefix('#')
            .is_some_and(|l| l.starts_with(' ') && l.trim_start().starts_with('#'))
}

/// The example's sections (in order) and the keys each shows.
fn shown_keys() -> Vec<(String, Vec<Shown>)> {
    let lines: Vec<&str> = EXAMPLE.lines().collect();
    let mut sections: Vec<(String, Vec<Shown>)> = Vec::new();
    // None: outside any section, or in an array of tables.
    let mut section: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let line_no = i + 1;
        let body = line
            .strip_prefix('#')
            .map_or(line, |l| l.trim_start())
            .trim_end();
        i += 1;
        if body.starts_with("[[") {
            section = None;
            continue;
        }
        if let Some(name) = body.strip_prefix('[').and_then(|b| b.strip_suffix(']')) {
            section = Some(name.to_owned());
            sections.push((name.to_owned(), Vec::new()));
            continue;
        }
        let Some(current) = &section else { continue };
        let Some((key, rest)) = body.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            continue;
        }
        let Some((value, mut comment)) = split_value(rest) else {
            continue; // a value over several lines: an example
        };
        while i < lines.len() && continues_comment(lines[i]) {
            comment.push(' ');
            comment.push_str(lines[i].trim_start().trim_start_matches(['#', ' ']));
            i += 1;
        }
        let stated = match stated_default(&comment) {
            Ok(None) => Some(value.clone()),
            Ok(Some(v)) => Some(v),
            Err(()) => None,
        };
        let entry = sections
            .iter_mut()
            .rev()
            .find(|(name, _)| name == current)
            .map(|(_, keys)| keys);
        if let Some(keys) = entry {
            keys.push(Shown {
                line: line_no,
                key: key.to_owned(),
                value,
                stated,
            });
        }
    }
    sections
}

/// `[section]` with `lines`, parsed (types and serde defaults only). A
/// section left without keys is left out: an empty `[policy.fallback]` is
/// a fallback without rules, not the default one.
fn parse(section: &str, lines: &[String]) -> Result<String, String> {
    let text = if lines.is_empty() {
        String::new()
    } else {
        format!("[{section}]\n{}\n", lines.join("\n"))
    };
    toml::from_str::<Config>(&text)
        .map(|c| format!("{c:?}"))
        .map_err(|e| format!("{text}: {e}"))
}

#[test]
fn every_default_the_example_states_is_the_codes_default() {
    let sections = shown_keys();
    let checked: usize = sections
        .iter()
        .map(|(_, keys)| keys.iter().filter(|k| k.stated.is_some()).count())
        .sum();
    // The parse of the example above must find what it documents: a
    // change of its layout must not empty this test.
    assert!(checked >= 50, "only {checked} stated defaults found");
    let mut wrong = Vec::new();
    for (section, keys) in &sections {
        for (n, key) in keys.iter().enumerate() {
            let Some(stated) = &key.stated else { continue };
            let others = keys
                .iter()
                .enumerate()
                .filter(|&(m, _)| m != n)
                .map(|(_, k)| format!("{} = {}", k.key, k.value));
            let without: Vec<String> = others.clone().collect();
            let with: Vec<String> = others
                .chain(std::iter::once(format!("{} = {stated}", key.key)))
                .collect();
            // Required in its section: no default to compare with.
            let Ok(default) = parse(section, &without) else {
                continue;
            };
            match parse(section, &with) {
                Ok(written) if written == default => {}
                Ok(_) => wrong.push(format!(
                    "pcrf.example.toml:{}: [{section}] {} = {stated} is not the default",
                    key.line, key.key
                )),
                Err(e) => wrong.push(format!("pcrf.example.toml:{}: {e}", key.line)),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_comment_states_a_default_or_says_there_is_none() {
    assert_eq!(stated_default("  # keep this long"), Ok(None));
    assert_eq!(
        stated_default(" default \"UTC\""),
        Ok(Some("\"UTC\"".into()))
    );
    assert_eq!(stated_default(" default false"), Ok(Some("false".into())));
    assert_eq!(
        stated_default(" mutual TLS (default); each peer's"),
        Ok(None)
    );
    assert_eq!(
        stated_default(" its realm (default: [node].origin_realm)"),
        Err(())
    );
    assert_eq!(
        stated_default(" fewer commits. Default 0 for sqlite, 2000"),
        Err(())
    );
    assert_eq!(stated_default(" an example (no default)"), Err(()));
    assert_eq!(stated_default(" or \"default_policy\""), Ok(None));
}
