//! RFC 3339 timestamps without a time crate: UTC, millisecond precision on output, any offset and
//! fraction on input. Calendar arithmetic uses Howard Hinnant's `days_from_civil` /
//! `civil_from_days` (proleptic Gregorian calendar), exact for every date a `SystemTime` can hold.
#![forbid(unsafe_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SECONDS_PER_DAY: i128 = 86_400;

/// Formats `t` as RFC 3339 UTC with millisecond precision, e.g. `2026-11-30T08:17:43.123Z`.
/// Sub-millisecond digits are truncated (floored), so a formatted time never lies in the future
/// of the instant it describes.
pub fn format_rfc3339(t: SystemTime) -> String {
    let nanos: i128 = match t.duration_since(UNIX_EPOCH) {
        Ok(after) => after.as_nanos() as i128,
        Err(before) => -(before.duration().as_nanos() as i128),
    };
    let millis = nanos.div_euclid(1_000_000);
    let seconds = millis.div_euclid(1000);
    let milli = millis.rem_euclid(1000);
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let second_of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// Parses an RFC 3339 date-time (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; `t`, `z` and a space
/// separator are accepted as RFC 3339 allows). Returns `None` for anything else, including
/// out-of-range fields. Fraction digits beyond nanoseconds are ignored.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let bytes = s.as_bytes();
    if bytes.len() < 20 {
        return None;
    }
    let year = digits(bytes, 0, 4)? as i64;
    let month = digits(bytes, 5, 2)? as u32;
    let day = digits(bytes, 8, 2)? as u32;
    let hour = digits(bytes, 11, 2)?;
    let minute = digits(bytes, 14, 2)?;
    let second = digits(bytes, 17, 2)?;
    if bytes[4] != b'-'
        || bytes[7] != b'-'
        || !matches!(bytes[10], b'T' | b't' | b' ')
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return None;
    }
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }

    let mut position = 19;
    let mut nanos: u32 = 0;
    if bytes.get(position) == Some(&b'.') {
        position += 1;
        let start = position;
        while position < bytes.len() && bytes[position].is_ascii_digit() {
            if position - start < 9 {
                nanos = nanos * 10 + u32::from(bytes[position] - b'0');
            }
            position += 1;
        }
        let count = position - start;
        if count == 0 {
            return None;
        }
        for _ in count..9 {
            nanos *= 10;
        }
    }

    let offset_seconds: i128 = match bytes.get(position)? {
        b'Z' | b'z' if position + 1 == bytes.len() => 0,
        sign @ (b'+' | b'-') if position + 6 == bytes.len() => {
            let offset_hour = digits(bytes, position + 1, 2)?;
            let offset_minute = digits(bytes, position + 4, 2)?;
            if bytes[position + 3] != b':' || offset_hour > 23 || offset_minute > 59 {
                return None;
            }
            let magnitude = i128::from(offset_hour * 3600 + offset_minute * 60);
            if *sign == b'-' { -magnitude } else { magnitude }
        }
        _ => return None,
    };

    let seconds = i128::from(days_from_civil(year, month, day)) * SECONDS_PER_DAY
        + i128::from(hour * 3600 + minute * 60 + second)
        - offset_seconds;
    let total_nanos = seconds * 1_000_000_000 + i128::from(nanos);
    let magnitude = Duration::new(
        u64::try_from(total_nanos.unsigned_abs() / 1_000_000_000).ok()?,
        (total_nanos.unsigned_abs() % 1_000_000_000) as u32,
    );
    if total_nanos >= 0 {
        UNIX_EPOCH.checked_add(magnitude)
    } else {
        UNIX_EPOCH.checked_sub(magnitude)
    }
}

fn digits(bytes: &[u8], start: usize, count: usize) -> Option<u64> {
    let slice = bytes.get(start..start + count)?;
    slice.iter().try_fold(0u64, |value, byte| {
        byte.is_ascii_digit()
            .then(|| value * 10 + u64::from(byte - b'0'))
    })
}

fn is_leap_year(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = i64::from(if month > 2 { month - 3 } else { month + 9 });
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip_over_many_years() {
        for days in (-800_000..800_000).step_by(37) {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(
                days_from_civil(year, month, day),
                days,
                "{year}-{month}-{day}"
            );
        }
    }

    #[test]
    fn known_instants() {
        assert_eq!(format_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::new(1_796_026_663, 123_999_999);
        assert_eq!(format_rfc3339(t), "2026-11-30T08:17:43.123Z");
        assert_eq!(
            parse_rfc3339("2026-11-30T08:17:43.123Z"),
            Some(UNIX_EPOCH + Duration::new(1_796_026_663, 123_000_000))
        );
        assert_eq!(
            parse_rfc3339("2026-11-30T09:17:43+01:00"),
            Some(UNIX_EPOCH + Duration::from_secs(1_796_026_663))
        );
        assert_eq!(
            format_rfc3339(UNIX_EPOCH - Duration::from_millis(1)),
            "1969-12-31T23:59:59.999Z"
        );
        assert_eq!(
            parse_rfc3339("1969-12-31T23:59:59.999Z"),
            Some(UNIX_EPOCH - Duration::from_millis(1))
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00Z")
                .map(format_rfc3339)
                .as_deref(),
            Some("2024-02-29T00:00:00.000Z")
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "2026-11-30",
            "2026-11-30T08:17:43",
            "2026-13-30T08:17:43Z",
            "2023-02-29T08:17:43Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T08:17:43.Z",
            "2026-11-30T08:17:43.123",
            "2026-11-30T08:17:43Zjunk",
            "2026-11-30T08:17:43+0100",
            "2026-11-30X08:17:43Z",
            "2026-1a-30T08:17:43Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
