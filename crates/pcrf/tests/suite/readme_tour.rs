//! The README's five-minute tour, run as written: its shell block is taken
//! from README.md and run twice against a server started the tour's way
//! (`serve --policy` on a copy of the example policy), on this test's own
//! ports, data and copy. The README is the first thing a new user runs; a
//! step that stops working, or leaves the shipped files changed, fails here.

use crate::support;

use std::process::Command;
use support::{eventually, repo_root, scratch_dir, Pcrf};

const IMSI: &str = "001010000000001";
/// Where the tour keeps its copy of the policy.
const TOUR_COPY: &str = "/tmp/pcrf-tour.lua";

/// The README's shell blocks (```sh ... ```) under the tour's heading: the
/// server's start, then the tour.
fn tour_blocks(readme: &str) -> Vec<String> {
    let start = readme
        .find("## A five-minute tour")
        .expect("the README has the tour");
    let section = &readme[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    let mut blocks = Vec::new();
    let mut rest = &section[..end];
    while let Some(open) = rest.find("```sh\n") {
        let body = &rest[open + 6..];
        let close = body.find("```").expect("a closed block");
        blocks.push(body[..close].to_string());
        rest = &body[close + 3..];
    }
    blocks
}

/// Replaces every `from` with `to`, insisting that there is one at least.
fn replace_all(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the tour no longer has {from:?}");
    text.replace(from, to)
}

#[test]
fn the_readme_tour_runs_twice_and_leaves_the_shipped_files_alone() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let blocks = tour_blocks(&readme);
    assert_eq!(
        blocks.len(),
        2,
        "the server's start and the tour: {blocks:?}"
    );
    let (serve, tour) = (&blocks[0], &blocks[1]);
    // The server runs on the copy that step 4 edits, never on the shipped file.
    assert!(
        serve.contains(&format!("cp policies/default.lua {TOUR_COPY}")),
        "{serve}"
    );
    assert!(
        serve.contains(&format!("serve --policy {TOUR_COPY}")),
        "{serve}"
    );
    let edits: Vec<&str> = tour.lines().filter(|l| l.starts_with("sed -i")).collect();
    assert!(!edits.is_empty(), "{tour}");
    assert!(edits.iter().all(|l| l.ends_with(TOUR_COPY)), "{edits:?}");

    let shipped = std::fs::read(root.join("policies/default.lua")).expect("policy");
    let copy = scratch_dir("tour").join("pcrf-tour.lua");
    std::fs::copy(root.join("policies/default.lua"), &copy).expect("copy the policy");
    let copy_text = copy.display().to_string();
    let mut p = Pcrf::start_with_serve_args(
        &["--policy", &copy_text],
        &format!(
            "[usage]\npath = \"{}\"\n",
            root.join("config/usage.toml").display()
        ),
    );
    assert!(
        p.log().contains(&format!("policy loaded path={copy_text}")),
        "{}",
        p.log()
    );

    let mut script = String::from("shopt -s expand_aliases\nset -e\n");
    script += tour;
    let script = replace_all(&script, "./target/release/pcrf", env!("CARGO_BIN_EXE_pcrf"));
    let script = replace_all(&script, "localhost:8080", &p.api.to_string());
    let script = replace_all(&script, TOUR_COPY, &copy_text);
    let script = replace_all(
        &script,
        "pcrf client gx ",
        &format!(
            "pcrf client gx --server {} --origin-host pgw.test.local --origin-realm test.local ",
            p.diameter
        ),
    );

    for run in 1..=2u64 {
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(&root)
            .output()
            .expect("bash");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "run {run}: {}\n{stdout}\n{stderr}\n{}",
            out.status,
            p.log()
        );
        // Step 5: the RAR carries the new uplink AMBR of step 4 (8 Mbit/s).
        let rar = stdout
            .split("<<< received from the PCRF:")
            .nth(1)
            .unwrap_or_else(|| panic!("run {run}: no RAR shown:\n{stdout}"));
        assert!(
            rar.contains("APN-Aggregate-Max-Bitrate-UL (1041, vendor 10415 3GPP) [V] = 8000000"),
            "run {run}: {rar}"
        );
        assert!(stdout.contains("\"rar_sent\":true"), "run {run}: {stdout}");
        // Step 8: the client ended its session.
        assert!(stdout.contains("interrupted"), "run {run}: {stdout}");
        assert!(
            stdout.contains("TERMINATION_REQUEST"),
            "run {run}: {stdout}"
        );
        let (_, sessions) = p.http("GET", &format!("/v1/subscribers/{IMSI}/sessions"), None);
        assert_eq!(sessions["sessions"], serde_json::json!([]), "run {run}");
        // Step 6: what step 2 reported, 450 MB a tour.
        let (_, usage) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
        let acc = &usage["accumulators"];
        assert_eq!(acc["monthly"]["used"], 450_000_000 * run, "{usage}");
        assert_eq!(acc["monthly"]["topup"], 1_000_000_000 * run, "{usage}");
        assert_eq!(acc["vip-video"]["used"], 150_000_000 * run, "{usage}");
        assert!(
            stdout.contains("pcrf_requests_total"),
            "run {run}: {stdout}"
        );
    }

    // The shipped policy is untouched, and its own tests still pass.
    assert_eq!(
        std::fs::read(root.join("policies/default.lua")).expect("policy"),
        shipped
    );
    let cases = Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .args([
            "policy",
            "test",
            "policies/default.lua",
            "policies/default.cases.toml",
        ])
        .current_dir(&root)
        .output()
        .expect("pcrf policy test");
    assert!(
        cases.status.success(),
        "{}",
        String::from_utf8_lossy(&cases.stdout)
    );

    // A SIGHUP reload keeps the policy named by --policy (no restart asked).
    p.signal("-HUP");
    eventually(
        p.waiting_for("the SIGHUP reload to be logged"),
        std::time::Duration::from_secs(10),
        || p.log().contains("configuration reloaded").then_some(()),
    );
    let log = p.log();
    assert!(!log.contains("apply only after a restart"), "{log}");
    p.terminate();
    if let Some(dir) = copy.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
