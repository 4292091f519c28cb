//! `pcrf check-config` against the real binary: it must refuse what `serve`
//! would refuse before listening (a log level that silences the node, a
//! missing usage file, two listeners on one port, an OCS and a CHF both
//! configured) and warn about a token
//! file other users can read, so that an operator learns it before a
//! restart rather than from a node that does not come up.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pcrf-check-config-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

/// A valid configuration with `extra` appended; returns its path.
fn config(dir: &Path, api_listen: &str, extra: &str) -> PathBuf {
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/default.lua");
    let text = format!(
        r#"
[node]
origin_host = "pcrf.test.local"
origin_realm = "test.local"

[diameter]
listen = "127.0.0.1:38868"

[store]
path = "{store}"

[policy]
path = "{policy}"

[api]
listen = "{api_listen}"
{extra}
"#,
        store = dir.join("data").display(),
        policy = policy.display(),
    );
    let path = dir.join("pcrf.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn run(args: &[&str], cfg: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .args(args)
        .arg(cfg)
        .env_remove("RUST_LOG")
        .output()
        .expect("run pcrf")
}

fn check(cfg: &Path) -> (bool, String) {
    let out = run(&["check-config"], cfg);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_valid_configuration_passes() {
    let dir = scratch("valid");
    let (ok, stderr) = check(&config(&dir, "127.0.0.1:38080", ""));
    assert!(ok, "{stderr}");
}

#[test]
fn an_unknown_log_level_is_refused_by_check_config_and_serve() {
    let dir = scratch("level");
    for level in ["warning", "inf", "info,pcrf::gx"] {
        let cfg = config(
            &dir,
            "127.0.0.1:38080",
            &format!("[log]\nlevel = {level:?}"),
        );
        let (ok, stderr) = check(&cfg);
        assert!(!ok, "{level} accepted");
        assert!(
            stderr.contains("[log].level")
                && stderr.contains("trace, debug, info, warn, error, off"),
            "{stderr}"
        );
        // `serve` refuses it before it opens anything.
        let out = run(&["serve", "--config"], &cfg);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "serve started with {level}");
        assert!(
            stderr.contains("trace, debug, info, warn, error, off"),
            "{stderr}"
        );
    }
}

#[test]
fn a_missing_usage_file_is_refused() {
    let dir = scratch("usage");
    let missing = dir.join("nowhere/usage.toml");
    let cfg = config(
        &dir,
        "127.0.0.1:38080",
        &format!("[usage]\npath = {:?}", missing.display().to_string()),
    );
    let (ok, stderr) = check(&cfg);
    assert!(!ok, "missing usage file accepted");
    assert!(
        stderr.contains("usage file") && stderr.contains(&missing.display().to_string()),
        "{stderr}"
    );
}

#[test]
fn an_ocs_and_a_chf_together_are_refused_and_a_chf_needs_the_sbi() {
    let dir = scratch("chf");
    let sbi = "[sbi]\nlisten = \"127.0.0.1:38777\"\n";
    let chf = "[sy]\nchf = \"http://127.0.0.1:9000\"\n";
    let both =
        format!("{sbi}{chf}ocs = [ {{ origin_host = \"ocs1\", address = \"127.0.0.1:3870\" }} ]\n");
    let cfg = config(&dir, "127.0.0.1:38080", &both);
    let (ok, stderr) = check(&cfg);
    assert!(!ok, "ocs and chf accepted");
    assert!(stderr.contains("not both"), "{stderr}");
    let out = run(&["serve", "--config"], &cfg);
    assert!(!out.status.success(), "serve started with ocs and chf");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not both"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, stderr) = check(&config(&dir, "127.0.0.1:38080", chf));
    assert!(!ok, "chf without [sbi] accepted");
    assert!(stderr.contains("[sy].chf needs [sbi]"), "{stderr}");
    let (ok, stderr) = check(&config(&dir, "127.0.0.1:38080", &format!("{sbi}{chf}")));
    assert!(ok, "{stderr}");
}

#[test]
fn one_port_for_two_listeners_is_refused() {
    let dir = scratch("port");
    for api in ["127.0.0.1:38868", "0.0.0.0:38868"] {
        let (ok, stderr) = check(&config(&dir, api, ""));
        assert!(
            !ok,
            "API on {api} beside Diameter on 127.0.0.1:38868 accepted"
        );
        assert!(
            stderr.contains("[api].listen") && stderr.contains("[diameter].listen"),
            "{stderr}"
        );
    }
    // Another address of the same port is another socket.
    let (ok, stderr) = check(&config(&dir, "127.0.0.2:38868", ""));
    assert!(ok, "{stderr}");
}

#[cfg(unix)]
#[test]
fn a_token_file_others_can_read_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("token-mode");
    let token = dir.join("api-token");
    std::fs::write(&token, "0123456789abcdef-token\n").expect("write token");
    let cfg = config(
        &dir,
        "127.0.0.1:38080",
        &format!("token_file = {:?}", token.display().to_string()),
    );
    for (mode, warned) in [(0o644, true), (0o666, true), (0o600, false), (0o640, false)] {
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let (ok, stderr) = check(&cfg);
        assert!(ok, "{stderr}");
        assert_eq!(
            stderr.contains("warning: api.token_file") && stderr.contains("other users"),
            warned,
            "mode {mode:o}: {stderr}"
        );
    }
}
