//! Scenario files: the call flows an emulated network runs, written as TOML
//! (see bench/scenarios/seed.toml), parsed and validated up front so that a
//! mistake is reported with its place before any traffic is sent.

use crate::duration::parse_duration;
use crate::population::Population;
use rand::Rng;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Why a scenario cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("scenario {path}: {message}")]
    Syntax { path: String, message: String },
    #[error("scenario {path}: {field}: {message}")]
    Invalid {
        path: String,
        field: String,
        message: String,
    },
}

/// When new sessions start: evenly spaced, or as a Poisson process (the
/// arrivals of independent subscribers) with the same mean rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalProcess {
    Uniform,
    Poisson,
}

/// The time from CCR-I to CCR-T of one session; CCR-Us are spread evenly
/// inside it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Hold {
    Fixed(Duration),
    Uniform {
        min: Duration,
        max: Duration,
    },
    /// Memoryless, as call holding times are usually modelled; truncated at `max`.
    Exponential {
        mean: Duration,
        max: Duration,
    },
}

impl Hold {
    pub fn sample<R: Rng>(&self, rng: &mut R) -> Duration {
        match *self {
            Hold::Fixed(d) => d,
            Hold::Uniform { min, max } => {
                if max > min {
                    min + (max - min).mul_f64(rng.random::<f64>())
                } else {
                    min
                }
            }
            Hold::Exponential { mean, max } => {
                let u: f64 = rng.random();
                mean.mul_f64(-(1.0 - u).ln()).min(max)
            }
        }
    }

    /// The longest hold this distribution yields.
    pub fn max(&self) -> Duration {
        match *self {
            Hold::Fixed(d) => d,
            Hold::Uniform { max, .. } | Hold::Exponential { max, .. } => max,
        }
    }
}

/// An inclusive range sampled uniformly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub min: u64,
    pub max: u64,
}

impl Span {
    pub fn sample<R: Rng>(&self, rng: &mut R) -> u64 {
        if self.max > self.min {
            rng.random_range(self.min..=self.max)
        } else {
            self.min
        }
    }
    pub fn mean(&self) -> f64 {
        (self.min as f64 + self.max as f64) / 2.0
    }
}

/// What a flow's sessions do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowKind {
    /// Gx only: CCR-I, CCR-Us with usage, CCR-T (`pcrf-bench run`).
    #[default]
    Data,
    /// A VoLTE call (`pcrf-bench volte`): Gx CCR-I, then the AF's AAR (the
    /// PCRF pushes a RAR to the PCEF before its AAA), the hold time, STR,
    /// then CCR-T. See [`VolteSettings`].
    Volte,
}

/// One kind of session and how often it occurs.
#[derive(Clone, Debug, PartialEq)]
pub struct Flow {
    pub name: String,
    pub kind: FlowKind,
    pub weight: u32,
    /// How many CCR-U between CCR-I and CCR-T.
    pub updates: Span,
    pub hold: Hold,
    /// Each CCR-U and the CCR-T report usage for each of these keys.
    pub monitoring_keys: Vec<String>,
    /// Octets reported per key per CCR-U.
    pub input_octets: Span,
    pub output_octets: Span,
}

/// Per-command Apdex target times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ApdexTargets {
    pub ccr_i: Duration,
    pub ccr_u: Duration,
    pub ccr_t: Duration,
    /// Rx (VoLTE flows): AAR sent -> AAA, STR sent -> STA.
    pub aar: Duration,
    pub str: Duration,
    /// A call's set-up: its AAR's intended send time -> AAA received.
    pub call_setup: Duration,
}

/// The emulated AFs (P-CSCFs) of VoLTE flows and the call they set up.
#[derive(Clone, Debug, PartialEq)]
pub struct VolteSettings {
    /// The AFs' Origin-Realm; their hosts are pcscf-N.<realm>.
    pub af_realm: String,
    pub af_peers: usize,
    /// From the CCA-I of the Gx attach to the AAR's intended send time.
    pub call_after: Duration,
    /// The UE's RTP port (RTCP the next one) and the far end's.
    pub ue_port: u16,
    pub remote_port: u16,
    pub media: crate::rx::VoiceMedia,
}

/// The Gx identity of the emulated gateways.
#[derive(Clone, Debug, PartialEq)]
pub struct GxSettings {
    pub origin_realm: String,
    pub destination_realm: String,
    pub destination_host: Option<String>,
    pub apn: String,
    /// 3GPP-SGSN-MCC-MNC and the PLMN in the user location.
    pub mcc_mnc: String,
}

/// What to provision for every subscriber before a run.
#[derive(Clone, Debug, PartialEq)]
pub struct ProvisionProfile {
    pub plan: String,
    pub services: Vec<String>,
}

/// Which node to kill, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeKill {
    /// From the start of the run (the gateways connecting).
    pub at: Duration,
    /// Run with `sh -c`, e.g. `kill -9 "$(cat /run/pcrf2.pid)"`; it must
    /// exit 0.
    pub command: String,
}

/// A validated scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub arrivals: ArrivalProcess,
    pub population: Population,
    pub provision: ProvisionProfile,
    pub gx: GxSettings,
    pub apdex: ApdexTargets,
    pub timeout: Duration,
    pub flows: Vec<Flow>,
    /// Set when a flow is of kind "volte".
    pub volte: Option<VolteSettings>,
    /// The `[cluster]` section: a node killed during the run.
    pub node_kill: Option<NodeKill>,
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Scenario::parse(&text, &path.display().to_string())
    }

    /// Parses and validates `text`; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let f: file::ScenarioFile = toml::from_str(text).map_err(|e| ScenarioError::Syntax {
            path: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let invalid = |field: &str, message: String| ScenarioError::Invalid {
            path: origin.to_string(),
            field: field.to_string(),
            message,
        };
        let dur = |field: &str, s: &str| parse_duration(s).map_err(|m| invalid(field, m));

        if f.name.trim().is_empty() {
            return Err(invalid("name", "must not be empty".into()));
        }
        let population = Population::new(
            &f.population.imsi_first,
            &f.population.msisdn_first,
            f.population.count,
        )
        .map_err(|m| invalid("population", m))?;

        let mut apdex = ApdexTargets {
            ccr_i: Duration::from_millis(5),
            ccr_u: Duration::from_millis(5),
            ccr_t: Duration::from_millis(5),
            aar: Duration::from_millis(10),
            str: Duration::from_millis(10),
            call_setup: Duration::from_millis(20),
        };
        for (cmd, t) in &f.apdex {
            let field = format!("apdex.{cmd}");
            let t = dur(&field, t)?;
            if t.is_zero() {
                return Err(invalid(&field, "T must be above zero".into()));
            }
            match cmd.as_str() {
                "CCR-I" => apdex.ccr_i = t,
                "CCR-U" => apdex.ccr_u = t,
                "CCR-T" => apdex.ccr_t = t,
                "AAR" => apdex.aar = t,
                "STR" => apdex.str = t,
                "CALL-SETUP" => apdex.call_setup = t,
                _ => {
                    return Err(invalid(
                        &field,
                        "unknown command (CCR-I, CCR-U, CCR-T, AAR, STR or CALL-SETUP)".into(),
                    ))
                }
            }
        }

        let timeout = dur("timeout", f.timeout.as_deref().unwrap_or("2s"))?;
        if timeout < Duration::from_millis(10) {
            return Err(invalid("timeout", "must be at least 10ms".into()));
        }

        if f.flow.is_empty() {
            return Err(invalid("flow", "at least one [[flow]] is needed".into()));
        }
        let mut flows = Vec::with_capacity(f.flow.len());
        for (i, fl) in f.flow.into_iter().enumerate() {
            let at = |k: &str| format!("flow[{i}] ({}).{k}", fl.name);
            if fl.name.trim().is_empty() {
                return Err(invalid(
                    &format!("flow[{i}].name"),
                    "must not be empty".into(),
                ));
            }
            if fl.weight == 0 {
                return Err(invalid(&at("weight"), "must be above zero".into()));
            }
            let updates = fl.updates.span().map_err(|m| invalid(&at("updates"), m))?;
            if updates.max > 1000 {
                return Err(invalid(
                    &at("updates"),
                    "at most 1000 CCR-U per session".into(),
                ));
            }
            let hold = match fl.hold {
                file::Hold::Fixed { value } => Hold::Fixed(dur(&at("hold.value"), &value)?),
                file::Hold::Uniform { min, max } => {
                    let (min, max) = (dur(&at("hold.min"), &min)?, dur(&at("hold.max"), &max)?);
                    if min > max {
                        return Err(invalid(&at("hold"), "min is above max".into()));
                    }
                    Hold::Uniform { min, max }
                }
                file::Hold::Exponential { mean, max } => {
                    let (mean, max) = (dur(&at("hold.mean"), &mean)?, dur(&at("hold.max"), &max)?);
                    if mean.is_zero() || max < mean {
                        return Err(invalid(
                            &at("hold"),
                            "mean must be above zero and max at least the mean".into(),
                        ));
                    }
                    Hold::Exponential { mean, max }
                }
            };
            if fl.monitoring_keys.iter().any(|k| k.is_empty()) {
                return Err(invalid(&at("monitoring_keys"), "empty key".into()));
            }
            let input_octets = fl
                .input_octets
                .span()
                .map_err(|m| invalid(&at("input_octets"), m))?;
            let output_octets = fl
                .output_octets
                .span()
                .map_err(|m| invalid(&at("output_octets"), m))?;
            let kind = fl.kind.unwrap_or_default();
            if kind == FlowKind::Volte && updates.max > 0 {
                return Err(invalid(
                    &at("updates"),
                    "a volte flow's Gx session sends no CCR-U (updates = 0)".into(),
                ));
            }
            flows.push(Flow {
                name: fl.name,
                kind,
                weight: fl.weight,
                updates,
                hold,
                monitoring_keys: fl.monitoring_keys,
                input_octets,
                output_octets,
            });
        }

        let gx = f.gx.unwrap_or_default();
        for (field, v) in [
            ("gx.origin_realm", &gx.origin_realm),
            ("gx.destination_realm", &gx.destination_realm),
        ] {
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(invalid(field, "must be a non-empty ASCII FQDN".into()));
            }
        }
        if gx.mcc_mnc.len() < 5
            || gx.mcc_mnc.len() > 6
            || !gx.mcc_mnc.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(invalid("gx.mcc_mnc", "must be 5 or 6 digits".into()));
        }

        let volte = if flows.iter().any(|f| f.kind == FlowKind::Volte) {
            Some(volte_settings(f.volte.unwrap_or_default(), &invalid, &dur)?)
        } else if f.volte.is_some() {
            return Err(invalid(
                "volte",
                "no flow has kind = \"volte\" to use it".into(),
            ));
        } else {
            None
        };

        let node_kill = match f.cluster {
            None => None,
            Some(c) => {
                let at = dur("cluster.kill_at", &c.kill_at)?;
                if c.kill_command.trim().is_empty() {
                    return Err(invalid("cluster.kill_command", "must not be empty".into()));
                }
                Some(NodeKill {
                    at,
                    command: c.kill_command,
                })
            }
        };

        Ok(Scenario {
            name: f.name,
            description: f.description.unwrap_or_default(),
            arrivals: f.arrivals.unwrap_or(ArrivalProcess::Uniform),
            population,
            provision: ProvisionProfile {
                plan: f.population.plan.unwrap_or_else(|| "default".into()),
                services: f.population.services,
            },
            gx: GxSettings {
                origin_realm: gx.origin_realm,
                destination_realm: gx.destination_realm,
                destination_host: gx.destination_host,
                apn: gx.apn,
                mcc_mnc: gx.mcc_mnc,
            },
            apdex,
            timeout,
            flows,
            volte,
            node_kill,
        })
    }

    /// Whether any flow is a VoLTE call (run by `pcrf-bench volte`).
    pub fn has_volte(&self) -> bool {
        self.flows.iter().any(|f| f.kind == FlowKind::Volte)
    }

    /// The mean number of requests (CCR-I + CCR-Us + CCR-T) per session over the mix.
    pub fn mean_requests_per_session(&self) -> f64 {
        let total: f64 = self.flows.iter().map(|f| f.weight as f64).sum();
        self.flows
            .iter()
            .map(|f| f.weight as f64 / total * (2.0 + f.updates.mean()))
            .sum()
    }

    /// The longest session: after this long the request mix is in steady state.
    pub fn max_hold(&self) -> Duration {
        self.flows
            .iter()
            .map(|f| f.hold.max())
            .max()
            .unwrap_or_default()
    }

    /// Picks a flow by weight.
    pub fn pick_flow<R: Rng>(&self, rng: &mut R) -> usize {
        let total: u64 = self.flows.iter().map(|f| f.weight as u64).sum();
        let mut x = rng.random_range(0..total.max(1));
        for (i, f) in self.flows.iter().enumerate() {
            if x < f.weight as u64 {
                return i;
            }
            x -= f.weight as u64;
        }
        self.flows.len() - 1
    }
}

/// Validates the `[volte]` table.
fn volte_settings(
    v: file::VolteFile,
    invalid: &dyn Fn(&str, String) -> ScenarioError,
    dur: &dyn Fn(&str, &str) -> Result<Duration, ScenarioError>,
) -> Result<VolteSettings, ScenarioError> {
    if v.af_realm.is_empty() || !v.af_realm.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(
            "volte.af_realm",
            "must be a non-empty ASCII FQDN".into(),
        ));
    }
    if v.af_peers == 0 || v.af_peers > 250 {
        return Err(invalid("volte.af_peers", "must be 1..=250".into()));
    }
    if v.ue_port == u16::MAX || v.remote_port == u16::MAX {
        return Err(invalid(
            "volte.ue_port",
            "RTCP uses the next port: at most 65534".into(),
        ));
    }
    let def = diameter::dict::avp_by_name("Specific-Action");
    let mut specific_actions = Vec::with_capacity(v.specific_actions.len());
    for name in &v.specific_actions {
        let value = def
            .and_then(|d| d.enums.iter().find(|(_, n)| n == name))
            .map(|(v, _)| *v as i32)
            .ok_or_else(|| {
                invalid(
                    "volte.specific_actions",
                    format!("{name:?} is not a Specific-Action of TS 29.214 §5.3.13"),
                )
            })?;
        specific_actions.push(value);
    }
    let ip = |field: &str, s: &str| {
        s.parse::<std::net::Ipv4Addr>()
            .map_err(|e| invalid(field, format!("{s:?}: {e}")))
    };
    let signalling = match &v.signalling_address {
        Some(s) => Some(ip("volte.signalling_address", s)?),
        None => None,
    };
    Ok(VolteSettings {
        af_realm: v.af_realm,
        af_peers: v.af_peers,
        call_after: dur("volte.call_after", &v.call_after)?,
        ue_port: v.ue_port,
        remote_port: v.remote_port,
        media: crate::rx::VoiceMedia {
            max_requested_bandwidth_ul: v.max_requested_bandwidth_ul,
            max_requested_bandwidth_dl: v.max_requested_bandwidth_dl,
            rr_bandwidth: v.rr_bandwidth,
            rs_bandwidth: v.rs_bandwidth,
            codec: v.codec,
            remote_ip: ip("volte.remote_address", &v.remote_address)?,
            signalling,
            specific_actions,
            af_application_id: v.af_application_id,
        },
    })
}

/// The file's shape, before validation.
mod file {
    use super::*;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct ScenarioFile {
        pub name: String,
        pub description: Option<String>,
        pub arrivals: Option<ArrivalProcess>,
        pub timeout: Option<String>,
        pub population: PopulationFile,
        pub gx: Option<GxFile>,
        #[serde(default)]
        pub apdex: BTreeMap<String, String>,
        #[serde(default)]
        pub flow: Vec<FlowFile>,
        pub volte: Option<VolteFile>,
        pub cluster: Option<ClusterFile>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct ClusterFile {
        pub kill_at: String,
        pub kill_command: String,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct VolteFile {
        pub af_realm: String,
        pub af_peers: usize,
        pub call_after: String,
        pub ue_port: u16,
        pub remote_port: u16,
        pub remote_address: String,
        pub signalling_address: Option<String>,
        pub max_requested_bandwidth_ul: u32,
        pub max_requested_bandwidth_dl: u32,
        pub rr_bandwidth: u32,
        pub rs_bandwidth: u32,
        pub codec: String,
        pub af_application_id: String,
        pub specific_actions: Vec<String>,
    }

    impl Default for VolteFile {
        fn default() -> Self {
            let m = crate::rx::VoiceMedia::default();
            let def = diameter::dict::avp_by_name("Specific-Action");
            VolteFile {
                af_realm: "ims.test".into(),
                af_peers: 1,
                call_after: "50ms".into(),
                ue_port: 50_000,
                remote_port: 40_000,
                remote_address: m.remote_ip.to_string(),
                signalling_address: None,
                max_requested_bandwidth_ul: m.max_requested_bandwidth_ul,
                max_requested_bandwidth_dl: m.max_requested_bandwidth_dl,
                rr_bandwidth: m.rr_bandwidth,
                rs_bandwidth: m.rs_bandwidth,
                codec: m.codec,
                af_application_id: m.af_application_id,
                specific_actions: m
                    .specific_actions
                    .iter()
                    .filter_map(|v| def.and_then(|d| d.enum_name(*v as i64)))
                    .map(String::from)
                    .collect(),
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct PopulationFile {
        pub imsi_first: String,
        pub msisdn_first: String,
        pub count: u64,
        pub plan: Option<String>,
        #[serde(default)]
        pub services: Vec<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct GxFile {
        pub origin_realm: String,
        pub destination_realm: String,
        pub destination_host: Option<String>,
        pub apn: String,
        pub mcc_mnc: String,
    }

    impl Default for GxFile {
        fn default() -> Self {
            GxFile {
                origin_realm: "bench.test".into(),
                destination_realm: "pcrf.test".into(),
                destination_host: None,
                apn: "internet".into(),
                mcc_mnc: "00101".into(),
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct FlowFile {
        pub name: String,
        pub kind: Option<FlowKind>,
        #[serde(default = "one")]
        pub weight: u32,
        #[serde(default = "zero")]
        pub updates: Count,
        pub hold: Hold,
        #[serde(default)]
        pub monitoring_keys: Vec<String>,
        #[serde(default = "zero")]
        pub input_octets: Count,
        #[serde(default = "zero")]
        pub output_octets: Count,
    }

    fn one() -> u32 {
        1
    }
    fn zero() -> Count {
        Count::One(0)
    }

    /// `3` or `[2, 4]` (an inclusive range).
    #[derive(Deserialize)]
    #[serde(untagged, expecting = "a non-negative integer or a [min, max] pair")]
    pub enum Count {
        One(u64),
        Range(Vec<u64>),
    }

    impl Count {
        pub fn span(&self) -> Result<Span, String> {
            match self {
                Count::One(n) => Ok(Span { min: *n, max: *n }),
                Count::Range(v) => match v.as_slice() {
                    [min, max] if min <= max => Ok(Span {
                        min: *min,
                        max: *max,
                    }),
                    [_, _] => Err("the range's min is above its max".into()),
                    _ => Err("a range is written [min, max]".into()),
                },
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(tag = "dist", rename_all = "lowercase", deny_unknown_fields)]
    pub enum Hold {
        Fixed { value: String },
        Uniform { min: String, max: String },
        Exponential { mean: String, max: String },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const MINIMAL: &str = r#"
        name = "t"
        [population]
        imsi_first = "001010000000001"
        msisdn_first = "79000000001"
        count = 10
        [[flow]]
        name = "data"
        updates = [2, 4]
        hold = { dist = "uniform", min = "1s", max = "3s" }
        monitoring_keys = ["mk1"]
        input_octets = [100, 200]
        output_octets = 1000
    "#;

    fn err(text: &str) -> String {
        match Scenario::parse(text, "x.toml") {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_shipped_seed_scenario_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios/seed.toml");
        let s = Scenario::load(&path).expect("seed scenario");
        assert!(!s.flows.is_empty());
        assert!(s.mean_requests_per_session() >= 3.0);
        assert!(s
            .flows
            .iter()
            .any(|f| f.updates.max > 0 && f.input_octets.max > 0));
    }

    #[test]
    fn the_shipped_volte_scenario_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios/volte.toml");
        let s = Scenario::load(&path).expect("volte scenario");
        assert!(s.has_volte());
        let v = s.volte.expect("volte settings");
        assert_eq!(v.af_peers, 2);
        assert_eq!(v.media.specific_actions, [1, 2, 4, 6, 8, 9]);
        assert_eq!(v.media.max_requested_bandwidth_dl, 41_000);
        assert_eq!(s.apdex.call_setup, Duration::from_millis(20));
        assert_eq!(s.gx.apn, "ims");
    }

    #[test]
    fn volte_flows_are_checked() {
        let volte = MINIMAL.replace("name = \"data\"", "name = \"call\"\nkind = \"volte\"");
        // A call's Gx session sends no CCR-U.
        let e = err(&volte);
        assert!(e.contains("updates = 0"), "{e}");
        let volte = volte.replace("updates = [2, 4]", "updates = 0");
        let s = Scenario::parse(&volte, "x.toml").expect("valid with defaults");
        let v = s.volte.expect("defaults");
        assert_eq!(v.af_realm, "ims.test");
        assert_eq!(v.call_after, Duration::from_millis(50));
        assert_eq!(v.media.specific_actions.len(), 6);
        let e = err(&format!(
            "{volte}\n[volte]\nspecific_actions = [\"RING_TWICE\"]\n"
        ));
        assert!(
            e.contains("volte.specific_actions") && e.contains("RING_TWICE"),
            "{e}"
        );
        let e = err(&format!("{volte}\n[volte]\nremote_address = \"10.0.0\"\n"));
        assert!(e.contains("volte.remote_address"), "{e}");
        let e = err(&format!("{volte}\n[volte]\naf_peers = 0\n"));
        assert!(e.contains("volte.af_peers"), "{e}");
        // A [volte] table with no call to use it is a mistake.
        let e = err(&format!("{MINIMAL}\n[volte]\naf_peers = 1\n"));
        assert!(e.contains("volte"), "{e}");
        let e = err(&format!("{MINIMAL}\n[apdex]\nCALL-SETUP = \"0ms\"\n"));
        assert!(e.contains("apdex.CALL-SETUP"), "{e}");
    }

    #[test]
    fn the_shipped_cluster_scenario_kills_a_node() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios/cluster.toml");
        let s = Scenario::load(&path).expect("cluster scenario");
        let k = s.node_kill.expect("[cluster]");
        assert_eq!(k.at, Duration::from_secs(20));
        assert!(k.command.contains("kill -9"), "{}", k.command);
        assert_eq!(s.gx.destination_realm, "pcrf.example.net");
        assert_eq!(s.gx.origin_realm, "pgw.example.net");
    }

    #[test]
    fn cluster_section_is_checked() {
        assert_eq!(
            Scenario::parse(MINIMAL, "x.toml").expect("valid").node_kill,
            None
        );
        let s = Scenario::parse(
            &format!("{MINIMAL}\n[cluster]\nkill_at = \"5s\"\nkill_command = \"true\"\n"),
            "x.toml",
        )
        .expect("valid");
        assert_eq!(
            s.node_kill,
            Some(NodeKill {
                at: Duration::from_secs(5),
                command: "true".into()
            })
        );
        let e = err(&format!(
            "{MINIMAL}\n[cluster]\nkill_at = \"soon\"\nkill_command = \"true\"\n"
        ));
        assert!(e.contains("cluster.kill_at"), "{e}");
        let e = err(&format!(
            "{MINIMAL}\n[cluster]\nkill_at = \"1s\"\nkill_command = \" \"\n"
        ));
        assert!(e.contains("cluster.kill_command"), "{e}");
        let e = err(&format!("{MINIMAL}\n[cluster]\nkill_at = \"1s\"\n"));
        assert!(e.contains("kill_command"), "{e}");
    }

    #[test]
    fn minimal_scenario_with_defaults() {
        let s = Scenario::parse(MINIMAL, "x.toml").expect("valid");
        assert_eq!(s.arrivals, ArrivalProcess::Uniform);
        assert_eq!(s.timeout, Duration::from_secs(2));
        assert_eq!(s.apdex.ccr_u, Duration::from_millis(5));
        assert_eq!(s.gx.apn, "internet");
        let f = &s.flows[0];
        assert_eq!(f.updates, Span { min: 2, max: 4 });
        assert_eq!(
            f.output_octets,
            Span {
                min: 1000,
                max: 1000
            }
        );
        assert_eq!(s.mean_requests_per_session(), 5.0);
        assert_eq!(s.max_hold(), Duration::from_secs(3));
    }

    #[test]
    fn errors_name_the_field() {
        let e = err(&MINIMAL.replace("updates = [2, 4]", "updates = [4, 2]"));
        assert!(
            e.contains("flow[0] (data).updates") && e.contains("min is above"),
            "{e}"
        );
        let e = err(&MINIMAL.replace("\"3s\"", "\"3\""));
        assert!(e.contains("hold.max") && e.contains("no unit"), "{e}");
        let e = err(&MINIMAL.replace("count = 10", "count = 10\ncolour = 1"));
        assert!(e.contains("colour"), "{e}");
        let e = err(&MINIMAL.replace("dist = \"uniform\"", "dist = \"gaussian\""));
        assert!(e.contains("gaussian"), "{e}");
        let e = err(&format!("{MINIMAL}\n[apdex]\nCCR-X = \"5ms\"\n"));
        assert!(e.contains("apdex.CCR-X"), "{e}");
        let e = err(&MINIMAL.replace("001010000000001", "0010"));
        assert!(e.contains("population"), "{e}");
        let e = err(&MINIMAL.replace("updates = [2, 4]", "updates = \"many\""));
        assert!(e.contains("[min, max]"), "{e}");
        let e = err("name = \"t\"\n[population]\nimsi_first=\"001010000000001\"\nmsisdn_first=\"7900000\"\ncount=1\n");
        assert!(e.contains("at least one [[flow]]"), "{e}");
    }

    #[test]
    fn holds_and_flow_picks_follow_their_distributions() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let h = Hold::Exponential {
            mean: Duration::from_secs(2),
            max: Duration::from_secs(10),
        };
        let n = 20_000;
        let mean: f64 = (0..n)
            .map(|_| h.sample(&mut rng).as_secs_f64())
            .sum::<f64>()
            / n as f64;
        // Truncation at 5x the mean removes about 0.7% of the mass.
        assert!((mean - 2.0).abs() < 0.1, "{mean}");
        let u = Hold::Uniform {
            min: Duration::from_secs(1),
            max: Duration::from_secs(3),
        };
        assert!((0..1000).all(|_| {
            let d = u.sample(&mut rng);
            d >= Duration::from_secs(1) && d <= Duration::from_secs(3)
        }));

        let text = format!(
            "{MINIMAL}\n[[flow]]\nname = \"short\"\nweight = 3\nupdates = 0\nhold = {{ dist = \"fixed\", value = \"100ms\" }}\n"
        );
        let s = Scenario::parse(&text, "x.toml").expect("valid");
        let picks = (0..40_000).filter(|_| s.pick_flow(&mut rng) == 1).count();
        assert!((picks as f64 / 40_000.0 - 0.75).abs() < 0.02, "{picks}");
        // (1 x 5 + 3 x 2) / 4
        assert_eq!(s.mean_requests_per_session(), 2.75);
    }
}
