//! End to end: the real `pcrf-bench` binary runs short scenarios against
//! the real `pcrf-bench echo-server` on a free loopback port. Asserts that
//! every request got an answer and that the JSON reports are well-formed;
//! no timing is asserted (this machine is shared and noisy).

use pcrf_bench::report::Report;
use pcrf_bench::zero_loss_run::ZeroLossReport;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_pcrf-bench");

fn scenario() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios/seed-fast.toml")
}

/// The echo server on a free port, stopped with SIGTERM on drop.
struct Echo {
    child: Child,
    addr: String,
}

impl Echo {
    fn start() -> Echo {
        let mut child = Command::new(BIN)
            .args(["echo-server", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start echo-server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read listening line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Echo { child, addr }
    }

    /// SIGTERM, then the exit status and what it printed on stderr.
    fn stop(mut self) -> (bool, String) {
        // SAFETY: kill() on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let out = std::mem::replace(
            &mut self.child,
            Command::new("true").spawn().expect("placeholder"),
        )
        .wait_with_output()
        .expect("wait echo-server");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run pcrf-bench");
    assert!(
        out.status.success(),
        "pcrf-bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 report")
}

fn assert_all_answered(r: &Report) {
    assert_eq!(r.commands.len(), 3);
    let names: Vec<_> = r.commands.iter().map(|c| c.command.as_str()).collect();
    assert_eq!(names, ["CCR-I", "CCR-U", "CCR-T"]);
    let t = &r.total;
    assert!(t.sent > 0, "nothing sent");
    assert_eq!(t.answered, t.sent, "every request answered");
    assert_eq!(t.succeeded, t.sent, "every answer 2001");
    assert_eq!((t.timeouts, t.send_failures, t.skipped), (0, 0, 0));
    assert_eq!(t.results.get("2001"), Some(&t.sent));
    assert_eq!(r.outside_window.failed, 0, "warm-up and drain too");
    assert_eq!(r.sessions.failed, 0);
    assert_eq!(
        r.sessions.started, r.sessions.completed,
        "every session ended with CCR-T"
    );
    for c in &r.commands {
        assert_eq!(c.sent, c.answered, "{}", c.command);
        let l = c.latency.as_ref().expect("latency percentiles");
        assert!(l.p50_ms <= l.p90_ms && l.p90_ms <= l.p99_ms && l.p99_ms <= l.max_ms);
        let score = c.apdex.score.expect("apdex score");
        assert!((0.0..=1.0).contains(&score));
        assert_eq!(
            c.apdex.satisfied + c.apdex.tolerating + c.apdex.frustrated,
            c.sent
        );
    }
    assert!(r.achieved_tps > 0.0);
}

#[test]
fn open_loop_against_echo_server() {
    let echo = Echo::start();
    let pid = echo.child.id().to_string();
    let dir = std::env::temp_dir().join(format!("pcrf-bench-e2e-{}", std::process::id()));
    let out_file = dir.join("open.json");
    let stdout = bench(&[
        "run",
        "--scenario",
        scenario().to_str().expect("path"),
        "--target",
        &echo.addr,
        "--peers",
        "2",
        "--rate",
        "200",
        "--duration",
        "2s",
        "--warmup",
        "500ms",
        "--server-pid",
        &pid,
        "--json",
        "--out",
        out_file.to_str().expect("path"),
    ]);
    let r: Report = serde_json::from_str(&stdout).expect("well-formed JSON report");
    assert_eq!(r.mode, "open-loop");
    assert_eq!(r.offered_tps, Some(200.0));
    assert_eq!(r.peers, 2);
    assert_all_answered(&r);
    let lag = r.send_lag.as_ref().expect("send lag");
    assert!(lag.count > 0);
    let cpu = r.server_cpu.as_ref().expect("server CPU accounted");
    assert_eq!(cpu.pids, vec![echo.child.id()]);
    assert!(cpu.cpu_us_per_txn.is_some());
    assert!(r.generator_cpu.is_some());
    let from_file: Report =
        serde_json::from_str(&std::fs::read_to_string(&out_file).expect("--out written"))
            .expect("file is the same JSON");
    assert_eq!(from_file.total.sent, r.total.sent);
    let _ = std::fs::remove_dir_all(&dir);
    let (ok, stderr) = echo.stop();
    assert!(ok, "echo-server exits cleanly on SIGTERM: {stderr}");
    assert!(stderr.contains("answered"), "{stderr}");
}

#[test]
fn closed_loop_and_zero_loss_against_echo_server() {
    let echo = Echo::start();
    let stdout = bench(&[
        "run",
        "--scenario",
        scenario().to_str().expect("path"),
        "--target",
        &echo.addr,
        "--max",
        "--concurrency",
        "8",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
        "--json",
    ]);
    let r: Report = serde_json::from_str(&stdout).expect("well-formed JSON report");
    assert_eq!(r.mode, "closed-loop");
    assert_eq!(r.concurrency, Some(8));
    assert_all_answered(&r);

    // Two trials at rates an echo server holds on any machine: both pass.
    // Two --server-pid (a cluster's nodes): both processes are accounted.
    let other = Echo::start();
    let (pid, other_pid) = (echo.child.id().to_string(), other.child.id().to_string());
    let stdout = bench(&[
        "zero-loss",
        "--server-pid",
        &pid,
        "--server-pid",
        &other_pid,
        "--scenario",
        scenario().to_str().expect("path"),
        "--target",
        &echo.addr,
        "--min",
        "100",
        "--max",
        "150",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
        "--p99-bound",
        "2s",
        "--pause",
        "0s",
        "--json",
    ]);
    let z: ZeroLossReport = serde_json::from_str(&stdout).expect("well-formed JSON report");
    assert!(!z.trials.is_empty());
    assert_eq!(z.trials.len(), z.result.trials.len());
    for t in &z.trials {
        assert_eq!(t.total.answered, t.total.sent);
        let cpu = t.server_cpu.as_ref().expect("server CPU accounted");
        assert_eq!(cpu.pids, vec![echo.child.id(), other.child.id()]);
    }
}

#[test]
fn unreachable_target_fails_cleanly() {
    // A port nothing listens on: bind, read the port, close.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    drop(l);
    let out = Command::new(BIN)
        .args([
            "run",
            "--scenario",
            scenario().to_str().expect("path"),
            "--target",
            &addr,
            "--rate",
            "10",
            "--duration",
            "1s",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("could not open a Diameter connection"),
        "{err}"
    );
}
