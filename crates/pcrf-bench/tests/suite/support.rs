//! What the pcrf-bench tests that run the real `pcrf serve` share: where
//! the repository and the workspace's `pcrf` binary are, and free ports to
//! give it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `pcrf` beside this test's own binary (target/<profile>/deps/..).
pub fn pcrf_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile> directory");
    let bin = dir.join("pcrf");
    assert!(
        bin.exists(),
        "{} missing: build it first (cargo build -p pcrf), or run the workspace's tests",
        bin.display()
    );
    bin
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}
