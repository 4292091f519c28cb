//! Wireshark's Diameter dissector as an independent reader of what we send.
//! Every interface's interop test writes its messages into a capture
//! (`pcap.rs`) and asks tshark three things: is anything malformed or worth
//! a warning, does it decode as many AVPs as our own validator visits, and
//! which values does it show. One implementation here, so the tests of the
//! stack, the server and the load generator check the same way.
//! Needs `tshark` on PATH (scripts/install-test-deps.sh installs it).

use crate::pcap::{Direction, PcapWriter};
use bytes::Bytes;
use diameter::codec::Message;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// Messages written to a capture file that tshark reads. The file's
/// directory is removed when the capture is dropped (kept, and its path
/// printed, with KEEP_PCAP set in the environment).
pub struct Capture {
    dir: PathBuf,
    path: PathBuf,
    /// AVPs our validator visits per message, in the order written.
    ours: Vec<usize>,
}

impl Capture {
    /// Writes `messages` as one loopback TCP connection into a fresh
    /// temporary directory named after `name`.
    pub fn write(name: &str, messages: &[(Direction, Bytes)]) -> Result<Capture, String> {
        let mut ours = Vec::with_capacity(messages.len());
        let mut w = PcapWriter::loopback(Vec::new()).map_err(|e| format!("pcap header: {e}"))?;
        for (i, (dir, m)) in messages.iter().enumerate() {
            let n = Message::parse(m.clone())
                .and_then(|p| p.validate())
                .map_err(|e| format!("message {i} is not valid Diameter: {e}"))?;
            ours.push(n);
            w.message(*dir, m)
                .map_err(|e| format!("writing message {i}: {e}"))?;
        }
        let bytes = w.finish().map_err(|e| format!("pcap: {e}"))?;
        // Unique per capture: tests of one binary may run in parallel.
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Relaxed);
        let dir = std::env::temp_dir().join(format!("tshark-{name}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(format!("{name}.pcap"));
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Capture { dir, path, ours })
    }

    /// The capture file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// tshark's output for the capture with `args` after `-n -r FILE`.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        run(&self.path, args)
    }

    /// Ok when tshark finds nothing malformed and nothing at warning level
    /// or above, and decodes exactly the AVPs (nested ones too) our
    /// validator visits in each message.
    pub fn check(&self) -> Result<(), String> {
        let bad = self.run(&["-Y", "_ws.malformed || _ws.expert.severity >= 0x00600000"])?;
        if !bad.trim().is_empty() {
            return Err(format!("tshark complains:\n{bad}"));
        }
        let pdml = self.run(&["-Y", "diameter", "-T", "pdml"])?;
        let theirs: Vec<usize> = pdml
            .split("<packet>")
            .skip(1)
            .map(|p| p.matches("<field name=\"diameter.avp\" ").count())
            .collect();
        if theirs != self.ours {
            return Err(format!(
                "AVPs per message: tshark {theirs:?}, our validator {:?}",
                self.ours
            ));
        }
        Ok(())
    }

    /// One line per Diameter message with the named fields separated by
    /// `|` (several occurrences of a field joined by `,`).
    pub fn fields(&self, fields: &[&str]) -> Result<Vec<String>, String> {
        let mut args = vec!["-Y", "diameter", "-T", "fields", "-E", "separator=|"];
        for f in fields {
            args.extend(["-e", f]);
        }
        Ok(self.run(&args)?.lines().map(str::to_owned).collect())
    }

    /// tshark's full decode (`-V`) of the Diameter messages.
    pub fn verbose(&self) -> Result<String, String> {
        self.run(&["-V", "-Y", "diameter"])
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if std::env::var_os("KEEP_PCAP").is_some() {
            eprintln!("capture kept: {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// tshark's output for a capture file with `args` after `-n -r FILE`.
pub fn run(pcap: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(pcap)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run tshark ({e}); run scripts/install-test-deps.sh"))?;
    if !out.status.success() {
        return Err(format!(
            "tshark {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
