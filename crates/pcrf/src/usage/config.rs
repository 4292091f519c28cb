//! The usage file (TOML): Monitoring-Keys and their grant chunks, the
//! accumulators they feed, and each plan's quotas. Loaded at start and on
//! every reload; every problem is reported with its location, all at once
//! (unknown fields included), so an operator fixes a file in one go. The
//! checksum of the running file is shown so one can tell which file a node
//! runs, and `check_reload` refuses a change that would orphan grants the
//! PCEFs are still using.
//!
//! The file is walked as a spanned TOML tree rather than deserialized with
//! serde: serde stops at the first error, we want all of them, with lines.

use super::period::{PeriodCache, Reset};
use super::MonitoringLevel;
use crate::config::ConfigProblem;
use jiff::tz::TimeZone;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// Where a report comes from: the PCEF over Gx, or a TDF over Sd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Interface {
    Gx,
    Sd,
}

impl Interface {
    /// The prefix used in `sources`.
    pub fn name(self) -> &'static str {
        match self {
            Interface::Gx => "gx",
            Interface::Sd => "sd",
        }
    }
}

impl std::fmt::Display for Interface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of an accumulator's `sources`: a Monitoring-Key on an interface.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    pub interface: Interface,
    pub key: String,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.interface, self.key)
    }
}

/// `[keys.NAME]`: a Monitoring-Key and how much to grant for it at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyConfig {
    pub level: MonitoringLevel,
    /// Octets granted at most per grant (> 0).
    pub chunk: u64,
    /// CC-Time granted, seconds, when configured.
    pub chunk_time: Option<u32>,
}

/// Local hours `[start, end)` during which an accumulator counts. When
/// `start > end` the window wraps midnight (e.g. 22..6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hours {
    /// 0..=23.
    pub start: u8,
    /// 1..=24, != start.
    pub end: u8,
}

impl Hours {
    /// Whether local hour `hour` (0..=23) is inside the window.
    pub fn contains(self, hour: u8) -> bool {
        if self.start < self.end {
            self.start <= hour && hour < self.end
        } else {
            hour >= self.start || hour < self.end
        }
    }
}

/// `[accumulators.NAME]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccumulatorConfig {
    pub reset: Reset,
    /// Keys whose usage is summed into this accumulator (at least one, no
    /// duplicates).
    pub sources: Vec<Source>,
    /// Counts only usage reported inside these local hours; all day if `None`.
    pub hours: Option<Hours>,
}

impl AccumulatorConfig {
    /// Whether usage of `key` reported over `interface` is counted here.
    pub fn is_fed_by(&self, interface: Interface, key: &str) -> bool {
        self.sources
            .iter()
            .any(|s| s.interface == interface && s.key == key)
    }

    /// Whether it counts at local hour `hour`.
    pub fn counts_at(&self, hour: u8) -> bool {
        self.hours.is_none_or(|h| h.contains(hour))
    }
}

/// A usage file that cannot be used: every problem, in file order.
#[derive(Debug, thiserror::Error)]
#[error("{}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct UsageConfigError {
    pub problems: Vec<ConfigProblem>,
}

/// The validated usage file.
#[derive(Clone, Debug)]
pub struct UsageConfig {
    time_zone_name: String,
    time_zone: TimeZone,
    billing_day: u8,
    keys: BTreeMap<String, KeyConfig>,
    accumulators: BTreeMap<Arc<str>, AccumulatorConfig>,
    /// plan -> accumulator -> octets per period.
    plans: BTreeMap<String, BTreeMap<String, u64>>,
    checksum: u64,
    source: Option<PathBuf>,
    periods: PeriodCache,
}

impl Default for UsageConfig {
    fn default() -> Self {
        UsageConfig::empty()
    }
}

impl UsageConfig {
    /// No keys, no accumulators: usage monitoring is off (what runs when
    /// no usage file is configured).
    pub fn empty() -> UsageConfig {
        UsageConfig {
            time_zone_name: "UTC".into(),
            time_zone: TimeZone::UTC,
            billing_day: 1,
            keys: BTreeMap::new(),
            accumulators: BTreeMap::new(),
            plans: BTreeMap::new(),
            checksum: 0,
            source: None,
            periods: PeriodCache::default(),
        }
    }

    /// Reads, parses and validates a file.
    pub fn load(path: &Path) -> Result<UsageConfig, UsageConfigError> {
        let name = path.display().to_string();
        let fail = |message: String| UsageConfigError {
            problems: vec![ConfigProblem {
                location: name.clone(),
                message,
            }],
        };
        let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        let text =
            std::str::from_utf8(&bytes).map_err(|e| fail(format!("not valid UTF-8: {e}")))?;
        let mut cfg = Self::parse(text, &name)?;
        cfg.source = Some(path.to_path_buf());
        Ok(cfg)
    }

    /// Parses and validates TOML text; `origin` names it in messages.
    pub fn parse(text: &str, origin: &str) -> Result<UsageConfig, UsageConfigError> {
        let (root, syntax) = DeTable::parse_recoverable(text);
        if !syntax.is_empty() {
            // The tree is a best guess past a syntax error: checking it
            // would report problems that are not there.
            let problems = syntax
                .iter()
                .map(|e| ConfigProblem {
                    location: match e.span() {
                        Some(span) => {
                            let (line, col) = line_col(text, span.start);
                            format!("{origin}:{line}:{col}")
                        }
                        None => origin.to_string(),
                    },
                    message: e.message().trim().to_string(),
                })
                .collect();
            return Err(UsageConfigError { problems });
        }
        let mut walk = Walk {
            text,
            origin,
            problems: Vec::new(),
            declared_keys: BTreeSet::new(),
            declared_accumulators: BTreeSet::new(),
        };
        let mut cfg = UsageConfig::empty();
        cfg.checksum = xxhash_rust::xxh3::xxh3_64(text.as_bytes());
        walk.document(root.get_ref(), &mut cfg);
        if walk.problems.is_empty() {
            Ok(cfg)
        } else {
            walk.problems.sort_by_key(|(at, _)| *at);
            Err(UsageConfigError {
                problems: walk.problems.into_iter().map(|(_, p)| p).collect(),
            })
        }
    }

    /// xxh3 of the file's bytes (0 for `empty()`).
    pub fn checksum(&self) -> u64 {
        self.checksum
    }

    /// The checksum as the API and logs show it.
    pub fn checksum_hex(&self) -> String {
        format!("{:016x}", self.checksum)
    }

    /// The file it was loaded from.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// Whether anything is monitored at all.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The IANA name as written ("UTC" by default).
    pub fn time_zone_name(&self) -> &str {
        &self.time_zone_name
    }

    /// The zone periods and hour windows are computed in.
    pub fn time_zone(&self) -> &TimeZone {
        &self.time_zone
    }

    /// Reset periods already computed today (see `PeriodCache`).
    pub fn periods(&self) -> &PeriodCache {
        &self.periods
    }

    /// The default billing day (1..=28).
    pub fn billing_day(&self) -> u8 {
        self.billing_day
    }

    /// A subscriber's billing day: theirs when valid, else the default.
    pub fn billing_day_for(&self, subscriber: Option<u8>) -> u8 {
        subscriber
            .filter(|d| (1..=28).contains(d))
            .unwrap_or(self.billing_day)
    }

    pub fn keys(&self) -> &BTreeMap<String, KeyConfig> {
        &self.keys
    }

    pub fn key(&self, name: &str) -> Option<&KeyConfig> {
        self.keys.get(name)
    }

    pub fn accumulators(&self) -> &BTreeMap<Arc<str>, AccumulatorConfig> {
        &self.accumulators
    }

    pub fn accumulator(&self, name: &str) -> Option<&AccumulatorConfig> {
        self.accumulators.get(name)
    }

    /// The accumulators that count usage of `key` reported over `interface`.
    pub fn accumulators_fed_by<'a>(
        &'a self,
        interface: Interface,
        key: &'a str,
    ) -> impl Iterator<Item = (&'a Arc<str>, &'a AccumulatorConfig)> + 'a {
        self.accumulators
            .iter()
            .filter(move |(_, a)| a.is_fed_by(interface, key))
    }

    /// Whether `key` feeds any accumulator over any interface.
    pub fn feeds_any(&self, key: &str) -> bool {
        self.accumulators
            .values()
            .any(|a| a.sources.iter().any(|s| s.key == key))
    }

    /// Plans and their quotas (octets per period by accumulator).
    pub fn plans(&self) -> &BTreeMap<String, BTreeMap<String, u64>> {
        &self.plans
    }

    /// The plan's quota on an accumulator; `None` when the plan is unknown
    /// or has no quota there (unlimited).
    pub fn plan_quota(&self, plan: &str, accumulator: &str) -> Option<u64> {
        self.plans.get(plan)?.get(accumulator).copied()
    }

    /// Checks that replacing `old` by `self` orphans no running grant:
    /// `granted_keys` counts, per key, the sessions holding a grant for it
    /// (see `grant::granted_keys`). A key with grants that disappears, or
    /// that fed an accumulator and would feed none, is refused: the PCEFs
    /// would go on reporting usage nobody counts. Keys unknown to `old`
    /// are not this reload's doing and are let through.
    pub fn check_reload(
        &self,
        old: &UsageConfig,
        granted_keys: &BTreeMap<String, usize>,
    ) -> Result<(), String> {
        let mut refused = Vec::new();
        for (key, &sessions) in granted_keys {
            if sessions == 0 || old.key(key).is_none() {
                continue;
            }
            let held = if sessions == 1 {
                "1 session holds a grant".to_string()
            } else {
                format!("{sessions} sessions hold a grant")
            };
            if self.key(key).is_none() {
                refused.push(format!(
                    "key {key:?} is removed but {held} for it; remove it from the policy's \
                     monitoring first and reload once those sessions no longer hold it"
                ));
            } else if old.feeds_any(key) && !self.feeds_any(key) {
                refused.push(format!(
                    "key {key:?} would feed no accumulator any more but {held} for it; \
                     keep it in some accumulator's sources until those sessions no longer hold it"
                ));
            }
        }
        if refused.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "usage configuration reload refused: {}",
                refused.join("; ")
            ))
        }
    }
}

/// Parses a volume in octets: "100 MB", "1.5 GB", "512 KiB", "42", "42 B".
/// Decimal units (kB, MB, GB, TB; any case) are powers of 1000, binary ones
/// (KiB, MiB, GiB, TiB) powers of 1024. A fraction is rounded down to
/// whole octets.
pub fn parse_volume(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (number, unit) = (t[..split].replace('_', ""), t[split..].trim());
    let (whole, fraction) = number.split_once('.').unwrap_or((&number, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (number.contains('.') && !digits(fraction)) {
        return Err(format!(
            "{text:?} is not a volume (e.g. 100 MB, 1.5 GB, 512 KiB)"
        ));
    }
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?} (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)"
            ))
        }
    };
    let too_big = || format!("{text:?} is too large");
    let whole: u128 = whole.parse().map_err(|_| too_big())?;
    let mut octets = whole
        .checked_mul(u128::from(multiplier))
        .ok_or_else(too_big)?;
    if !fraction.is_empty() {
        // Exact decimal arithmetic: 1.1 GB is 1_100_000_000, not
        // 1_099_999_999. Digits past 20 cannot change whole octets (the
        // largest multiplier is 2^40 < 10^13) and would overflow u128.
        let fraction = &fraction[..fraction.len().min(20)];
        let scale = 10u128.pow(fraction.len() as u32);
        let f: u128 = fraction.parse().map_err(|_| too_big())?;
        octets += f * u128::from(multiplier) / scale;
    }
    u64::try_from(octets).map_err(|_| too_big())
}

/// Collects problems while walking the spanned tree.
struct Walk<'a> {
    text: &'a str,
    origin: &'a str,
    problems: Vec<(usize, ConfigProblem)>,
    /// Names of `[keys]` and `[accumulators]` entries, valid or not: a
    /// reference to a badly defined one is not a second problem.
    declared_keys: BTreeSet<String>,
    declared_accumulators: BTreeSet<String>,
}

type Entry<'i> = (
    &'i Spanned<std::borrow::Cow<'i, str>>,
    &'i Spanned<DeValue<'i>>,
);

impl Walk<'_> {
    fn bad(&mut self, span: Range<usize>, path: &str, message: impl Into<String>) {
        let (line, col) = line_col(self.text, span.start);
        self.problems.push((
            span.start,
            ConfigProblem {
                location: format!("{}:{line}:{col} {path}", self.origin),
                message: message.into(),
            },
        ));
    }

    fn document(&mut self, root: &DeTable<'_>, cfg: &mut UsageConfig) {
        let mut sections: Vec<Entry<'_>> = Vec::new();
        for (k, v) in root.iter() {
            let path = k.get_ref().as_ref();
            match path {
                "time_zone" => {
                    if let Some(name) = self.string(v, "time_zone") {
                        match crate::policy::clock::time_zone(name) {
                            Ok(tz) => {
                                cfg.time_zone_name = name.to_string();
                                cfg.time_zone = tz;
                            }
                            Err(_) => self.bad(
                                v.span(),
                                "time_zone",
                                format!("unknown IANA time zone {name:?}"),
                            ),
                        }
                    }
                }
                "billing_day" => {
                    if let Some(day) = self.integer(v, "billing_day") {
                        match u8::try_from(day) {
                            Ok(d) if (1..=28).contains(&d) => cfg.billing_day = d,
                            _ => self.bad(
                                v.span(),
                                "billing_day",
                                format!("must be 1 to 28 (a day every month has), got {day}"),
                            ),
                        }
                    }
                }
                "keys" | "accumulators" | "plans" => sections.push((k, v)),
                other => self.bad(
                    k.span(),
                    other,
                    "unknown field (expected time_zone, billing_day, keys, accumulators, plans)",
                ),
            }
        }
        for (k, v) in &sections {
            if let DeValue::Table(t) = v.get_ref() {
                let names = t.iter().map(|(n, _)| n.get_ref().to_string());
                match k.get_ref().as_ref() {
                    "keys" => self.declared_keys.extend(names),
                    "accumulators" => self.declared_accumulators.extend(names),
                    _ => {}
                }
            }
        }
        for (k, v) in &sections {
            let section = k.get_ref().as_ref();
            let Some(table) = self.table(v, section) else {
                continue;
            };
            for (entry, value) in table.iter() {
                let entry_name = entry.get_ref().as_ref();
                let path = format!("[{section}.{entry_name}]");
                let Some(fields) = self.table(value, &path) else {
                    continue;
                };
                match section {
                    "keys" => {
                        if let Some(key) = self.key(entry, fields, &path) {
                            cfg.keys.insert(entry_name.to_string(), key);
                        }
                    }
                    "accumulators" => {
                        if let Some(acc) = self.accumulator(entry, fields, &path) {
                            cfg.accumulators
                                .insert(crate::session::shared_text::shared(entry_name), acc);
                        }
                    }
                    _ => {
                        let quotas = self.plan(fields, &path);
                        cfg.plans.insert(entry_name.to_string(), quotas);
                    }
                }
            }
        }
    }

    fn key(
        &mut self,
        name: &Spanned<std::borrow::Cow<'_, str>>,
        fields: &DeTable<'_>,
        path: &str,
    ) -> Option<KeyConfig> {
        let mut ok = true;
        let n = name.get_ref();
        if n.is_empty() || n.contains(':') {
            self.bad(
                name.span(),
                path,
                "a key name must be non-empty and without ':' (sources use gx:/sd: prefixes)",
            );
            ok = false;
        }
        let mut key = KeyConfig {
            level: MonitoringLevel::Session,
            chunk: 0,
            chunk_time: None,
        };
        let mut chunk_seen = false;
        for (k, v) in fields.iter() {
            let field = format!("{path}.{}", k.get_ref());
            match k.get_ref().as_ref() {
                "level" => match self.string(v, &field) {
                    Some("session") => key.level = MonitoringLevel::Session,
                    Some("rule") => key.level = MonitoringLevel::Rule,
                    Some(other) => {
                        self.bad(
                            v.span(),
                            &field,
                            format!("must be \"session\" or \"rule\", got {other:?}"),
                        );
                        ok = false;
                    }
                    None => ok = false,
                },
                "chunk" => {
                    chunk_seen = true;
                    match self.volume(v, &field) {
                        Some(0) => {
                            self.bad(v.span(), &field, "must be at least 1 octet");
                            ok = false;
                        }
                        Some(octets) => key.chunk = octets,
                        None => ok = false,
                    }
                }
                "chunk_time" => match self.integer(v, &field) {
                    Some(secs) => match u32::try_from(secs) {
                        Ok(s) if s > 0 => key.chunk_time = Some(s),
                        _ => {
                            self.bad(
                                v.span(),
                                &field,
                                format!("must be 1 to {} seconds, got {secs}", u32::MAX),
                            );
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                _ => {
                    self.bad(
                        k.span(),
                        &field,
                        "unknown field (expected level, chunk, chunk_time)",
                    );
                    ok = false;
                }
            }
        }
        if !chunk_seen {
            self.bad(
                name.span(),
                path,
                "chunk is missing (octets granted at a time, e.g. \"100 MB\")",
            );
            ok = false;
        }
        ok.then_some(key)
    }

    fn accumulator(
        &mut self,
        name: &Spanned<std::borrow::Cow<'_, str>>,
        fields: &DeTable<'_>,
        path: &str,
    ) -> Option<AccumulatorConfig> {
        let mut ok = true;
        if name.get_ref().is_empty() {
            self.bad(name.span(), path, "an accumulator name must be non-empty");
            ok = false;
        }
        let mut reset = None;
        let mut sources: Option<Vec<Source>> = None;
        let mut hours = None;
        for (k, v) in fields.iter() {
            let field = format!("{path}.{}", k.get_ref());
            match k.get_ref().as_ref() {
                "reset" => match self.string(v, &field) {
                    Some(s) => match Reset::from_name(s) {
                        Some(r) => reset = Some(r),
                        None => {
                            self.bad(
                                v.span(),
                                &field,
                                format!(
                                    "must be \"never\", \"daily\", \"weekly\" or \"monthly\", got {s:?}"
                                ),
                            );
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                "sources" => match self.sources(v, &field) {
                    Some(s) => sources = Some(s),
                    None => ok = false,
                },
                "hours" => match self.hours(v, &field) {
                    Some(h) => hours = Some(h),
                    None => ok = false,
                },
                _ => {
                    self.bad(
                        k.span(),
                        &field,
                        "unknown field (expected reset, sources, hours)",
                    );
                    ok = false;
                }
            }
        }
        if !fields.iter().any(|(k, _)| k.get_ref() == "reset") {
            self.bad(
                name.span(),
                path,
                "reset is missing (\"never\", \"daily\", \"weekly\" or \"monthly\")",
            );
            ok = false;
        }
        if sources.is_none() && !fields.iter().any(|(k, _)| k.get_ref() == "sources") {
            self.bad(
                name.span(),
                path,
                "sources is missing (the keys counted into it, e.g. [\"total\"])",
            );
            ok = false;
        }
        match (ok, reset, sources) {
            (true, Some(reset), Some(sources)) => Some(AccumulatorConfig {
                reset,
                sources,
                hours,
            }),
            _ => None,
        }
    }

    fn sources(&mut self, v: &Spanned<DeValue<'_>>, field: &str) -> Option<Vec<Source>> {
        let DeValue::Array(items) = v.get_ref() else {
            self.bad(v.span(), field, "must be an array of key names");
            return None;
        };
        if items.is_empty() {
            self.bad(
                v.span(),
                field,
                "is empty: an accumulator must count at least one key",
            );
            return None;
        }
        let mut out: Vec<Source> = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let at = format!("{field}[{i}]");
            let Some(text) = self.string(item, &at) else {
                ok = false;
                continue;
            };
            let (interface, key) = match text.split_once(':') {
                None => (Interface::Gx, text),
                Some(("gx", key)) => (Interface::Gx, key),
                Some(("sd", key)) => (Interface::Sd, key),
                Some((other, _)) => {
                    self.bad(
                        item.span(),
                        &at,
                        format!(
                            "unknown interface {other:?} (use gx: or sd:, or no prefix for gx)"
                        ),
                    );
                    ok = false;
                    continue;
                }
            };
            if !self.declared_keys.contains(key) {
                self.bad(
                    item.span(),
                    &at,
                    format!("names key {key:?}, which is not defined in [keys]"),
                );
                ok = false;
                continue;
            }
            let source = Source {
                interface,
                key: key.to_string(),
            };
            if out.contains(&source) {
                self.bad(
                    item.span(),
                    &at,
                    format!("{source} is listed twice (it would be counted twice)"),
                );
                ok = false;
                continue;
            }
            out.push(source);
        }
        ok.then_some(out)
    }

    fn hours(&mut self, v: &Spanned<DeValue<'_>>, field: &str) -> Option<Hours> {
        let why = "must be [start, end], local hours: start 0..=23, end 1..=24, \
                   start != end (start > end wraps midnight)";
        let pair = match v.get_ref() {
            DeValue::Array(items) if items.len() == 2 => {
                let hour = |x: &Spanned<DeValue<'_>>| match x.get_ref() {
                    DeValue::Integer(i) => u8::from_str_radix(i.as_str(), i.radix()).ok(),
                    _ => None,
                };
                hour(&items[0]).zip(hour(&items[1]))
            }
            _ => None,
        };
        match pair {
            Some((start, end)) if start <= 23 && (1..=24).contains(&end) && start != end => {
                Some(Hours { start, end })
            }
            _ => {
                self.bad(v.span(), field, why);
                None
            }
        }
    }

    fn plan(&mut self, fields: &DeTable<'_>, path: &str) -> BTreeMap<String, u64> {
        let mut quotas = BTreeMap::new();
        for (k, v) in fields.iter() {
            let acc = k.get_ref().as_ref();
            let field = format!("{path}.{acc}");
            if !self.declared_accumulators.contains(acc) {
                self.bad(
                    k.span(),
                    &field,
                    format!("names accumulator {acc:?}, which is not defined in [accumulators]"),
                );
                continue;
            }
            if let Some(octets) = self.volume(v, &field) {
                quotas.insert(acc.to_string(), octets);
            }
        }
        quotas
    }

    fn table<'t, 'i>(
        &mut self,
        v: &'t Spanned<DeValue<'i>>,
        path: &str,
    ) -> Option<&'t DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.bad(
                    v.span(),
                    path,
                    format!("must be a table, got {}", other.type_str()),
                );
                None
            }
        }
    }

    fn string<'t>(&mut self, v: &'t Spanned<DeValue<'_>>, path: &str) -> Option<&'t str> {
        match v.get_ref() {
            DeValue::String(s) => Some(s.as_ref()),
            other => {
                self.bad(
                    v.span(),
                    path,
                    format!("must be a string, got {}", other.type_str()),
                );
                None
            }
        }
    }

    fn integer(&mut self, v: &Spanned<DeValue<'_>>, path: &str) -> Option<i128> {
        match v.get_ref() {
            DeValue::Integer(i) => match i128::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.bad(v.span(), path, "integer out of range");
                    None
                }
            },
            other => {
                self.bad(
                    v.span(),
                    path,
                    format!("must be an integer, got {}", other.type_str()),
                );
                None
            }
        }
    }

    /// Octets: a non-negative integer or a string with a unit.
    fn volume(&mut self, v: &Spanned<DeValue<'_>>, path: &str) -> Option<u64> {
        let parsed = match v.get_ref() {
            DeValue::Integer(i) => u64::from_str_radix(i.as_str(), i.radix())
                .map_err(|_| format!("must be 0 to {} octets, got {i}", u64::MAX)),
            DeValue::String(s) => parse_volume(s),
            other => Err(format!(
                "must be octets (an integer) or a volume string like \"100 MB\", got {}",
                other.type_str()
            )),
        };
        match parsed {
            Ok(octets) => Some(octets),
            Err(message) => {
                self.bad(v.span(), path, message);
                None
            }
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
time_zone = "Europe/Berlin"
billing_day = 15

[keys.total]
chunk = "100 MB"

[keys.vip]
level = "rule"
chunk = 50_000_000
chunk_time = 600

[keys.video]
chunk = "1 GiB"

[accumulators.monthly]
reset = "monthly"
sources = ["total", "vip"]

[accumulators.night]
reset = "daily"
sources = ["gx:total"]
hours = [1, 6]

[accumulators.video]
reset = "weekly"
sources = ["sd:video", "video"]

[plans.basic]
monthly = "10 GB"
night = 0

[plans.unlimited]
"#;

    fn parse(text: &str) -> UsageConfig {
        UsageConfig::parse(text, "usage.toml").expect("valid usage config")
    }

    fn problems(text: &str) -> Vec<String> {
        UsageConfig::parse(text, "usage.toml")
            .expect_err("invalid usage config")
            .problems
            .iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn parses_keys_accumulators_and_plans() {
        let c = parse(GOOD);
        assert_eq!(c.time_zone_name(), "Europe/Berlin");
        assert_eq!(c.billing_day(), 15);
        assert_eq!(
            c.key("total"),
            Some(&KeyConfig {
                level: MonitoringLevel::Session,
                chunk: 100_000_000,
                chunk_time: None
            })
        );
        assert_eq!(
            c.key("vip"),
            Some(&KeyConfig {
                level: MonitoringLevel::Rule,
                chunk: 50_000_000,
                chunk_time: Some(600)
            })
        );
        assert_eq!(c.key("video").map(|k| k.chunk), Some(1 << 30));
        let monthly = c.accumulator("monthly").expect("monthly");
        assert_eq!(monthly.reset, Reset::Monthly);
        assert_eq!(monthly.hours, None);
        assert_eq!(
            c.accumulator("night").and_then(|a| a.hours),
            Some(Hours { start: 1, end: 6 })
        );
        assert_eq!(c.plan_quota("basic", "monthly"), Some(10_000_000_000));
        assert_eq!(c.plan_quota("basic", "night"), Some(0));
        assert_eq!(c.plan_quota("basic", "video"), None);
        assert_eq!(c.plan_quota("unlimited", "monthly"), None);
        assert_eq!(c.plan_quota("gold", "monthly"), None);
        assert!(!c.is_empty());
    }

    #[test]
    fn sources_name_the_interface() {
        let c = parse(GOOD);
        let fed = |i, k| {
            c.accumulators_fed_by(i, k)
                .map(|(n, _)| &**n)
                .collect::<Vec<_>>()
        };
        assert_eq!(fed(Interface::Gx, "total"), vec!["monthly", "night"]);
        assert_eq!(fed(Interface::Sd, "total"), Vec::<&str>::new());
        assert_eq!(fed(Interface::Gx, "vip"), vec!["monthly"]);
        assert_eq!(fed(Interface::Sd, "video"), vec!["video"]);
        assert_eq!(fed(Interface::Gx, "video"), vec!["video"]);
        assert_eq!(fed(Interface::Gx, "nope"), Vec::<&str>::new());
    }

    #[test]
    fn defaults_and_empty() {
        let c = parse("[keys.k]\nchunk = 1\n");
        assert_eq!(c.time_zone_name(), "UTC");
        assert_eq!(c.billing_day(), 1);
        assert_eq!(c.billing_day_for(Some(20)), 20);
        assert_eq!(c.billing_day_for(Some(31)), 1);
        assert_eq!(c.billing_day_for(None), 1);
        let e = UsageConfig::empty();
        assert!(e.is_empty());
        assert_eq!(e.checksum(), 0);
        assert_eq!(e.checksum_hex(), "0000000000000000");
        assert!(parse("").is_empty());
    }

    #[test]
    fn checksum_is_of_the_bytes() {
        let a = parse(GOOD);
        let b = parse(&format!("{GOOD}\n# a comment\n"));
        assert_eq!(a.checksum(), xxhash_rust::xxh3::xxh3_64(GOOD.as_bytes()));
        assert_ne!(a.checksum(), b.checksum());
        assert_eq!(a.checksum_hex().len(), 16);
        assert_eq!(a.checksum_hex(), format!("{:016x}", a.checksum()));
    }

    #[test]
    fn volumes() {
        assert_eq!(parse_volume("100 MB"), Ok(100_000_000));
        assert_eq!(parse_volume("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_volume("1.1 GB"), Ok(1_100_000_000));
        assert_eq!(parse_volume("512 KiB"), Ok(524_288));
        assert_eq!(parse_volume("1.5GiB"), Ok(1_610_612_736));
        assert_eq!(parse_volume("2 TiB"), Ok(2 << 40));
        assert_eq!(parse_volume("3 kB"), Ok(3_000));
        assert_eq!(parse_volume("3 KB"), Ok(3_000));
        assert_eq!(parse_volume("7 TB"), Ok(7_000_000_000_000));
        assert_eq!(parse_volume("42"), Ok(42));
        assert_eq!(parse_volume("42 B"), Ok(42));
        assert_eq!(parse_volume("1_000 MB"), Ok(1_000_000_000));
        // Fractions of octets are rounded down.
        assert_eq!(parse_volume("0.1 KiB"), Ok(102));
        assert_eq!(
            parse_volume("1.0000000000000000000000000009 GB"),
            Ok(1_000_000_000)
        );
        assert_eq!(parse_volume("18446744073709551615"), Ok(u64::MAX));
        for bad in [
            "", "MB", "1.2.3 GB", "5 XB", "-1 GB", ".5 GB", "1. GB", "1 G B",
        ] {
            assert!(parse_volume(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_volume("18446744073709551616").is_err());
        assert!(parse_volume("20000000 TB").is_err());
        assert!(parse_volume("99999999999999999999999999999999999999999 B").is_err());
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_location() {
        let text = r#"time_zone = "Mars/Olympus"
billing_day = 31
colour = "red"

[keys.total]
chunk = 0
level = "bearer"
extra = true

[keys.vip]
chunk = "lots"

[accumulators.monthly]
reset = "yearly"
sources = ["total", "ghost", "x2:total"]

[accumulators.night]
reset = "daily"
sources = ["total"]
hours = [6, 6]

[plans.basic]
monthly = "10 GB"
weekly = "1 GB"
"#;
        assert_eq!(
            problems(text),
            vec![
                "usage.toml:1:13 time_zone: unknown IANA time zone \"Mars/Olympus\"",
                "usage.toml:2:15 billing_day: must be 1 to 28 (a day every month has), got 31",
                "usage.toml:3:1 colour: unknown field (expected time_zone, billing_day, keys, accumulators, plans)",
                "usage.toml:6:9 [keys.total].chunk: must be at least 1 octet",
                "usage.toml:7:9 [keys.total].level: must be \"session\" or \"rule\", got \"bearer\"",
                "usage.toml:8:1 [keys.total].extra: unknown field (expected level, chunk, chunk_time)",
                "usage.toml:11:9 [keys.vip].chunk: \"lots\" is not a volume (e.g. 100 MB, 1.5 GB, 512 KiB)",
                "usage.toml:14:9 [accumulators.monthly].reset: must be \"never\", \"daily\", \"weekly\" or \"monthly\", got \"yearly\"",
                "usage.toml:15:21 [accumulators.monthly].sources[1]: names key \"ghost\", which is not defined in [keys]",
                "usage.toml:15:30 [accumulators.monthly].sources[2]: unknown interface \"x2\" (use gx: or sd:, or no prefix for gx)",
                "usage.toml:20:9 [accumulators.night].hours: must be [start, end], local hours: start 0..=23, end 1..=24, start != end (start > end wraps midnight)",
                "usage.toml:24:1 [plans.basic].weekly: names accumulator \"weekly\", which is not defined in [accumulators]",
            ]
        );
    }

    #[test]
    fn a_source_naming_a_key_whose_definition_is_broken_is_one_problem_not_two() {
        // The key is defined, only badly: the source is not also reported.
        let p = problems(
            "[keys.total]\nchunk = 0\n[accumulators.a]\nreset = \"never\"\nsources = [\"total\"]\n",
        );
        assert_eq!(p.len(), 1, "{p:?}");
    }

    #[test]
    fn missing_and_malformed_fields() {
        let p = problems(
            r#"
[keys.total]
level = "rule"
[keys."gx:odd"]
chunk = 1
[keys.t2]
chunk = 1.5
chunk_time = 0
[accumulators.a]
hours = [1]
[accumulators.b]
reset = "never"
sources = []
[accumulators.c]
reset = "never"
sources = ["t3", "gx:t3", "sd:t3"]
[keys.t3]
chunk = 1
keys = 1
"#,
        );
        let joined = p.join("\n");
        for expected in [
            "[keys.total]: chunk is missing",
            "[keys.gx:odd]: a key name must be non-empty and without ':'",
            "[keys.t2].chunk: must be octets (an integer) or a volume string",
            "[keys.t2].chunk_time: must be 1 to",
            "[accumulators.a].hours: must be [start, end]",
            "[accumulators.a]: reset is missing",
            "[accumulators.a]: sources is missing",
            "[accumulators.b].sources: is empty",
            "[accumulators.c].sources[1]: gx:t3 is listed twice",
            "[keys.t3].keys: unknown field",
        ] {
            assert!(
                joined.contains(expected),
                "missing {expected:?} in\n{joined}"
            );
        }
        assert!(!joined.contains("sources[2]"), "{joined}");
    }

    #[test]
    fn sections_must_be_tables() {
        let p = problems("keys = 3\naccumulators = \"x\"\n[plans]\nbasic = 1\n");
        assert_eq!(
            p,
            vec![
                "usage.toml:1:8 keys: must be a table, got integer",
                "usage.toml:2:16 accumulators: must be a table, got string",
                "usage.toml:4:9 [plans.basic]: must be a table, got integer",
            ]
        );
    }

    #[test]
    fn syntax_errors_have_line_and_column() {
        let e = UsageConfig::parse("[keys.total]\nchunk = \n", "u.toml").expect_err("bad toml");
        assert!(e.problems[0].location.starts_with("u.toml:2:"), "{e}");
    }

    #[test]
    fn hours_wrap_midnight() {
        let night = Hours { start: 1, end: 6 };
        assert!(!night.contains(0) && night.contains(1) && night.contains(5) && !night.contains(6));
        let late = Hours { start: 22, end: 6 };
        assert!(late.contains(23) && late.contains(0) && late.contains(5));
        assert!(!late.contains(6) && !late.contains(21));
        let evening = Hours { start: 18, end: 24 };
        assert!(evening.contains(23) && !evening.contains(0));
        let wrapping = parse("[keys.k]\nchunk = 1\n[accumulators.a]\nreset = \"daily\"\nsources = [\"k\"]\nhours = [22, 6]\n");
        assert_eq!(
            wrapping.accumulator("a").and_then(|a| a.hours),
            Some(Hours { start: 22, end: 6 })
        );
    }

    #[test]
    fn load_reports_the_path_and_keeps_the_source() {
        let e = UsageConfig::load(Path::new("/nonexistent/usage.toml")).expect_err("missing");
        assert_eq!(e.problems[0].location, "/nonexistent/usage.toml");
        assert!(e.problems[0].message.starts_with("cannot read"), "{e}");
        let dir = std::env::temp_dir().join(format!("pcrf-usage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("usage.toml");
        std::fs::write(&path, GOOD).expect("write");
        let c = UsageConfig::load(&path).expect("loads");
        assert_eq!(c.source(), Some(path.as_path()));
        assert_eq!(c.checksum(), parse(GOOD).checksum());
        std::fs::write(&path, b"\xff\xfe").expect("write");
        let e = UsageConfig::load(&path).expect_err("not utf-8");
        assert!(e.problems[0].message.contains("UTF-8"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_example_file_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/usage.toml");
        let c = UsageConfig::load(&path).expect("config/usage.toml must load");
        assert_eq!(
            c.key("total").map(|k| k.level),
            Some(MonitoringLevel::Session)
        );
        assert_eq!(c.key("vip").map(|k| k.level), Some(MonitoringLevel::Rule));
        let fed = c
            .accumulators_fed_by(Interface::Gx, "vip")
            .map(|(n, _)| &**n)
            .collect::<Vec<_>>();
        assert!(
            fed.contains(&"monthly") && fed.contains(&"vip-video"),
            "{fed:?}"
        );
        assert_eq!(c.plan_quota("basic", "monthly"), Some(10_000_000_000));
        assert_eq!(c.plan_quota("plus", "monthly"), Some(50_000_000_000));
        assert_eq!(c.plan_quota("unlimited", "monthly"), None);
        assert!(c.accumulator("night").and_then(|a| a.hours).is_some());
    }

    fn grants(list: &[(&str, usize)]) -> BTreeMap<String, usize> {
        list.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    #[test]
    fn reload_refuses_orphaning_running_grants() {
        let old = parse(GOOD);
        // "vip" removed while 3 sessions hold a grant for it.
        let removed = parse(
            &GOOD
                .replace(
                    "[keys.vip]\nlevel = \"rule\"\nchunk = 50_000_000\nchunk_time = 600\n",
                    "",
                )
                .replace("[\"total\", \"vip\"]", "[\"total\"]"),
        );
        let e = removed
            .check_reload(&old, &grants(&[("vip", 3), ("total", 10)]))
            .expect_err("refused");
        assert!(
            e.contains("\"vip\" is removed but 3 sessions hold a grant"),
            "{e}"
        );
        assert!(!e.contains("\"total\""), "{e}");
        // Kept as a key but feeding nothing any more.
        let unfed = parse(&GOOD.replace("[\"total\", \"vip\"]", "[\"total\"]"));
        let e = unfed
            .check_reload(&old, &grants(&[("vip", 1)]))
            .expect_err("refused");
        assert!(
            e.contains("\"vip\" would feed no accumulator any more but 1 session holds"),
            "{e}"
        );
        // The same changes with nobody holding a grant are fine.
        assert_eq!(
            removed.check_reload(&old, &grants(&[("vip", 0), ("total", 2)])),
            Ok(())
        );
        assert_eq!(unfed.check_reload(&old, &BTreeMap::new()), Ok(()));
    }

    #[test]
    fn reload_accepts_harmless_changes() {
        let old = parse(GOOD);
        // New chunk, moved from one accumulator to another, new accumulator.
        let new = parse(
            &GOOD
                .replace("chunk = 50_000_000", "chunk = \"10 MB\"")
                .replace("[\"total\", \"vip\"]", "[\"total\"]")
                .replace("[plans.basic]", "[accumulators.vip]\nreset = \"never\"\nsources = [\"sd:vip\"]\n\n[plans.basic]"),
        );
        let held = grants(&[("vip", 5), ("total", 7), ("video", 1)]);
        assert_eq!(new.check_reload(&old, &held), Ok(()));
        // A key with grants that the old file did not know is not this reload's doing.
        assert_eq!(new.check_reload(&old, &grants(&[("stale", 4)])), Ok(()));
        // Monitoring switched off entirely with grants held is refused.
        let e = UsageConfig::empty()
            .check_reload(&old, &held)
            .expect_err("refused");
        assert!(
            e.contains("\"total\"") && e.contains("\"vip\"") && e.contains("\"video\""),
            "{e}"
        );
    }
}
