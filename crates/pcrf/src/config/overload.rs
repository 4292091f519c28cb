//! `[overload]`: when the node sheds load. Its own file because the
//! queueing-delay test (see `admission.rs`) has its own two settings, apart
//! from the listener's limits in `[diameter]`.

use serde::Deserialize;
use std::time::Duration;

/// `[overload]`: sustained overload is a queueing delay (from reading a
/// request to starting on it) whose minimum stays above `target_delay_ms`
/// for a whole `interval_ms`; only then are requests answered 3004.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverloadConfig {
    /// The queueing delay the node aims to stay under, ms. While overloaded
    /// it sheds CCR-I that waited longer, CCR-U/T that waited twice as long.
    #[serde(default = "default_target")]
    pub target_delay_ms: u64,
    /// How long the delay must stay above the target before shedding
    /// starts, ms: bursts that drain within it are queued, not shed.
    #[serde(default = "default_interval")]
    pub interval_ms: u64,
}

fn default_target() -> u64 {
    20
}
fn default_interval() -> u64 {
    1_000
}

impl Default for OverloadConfig {
    fn default() -> Self {
        OverloadConfig {
            target_delay_ms: default_target(),
            interval_ms: default_interval(),
        }
    }
}

impl OverloadConfig {
    pub fn target(&self) -> Duration {
        Duration::from_millis(self.target_delay_ms)
    }
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// Problems, as (key, message).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if !(1..=10_000).contains(&self.target_delay_ms) {
            p.push((
                "[overload].target_delay_ms",
                "must be between 1 and 10000".into(),
            ));
        }
        if !(10..=60_000).contains(&self.interval_ms) {
            p.push((
                "[overload].interval_ms",
                "must be between 10 and 60000".into(),
            ));
        }
        p
    }
}
