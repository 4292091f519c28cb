//! A subscriber's last decisions, read back from the decision log's file
//! and its rotated predecessors (`decision_log.rs` writes them), newest
//! first: "why did this subscriber get that, then?" after the session's
//! record has moved on. The files are read backwards in blocks, so the
//! newest decisions cost the least, and a read stops at a byte budget: an
//! operator's page must not make the node scan gigabytes.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// How much of the files one read scans at most.
pub const SCAN_BUDGET_BYTES: u64 = 64 << 20;

/// The block read at a time, backwards.
const BLOCK: u64 = 64 << 10;

/// What a read found.
#[derive(Debug, Default)]
pub struct Found {
    /// The lines of the subscriber, newest first, as written (`time`,
    /// `name`, `subscriber`, `payload`).
    pub decisions: Vec<serde_json::Value>,
    /// Every file was read to its start (false: the budget ran out first,
    /// or `limit` decisions were found).
    pub complete: bool,
}

/// The file and its rotated copies, newest first: `path`, `path.1` ...
/// `path.keep`.
fn files(path: &Path, keep: u32) -> Vec<PathBuf> {
    let mut all = vec![path.to_path_buf()];
    for n in 1..=keep {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        all.push(PathBuf::from(name));
    }
    all
}

/// The last `limit` decisions of `subscriber` in the decision log at
/// `path` (rotated `keep` times), scanning at most `budget` bytes. A file
/// that is missing (not rotated yet) is skipped; one that cannot be read
/// is an error. A line cut short by a write in progress is skipped.
pub fn recent(
    path: &Path,
    keep: u32,
    subscriber: &str,
    limit: usize,
    budget: u64,
) -> Result<Found, String> {
    let needle = format!("\"subscriber\":{}", serde_json::Value::from(subscriber));
    let mut found = Found::default();
    let mut left = budget;
    for file in files(path, keep) {
        let mut f = match std::fs::File::open(&file) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", file.display())),
        };
        let done = scan_backwards(&mut f, &mut left, |line| {
            if !contains(line, needle.as_bytes()) {
                return true;
            }
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) {
                if v["subscriber"] == subscriber {
                    found.decisions.push(v);
                }
            }
            found.decisions.len() < limit
        })
        .map_err(|e| format!("{}: {e}", file.display()))?;
        if !done {
            return Ok(found);
        }
    }
    found.complete = true;
    Ok(found)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Calls `each` with every line of `f`, last first, until it answers
/// false or `left` bytes are read. Returns whether the file was read to
/// its start with `each` wanting more.
fn scan_backwards(
    f: &mut std::fs::File,
    left: &mut u64,
    mut each: impl FnMut(&[u8]) -> bool,
) -> std::io::Result<bool> {
    let mut end = f.seek(SeekFrom::End(0))?;
    // The bytes after the last newline seen: the tail of a line whose
    // start is in an earlier block.
    let mut carry: Vec<u8> = Vec::new();
    while end > 0 {
        if *left == 0 {
            return Ok(false);
        }
        let size = BLOCK.min(end).min(*left);
        let start = end - size;
        f.seek(SeekFrom::Start(start))?;
        let mut block = vec![0; usize::try_from(size).unwrap_or(0)];
        f.read_exact(&mut block)?;
        *left -= size;
        block.extend_from_slice(&carry);
        // Every complete line in the block, last first; the part before
        // its first newline waits for the earlier block.
        let mut line_end = block.len();
        while let Some(nl) = block[..line_end].iter().rposition(|&b| b == b'\n') {
            let line = &block[nl + 1..line_end];
            if !line.is_empty() && !each(line) {
                return Ok(false);
            }
            line_end = nl;
        }
        carry = block[..line_end].to_vec();
        end = start;
    }
    Ok(carry.is_empty() || each(&carry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(sub: &str, n: u32) -> String {
        format!(
            "{{\"time\":\"t{n}\",\"name\":\"decision\",\"subscriber\":\"{sub}\",\"payload\":{{\"n\":{n}}}}}\n"
        )
    }

    #[test]
    fn the_newest_come_first_across_rotated_files_and_blocks() {
        let dir =
            std::env::temp_dir().join(format!("pcrf-decision-history-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("decisions.jsonl");
        // .2 is oldest: 0..3000, .1: 3000..6000, the file: 6000..9000 and
        // a line cut short by a write in progress. Lines of two
        // subscribers interleave; 3000 lines span several blocks.
        let mut n = 0;
        for file in [".2", ".1", ""] {
            let mut text = String::new();
            for _ in 0..3000 {
                text.push_str(&line(if n % 3 == 0 { "001" } else { "002" }, n));
                n += 1;
            }
            if file.is_empty() {
                text.push_str("{\"time\":\"cut");
            }
            std::fs::write(format!("{}{file}", path.display()), text).expect("write");
        }
        let got = recent(&path, 5, "001", 5, SCAN_BUDGET_BYTES).expect("read");
        let ns: Vec<u64> = got
            .decisions
            .iter()
            .map(|d| d["payload"]["n"].as_u64().unwrap_or(0))
            .collect();
        assert_eq!(ns, [8997, 8994, 8991, 8988, 8985]);
        assert!(!got.complete);

        // All of them, through both rotations, in order.
        let got = recent(&path, 5, "001", usize::MAX, SCAN_BUDGET_BYTES).expect("read");
        assert_eq!(got.decisions.len(), 3000);
        assert!(got.complete);
        let ns: Vec<u64> = got
            .decisions
            .iter()
            .map(|d| d["payload"]["n"].as_u64().unwrap_or(0))
            .collect();
        assert!(
            ns.windows(2).all(|w| w[0] == w[1] + 3),
            "newest first, none missed"
        );
        assert_eq!(ns.last(), Some(&0));

        // A prefix of another subscriber's key is not a match.
        assert!(recent(&path, 5, "00", 5, SCAN_BUDGET_BYTES)
            .expect("read")
            .decisions
            .is_empty());
        // The budget stops the scan early.
        let got = recent(&path, 5, "001", usize::MAX, 100_000).expect("read");
        assert!(!got.complete && got.decisions.len() < 3000 && !got.decisions.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
