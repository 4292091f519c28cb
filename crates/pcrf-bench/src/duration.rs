//! Human-written durations ("60s", "500ms", "1.5s", "2m", "250us") as used
//! on the command line and in scenario files.

use std::time::Duration;

/// Parses a number followed by a unit: ns, us (or µs), ms, s, m, h.
/// A bare number is rejected: a silent default unit has caused too many
/// seconds-versus-milliseconds mistakes.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{s:?} has no unit (use e.g. 500ms, 60s, 2m)"))?;
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} does not start with a number"))?;
    let secs_per_unit = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        u => return Err(format!("{s:?}: unknown unit {u:?} (ns, us, ms, s, m, h)")),
    };
    let secs = n * secs_per_unit;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration(" 1.5s "), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_bare_numbers_and_garbage() {
        assert!(parse_duration("60").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("1.2.3s").is_err());
        assert!(parse_duration("").is_err());
    }
}
