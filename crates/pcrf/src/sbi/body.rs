//! What every decoder of an SBI request body shares, whichever service
//! the body is for (N7's SM policies, N5's application sessions, the
//! BSF's answers, the N7 context kept in a stored record): a body is
//! bounded before serde sees it (nesting depth, every string, every list,
//! every object), read into its type with the member at fault named by
//! its JSON pointer, and its identities, URIs and bit rates are checked
//! the same way. A refusal is the ProblemDetails to answer with. Nothing
//! here panics on any input.

use crate::sbi::problem::{cause, ProblemDetails};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Bounds every body is held to before it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Deepest nesting of objects and arrays.
    pub max_depth: usize,
    /// Longest string, in bytes (keys included).
    pub max_string_bytes: usize,
    /// Most elements of one array, members of one object.
    pub max_items: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_depth: 16,
            max_string_bytes: 2048,
            max_items: 256,
        }
    }
}

/// Longest SUPI, GPSI or PEI accepted (an NAI SUPI is the longest kind).
pub const MAX_IDENTITY_BYTES: usize = 255;

/// Longest notification URI.
pub const MAX_URI_BYTES: usize = 1024;

/// JSON text to a value, refusing what is too deep before it is built
/// (serde_json would recurse into it), then anything too long or too wide.
pub(crate) fn parse_bounded(body: &[u8], limits: &DecodeLimits) -> Result<Value, ProblemDetails> {
    if let Some(depth) = too_deep(body, limits.max_depth) {
        return Err(ProblemDetails::invalid_format(format!(
            "nesting deeper than {} (at byte {depth})",
            limits.max_depth
        )));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ProblemDetails::invalid_format(format!("not JSON: {e}")))?;
    if !value.is_object() {
        return Err(ProblemDetails::invalid_format(
            "the body must be a JSON object",
        ));
    }
    check_sizes(&value, limits, &mut String::new())?;
    Ok(value)
}

/// The byte offset where `body` nests deeper than `max`, if it does.
/// Brackets inside strings do not count.
fn too_deep(body: &[u8], max: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in body.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return Some(i);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Every string, array and object within the limits; the error names the
/// first one that is not.
fn check_sizes(v: &Value, limits: &DecodeLimits, path: &mut String) -> Result<(), ProblemDetails> {
    let too_long = |path: &str, what: String| {
        ProblemDetails::field(cause::INVALID_MSG_FORMAT, path_or_root(path), what)
    };
    match v {
        Value::String(s) if s.len() > limits.max_string_bytes => Err(too_long(
            path,
            format!("string longer than {} bytes", limits.max_string_bytes),
        )),
        Value::Array(a) => {
            if a.len() > limits.max_items {
                return Err(too_long(
                    path,
                    format!("more than {} elements", limits.max_items),
                ));
            }
            for (i, item) in a.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                check_sizes(item, limits, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Object(o) => {
            if o.len() > limits.max_items {
                return Err(too_long(
                    path,
                    format!("more than {} members", limits.max_items),
                ));
            }
            for (k, item) in o {
                if k.len() > limits.max_string_bytes {
                    return Err(too_long(
                        path,
                        format!("member name longer than {} bytes", limits.max_string_bytes),
                    ));
                }
                let len = path.len();
                path.push('/');
                // A name as a JSON pointer segment (RFC 6901), cut short:
                // it is echoed back in the answer.
                let shown: String = k.chars().take(64).collect();
                path.push_str(&shown.replace('~', "~0").replace('/', "~1"));
                check_sizes(item, limits, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn path_or_root(path: &str) -> &str {
    if path.is_empty() {
        "/"
    } else {
        path
    }
}

/// The value as `T`; on a type error, the member at fault is named by
/// its JSON pointer, however deep (an N5 body has every field under
/// `ascReqData`, so naming the top-level member alone says little).
pub(crate) fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ProblemDetails> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let pointer = json_pointer(e.path());
        let reason = e.into_inner().to_string();
        if pointer.is_empty() {
            ProblemDetails::invalid_format(reason)
        } else {
            ProblemDetails::field(cause::INVALID_MSG_FORMAT, &pointer, reason)
        }
    })
}

/// A deserializer's path as a JSON pointer (RFC 6901), each segment cut
/// to 64 characters; empty for the whole document.
fn json_pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        let text = match segment {
            Segment::Seq { index } => index.to_string(),
            Segment::Map { key } => key.chars().take(64).collect(),
            Segment::Enum { variant } => variant.chars().take(64).collect(),
            Segment::Unknown => break,
        };
        out.push('/');
        out.push_str(&text.replace('~', "~0").replace('/', "~1"));
    }
    out
}

pub(crate) fn check_identity(
    param: &str,
    v: Option<&str>,
    mandatory: bool,
) -> Result<(), ProblemDetails> {
    match v {
        None if mandatory => Err(ProblemDetails::missing(param)),
        None => Ok(()),
        Some(s)
            if s.is_empty() || s.len() > MAX_IDENTITY_BYTES || s.chars().any(char::is_control) =>
        {
            let reason =
                format!("must be 1 to {MAX_IDENTITY_BYTES} bytes without control characters");
            Err(if mandatory {
                ProblemDetails::incorrect(param, reason)
            } else {
                ProblemDetails::optional_incorrect(param, reason)
            })
        }
        Some(_) => Ok(()),
    }
}

pub(crate) fn check_uri(param: &str, uri: &str) -> Result<(), ProblemDetails> {
    let rest = uri
        .strip_prefix("http://")
        .or_else(|| uri.strip_prefix("https://"));
    match rest {
        _ if uri.len() > MAX_URI_BYTES => Err(ProblemDetails::incorrect(
            param,
            format!("longer than {MAX_URI_BYTES} bytes"),
        )),
        Some(rest)
            if !rest.is_empty()
                && !rest.starts_with('/')
                && !uri.chars().any(|c| c.is_control() || c == ' ') =>
        {
            Ok(())
        }
        _ => Err(ProblemDetails::incorrect(
            param,
            "must be an absolute http or https URI",
        )),
    }
}

/// A TS 29.571 BitRate (`"<number> <unit>bps"`) in bit/s.
pub fn bit_rate(text: &str) -> Option<u64> {
    let (number, unit) = text.split_once(' ')?;
    let scale: f64 = match unit {
        "bps" => 1.0,
        "Kbps" => 1e3,
        "Mbps" => 1e6,
        "Gbps" => 1e9,
        "Tbps" => 1e12,
        _ => return None,
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let v: f64 = number.parse().ok()?;
    let bits = v * scale;
    (bits.is_finite() && bits >= 0.0 && bits < u64::MAX as f64).then_some(bits as u64)
}

/// A bit rate as TS 29.571 BitRate text, exact.
pub fn bit_rate_text(bps: u64) -> String {
    format!("{bps} bps")
}

/// The host and port of a notification URI: the peer of an N7 session
/// (its SMF) or of an N5 application session (its AF), which the record
/// keeps where a Gx session keeps its PCEF.
pub(crate) fn notification_authority(uri: &str) -> String {
    let rest = uri
        .strip_prefix("http://")
        .or_else(|| uri.strip_prefix("https://"))
        .unwrap_or(uri);
    rest.split('/').next().unwrap_or("").to_owned()
}
