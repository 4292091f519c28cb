//! `pcrf client gx`, the binary, against a real `pcrf serve`: its usage
//! reports reach the subscriber's accumulators, it ends its session with a
//! CCR-T after its hold time and on SIGINT (or keeps it when told to), and
//! it answers the server's DPR at shutdown and exits.

use crate::support;

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use support::Pcrf;

const IMSI: &str = "001010000000077";

/// The client as the allowed test PCEF, its output in `out` (or piped).
fn client(p: &Pcrf, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pcrf"));
    c.args(["client", "gx", "--server", &p.diameter.to_string()])
        .args([
            "--origin-host",
            "pgw.test.local",
            "--origin-realm",
            "test.local",
        ])
        .args(["--imsi", IMSI])
        .args(args);
    c
}

/// Starts the client with stdout and stderr in a file of the server's
/// directory; returns the child and the file.
fn spawn_client(p: &Pcrf, args: &[&str]) -> (Child, PathBuf) {
    let path = p
        .dir
        .join(format!("client-{}.out", args.join("_").replace('/', "")));
    let out = std::fs::File::create(&path).expect("client output");
    let child = client(p, args)
        .stdout(Stdio::from(out.try_clone().expect("out")))
        .stderr(Stdio::from(out))
        .spawn()
        .expect("start the client");
    (child, path)
}

fn wait_exit(child: &mut Child, within: Duration, out: &PathBuf) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "the client did not exit within {within:?}:\n{}",
                std::fs::read_to_string(out).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The subscriber's open sessions, as the API lists them.
fn open_sessions(p: &Pcrf) -> Vec<serde_json::Value> {
    let (st, body) = p.http("GET", &format!("/v1/subscribers/{IMSI}/sessions"), None);
    assert_eq!(st, 200, "{body}");
    body["sessions"].as_array().cloned().unwrap_or_default()
}

fn wait_for_open_session(p: &Pcrf, out: &PathBuf) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if !open_sessions(p).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "no session opened:\n{}",
        std::fs::read_to_string(out).unwrap_or_default()
    );
}

#[test]
fn usage_reports_reach_the_accumulators_and_the_session_ends() {
    let p = Pcrf::start_with_usage("");
    p.provision(IMSI, r#"{"plan":"basic","services":["vip"]}"#);
    let out = client(
        &p,
        &[
            "--updates",
            "3",
            "--report",
            "total=100MB",
            "--report",
            "vip=50 MB",
        ],
    )
    .output()
    .expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Both keys were granted in the CCA (the session-level "total", the VIP
    // rule's "vip"), so each report carried its grant's level.
    assert!(!stderr.contains("not granted"), "{stderr}");

    let (st, usage) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(st, 200, "{usage}");
    let acc = &usage["accumulators"];
    assert_eq!(acc["monthly"]["used"], 450_000_000u64, "{usage}");
    assert_eq!(acc["vip-video"]["used"], 150_000_000u64, "{usage}");
    assert_eq!(
        usage["last_reports"]["total"]["used"],
        serde_json::json!({"total": 100_000_000u64, "input": 10_000_000u64, "output": 90_000_000u64}),
        "{usage}"
    );
    assert_eq!(usage["unknown_key_reports"], 0, "{usage}");
    assert!(
        p.metrics()
            .contains("pcrf_requests_total{command=\"CCR-U\",result_code=\"2001\"} 3"),
        "{}",
        p.metrics()
    );
    // Without --hold or --keep-session the session ends at once (CCR-T).
    assert!(open_sessions(&p).is_empty(), "{stdout}");
    assert!(stdout.contains("TERMINATION_REQUEST"), "{stdout}");
}

#[test]
fn keep_session_leaves_it_open_and_reports_need_updates() {
    let p = Pcrf::start("");
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let out = client(&p, &["--keep-session"])
        .output()
        .expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("leaving the session"), "{stdout}");
    assert!(!stdout.contains("TERMINATION_REQUEST"), "{stdout}");
    assert_eq!(open_sessions(&p).len(), 1);

    let out = client(&p, &["--report", "total=1MB"])
        .output()
        .expect("run the client");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--updates"));
    let out = client(&p, &["--updates", "1", "--report", "total=lots"])
        .output()
        .expect("run the client");
    assert_eq!(out.status.code(), Some(2), "clap refuses a bad size");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a volume"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sigint_ends_the_session_with_a_ccr_t() {
    let p = Pcrf::start("");
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let (mut child, out) = spawn_client(&p, &["--hold", "600"]);
    wait_for_open_session(&p, &out);
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    let status = wait_exit(&mut child, Duration::from_secs(15), &out);
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(status.success(), "{status}\n{text}");
    assert!(text.contains("interrupted"), "{text}");
    assert!(text.contains("TERMINATION_REQUEST"), "{text}");
    assert!(open_sessions(&p).is_empty(), "{text}");
    assert!(
        p.metrics()
            .contains("pcrf_requests_total{command=\"CCR-T\",result_code=\"2001\"} 1"),
        "{}",
        p.metrics()
    );
}

#[test]
fn the_client_answers_the_servers_dpr_and_exits() {
    let mut p = Pcrf::start("");
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let (mut child, out) = spawn_client(&p, &["--hold", "600"]);
    wait_for_open_session(&p, &out);
    let server = p.terminate();
    assert!(server.success(), "{server}\n{}", p.log());
    let status = wait_exit(&mut child, Duration::from_secs(15), &out);
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(status.success(), "{status}\n{text}");
    assert!(
        text.contains("DPR from the PCRF (Disconnect-Cause REBOOTING), answered with DPA"),
        "{text}"
    );
    // The server had its DPA: the close was orderly, not a lost connection.
    assert!(
        p.log().contains("reason=LocalDisconnect(Rebooting)"),
        "{}",
        p.log()
    );
}
