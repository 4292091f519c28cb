//! The NRF client against an independent NRF: tests/n7/nrf_emulator.py,
//! served by Python's hypercorn over h2c. The client registers as a PCF
//! with its service and apiPrefix, sends heartbeats at the interval the NRF
//! answers (1 s), registers again when a heartbeat is answered 404, and
//! deregisters on shutdown. Real sockets both ways; nothing is faked.

use crate::support;

use pcrf::sbi::nrf::{self, NrfConfig};
use std::time::Duration;

fn start_emulator(port: u16) -> support::PythonPeer {
    support::PythonPeer::script("nrf_emulator.py", port)
}

fn methods(nrf: &support::PythonPeer) -> Vec<String> {
    nrf.requests()
        .iter()
        .filter_map(|r| r["method"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn registers_beats_registers_again_after_a_404_and_deregisters() {
    let port = support::free_port();
    let nrf_emulator = start_emulator(port);
    let id = "6f1f3c2e-8d0b-4a51-9c1e-2b7f6d9a0e11";
    let config = NrfConfig {
        uri: format!("http://127.0.0.1:{port}"),
        nf_instance_id: id.into(),
        api_prefix: "http://127.0.0.1:7777".into(),
        heartbeat_secs: 10,
        retry_initial_ms: 100,
        retry_max_ms: 1000,
        timeout_ms: 2000,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let client = rt.spawn(nrf::run(config, async {
        let _ = stop_rx.await;
    }));

    // PUT, PATCH, PATCH (404), PUT again, then a heartbeat on the new
    // registration.
    let (seen, got) = support::poll_for(Duration::from_secs(30), || {
        let m = methods(&nrf_emulator);
        let puts = m.iter().filter(|x| *x == "PUT").count();
        let last_put = m.iter().rposition(|x| x == "PUT");
        let beat_after = last_put.is_some_and(|i| m[i + 1..].iter().any(|x| x == "PATCH"));
        (puts >= 2 && beat_after, m)
    });
    assert!(seen, "requests the NRF saw: {got:?}");
    assert_eq!(&got[..4], ["PUT", "PATCH", "PATCH", "PUT"], "{got:?}");

    let _ = stop_tx.send(());
    rt.block_on(client).expect("the client ends");
    let requests = nrf_emulator.requests();
    let last = requests.last().expect("requests");
    assert_eq!(last["method"], "DELETE", "{requests:?}");
    assert_eq!(last["path"], format!("/nnrf-nfm/v1/nf-instances/{id}"));

    for r in &requests {
        assert_eq!(r["http_version"], "2", "HTTP/2 with prior knowledge: {r}");
        assert_eq!(r["path"], format!("/nnrf-nfm/v1/nf-instances/{id}"));
    }
    let put = &requests[0];
    assert_eq!(put["content_type"], "application/json");
    let profile = &put["body"];
    assert_eq!(profile["nfInstanceId"], id);
    assert_eq!(profile["nfType"], "PCF");
    assert_eq!(profile["nfStatus"], "REGISTERED");
    assert_eq!(
        profile["nfServices"][0]["serviceName"],
        "npcf-smpolicycontrol"
    );
    assert_eq!(
        profile["nfServices"][0]["apiPrefix"],
        "http://127.0.0.1:7777"
    );
    let patch = &requests[1];
    assert_eq!(patch["content_type"], "application/json-patch+json");
    assert_eq!(
        patch["body"],
        serde_json::json!([{"op": "replace", "path": "/nfStatus", "value": "REGISTERED"}])
    );
}

#[test]
fn registers_again_with_an_nrf_that_was_lost() {
    let port = support::free_port();
    let first = start_emulator(port);
    let config = NrfConfig {
        uri: format!("http://127.0.0.1:{port}"),
        nf_instance_id: "0b7e2a54-1c3d-4e5f-8a9b-0c1d2e3f4a5b".into(),
        api_prefix: "http://127.0.0.1:7777".into(),
        heartbeat_secs: 10,
        retry_initial_ms: 100,
        retry_max_ms: 500,
        // Generous: on a loaded machine the emulator may be slow to answer
        // the deregistration, which is sent once.
        timeout_ms: 5000,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let client = rt.spawn(nrf::run(config, async {
        let _ = stop_rx.await;
    }));
    let (registered, got) = support::poll_for(Duration::from_secs(30), || {
        let m = methods(&first);
        (m.iter().any(|x| x == "PATCH"), m)
    });
    assert!(registered, "{got:?}");
    drop(first);

    // A new NRF on the same address, knowing nothing: the client's next
    // heartbeat fails (connection refused, or 404), and it registers again.
    let second = start_emulator(port);
    let (again, got) = support::poll_for(Duration::from_secs(30), || {
        let m = methods(&second);
        (m.iter().any(|x| x == "PUT"), m)
    });
    assert!(again, "requests the new NRF saw: {got:?}");
    let _ = stop_tx.send(());
    rt.block_on(client).expect("the client ends");
    // The emulator logs a request once it has answered it.
    let (deleted, m) = support::poll_for(Duration::from_secs(10), || {
        let m = methods(&second);
        (m.last().map(String::as_str) == Some("DELETE"), m)
    });
    assert!(deleted, "the last request is the deregistration: {m:?}");
}

/// `[sbi.bsf]` without a uri: the node finds the BSF through the NRF
/// (Nnrf_NFDiscovery), skipping a suspended instance, registers each PDU
/// session's binding there and removes it when the session ends.
#[test]
fn the_bsf_is_found_through_the_nrf() {
    let port = support::free_port();
    let nrf_emulator = start_emulator(port);
    let sbi = support::free_port();
    let p = support::Pcrf::start_with_usage(&format!(
        "[sbi]\nlisten = \"127.0.0.1:{sbi}\"\n\
         [sbi.nrf]\nuri = \"http://127.0.0.1:{port}\"\n\
         nf_instance_id = \"6f1f3c2e-8d0b-4a51-9c1e-2b7f6d9a0e12\"\n\
         api_prefix = \"http://127.0.0.1:{sbi}\"\n\
         [sbi.bsf]\n"
    ));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    let callback = support::Callback::start();
    let smf = support::Smf::new(sbi);
    let (st, location, body) = smf.call(
        true,
        "",
        Some(&support::create_body(
            &callback,
            "/nsmf-callback/v1/sm-policy-notify/d",
        )),
    );
    assert_eq!(st, 201, "{body}");
    let id = location.rsplit('/').next().expect("id").to_owned();
    let seen = |method: &str, path: &str| {
        nrf_emulator.requests().iter().any(|r| {
            r["method"] == method && r["path"].as_str().is_some_and(|p| p.starts_with(path))
        })
    };
    let bindings = "/bsf/nbsf-management/v1/pcfBindings";
    assert!(
        support::poll_until(Duration::from_secs(10), || seen("POST", bindings)),
        "{:?}\n{}",
        nrf_emulator.requests(),
        p.log()
    );
    assert!(seen("GET", "/nnrf-disc/v1/nf-instances"));
    let (st, _, _) = smf.call(true, &format!("/{id}/delete"), None);
    assert_eq!(st, 204);
    assert!(
        support::poll_until(Duration::from_secs(10), || seen(
            "DELETE",
            &format!("{bindings}/")
        )),
        "{:?}",
        nrf_emulator.requests()
    );
}
