//! Sy against an independent stack: an OCS on Erlang/OTP's `diameter`
//! application with a Sy dictionary written from TS 29.219
//! (crates/diameter/tests/interop/sy.dia). The real `pcrf` connects to it;
//! OTP decodes our SLR strictly and answers "exhausted" (the CCA throttles),
//! sends an SNR whose SNA it decodes strictly (the PCEF gets a RAR lifting
//! the throttle), and decodes the STR of the last CCR-T, which must name
//! the same Sy session.

use crate::support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const IMSI: &str = "001010000000001";
const LIMIT: Duration = Duration::from_secs(60);

fn interop_dir() -> PathBuf {
    repo_root().join("crates/diameter/tests/interop")
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("{cmd:?}: {e} (run scripts/test.sh, which installs erlang-diameter)")
    });
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn read_lossy(path: &std::path::Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn wait_for_line(log: &std::path::Path, want: &str) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let out = read_lossy(log);
        if out.lines().any(|l| l.starts_with(want))
            || out.contains("FAIL")
            || Instant::now() > deadline
        {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_ocs_decodes_our_slr_sna_and_str() {
    let dir = scratch_dir("otp-sy");
    std::fs::copy(interop_dir().join("sy.dia"), dir.join("sy.dia")).expect("copy dia");
    run(Command::new("diameterc").current_dir(&dir).arg("sy.dia"));
    run(Command::new("erlc").current_dir(&dir).arg("sy.erl"));
    run(Command::new("erlc")
        .current_dir(&dir)
        .arg(interop_dir().join("sy_ocs.erl")));

    let port = free_port();
    let log = dir.join("sy_ocs.out");
    let out_file = std::fs::File::create(&log).expect("log");
    let mut erl = Command::new("erl")
        .arg("-noshell")
        .arg("-pa")
        .arg(&dir)
        .arg("-eval")
        .arg(format!("sy_ocs:main([\"{port}\"])"))
        .stdin(Stdio::null())
        .stdout(out_file.try_clone().expect("dup"))
        .stderr(out_file)
        .spawn()
        .expect("start erl");
    let out = wait_for_line(&log, "LISTENING");
    assert!(out.contains("LISTENING"), "OTP OCS did not start:\n{out}");

    let p = Pcrf::start(&format!(
        "\n[sy]\ntimeout_ms = 3000\nocs = [ {{ origin_host = \"ocs.erlang.test\", address = \"127.0.0.1:{port}\" }} ]\n"
    ));
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let out = wait_for_line(&log, "PEER-UP");
    assert!(
        out.contains("PEER-UP"),
        "the PCRF did not connect:\n{out}\n{}",
        p.log()
    );
    eventually_async(
        p.waiting_for("the Erlang OCS up in the metrics"),
        Duration::from_secs(10),
        || {
            p.metrics()
                .contains("pcrf_sy_ocs_up{ocs=\"ocs.erlang.test\"} 1")
                .then_some(())
        },
    )
    .await;

    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let cca = pcef.ccr_i("pgw;otp-sy;1", IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    let (install, _) = rule_changes(&cca);
    assert!(
        install.contains(&"throttled".to_string()),
        "OTP's 'exhausted' used: {install:?}\n{}",
        read_lossy(&log)
    );

    // OTP's SNR ("valid") lifts the throttle through a RAR.
    let rar = eventually_async("a RAR after OTP's SNR", LIMIT, || pcef.rars().pop()).await;
    assert_eq!(rule_changes(&rar).0, ["internet"]);

    assert_eq!(result_of(&pcef.ccr_t("pgw;otp-sy;1", 1).await), 2001);
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Ok(Some(st)) = erl.try_wait() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = erl.kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let out = read_lossy(&log);
    assert!(
        status.is_some_and(|s| s.success()),
        "OTP OCS failed ({status:?}):\n{out}\n--- pcrf log:\n{}",
        p.log()
    );
    let lines: Vec<&str> = out.lines().collect();
    for want in [
        "PEER-UP",
        "SLR 0 monthly-data",
        "SUBSCRIBER 001010000000001",
        "SNA 2001",
        "STR 1",
        "SAME-SESSION",
        "DONE",
    ] {
        assert!(lines.contains(&want), "OTP did not print {want:?}:\n{out}");
    }
    assert!(!out.contains("DECODE-ERRORS"), "{out}");
    pcef.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
