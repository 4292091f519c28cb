//! Why a policy script could not be loaded, validated or run. Operators see
//! these texts in the reload answer, logs and `pcrf check-config`, so each
//! one names the file and, when Lua gives one, the line.

use std::path::PathBuf;

/// A policy failure. `line` is the script line Lua blamed, when known.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("syntax error in policy: {message}")]
    Syntax { message: String, line: Option<u32> },
    /// Loaded but unusable: no `decide`, top-level code failed, or `decide`
    /// failed or returned a bad decision for a built-in sample input.
    #[error("policy rejected: {message}")]
    Invalid { message: String, line: Option<u32> },
    /// `decide` failed at run time (error, budget, memory, bad return value).
    #[error("policy runtime error: {message}")]
    Runtime { message: String, line: Option<u32> },
    #[error("policy engine setup failed: {0}")]
    Setup(String),
    #[error("cannot watch policy {path}: {message}")]
    Watch { path: PathBuf, message: String },
    #[error("bad policy test cases {path}: {message}")]
    Cases { path: PathBuf, message: String },
    #[error("unknown time zone {name:?}: {message}")]
    TimeZone { name: String, message: String },
}

impl PolicyError {
    /// The script line this error points at, if Lua named one.
    pub fn line(&self) -> Option<u32> {
        match self {
            PolicyError::Syntax { line, .. }
            | PolicyError::Invalid { line, .. }
            | PolicyError::Runtime { line, .. } => *line,
            _ => None,
        }
    }
}

/// Finds the first `<chunk>:<line>:` in a Lua message (chunk names are set
/// to `=<file name>`, so messages read `default.lua:12: ...`).
pub(crate) fn line_in(message: &str, chunk: &str) -> Option<u32> {
    let mut rest = message;
    while let Some(at) = rest.find(chunk) {
        let after = &rest[at + chunk.len()..];
        if let Some(tail) = after.strip_prefix(':') {
            let digits: String = tail.chars().take_while(|c| c.is_ascii_digit()).collect();
            if !digits.is_empty() && tail[digits.len()..].starts_with(':') {
                return digits.parse().ok();
            }
        }
        rest = after;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::line_in;

    #[test]
    fn finds_line_of_chunk() {
        assert_eq!(
            line_in("default.lua:12: '=' expected near 'x'", "default.lua"),
            Some(12)
        );
        assert_eq!(
            line_in(
                "runtime error: x.lua:oops default.lua:7: boom",
                "default.lua"
            ),
            Some(7)
        );
        assert_eq!(line_in("no line here", "default.lua"), None);
    }
}
