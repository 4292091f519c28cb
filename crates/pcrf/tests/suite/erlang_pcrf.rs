//! One Gx flow driven by an independent stack against the real `pcrf`
//! binary: Erlang/OTP's `diameter` application, with a Gx dictionary written
//! from the specifications (crates/diameter/tests/interop/gx.dia), opens a
//! session with a CCR-I that OTP encodes, decodes our CCA strictly (any
//! decode error fails), then decodes our RAR pushed through the REST API and
//! answers it 2001 only if it decoded cleanly, and disconnects with DPR.

use crate::support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const SESSION: &str = "pcef.erlang.test;1767225600;1";
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

/// The client's output so far; OTP prints some octets raw, so not UTF-8.
fn read_lossy(path: &std::path::Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn wait_for_line(log: &std::path::Path, want: &str) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let out = read_lossy(log);
        if out.lines().any(|l| l == want) || out.contains("FAIL") || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn otp_pcef_opens_a_session_and_answers_a_rar_from_the_real_pcrf() {
    let p =
        Pcrf::start("[[peers]]\norigin_host = \"pcef.erlang.test\"\naddresses = [\"127.0.0.1\"]\n");
    p.provision(
        "001010123456789",
        r#"{"msisdn":"33612345678","plan":"basic","services":["vip"]}"#,
    );

    let dir = scratch_dir("otp");
    std::fs::copy(interop_dir().join("gx.dia"), dir.join("gx.dia")).expect("copy dia");
    run(Command::new("diameterc").current_dir(&dir).arg("gx.dia"));
    run(Command::new("erlc").current_dir(&dir).arg("gx.erl"));
    run(Command::new("erlc")
        .current_dir(&dir)
        .arg(interop_dir().join("gx_client.erl")));

    let log = dir.join("gx_client.out");
    let out_file = std::fs::File::create(&log).expect("log");
    let mut erl = Command::new("erl")
        .arg("-noshell")
        .arg("-pa")
        .arg(&dir)
        .arg("-eval")
        .arg(format!(
            "gx_client:main([\"127.0.0.1\", \"{}\"])",
            p.diameter.port()
        ))
        .stdin(Stdio::null())
        .stdout(out_file.try_clone().expect("dup"))
        .stderr(out_file)
        .spawn()
        .expect("start erl");

    // OTP decoded our CCA: the dynamic VIP rule and the predefined ones.
    let out = wait_for_line(&log, "PREDEFINED internet");
    if !out.lines().any(|l| l == "PREDEFINED internet") {
        let _ = erl.kill();
        panic!(
            "OTP did not decode our CCA:\n{out}\n--- pcrf log:\n{}",
            p.log()
        );
    }

    // Drop the VIP service: the provisioning re-decides the session and
    // the RAR removes the rule; OTP's verdict on it is its RAA.
    p.provision(
        "001010123456789",
        r#"{"msisdn":"33612345678","plan":"basic"}"#,
    );
    assert!(
        p.metrics()
            .contains(r#"pcrf_requests_total{command="RAR",result_code="2001"} 1"#),
        "OTP's verdict on our RAR:\n{}\n{}",
        read_lossy(&log),
        p.metrics()
    );

    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Ok(Some(st)) = erl.try_wait() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = erl.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = read_lossy(&log);
    assert!(
        status.is_some_and(|s| s.success()),
        "OTP client failed ({status:?}):\n{out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    for want in [
        "PEER-UP",
        "RESULT-CODE 2001",
        "RULE vip-video",
        "RULE-QCI 4",
        "PREDEFINED internet",
        "RAR-REMOVE vip-video",
        "DONE",
    ] {
        assert!(lines.contains(&want), "OTP did not print {want:?}:\n{out}");
    }
    assert!(!out.contains("DECODE-ERRORS"), "{out}");
    let (_, s) = p.http("GET", &format!("/v1/sessions/{SESSION}"), None);
    assert_eq!(s["imsi"], "001010123456789");
    assert_eq!(s["apn"], "internet.apn");
    let _ = std::fs::remove_dir_all(&dir);
}
