//! For the SBI tests only: a minimal implementation of the N7 seam
//! (`SmPolicyService`) and a helper that starts the real SBI listener on a
//! free loopback port with it. The policy core, which implements the seam
//! for real, is not what these tests are about: this one keeps each
//! created policy in a map and answers a decision made by the real mapping
//! (`n7::decision_map::whole`), so the listener, its routes, decoder and
//! answers are exercised end to end.

use pcrf::n7::decision_map;
use pcrf::n7::model::{
    SmPolicyContextData, SmPolicyControl, SmPolicyDecision, SmPolicyDeleteData,
    SmPolicyUpdateContextData,
};
use pcrf::n7::service::{Created, OpFuture, SmPolicyService};
use pcrf::pcc::UsageInstructions;
use pcrf::policy::decision::{Ambr, Arp, BearerQos, Decision, RuleDefinition, RuleQos};
use pcrf::sbi::problem::{cause, ProblemDetails};
use pcrf::sbi::routes::Routes;
use pcrf::sbi::stats::SbiStats;
use pcrf::sbi::SbiConfig;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The seam for tests (see the file's comment).
#[derive(Default)]
pub struct TestSmPolicies {
    next: AtomicU64,
    map: Mutex<HashMap<String, (SmPolicyContextData, SmPolicyDecision)>>,
}

/// The decision every created policy gets: AMBR, default QoS, a
/// predefined rule and a dynamic one with its QoS and flows.
pub fn test_decision() -> SmPolicyDecision {
    let d = Decision {
        rules: vec!["internet".into()],
        definitions: vec![RuleDefinition {
            name: "vip-video".into(),
            flows: vec!["permit out 17 from 198.51.100.0/24 to assigned".into()],
            qos: Some(RuleQos {
                qci: 4,
                arp: Some(Arp {
                    priority: 5,
                    may_preempt: false,
                    preemptable: true,
                }),
                mbr_ul: Some(2_000_000),
                mbr_dl: Some(8_000_000),
                gbr_ul: Some(1_000_000),
                gbr_dl: Some(4_000_000),
            }),
            precedence: Some(100),
            ..RuleDefinition::default()
        }],
        apn_ambr: Some(Ambr {
            ul: 10_000_000,
            dl: 20_000_000,
        }),
        default_bearer_qos: Some(BearerQos {
            qci: 9,
            arp: Arp {
                priority: 8,
                may_preempt: false,
                preemptable: true,
            },
        }),
        ..Decision::default()
    };
    decision_map::whole(&d, &UsageInstructions::default(), 0)
}

fn not_found(id: &str) -> ProblemDetails {
    ProblemDetails::new(
        404,
        "Not Found",
        cause::CONTEXT_NOT_FOUND,
        format!("no SM policy {id}"),
    )
}

impl SmPolicyService for TestSmPolicies {
    fn create(&self, ctx: SmPolicyContextData) -> OpFuture<'_, Created> {
        Box::pin(async move {
            let id = self.next.fetch_add(1, Ordering::Relaxed).to_string();
            let d = test_decision();
            self.map
                .lock()
                .map_err(|_| not_found(&id))?
                .insert(id.clone(), (ctx, d.clone()));
            Ok(Created { id, decision: d })
        })
    }

    fn get(&self, id: &str) -> OpFuture<'_, SmPolicyControl> {
        let id = id.to_owned();
        Box::pin(async move {
            let map = self.map.lock().map_err(|_| not_found(&id))?;
            let (context, policy) = map.get(&id).cloned().ok_or_else(|| not_found(&id))?;
            Ok(SmPolicyControl { context, policy })
        })
    }

    fn update(
        &self,
        id: &str,
        _update: SmPolicyUpdateContextData,
        _digest: pcrf::n7::repeat::RequestDigest,
    ) -> OpFuture<'_, SmPolicyDecision> {
        let id = id.to_owned();
        Box::pin(async move {
            let map = self.map.lock().map_err(|_| not_found(&id))?;
            map.get(&id).ok_or_else(|| not_found(&id))?;
            Ok(SmPolicyDecision::default())
        })
    }

    fn delete(&self, id: &str, _delete: SmPolicyDeleteData) -> OpFuture<'_, ()> {
        let id = id.to_owned();
        Box::pin(async move {
            let mut map = self.map.lock().map_err(|_| not_found(&id))?;
            map.remove(&id).map(|_| ()).ok_or_else(|| not_found(&id))
        })
    }
}

/// Starts the SBI listener with [`TestSmPolicies`] on a free loopback
/// port, over TLS when `tls` is given; returns its address and counters.
pub fn start_sbi(
    rt: &tokio::runtime::Runtime,
    config: SbiConfig,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
) -> (SocketAddr, Arc<SbiStats>) {
    let stats = Arc::new(SbiStats::new());
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let routes = Routes {
        service: Arc::new(TestSmPolicies::default()),
        app_sessions: None,
        spending: None,
        stats: stats.clone(),
        max_body_bytes: config.max_body_bytes,
        decode_limits: config.decode_limits(),
        request_timeout: config.request_timeout(),
        scheme: if tls.is_some() { "https" } else { "http" },
        fallback_authority: addr.to_string(),
    };
    rt.spawn(async move {
        let _ =
            pcrf::sbi::server::serve(listener, routes, &config, tls, std::future::pending()).await;
    });
    (addr, stats)
}
