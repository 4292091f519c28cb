//! One emulated session's fixed identity (Session-Id, subscriber, charging
//! id) and the usage it reports, shared by the open- and closed-loop runs.

use crate::gx::{self, Gateway, Subscriber, Usage};
use crate::population::Population;
use crate::scenario::Flow;
use rand::Rng;
use std::sync::Arc;

/// What stays the same across the requests of a session.
#[derive(Clone, Debug)]
pub struct SessionIdentity {
    pub session_id: String,
    pub subscriber: Subscriber,
    pub charging_id: u32,
}

/// The subscriber `i` of `pop` with the device and cell it attaches from.
pub fn subscriber(pop: &Population, i: u64) -> Subscriber {
    Subscriber {
        imsi: pop.imsi(i),
        msisdn: pop.msisdn(i),
        ue_ip: pop.ue_ip(i),
        // TAC 35349006 (a common handset), serial from the index, SV 01.
        imeisv: format!("35349006{:06}01", i % 1_000_000),
        cell_id: (i as u32).wrapping_mul(2_654_435_761) & 0x0fff_ffff,
        tac: (i % 4096) as u16 + 1,
    }
}

impl SessionIdentity {
    /// Session `id` of a run started at `run_tag` (unix seconds), on `gateway`.
    pub fn new(gateway: &Gateway, run_tag: u32, id: u64, pop: &Population, sub: u64) -> Self {
        SessionIdentity {
            session_id: gx::session_id(&gateway.origin_host, run_tag, id as u32),
            subscriber: subscriber(pop, sub),
            charging_id: (id as u32) ^ run_tag.rotate_left(16),
        }
    }
}

/// The usage a session of `flow` reports in one CCR-U or CCR-T.
pub fn usage<R: Rng>(flow: &Flow, rng: &mut R) -> Vec<Usage> {
    flow.monitoring_keys
        .iter()
        .map(|k| Usage {
            monitoring_key: k.clone(),
            input_octets: flow.input_octets.sample(rng),
            output_octets: flow.output_octets.sample(rng),
        })
        .collect()
}

/// Which request of a session to build.
#[derive(Clone, Debug)]
pub enum RequestKind {
    Initial,
    Update(Vec<Usage>),
    Terminate(Vec<Usage>),
}

/// Everything a request task needs (cheap to move: Arcs and a small Vec).
#[derive(Clone, Debug)]
pub struct RequestSpec {
    pub gateway: Arc<Gateway>,
    pub identity: Arc<SessionIdentity>,
    pub kind: RequestKind,
    pub number: u32,
    pub destination_host: Option<Arc<str>>,
}

impl RequestSpec {
    /// Adds the request's AVPs to a builder.
    pub fn build(&self, b: &mut diameter::MessageBuilder<'_>) {
        let r = gx::Request {
            session_id: &self.identity.session_id,
            gateway: &self.gateway,
            destination_host: self.destination_host.as_deref(),
            subscriber: &self.identity.subscriber,
            number: self.number,
            charging_id: self.identity.charging_id,
        };
        match &self.kind {
            RequestKind::Initial => gx::ccr_initial(b, &r),
            RequestKind::Update(u) => gx::ccr_update(b, &r, u),
            RequestKind::Terminate(u) => gx::ccr_terminate(
                b,
                &r,
                u,
                diameter::dict::enums::TERMINATION_CAUSE::DIAMETER_LOGOUT,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Hold, Span};
    use rand::SeedableRng;
    use std::time::Duration;

    #[test]
    fn identities_are_distinct_and_well_formed() {
        let pop = Population::new("001010000000001", "79000000001", 100).expect("pop");
        let s = subscriber(&pop, 42);
        assert_eq!(s.imsi, "001010000000043");
        assert_eq!(s.imeisv.len(), 16);
        assert!(s.cell_id <= 0x0fff_ffff);
        assert_ne!(subscriber(&pop, 1).cell_id, subscriber(&pop, 2).cell_id);
    }

    #[test]
    fn usage_per_key_within_spans() {
        let flow = Flow {
            name: "f".into(),
            kind: crate::scenario::FlowKind::Data,
            weight: 1,
            updates: Span { min: 1, max: 1 },
            hold: Hold::Fixed(Duration::from_secs(1)),
            monitoring_keys: vec!["a".into(), "b".into()],
            input_octets: Span { min: 10, max: 20 },
            output_octets: Span { min: 5, max: 5 },
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let u = usage(&flow, &mut rng);
        assert_eq!(u.len(), 2);
        assert_eq!(u[1].monitoring_key, "b");
        assert!((10..=20).contains(&u[0].input_octets));
        assert_eq!(u[0].output_octets, 5);
    }
}
