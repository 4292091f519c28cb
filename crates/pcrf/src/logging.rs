//! Log set-up: `tracing` events formatted as text or JSON lines on stderr,
//! filtered by `RUST_LOG` or the configured level (changeable live), and
//! stamped by [`CachedUtcTime`], which formats the date-time text once per
//! second per thread and only appends milliseconds (in a
//! busy PCRF the timestamp is the text written most often, so formatting it
//! once a second instead of once a line is measurable). The
//! fields an operator needs to reconstruct events are listed in
//! docs/metrics.md ("Logs").
//!
//! Text lines are written through [`EscapedFields`]: every field value, the
//! message and span fields included, has its control characters escaped
//! and is cut at [`MAX_FIELD_TEXT`] bytes. Session-Ids, rule names, APNs,
//! peer names and API paths come from the network; escaping them in the
//! formatter, once, means no call site can forget to, so a value can
//! neither start a forged line nor send terminal escape codes, nor make
//! one line megabytes long. (JSON lines escape through JSON itself.)

use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// Line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `2026-11-22T03:57:10.123Z  INFO pcrf::gx: message key=value`
    #[default]
    Text,
    /// One JSON object per line, event fields at top level.
    Json,
}

/// `[log]` in the configuration file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// An `EnvFilter` directive: "info", "pcrf=debug,pcrf_diameter=info"...
    /// `RUST_LOG`, when set, wins.
    pub level: String,
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: LogFormat::Text,
        }
    }
}

/// Why logging could not be set up or changed.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("bad log level directive {directive:?}: {reason}")]
    Filter { directive: String, reason: String },
    #[error("a global logger is already installed")]
    AlreadySet,
    #[error("the logger is gone")]
    Gone,
}

fn parse_filter(directive: &str) -> Result<EnvFilter, LoggingError> {
    EnvFilter::builder()
        .parse(directive)
        .map_err(|e| LoggingError::Filter {
            directive: directive.to_string(),
            reason: e.to_string(),
        })
}

/// The levels a configured directive may name.
pub const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// Parses `[log].level`. A filter takes a bare word it does not know as a
/// target name, so `warning` or `inf` would enable only a target of that
/// name and silence everything else: here every part must be a level or
/// `TARGET=LEVEL` with a level of [`LEVELS`]. (`RUST_LOG` keeps the filter's
/// own syntax.)
fn parse_configured(directive: &str) -> Result<EnvFilter, LoggingError> {
    for part in directive
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let level = part.rsplit_once('=').map_or(part, |(_, level)| level);
        if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level.trim())) {
            return Err(LoggingError::Filter {
                directive: directive.to_string(),
                reason: format!(
                    "{level:?} is not a log level; use one of {}, or TARGET=LEVEL (e.g. \"info,pcrf::gx=debug\")",
                    LEVELS.join(", ")
                ),
            });
        }
    }
    parse_filter(directive)
}

/// Checks a configured level directive without installing it.
pub fn check_level(directive: &str) -> Result<(), LoggingError> {
    parse_configured(directive).map(|_| ())
}

/// Changes the filter of the installed logger (config hot reload).
#[derive(Clone)]
pub struct LogHandle {
    filter: reload::Handle<EnvFilter, Registry>,
    /// Set when `RUST_LOG` overrides the configuration: a reload must not
    /// undo what the operator asked for on the command line.
    env_override: bool,
}

impl LogHandle {
    /// Applies a new level directive unless `RUST_LOG` is set. Returns
    /// whether it was applied.
    pub fn set_level(&self, directive: &str) -> Result<bool, LoggingError> {
        if self.env_override {
            return Ok(false);
        }
        let f = parse_configured(directive)?;
        self.filter.reload(f).map_err(|_| LoggingError::Gone)?;
        Ok(true)
    }
}

/// Installs the global logger, writing to stderr. Call once, early in `main`.
pub fn init(cfg: &LogConfig) -> Result<LogHandle, LoggingError> {
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let (subscriber, handle) = build(cfg, env.as_deref(), std::io::stderr)?;
    subscriber
        .try_init()
        .map_err(|_| LoggingError::AlreadySet)?;
    Ok(handle)
}

/// The logger `init` installs, writing to `writer`; `env_filter` (the
/// value of `RUST_LOG`) wins over the configured level.
pub fn build<W>(
    cfg: &LogConfig,
    env_filter: Option<&str>,
    writer: W,
) -> Result<(impl tracing::Subscriber + Send + Sync + 'static, LogHandle), LoggingError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = match env_filter {
        Some(env) => parse_filter(env)?,
        None => parse_configured(&cfg.level)?,
    };
    let (filter, handle) = reload::Layer::new(filter);
    let (text, json) = match cfg.format {
        LogFormat::Text => (
            Some(
                tracing_subscriber::fmt::layer()
                    .fmt_fields(EscapedFields)
                    .with_timer(CachedUtcTime)
                    .with_writer(writer)
                    .with_ansi(false),
            ),
            None,
        ),
        LogFormat::Json => (
            None,
            Some(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_timer(CachedUtcTime)
                    .with_writer(writer),
            ),
        ),
    };
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json);
    Ok((
        subscriber,
        LogHandle {
            filter: handle,
            env_override: env_filter.is_some(),
        },
    ))
}

/// The most bytes of one field value (or message) a text line carries;
/// the rest is replaced by "…[N more bytes]".
pub const MAX_FIELD_TEXT: usize = 1024;

/// The text format's field formatter: `message key=value key=value`, as
/// tracing's default, with every value escaped by [`Escaper`].
#[derive(Clone, Copy, Debug, Default)]
pub struct EscapedFields;

impl<'w> FormatFields<'w> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut v = EscapingVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }
}

struct EscapingVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"))
        } else {
            self.record_debug(field, &value)
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.record_debug(field, &format_args!("{value}"))
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        // `log` crate records forwarded by tracing-log: metadata, not fields.
        if name.starts_with("log.") {
            return;
        }
        self.result = self.write_field(name, value);
    }
}

impl EscapingVisitor<'_> {
    fn write_field(&mut self, name: &str, value: &dyn fmt::Debug) -> fmt::Result {
        if !self.first {
            self.writer.write_char(' ')?;
        }
        self.first = false;
        if name != "message" {
            self.writer
                .write_str(name.strip_prefix("r#").unwrap_or(name))?;
            self.writer.write_char('=')?;
        }
        let mut e = Escaper::new(&mut self.writer, MAX_FIELD_TEXT);
        write!(e, "{value:?}")?;
        e.finish()
    }
}

/// A `fmt::Write` that passes text on with control characters (and the
/// Unicode line separators and bidirectional overrides, which reorder or
/// break what a terminal shows) escaped as `\n`, `\r`, `\t` or
/// `\u{..}`, and drops what comes after `limit` bytes, counting it.
pub struct Escaper<'a, W: fmt::Write> {
    out: &'a mut W,
    left: usize,
    dropped: usize,
}

impl<'a, W: fmt::Write> Escaper<'a, W> {
    pub fn new(out: &'a mut W, limit: usize) -> Self {
        Escaper {
            out,
            left: limit,
            dropped: 0,
        }
    }

    /// Says how much was dropped, if anything.
    pub fn finish(self) -> fmt::Result {
        if self.dropped > 0 {
            write!(self.out, "…[{} more bytes]", self.dropped)?;
        }
        Ok(())
    }
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

impl<W: fmt::Write> fmt::Write for Escaper<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut run = 0;
        for (i, c) in s.char_indices() {
            let len = c.len_utf8();
            if len > self.left {
                self.out.write_str(&s[run..i])?;
                self.dropped += s.len() - i;
                self.left = 0;
                return Ok(());
            }
            self.left -= len;
            if needs_escape(c) {
                self.out.write_str(&s[run..i])?;
                match c {
                    '\n' => self.out.write_str("\\n")?,
                    '\r' => self.out.write_str("\\r")?,
                    '\t' => self.out.write_str("\\t")?,
                    c => write!(self.out, "\\u{{{:x}}}", u32::from(c))?,
                }
                run = i + len;
            }
        }
        self.out.write_str(&s[run..])
    }
}

/// RFC 3339 UTC timestamps with milliseconds (`2026-11-22T03:57:10.123Z`);
/// the text up to the second is formatted once per second per thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct CachedUtcTime;

thread_local! {
    /// (Unix second, "YYYY-MM-DDTHH:MM:SS" of that second).
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

impl FormatTime for CachedUtcTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write_timestamp(SystemTime::now(), w)
    }
}

/// Writes `now` through the per-thread cache.
pub fn write_timestamp(now: SystemTime, w: &mut impl fmt::Write) -> fmt::Result {
    // A clock before 1970 prints as the epoch rather than failing the line.
    let d = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (secs, ms) = (d.as_secs(), d.subsec_millis());
    SECOND.with(|cell| {
        let mut c = cell.borrow_mut();
        if c.0 != secs {
            c.1.clear();
            format_second(secs, &mut c.1);
            c.0 = secs;
        }
        w.write_str(&c.1)
    })?;
    // Bytes of ".mmmZ"; all ASCII.
    let tail = [
        b'.',
        b'0' + (ms / 100) as u8,
        b'0' + (ms / 10 % 10) as u8,
        b'0' + (ms % 10) as u8,
        b'Z',
    ];
    w.write_str(std::str::from_utf8(&tail).map_err(|_| fmt::Error)?)
}

/// "YYYY-MM-DDTHH:MM:SS" of a Unix second (UTC); a clock past jiff's
/// last year (9999) prints as its last second rather than failing the line.
fn format_second(secs: u64, out: &mut String) {
    let t = i64::try_from(secs)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .unwrap_or(jiff::Timestamp::MAX);
    let _ = write!(out, "{}", t.strftime("%Y-%m-%dT%H:%M:%S"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn reference(ms: u64) -> String {
        let ts = jiff::Timestamp::from_millisecond(ms as i64).expect("in range");
        ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
    }

    fn ours(ms: u64) -> String {
        let mut s = String::new();
        write_timestamp(UNIX_EPOCH + Duration::from_millis(ms), &mut s).expect("write");
        s
    }

    #[test]
    fn agrees_with_an_independent_formatter() {
        // Year ends, and a walk through one second's milliseconds (cache
        // hits) and across seconds (misses).
        let fixed = [
            0u64,
            951_782_400_000,    // 2000-02-29
            4_107_542_399_999,  // 2100-02-28T23:59:59.999
            4_107_542_400_000,  // 2100-03-01
            1_798_761_599_999,  // 2026-12-31T23:59:59.999
            13_574_608_496_000, // 2400-02-29T12:34:56
        ];
        for ms in fixed {
            assert_eq!(ours(ms), reference(ms), "at {ms}");
        }
        let mut ms = 1_795_000_000_000u64;
        for step in 0..200_000u64 {
            ms += 1 + (step * 7919) % 40_000;
            assert_eq!(ours(ms), reference(ms), "at {ms}");
        }
    }

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    impl Buf {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("lock").clone()).expect("utf8")
        }
    }

    fn is_timestamp(s: &str) -> bool {
        s.parse::<jiff::Timestamp>().is_ok()
            && s.ends_with('Z')
            && s.len() == "2026-11-22T03:57:10.123Z".len()
    }

    #[test]
    fn json_lines_carry_time_level_and_fields() {
        let buf = Buf::default();
        let cfg = LogConfig {
            level: "info".into(),
            format: LogFormat::Json,
        };
        let (sub, handle) = build(&cfg, None, buf.clone()).expect("build");
        tracing::subscriber::with_default(sub, || {
            tracing::debug!(session = "s;1", "hidden at info");
            tracing::info!(session = "pgw1;1;2", result = 2001u32, "gx");
            assert_eq!(handle.set_level("debug").ok(), Some(true));
            tracing::debug!(session = "s;2", "shown at debug");
            assert!(handle.set_level("pcrf=shout").is_err());
        });
        let text = buf.text();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        let first = &lines[0];
        assert!(
            is_timestamp(first["timestamp"].as_str().unwrap_or("")),
            "{first}"
        );
        assert_eq!(first["level"], "INFO");
        assert_eq!(first["message"], "gx");
        assert_eq!(first["session"], "pgw1;1;2");
        assert_eq!(first["result"], 2001);
        assert_eq!(lines[1]["session"], "s;2");
    }

    #[test]
    fn text_lines_start_with_the_cached_timestamp_and_env_wins() {
        let buf = Buf::default();
        let (sub, handle) = build(&LogConfig::default(), Some("warn"), buf.clone()).expect("build");
        tracing::subscriber::with_default(sub, || {
            tracing::info!("hidden: RUST_LOG says warn");
            tracing::warn!(session = "pgw1;1;3", "rule failure");
            // A config reload must not override RUST_LOG.
            assert_eq!(handle.set_level("debug").ok(), Some(false));
            tracing::info!("still hidden");
        });
        let text = buf.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let (ts, rest) = lines[0].split_once(' ').expect("timestamp first");
        assert!(is_timestamp(ts), "{ts}");
        assert!(
            rest.contains("WARN") && rest.contains("rule failure"),
            "{rest}"
        );
        assert!(rest.contains("session=\"pgw1;1;3\""), "{rest}");
        assert!(build(&LogConfig::default(), Some("=bad="), Buf::default()).is_err());
    }

    #[test]
    fn text_fields_from_the_network_cannot_forge_lines_or_colours() {
        let buf = Buf::default();
        let (sub, _) = build(&LogConfig::default(), Some("info"), buf.clone()).expect("build");
        let forged = "pgw;1;1\n2026-11-28T04:00:00.000Z ERROR pcrf: forged\x1b[31m red\r\u{202e}";
        let long = "x".repeat(100_000);
        tracing::subscriber::with_default(sub, || {
            let span = tracing::info_span!("gx", session = %forged);
            let _in = span.enter();
            tracing::warn!(session = %forged, rule = ?forged, "rule failure for {}", forged);
            tracing::warn!(apn = %long, "long");
        });
        let text = buf.text();
        let lines: Vec<&str> = text.lines().collect();
        let head: String = text.chars().take(2000).collect();
        assert_eq!(lines.len(), 2, "{head}");
        assert!(!text.contains('\x1b') && !text.contains('\r'), "{head:?}");
        assert!(!text.contains('\u{202e}'), "{head:?}");
        // Each event is one line, starting with its own timestamp: the forged
        // one is inside it, escaped.
        assert!(
            lines
                .iter()
                .all(|l| !l.starts_with("2026-11-28T04:00:00.000Z")),
            "{head}"
        );
        // The escaped text is still there to read, in the span, the
        // message and the fields.
        assert_eq!(
            lines[0].matches("pgw;1;1\\n2026-11-28").count(),
            4,
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("forged\\u{1b}[31m red"), "{}", lines[0]);
        // A long value is cut and says by how much.
        assert!(lines[1].len() < 2 * MAX_FIELD_TEXT, "{}", lines[1].len());
        assert!(
            lines[1].contains(&format!("…[{} more bytes]", 100_000 - MAX_FIELD_TEXT)),
            "{}",
            &lines[1][lines[1].len() - 80..]
        );
    }

    #[test]
    fn default_config_parses() {
        let c: LogConfig = toml::from_str("").expect("empty");
        assert_eq!(c, LogConfig::default());
        let c: LogConfig =
            toml::from_str("level = \"pcrf=debug\"\nformat = \"json\"").expect("set");
        assert_eq!(c.format, LogFormat::Json);
        assert!(toml::from_str::<LogConfig>("colour = true").is_err());
        assert!(check_level("pcrf=debug,info").is_ok());
        assert!(check_level("pcrf=loud").is_err());
        assert!(check_level("WARN,pcrf::gx=debug").is_ok());
        for typo in ["warning", "inf", "info,pcrf::gx", "pcrf"] {
            let e = check_level(typo).expect_err(typo).to_string();
            assert!(e.contains("trace, debug, info, warn, error, off"), "{e}");
        }
    }
}
