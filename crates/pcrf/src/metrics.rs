//! Metrics of the running PCRF, exposed at `GET /metrics` in the Prometheus
//! text exposition format 0.0.4, written by prometheus-client's encoder (the
//! official Rust client): the text format, its escaping, float spelling and
//! counter `_total` naming are the library's, not ours.
//!
//! What stays here is how the numbers are kept. The hot path is one relaxed
//! atomic add per counter and per histogram bucket, with no lock, no
//! allocation and no label hashing, because every label set we have is
//! small and fixed (command, result code, peer state); prometheus-client's
//! own `Family` hashes the label set under a lock and its `Histogram` takes
//! a mutex per observation and cannot be read back as a snapshot. So the
//! request counters and histograms below are our atomics, encoded at scrape
//! time through a prometheus-client [`Collector`]. Measured on the 2-core
//! development VM (release build): prometheus-client's histogram took
//! 15-21 ns per observation against 12-13 ns for ours on one thread, and
//! 29-42 ns against 19-40 ns with two threads observing at once; the
//! snapshot, which the tests and the store's batch-size histogram need, it
//! cannot give at all. Modules that own other
//! state (policy engine, group-commit writer, Diameter transport, session
//! table) keep their own atomics and contribute at scrape time through
//! [`MetricsSource`], so this file depends on none of them. Every family is
//! described in docs/metrics.md.

use diameter::doic::ReportSent;
use diameter::peer::WatchdogState;
use diameter::transport::{LastError, PeerCountersSnapshot, PeerHandle, PeerTable};
use parking_lot::RwLock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `Content-Type` of [`Metrics::render`]'s output (text format 0.0.4).
pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

// ---------------------------------------------------------------------------
// Exposition: our families through prometheus-client's encoder

/// Prometheus metric type of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// A sample value, encoded exactly as an integer or as a float.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    U(u64),
    I(i64),
    F(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::U(v)
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::U(v as u64)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::U(u64::from(v))
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::I(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::F(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::U(u64::from(v))
    }
}

fn valid_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'A'..=b'Z' | b'_' | b':'))
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

/// A scrape being encoded. A family name may appear once per scrape, and
/// a counter's name must end in `_total` (the encoder appends that suffix
/// to counters, so the name is handed over without it): a repeated or
/// invalid family is dropped (and logged) so one module's mistake never
/// makes the whole scrape unparseable.
pub struct Exposition<'a> {
    encoder: DescriptorEncoder<'a>,
    seen: Vec<String>,
    /// The first encoding error; writing into a String never fails, so in
    /// practice none.
    result: std::fmt::Result,
}

impl<'a> Exposition<'a> {
    fn new(encoder: DescriptorEncoder<'a>) -> Exposition<'a> {
        Exposition {
            encoder,
            seen: Vec::new(),
            result: Ok(()),
        }
    }

    /// Starts a family: writes its HELP and TYPE lines. Samples follow
    /// through the returned [`Family`].
    pub fn family<'s>(&'s mut self, name: &'s str, help: &str, kind: Kind) -> Family<'s> {
        let (base, metric_type) = match kind {
            Kind::Counter => (name.strip_suffix("_total"), MetricType::Counter),
            Kind::Gauge => (Some(name), MetricType::Gauge),
            Kind::Histogram => (Some(name), MetricType::Histogram),
        };
        let problem = match base {
            _ if !valid_metric_name(name) => Some("invalid name"),
            None => Some("counter name without _total"),
            Some(_) if self.seen.iter().any(|n| n == name) => Some("written twice in one scrape"),
            Some(_) => None,
        };
        let encoder = match (problem, base) {
            (None, Some(base)) => {
                self.seen.push(name.to_string());
                self.encoder
                    .encode_descriptor(base, help, None, metric_type)
                    .map_err(|e| self.result = Err(e))
                    .ok()
            }
            _ => {
                tracing::error!(
                    family = name,
                    problem,
                    "metric family dropped from the scrape"
                );
                None
            }
        };
        Family {
            encoder,
            kind,
            result: &mut self.result,
        }
    }

    /// An unlabelled counter family with one sample.
    pub fn counter(&mut self, name: &str, help: &str, value: impl Into<Value>) {
        self.family(name, help, Kind::Counter).sample(&[], value);
    }

    /// An unlabelled gauge family with one sample.
    pub fn gauge(&mut self, name: &str, help: &str, value: impl Into<Value>) {
        self.family(name, help, Kind::Gauge).sample(&[], value);
    }
}

/// One family being written; a dropped family swallows its samples.
pub struct Family<'a> {
    encoder: Option<MetricEncoder<'a>>,
    kind: Kind,
    result: &'a mut std::fmt::Result,
}

impl Family<'_> {
    /// Encodes one labelled metric of the family, keeping the first error.
    fn encode(
        &mut self,
        labels: &[(&str, &str)],
        f: impl FnOnce(&mut MetricEncoder<'_>) -> std::fmt::Result,
    ) {
        if let Some(encoder) = &mut self.encoder {
            let r = encoder
                .encode_family(&labels)
                .and_then(|mut metric| f(&mut metric));
            if self.result.is_ok() {
                *self.result = r;
            }
        }
    }

    /// One sample of a counter or gauge family.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) -> &mut Self {
        debug_assert!(self.kind != Kind::Histogram, "use Family::histogram");
        let counter = self.kind == Kind::Counter;
        let value = value.into();
        self.encode(labels, |m| match value {
            Value::U(v) if counter => m.encode_counter::<NoLabelSet, _, u64>(&v, None),
            Value::I(v) if counter => m.encode_counter::<NoLabelSet, _, u64>(&(v as f64), None),
            Value::F(v) if counter => m.encode_counter::<NoLabelSet, _, u64>(&v, None),
            Value::U(v) => m.encode_gauge(&v),
            Value::I(v) => m.encode_gauge(&v),
            Value::F(v) => m.encode_gauge(&v),
        });
        self
    }

    /// One labelled histogram of a histogram family: cumulative `_bucket`
    /// lines ending with `le="+Inf"`, then `_sum` and `_count`.
    pub fn histogram(&mut self, labels: &[(&str, &str)], h: &HistogramSnapshot) -> &mut Self {
        debug_assert!(
            self.kind == Kind::Histogram,
            "histogram in a non-histogram family"
        );
        let scale = 10f64.powi(h.decimals as i32);
        // The encoder accumulates the buckets and writes the +Inf one as the count.
        let buckets: Vec<(f64, u64)> = h
            .bounds
            .iter()
            .zip(&h.buckets)
            .map(|(bound, n)| (*bound as f64 / scale, *n))
            .collect();
        self.encode(labels, |m| {
            m.encode_histogram::<NoLabelSet>(h.sum as f64 / scale, h.count(), &buckets, None)
        });
        self
    }
}

/// Something that contributes families at scrape time (the policy engine,
/// the group-commit writer, the Diameter transport, the session table...).
/// Each family name must come from one source only.
pub trait MetricsSource: Send + Sync + 'static {
    fn write(&self, out: &mut Exposition);
}

impl<F> MetricsSource for F
where
    F: Fn(&mut Exposition) + Send + Sync + 'static,
{
    fn write(&self, out: &mut Exposition) {
        self(out)
    }
}

/// Sources in the order they are encoded, as a prometheus-client collector.
struct Sources(RwLock<Vec<Arc<dyn MetricsSource>>>);

/// prometheus-client wants collectors printable; the sources are not.
impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sources")
    }
}

impl Collector for Sources {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        // Clone the list so a slow source never blocks `register`.
        let sources: Vec<Arc<dyn MetricsSource>> = self.0.read().clone();
        let mut out = Exposition::new(encoder);
        for s in sources {
            s.write(&mut out);
        }
        out.result
    }
}

/// `registry` in the text format 0.0.4.
fn encode(registry: &Registry) -> String {
    let mut text = String::with_capacity(16 * 1024);
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut text, registry) {
        tracing::error!(error = %e, "metrics scrape could not be encoded");
    }
    text
}

/// The families of one source on their own, in the text format 0.0.4 (the
/// API appends its own counters to the node's scrape this way).
pub fn render_source(source: Arc<dyn MetricsSource>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Sources(RwLock::new(vec![source]))));
    encode(&registry)
}

// ---------------------------------------------------------------------------
// Histogram

/// The most bounds a [`Histogram`] may have (fixed so the buckets are an
/// inline array: no pointer chase on the hot path).
pub const MAX_BOUNDS: usize = 20;

/// Request latency bucket upper bounds, nanoseconds: 50 µs .. 5 s. Dense
/// below 10 ms, where a PCRF answer belongs.
pub const LATENCY_BOUNDS_NS: &[u64] = &[
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
];

/// Group-commit batch size bucket upper bounds (changes per transaction).
pub const BATCH_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048];

/// A histogram with fixed bounds; values are integers in some unit
/// (nanoseconds, items) and render divided by `10^decimals` (9 turns
/// nanoseconds into Prometheus' seconds).
pub struct Histogram {
    bounds: &'static [u64],
    decimals: u32,
    /// Non-cumulative counts; index `bounds.len()` is the +Inf bucket.
    buckets: [AtomicU64; MAX_BOUNDS + 1],
    sum: AtomicU64,
}

impl Histogram {
    /// `bounds` must be strictly increasing and at most [`MAX_BOUNDS`] long.
    pub fn new(bounds: &'static [u64], decimals: u32) -> Histogram {
        assert!(bounds.len() <= MAX_BOUNDS, "too many histogram bounds");
        assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "bounds must increase"
        );
        Histogram {
            bounds,
            decimals,
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
        }
    }

    /// A latency histogram in seconds with [`LATENCY_BOUNDS_NS`].
    pub fn latency() -> Histogram {
        Histogram::new(LATENCY_BOUNDS_NS, 9)
    }

    /// A batch-size histogram with [`BATCH_BOUNDS`].
    pub fn batch_sizes() -> Histogram {
        Histogram::new(BATCH_BOUNDS, 0)
    }

    /// Records one value (in the histogram's integer unit).
    #[inline]
    pub fn observe(&self, v: u64) {
        let i = self.bounds.partition_point(|b| *b < v);
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum.fetch_add(v, Relaxed);
    }

    /// Records a duration (for histograms in nanoseconds).
    #[inline]
    pub fn observe_duration(&self, d: Duration) {
        self.observe(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// A copy for rendering. The count is the sum of the buckets, so the
    /// `+Inf` bucket and `_count` always agree even under concurrent writes.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let n = self.bounds.len() + 1;
        HistogramSnapshot {
            bounds: self.bounds,
            decimals: self.decimals,
            buckets: self.buckets[..n].iter().map(|b| b.load(Relaxed)).collect(),
            sum: self.sum.load(Relaxed),
        }
    }
}

/// A point-in-time copy of a [`Histogram`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub bounds: &'static [u64],
    pub decimals: u32,
    /// Non-cumulative, `bounds.len() + 1` entries (the last is +Inf).
    pub buckets: Vec<u64>,
    pub sum: u64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// From cumulative counts (`cumulative[i]` values were <= `bounds[i]`)
    /// and the total count, as modules that keep their own buckets report
    /// them. None if the lengths differ or the counts are not cumulative.
    pub fn from_cumulative(
        bounds: &'static [u64],
        decimals: u32,
        cumulative: &[u64],
        count: u64,
        sum: u64,
    ) -> Option<HistogramSnapshot> {
        if cumulative.len() != bounds.len() {
            return None;
        }
        let mut buckets = Vec::with_capacity(bounds.len() + 1);
        let mut prev = 0u64;
        for &c in cumulative.iter().chain(std::iter::once(&count)) {
            buckets.push(c.checked_sub(prev)?);
            prev = c;
        }
        Some(HistogramSnapshot {
            bounds,
            decimals,
            buckets,
            sum,
        })
    }
}

// ---------------------------------------------------------------------------
// Requests by command and result code

/// The Diameter commands we count, as the `command` label spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// Gx CCR with CC-Request-Type INITIAL_REQUEST.
    CcrInitial,
    CcrUpdate,
    CcrTermination,
    CcrEvent,
    /// Gx RAR we sent; counted with the RAA's result code.
    Rar,
    /// Rx AA-Request.
    Aar,
    /// Rx/Sy Session-Termination-Request.
    Str,
    /// Abort-Session-Request we sent (Rx).
    Asr,
    /// Sy Spending-Limit-Request we sent.
    Slr,
    /// Sy Spending-Status-Notification-Request received.
    Snr,
    /// Sd CCR from a TDF (any CC-Request-Type).
    SdCcr,
    /// Sd TDF-Session-Request we sent (solicited), with the TSA's code.
    Tsr,
    /// Sd RAR we sent to a TDF, with the RAA's code.
    SdRar,
    /// N7 notification we sent to an SMF (`/update` or `/terminate`),
    /// counted with the code an RAA would carry: 2001 for a 2xx, 5002 for
    /// a 404 (the SMF has no such session), 5012 for any other status.
    N7Notify,
    /// N5 notification we sent to an AF (an event, or the termination),
    /// counted with the code an RAA would carry, as N7-NOTIFY.
    N5Notify,
    /// Base protocol.
    Cer,
    Dwr,
    Dpr,
}

impl Command {
    pub const ALL: [Command; 18] = [
        Command::CcrInitial,
        Command::CcrUpdate,
        Command::CcrTermination,
        Command::CcrEvent,
        Command::Rar,
        Command::Aar,
        Command::Str,
        Command::Asr,
        Command::Slr,
        Command::Snr,
        Command::SdCcr,
        Command::Tsr,
        Command::SdRar,
        Command::N7Notify,
        Command::N5Notify,
        Command::Cer,
        Command::Dwr,
        Command::Dpr,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Command::CcrInitial => "CCR-I",
            Command::CcrUpdate => "CCR-U",
            Command::CcrTermination => "CCR-T",
            Command::CcrEvent => "CCR-E",
            Command::Rar => "RAR",
            Command::Aar => "AAR",
            Command::Str => "STR",
            Command::Asr => "ASR",
            Command::Slr => "SLR",
            Command::Snr => "SNR",
            Command::SdCcr => "SD-CCR",
            Command::Tsr => "TSR",
            Command::SdRar => "SD-RAR",
            Command::N7Notify => "N7-NOTIFY",
            Command::N5Notify => "N5-NOTIFY",
            Command::Cer => "CER",
            Command::Dwr => "DWR",
            Command::Dpr => "DPR",
        }
    }

    /// The Gx CCR command for a CC-Request-Type value (RFC 4006 §8.3).
    pub fn from_cc_request_type(t: u32) -> Option<Command> {
        match t {
            1 => Some(Command::CcrInitial),
            2 => Some(Command::CcrUpdate),
            3 => Some(Command::CcrTermination),
            4 => Some(Command::CcrEvent),
            _ => None,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Distinct result codes counted per command before the rest go to
/// `result_code="other"`. A PCRF sees a handful (2001, 5002, 5003, 5005,
/// 5012, 5030...); 24 leaves room without making scrapes long.
const RESULT_SLOTS: usize = 24;

/// Pseudo result code for a request that got no answer (timed out, peer
/// gone): rendered as `result_code="none"`.
pub const NO_ANSWER: u32 = 0;

/// A lock-free map result code -> count: open addressing over a fixed
/// array, a slot claimed once by compare-and-swap and never freed.
struct ResultCounts {
    /// Result code + 1 (0 = free slot), so [`NO_ANSWER`] is storable.
    keys: [AtomicU32; RESULT_SLOTS],
    counts: [AtomicU64; RESULT_SLOTS],
    other: AtomicU64,
}

impl ResultCounts {
    fn new() -> ResultCounts {
        ResultCounts {
            keys: std::array::from_fn(|_| AtomicU32::new(0)),
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            other: AtomicU64::new(0),
        }
    }

    #[inline]
    fn add(&self, code: u32) {
        let key = code.wrapping_add(1);
        if key == 0 {
            self.other.fetch_add(1, Relaxed);
            return;
        }
        let start = (code as usize).wrapping_mul(0x9E37_79B9) % RESULT_SLOTS;
        for probe in 0..RESULT_SLOTS {
            let i = (start + probe) % RESULT_SLOTS;
            let k = self.keys[i].load(Relaxed);
            if k == key {
                self.counts[i].fetch_add(1, Relaxed);
                return;
            }
            if k == 0 {
                match self.keys[i].compare_exchange(0, key, Relaxed, Relaxed) {
                    Ok(_) => {
                        self.counts[i].fetch_add(1, Relaxed);
                        return;
                    }
                    Err(now) if now == key => {
                        self.counts[i].fetch_add(1, Relaxed);
                        return;
                    }
                    Err(_) => continue,
                }
            }
        }
        self.other.fetch_add(1, Relaxed);
    }

    fn get(&self, code: u32) -> u64 {
        let key = code.wrapping_add(1);
        (0..RESULT_SLOTS)
            .find(|&i| self.keys[i].load(Relaxed) == key)
            .map_or(0, |i| self.counts[i].load(Relaxed))
    }

    /// (code, count) sorted by code, then the overflow count.
    fn snapshot(&self) -> (Vec<(u32, u64)>, u64) {
        let mut v: Vec<(u32, u64)> = (0..RESULT_SLOTS)
            .filter_map(|i| {
                let k = self.keys[i].load(Relaxed);
                (k != 0).then(|| (k.wrapping_sub(1), self.counts[i].load(Relaxed)))
            })
            .collect();
        v.sort_unstable();
        (v, self.other.load(Relaxed))
    }
}

/// One command's counters, on its own cache lines so workers answering
/// different commands do not false-share.
#[repr(align(128))]
struct CommandStats {
    results: ResultCounts,
    latency: Histogram,
}

/// The families owned here: build, start time, and the request counters
/// and latency histograms of the hot path.
struct Requests {
    commands: Vec<CommandStats>,
    start_unix: f64,
}

impl MetricsSource for Requests {
    fn write(&self, out: &mut Exposition) {
        out.family(
            "pcrf_build_info",
            "Build of the running PCRF (always 1).",
            Kind::Gauge,
        )
        .sample(&[("version", env!("CARGO_PKG_VERSION"))], 1u64);
        out.gauge(
            "pcrf_start_time_seconds",
            "Start time of the process, Unix seconds.",
            self.start_unix,
        );
        {
            let mut f = out.family(
                "pcrf_requests_total",
                "Diameter requests handled (or, for requests the PCRF sends, answers received) by command and Result-Code; result_code=\"none\" means no answer.",
                Kind::Counter,
            );
            for (cmd, stats) in Command::ALL.iter().zip(&self.commands) {
                let (codes, other) = stats.results.snapshot();
                for (code, n) in codes {
                    let code = if code == NO_ANSWER {
                        "none".to_string()
                    } else {
                        code.to_string()
                    };
                    f.sample(&[("command", cmd.label()), ("result_code", &code)], n);
                }
                if other > 0 {
                    f.sample(&[("command", cmd.label()), ("result_code", "other")], other);
                }
            }
        }
        let mut f = out.family(
            "pcrf_request_duration_seconds",
            "Time from reading a request to writing its answer (for requests the PCRF sends: to receiving the answer), by command.",
            Kind::Histogram,
        );
        for (cmd, stats) in Command::ALL.iter().zip(&self.commands) {
            let snap = stats.latency.snapshot();
            if snap.count() > 0 {
                f.histogram(&[("command", cmd.label())], &snap);
            }
        }
    }
}

/// The registry: request counters and latency histograms owned here (the
/// hot path), plus the sources registered by other modules, encoded by
/// one prometheus-client collector.
pub struct Metrics {
    requests: Arc<Requests>,
    sources: Arc<Sources>,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let requests = Arc::new(Requests {
            commands: Command::ALL
                .iter()
                .map(|_| CommandStats {
                    results: ResultCounts::new(),
                    latency: Histogram::latency(),
                })
                .collect(),
            start_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        });
        let sources = Arc::new(Sources(RwLock::new(vec![requests.clone()])));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(sources.clone()));
        Metrics {
            requests,
            sources,
            registry,
        }
    }

    /// Counts one request handled (or, for commands we send, one answer
    /// received) with its Result-Code or Experimental-Result-Code
    /// ([`NO_ANSWER`] if none came), and its latency from read to answer.
    #[inline]
    pub fn request(&self, command: Command, result_code: u32, elapsed: Duration) {
        let s = &self.requests.commands[command.index()];
        s.results.add(result_code);
        s.latency.observe_duration(elapsed);
    }

    /// How many `command` requests ended with `result_code` so far.
    pub fn requests(&self, command: Command, result_code: u32) -> u64 {
        self.requests.commands[command.index()]
            .results
            .get(result_code)
    }

    /// Adds a contributor, rendered after the built-in families in
    /// registration order.
    pub fn register(&self, source: Arc<dyn MetricsSource>) {
        self.sources.0.write().push(source);
    }

    /// The whole scrape, Prometheus text format 0.0.4.
    pub fn render(&self) -> String {
        encode(&self.registry)
    }
}

// ---------------------------------------------------------------------------
// Snapshots other modules fill in: the family names live here, in one place
// with docs/metrics.md, and each module only copies its atomics.

/// Session table and subscriber cache sizes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    pub open_sessions: u64,
    /// Closed sessions still kept for the retention period.
    pub closed_sessions: u64,
    /// Subscriber profiles held in memory.
    pub cached_subscribers: u64,
}

impl SessionStats {
    pub fn write(&self, out: &mut Exposition) {
        out.family(
            "pcrf_sessions",
            "Gx sessions in memory by state.",
            Kind::Gauge,
        )
        .sample(&[("state", "open")], self.open_sessions)
        .sample(&[("state", "closed")], self.closed_sessions);
        out.gauge(
            "pcrf_subscribers_cached",
            "Subscriber profiles held in memory.",
            self.cached_subscribers,
        );
    }
}

/// Diameter peer state, as the `state` label spells it: the connection
/// state machine (RFC 6733 §5.6) folded with the RFC 3539 watchdog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerState {
    /// Configured but not connected.
    Closed,
    /// Connected, capabilities exchange (CER/CEA) not finished.
    Connecting,
    Open,
    /// Open but the watchdog is unanswered (RFC 3539 SUSPECT): no new
    /// requests are routed to it.
    Suspect,
    /// DPR sent or received.
    Closing,
}

impl PeerState {
    pub const ALL: [PeerState; 5] = [
        PeerState::Closed,
        PeerState::Connecting,
        PeerState::Open,
        PeerState::Suspect,
        PeerState::Closing,
    ];

    pub fn label(self) -> &'static str {
        match self {
            PeerState::Closed => "closed",
            PeerState::Connecting => "connecting",
            PeerState::Open => "open",
            PeerState::Suspect => "suspect",
            PeerState::Closing => "closing",
        }
    }

    /// Folds the diameter crate's connection and watchdog states.
    pub fn of(state: diameter::peer::PeerState, watchdog: WatchdogState) -> PeerState {
        use diameter::peer::PeerState as S;
        match (state, watchdog) {
            (S::WaitCer | S::WaitCea | S::Admitting, _) => PeerState::Connecting,
            (S::Open, WatchdogState::Okay) => PeerState::Open,
            (S::Open, WatchdogState::Suspect) => PeerState::Suspect,
            (S::Open, WatchdogState::Down) | (S::Closed, _) => PeerState::Closed,
            (S::Closing, _) => PeerState::Closing,
        }
    }
}

/// One Diameter peer as the transport sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStat {
    /// The peer's Origin-Host (or its configured name when not connected).
    pub host: String,
    pub state: PeerState,
    /// Zero for a peer that is not connected.
    pub counters: PeerCountersSnapshot,
    /// The connection's most recent error.
    pub last_error: Option<LastError>,
    /// The peer advertised DOIC (OC-Supported-Features) on this connection.
    pub doic_supported: bool,
}

impl PeerStat {
    /// A connected peer.
    pub fn of(handle: &PeerHandle) -> PeerStat {
        PeerStat {
            host: handle
                .origin_host()
                .map(|h| h.to_string())
                .or_else(|| handle.remote_addr().map(|a| a.to_string()))
                .unwrap_or_default(),
            state: PeerState::of(handle.state(), handle.watchdog()),
            counters: handle.counters().snapshot(),
            last_error: handle.counters().last_error(),
            doic_supported: false,
        }
    }
}

/// Every open peer of `table`, plus each `configured` Origin-Host that is
/// not connected (as closed), sorted by host.
pub fn peer_stats(table: &PeerTable, configured: &[String]) -> Vec<PeerStat> {
    let mut v: Vec<PeerStat> = table.peers().iter().map(PeerStat::of).collect();
    for host in configured {
        if !v.iter().any(|p| p.host.eq_ignore_ascii_case(host)) {
            v.push(PeerStat {
                host: host.clone(),
                state: PeerState::Closed,
                counters: PeerCountersSnapshot::default(),
                last_error: None,
                doic_supported: false,
            });
        }
    }
    v.sort_by(|a, b| a.host.cmp(&b.host));
    v
}

/// Writes the peer families: `pcrf_peers{state}` (count per state, every
/// state present), `pcrf_peer_state{peer,state} 1` (each peer's current
/// state), the per-peer transport counters and each peer's DOIC state
/// (`report` is the OC-OLR answers to DOIC peers carry now).
pub fn write_peers(out: &mut Exposition, peers: &[PeerStat], report: Option<ReportSent>) {
    {
        let mut f = out.family("pcrf_peers", "Diameter peers by state.", Kind::Gauge);
        for st in PeerState::ALL {
            let n = peers.iter().filter(|p| p.state == st).count();
            f.sample(&[("state", st.label())], n);
        }
    }
    {
        let mut f = out.family(
            "pcrf_peer_state",
            "Each Diameter peer's current state (the sample with value 1).",
            Kind::Gauge,
        );
        for p in peers {
            f.sample(&[("peer", &p.host), ("state", p.state.label())], 1u64);
        }
    }
    type Pick = fn(&PeerCountersSnapshot) -> u64;
    let directional: [(&str, &str, Pick, Pick); 3] = [
        (
            "pcrf_peer_messages_total",
            "Diameter messages read (in) and written (out) per peer.",
            |c| c.messages_in,
            |c| c.messages_out,
        ),
        (
            "pcrf_peer_bytes_total",
            "Bytes read (in) and written (out) per peer.",
            |c| c.bytes_in,
            |c| c.bytes_out,
        ),
        (
            "pcrf_peer_requests_total",
            "Application requests received from (in) and sent to (out) each peer.",
            |c| c.requests_in,
            |c| c.requests_out,
        ),
    ];
    for (name, help, inbound, outbound) in directional {
        let mut f = out.family(name, help, Kind::Counter);
        for p in peers {
            f.sample(
                &[("peer", &p.host), ("direction", "in")],
                inbound(&p.counters),
            );
            f.sample(
                &[("peer", &p.host), ("direction", "out")],
                outbound(&p.counters),
            );
        }
    }
    let single: [(&str, &str, Kind, Pick); 7] = [
        (
            "pcrf_peer_writes_total",
            "Socket writes per peer; messages out / writes is the write coalescing factor.",
            Kind::Counter,
            |c| c.writes,
        ),
        (
            "pcrf_peer_error_answers_total",
            "Error answers the transport produced for each peer (protocol and handler errors).",
            Kind::Counter,
            |c| c.error_answers_out,
        ),
        (
            "pcrf_peer_too_busy_total",
            "Requests shed with 3004 DIAMETER_TOO_BUSY per peer.",
            Kind::Counter,
            |c| c.too_busy,
        ),
        (
            "pcrf_peer_request_timeouts_total",
            "Requests the PCRF sent (RAR) that got no answer in time, per peer.",
            Kind::Counter,
            |c| c.request_timeouts,
        ),
        (
            "pcrf_peer_unmatched_answers_total",
            "Answers with no waiting request (late or unknown hop-by-hop id), per peer.",
            Kind::Counter,
            |c| c.unmatched_answers,
        ),
        (
            "pcrf_peer_connects_total",
            "Connections opened per peer.",
            Kind::Counter,
            |c| c.connects,
        ),
        (
            "pcrf_peer_in_flight",
            "Requests from each peer being handled now.",
            Kind::Gauge,
            |c| c.in_flight,
        ),
    ];
    for (name, help, kind, pick) in single {
        let mut f = out.family(name, help, kind);
        for p in peers {
            f.sample(&[("peer", &p.host)], pick(&p.counters));
        }
    }
    write_peer_doic(out, peers, report);
    let mut f = out.family(
        "pcrf_peer_last_error_time_seconds",
        "When each peer's connection last had an error (Unix seconds), the error in its label; peers without one have no sample.",
        Kind::Gauge,
    );
    for p in peers {
        if let Some(e) = &p.last_error {
            f.sample(
                &[("peer", &p.host), ("error", &e.text)],
                e.at_ms as f64 / 1000.0,
            );
        }
    }
}

/// `pcrf_peer_doic_supported{peer}` (1 when the peer advertised DOIC) and,
/// for those peers while a report is out, the OC-OLR they are sent:
/// reduction, remaining validity and sequence number.
fn write_peer_doic(out: &mut Exposition, peers: &[PeerStat], report: Option<ReportSent>) {
    {
        let mut f = out.family(
            "pcrf_peer_doic_supported",
            "1 when the peer advertised DOIC (OC-Supported-Features) on its connection.",
            Kind::Gauge,
        );
        for p in peers {
            f.sample(&[("peer", &p.host)], u64::from(p.doic_supported));
        }
    }
    type Pick = fn(&ReportSent) -> Value;
    let families: [(&str, &str, Pick); 3] = [
        (
            "pcrf_peer_doic_reduction_percent",
            "OC-Reduction-Percentage of the overload report sent to each DOIC peer; no sample when none is sent.",
            |r| Value::from(r.reduction_percentage),
        ),
        (
            "pcrf_peer_doic_validity_seconds",
            "What remains of the validity of the overload report sent to each DOIC peer (0: the overload ended).",
            |r| Value::F(r.validity.as_secs_f64()),
        ),
        (
            "pcrf_peer_doic_sequence",
            "OC-Sequence-Number of the overload report sent to each DOIC peer.",
            |r| Value::U(r.sequence),
        ),
    ];
    for (name, help, pick) in families {
        let mut f = out.family(name, help, Kind::Gauge);
        if let Some(r) = &report {
            for p in peers.iter().filter(|p| p.doic_supported) {
                f.sample(&[("peer", &p.host)], pick(r));
            }
        }
    }
}

/// Policy engine counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyStats {
    /// Lua runs (the inputs or the script changed).
    pub runs: u64,
    /// Decisions reused because the input hash and script version were
    /// unchanged (the memo).
    pub skips: u64,
    /// Of `skips`, the decisions reused on changed inputs, within the
    /// bounds the script stated with them (`valid`).
    pub skips_within_bounds: u64,
    /// Runtime errors (incl. instruction budget or memory limit exceeded);
    /// the fallback decision was used.
    pub errors: u64,
    pub reloads_ok: u64,
    /// Reloads refused (script did not compile or check); old one kept.
    pub reloads_failed: u64,
    /// The serving script's version (a hash of it).
    pub script_version: u64,
    /// `log()` lines the script wrote beyond its limits, dropped.
    pub log_dropped: u64,
}

impl PolicyStats {
    pub fn write(&self, out: &mut Exposition) {
        out.counter(
            "pcrf_policy_runs_total",
            "Policy script runs (inputs or script changed).",
            self.runs,
        );
        out.counter(
            "pcrf_policy_skips_total",
            "Decisions reused without running the script (input hash and script version unchanged).",
            self.skips,
        );
        out.counter(
            "pcrf_policy_skips_within_bounds_total",
            "Of the reused decisions, those whose inputs changed only within the validity the script stated (valid).",
            self.skips_within_bounds,
        );
        out.counter(
            "pcrf_policy_errors_total",
            "Policy script runtime errors (incl. budget or memory limit); the fallback decision was used.",
            self.errors,
        );
        out.family(
            "pcrf_policy_reloads_total",
            "Policy reloads by outcome.",
            Kind::Counter,
        )
        .sample(&[("outcome", "ok")], self.reloads_ok)
        .sample(&[("outcome", "failed")], self.reloads_failed);
        out.counter(
            "pcrf_policy_log_dropped_total",
            "Lines the policy's log() wrote beyond its limits (per call, per second), dropped.",
            self.log_dropped,
        );
        // An info metric: a 64-bit hash does not fit a float sample exactly.
        let version = format!("{:016x}", self.script_version);
        out.family(
            "pcrf_policy_script_info",
            "The running policy script, by version (16 hex digits, as logged); always 1.",
            Kind::Gauge,
        )
        .sample(&[("version", &version)], 1u64);
    }
}

/// Group-commit writer counters (the writer's own snapshot, copied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitStats {
    /// Transactions attempted (one per batch).
    pub batches: u64,
    /// Transactions committed (a row changed).
    pub commits: u64,
    /// Batches where no row changed: no commit, no fsync.
    pub skipped: u64,
    /// Rows inserted, updated or deleted.
    pub rows: u64,
    /// Changes dropped because a later change in the same batch wrote the same row.
    pub coalesced: u64,
    /// Batches that failed (their requests got the error).
    pub errors: u64,
    /// Closed sessions purged after their retention.
    pub purged: u64,
    /// Requests waiting for the writer now.
    pub queued: u64,
    /// Time spent applying batches in the store, microseconds.
    pub apply_micros: u64,
    /// Requests per batch.
    pub batch_sizes: HistogramSnapshot,
    /// Time per batch from BEGIN to COMMIT (the fsync included), in
    /// microseconds: a slow disk shows here before it shows in the answers.
    pub apply_times: HistogramSnapshot,
}

impl CommitStats {
    pub fn write(&self, out: &mut Exposition) {
        out.counter(
            "pcrf_store_batches_total",
            "Store transactions attempted (one per group-commit batch).",
            self.batches,
        );
        out.counter(
            "pcrf_store_commits_total",
            "Store transactions committed (a row changed).",
            self.commits,
        );
        out.counter(
            "pcrf_store_commits_skipped_total",
            "Batches not committed because no row changed.",
            self.skipped,
        );
        out.counter("pcrf_store_rows_total", "Store rows changed.", self.rows);
        out.counter(
            "pcrf_store_coalesced_total",
            "Changes dropped because a later change in the same batch wrote the same row.",
            self.coalesced,
        );
        out.counter(
            "pcrf_store_errors_total",
            "Store batches that failed (their requests were answered with an error).",
            self.errors,
        );
        out.counter(
            "pcrf_store_purged_total",
            "Closed sessions deleted after their retention.",
            self.purged,
        );
        out.gauge(
            "pcrf_store_queued",
            "Requests waiting for the group-commit writer.",
            self.queued,
        );
        out.counter(
            "pcrf_store_apply_seconds_total",
            "Time spent applying batches in the store.",
            self.apply_micros as f64 / 1e6,
        );
        out.family(
            "pcrf_store_batch_size",
            "Requests per group-commit batch.",
            Kind::Histogram,
        )
        .histogram(&[], &self.batch_sizes);
        out.family(
            "pcrf_store_apply_duration_seconds",
            "Time per group-commit batch in the store, from its start to its commit (the sync included).",
            Kind::Histogram,
        )
        .histogram(&[], &self.apply_times);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_le() {
        let h = Histogram::new(&[10, 20], 0);
        for v in [0, 10, 11, 20, 21, 1000] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![2, 2, 2]);
        assert_eq!(s.sum, 1062);
        assert_eq!(s.count(), 6);
    }

    #[test]
    fn result_codes_overflow_to_other() {
        let r = ResultCounts::new();
        for code in 0..(RESULT_SLOTS as u32 + 5) {
            r.add(2000 + code);
        }
        r.add(2001);
        r.add(NO_ANSWER);
        let (codes, other) = r.snapshot();
        assert_eq!(codes.len(), RESULT_SLOTS);
        assert_eq!(other, 6);
        assert_eq!(r.get(2001), 2);
        assert!(codes.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn from_cumulative_checks_shape() {
        const B: &[u64] = &[1, 4];
        let h = HistogramSnapshot::from_cumulative(B, 0, &[2, 5], 7, 20).expect("valid");
        assert_eq!(h.buckets, vec![2, 3, 2]);
        assert_eq!(h.count(), 7);
        assert!(HistogramSnapshot::from_cumulative(B, 0, &[5, 2], 7, 0).is_none());
        assert!(HistogramSnapshot::from_cumulative(B, 0, &[2, 5], 4, 0).is_none());
        assert!(HistogramSnapshot::from_cumulative(B, 0, &[2], 4, 0).is_none());
    }

    #[test]
    fn peer_states_fold_the_watchdog() {
        use diameter::peer::PeerState as S;
        assert_eq!(PeerState::of(S::Open, WatchdogState::Okay), PeerState::Open);
        assert_eq!(
            PeerState::of(S::Open, WatchdogState::Suspect),
            PeerState::Suspect
        );
        assert_eq!(
            PeerState::of(S::WaitCer, WatchdogState::Okay),
            PeerState::Connecting
        );
        assert_eq!(
            PeerState::of(S::Closing, WatchdogState::Okay),
            PeerState::Closing
        );
        assert_eq!(
            PeerState::of(S::Closed, WatchdogState::Okay),
            PeerState::Closed
        );
    }

    #[test]
    fn escaping() {
        let text = render_source(Arc::new(|out: &mut Exposition| {
            out.family("x", "a \\ b\nc", Kind::Gauge)
                .sample(&[("peer", "a\"b\\c\nd")], 1u64);
        }));
        assert!(text.contains("# HELP x a \\\\ b\\nc\n"));
        assert!(text.contains("x{peer=\"a\\\"b\\\\c\\nd\"} 1\n"));
    }

    #[test]
    fn concurrent_counts_are_exact() {
        let m = Arc::new(Metrics::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u32 {
                        let code = if i % 2 == 0 { 2001 } else { 5002 };
                        m.request(Command::CcrUpdate, code, Duration::from_micros(300));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(m.requests(Command::CcrUpdate, 2001), 20_000);
        assert_eq!(m.requests(Command::CcrUpdate, 5002), 20_000);
        let text = m.render();
        assert!(text.contains(
            "pcrf_request_duration_seconds_bucket{command=\"CCR-U\",le=\"0.0005\"} 40000\n"
        ));
        assert!(text.contains("pcrf_request_duration_seconds_sum{command=\"CCR-U\"} 12.0\n"));
    }
}
