//! `pcrf client n7`, the binary, against a real `pcrf serve` with `[sbi]`:
//! it creates an SM policy, its usage reports reach the subscriber's
//! accumulators, the PCF's notification after a plan change reaches its
//! own h2c notification server and is printed, and it deletes the SM
//! policy after its hold time, at once on SIGINT, and after the PCF's
//! TerminationNotification; a refused request or an unreachable PCF is a
//! failed exit.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, Pcrf};

const IMSI: &str = "001010000000001";
const NOTIFY: &str = "<<< notification from the PCF: POST /nsmf-callback/sm-policies/1/update";

fn start() -> (Pcrf, u16) {
    let sbi = free_port();
    let p = Pcrf::start_with_usage(&format!("[sbi]\nlisten = \"127.0.0.1:{sbi}\"\n"));
    p.provision(IMSI, r#"{"plan":"basic","services":["vip"]}"#);
    (p, sbi)
}

/// Starts the client with stdout and stderr in a file of the server's
/// directory; returns the child and the file.
fn spawn_client(p: &Pcrf, sbi: u16, tag: &str, args: &[&str]) -> (Child, PathBuf) {
    let path = p.dir.join(format!("client-n7-{tag}.out"));
    let out = std::fs::File::create(&path).expect("client output");
    let child = Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .args(["client", "n7", "--server", &format!("127.0.0.1:{sbi}")])
        .args(["--supi", &format!("imsi-{IMSI}")])
        .args(args)
        .stdout(Stdio::from(out.try_clone().expect("out")))
        .stderr(Stdio::from(out))
        .spawn()
        .expect("start the client");
    (child, path)
}

fn output(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until the client's output contains `needle`.
fn wait_output(child: &mut Child, path: &Path, needle: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !output(path).contains(needle) {
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "the client exited ({st}) before {needle:?}:\n{}",
                output(path)
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("no {needle:?} within {within:?}:\n{}", output(path));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_exit(child: &mut Child, within: Duration, path: &Path) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "the client did not exit within {within:?}:\n{}",
                output(path)
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

/// What follows `marker` in `out`, up to the next `>>>` line.
fn section_after<'a>(out: &'a str, marker: &str) -> &'a str {
    let Some(at) = out.find(marker) else {
        panic!("no {marker:?} in:\n{out}");
    };
    let rest = &out[at + marker.len()..];
    rest.find("\n>>>").map_or(rest, |end| &rest[..end])
}

#[test]
fn creates_reports_usage_prints_a_notification_and_deletes() {
    let (p, sbi) = start();
    let (mut child, path) = spawn_client(
        &p,
        sbi,
        "hold",
        &["--updates", "1", "--report", "total=10MB", "--hold", "3"],
    );
    wait_output(
        &mut child,
        &path,
        "holding for 3 s",
        Duration::from_secs(20),
    );
    assert_eq!(open_sessions(&p).len(), 1, "{}", output(&path));
    // A new plan while the client holds: the node pushes the change.
    p.provision(IMSI, r#"{"plan":"plus"}"#);
    let st = wait_exit(&mut child, Duration::from_secs(20), &path);
    let out = output(&path);
    assert!(st.success(), "{st}:\n{out}\n{}", p.log());

    assert!(out.contains("<<< Create: 201 Created"), "{out}");
    assert!(
        section_after(&out, "<<< Create: 201 Created").contains("\"sessRules\""),
        "{out}"
    );
    assert!(out.contains("<<< Update 1/1: 200 OK"), "{out}");
    let note = section_after(&out, NOTIFY);
    assert!(note.contains("\"authSessAmbr\""), "{out}");
    assert!(note.contains("\"resourceUri\""), "{out}");
    assert!(out.contains(">>> answered 204"), "{out}");
    assert!(out.contains("<<< Delete: 204 No Content"), "{out}");
    assert!(open_sessions(&p).is_empty(), "{out}");

    let (st, usage) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(st, 200, "{usage}");
    assert_eq!(
        usage["accumulators"]["monthly"]["used"], 10_000_000u64,
        "{usage}\n{out}"
    );
}

#[test]
fn sigint_and_termination_delete_at_once_and_failures_exit_non_zero() {
    let (p, sbi) = start();
    let (mut child, path) = spawn_client(&p, sbi, "int", &["--hold", "60"]);
    wait_output(
        &mut child,
        &path,
        "holding for 60 s",
        Duration::from_secs(20),
    );
    let begun = Instant::now();
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    let st = wait_exit(&mut child, Duration::from_secs(15), &path);
    let out = output(&path);
    assert!(st.success(), "{st}:\n{out}");
    assert!(begun.elapsed() < Duration::from_secs(15), "{out}");
    assert!(out.contains("interrupted"), "{out}");
    assert!(out.contains("<<< Delete: 204 No Content"), "{out}");
    assert!(open_sessions(&p).is_empty(), "{out}");

    // The PCF ends it (an operator's DELETE): the client prints the
    // TerminationNotification, sends the Delete and exits.
    let (mut child, path) = spawn_client(&p, sbi, "terminate", &["--hold", "60"]);
    wait_output(
        &mut child,
        &path,
        "holding for 60 s",
        Duration::from_secs(20),
    );
    let out = output(&path);
    let id = section_after(&out, "SM policy ")
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    let (st, body) = p.http("DELETE", &format!("/v1/sessions/{id}"), None);
    assert_eq!(st, 200, "{body}\n{out}");
    let st = wait_exit(&mut child, Duration::from_secs(15), &path);
    let out = output(&path);
    assert!(st.success(), "{st}:\n{out}");
    assert!(
        out.contains("<<< notification from the PCF: POST /nsmf-callback/sm-policies/1/terminate"),
        "{out}"
    );
    assert!(out.contains("the PCF terminated the SM policy"), "{out}");
    assert!(out.contains("<<< Delete: 204 No Content"), "{out}");
    assert!(open_sessions(&p).is_empty(), "{out}");

    // A Create the PCF refuses (an empty DNN): the exit status says so.
    let (mut child, path) = spawn_client(&p, sbi, "refused", &["--dnn", ""]);
    let st = wait_exit(&mut child, Duration::from_secs(20), &path);
    let out = output(&path);
    assert!(!st.success(), "{out}");
    assert!(out.contains("<<< Create: 400 Bad Request"), "{out}");
    assert!(out.contains("error: Create failed: HTTP 400"), "{out}");

    // No PCF there.
    let closed = free_port();
    let (mut child, path) = spawn_client(&p, closed, "closed", &[]);
    let st = wait_exit(&mut child, Duration::from_secs(20), &path);
    let out = output(&path);
    assert!(!st.success(), "{out}");
    assert!(out.contains("cannot reach the PCF at"), "{out}");

    // --report needs --updates.
    let (mut child, path) = spawn_client(&p, sbi, "noupdates", &["--report", "total=1MB"]);
    let st = wait_exit(&mut child, Duration::from_secs(20), &path);
    assert_eq!(st.code(), Some(2), "{}", output(&path));
}
