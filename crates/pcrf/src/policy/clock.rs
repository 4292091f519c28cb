//! Local time for the policy, in the operator's configured IANA time zone.
//! Scripts get time only through `input.time` (never os.time) so that time
//! is part of the memo's input: a decision is re-made when the minute changes.

use super::error::PolicyError;
use super::input::TimeInput;
use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    /// The last local date this thread wrote out, and its text.
    static DATE_TEXT: RefCell<Option<(Date, Arc<str>)>> = const { RefCell::new(None) };
}

/// `date` as "YYYY-MM-DD": the text this thread made for it last, when the
/// same day; every request builds the policy's time input, and nearly all
/// of a day's requests on a thread fall on the same date.
fn date_text(date: Date) -> Arc<str> {
    DATE_TEXT.with(|cell| {
        let mut last = cell.borrow_mut();
        match &*last {
            Some((d, text)) if *d == date => text.clone(),
            _ => {
                let text: Arc<str> = Arc::from(date.to_string());
                *last = Some((date, text.clone()));
                text
            }
        }
    })
}

/// Resolves an IANA name ("Europe/Berlin", "UTC"); "system" means the host's
/// zone. Uses the system tzdb when present, else the one built into the binary.
pub fn time_zone(name: &str) -> Result<TimeZone, PolicyError> {
    let found = if name.eq_ignore_ascii_case("system") {
        TimeZone::try_system()
    } else {
        TimeZone::get(name)
    };
    found.map_err(|e| PolicyError::TimeZone {
        name: name.to_string(),
        message: e.to_string(),
    })
}

impl TimeInput {
    /// The policy's view of `at` in `tz`.
    pub fn at(at: Timestamp, tz: &TimeZone) -> TimeInput {
        let local = at.to_zoned(tz.clone());
        let at_ms = at.as_millisecond();
        let into_minute = i64::from(local.second()) * 1000 + i64::from(local.millisecond());
        TimeInput {
            hour: local.hour() as u8,
            minute: local.minute() as u8,
            weekday: local.weekday().to_monday_one_offset() as u8,
            date: date_text(local.date()),
            at_ms,
            minute_ms: at_ms - into_minute,
        }
    }

    /// The policy's view of now in `tz`.
    pub fn now(tz: &TimeZone) -> TimeInput {
        TimeInput::at(Timestamp::now(), tz)
    }

    /// The policy's view of `ms` (Unix milliseconds, a request's time) in
    /// `tz`; the epoch for a value outside jiff's range.
    pub fn at_ms(ms: i64, tz: &TimeZone) -> TimeInput {
        TimeInput::at(
            Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH),
            tz,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_time_in_zone() {
        // 2026-01-04T23:30:00Z is a Sunday in UTC and Monday 00:30 in Berlin.
        let at: Timestamp = "2026-01-04T23:30:00Z".parse().expect("timestamp");
        let utc = TimeInput::at(at, &time_zone("UTC").expect("utc"));
        assert_eq!((utc.hour, utc.minute, utc.weekday), (23, 30, 7));
        assert_eq!(&*utc.date, "2026-01-04");
        let berlin = TimeInput::at(at, &time_zone("Europe/Berlin").expect("berlin"));
        assert_eq!((berlin.hour, berlin.minute, berlin.weekday), (0, 30, 1));
        assert_eq!(&*berlin.date, "2026-01-05");
        let later: Timestamp = "2026-01-04T23:30:42.5Z".parse().expect("timestamp");
        let t = TimeInput::at(later, &time_zone("Europe/Berlin").expect("berlin"));
        assert_eq!(t.at_ms - t.minute_ms, 42_500);
        assert_eq!(t.minute_ms, at.as_millisecond());
        // The same day's text is made once on a thread; a new day gets its own.
        assert!(Arc::ptr_eq(&t.date, &berlin.date));
        assert_eq!(
            &*TimeInput::at(at, &time_zone("UTC").expect("utc")).date,
            "2026-01-04"
        );
    }

    #[test]
    fn unknown_zone_is_an_error() {
        assert!(matches!(
            time_zone("Mars/Olympus"),
            Err(PolicyError::TimeZone { .. })
        ));
        assert!(time_zone("system").is_ok());
    }
}
