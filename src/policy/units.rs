//! Parsing of the small value languages used in policies: durations, sizes, octal modes, rates.
#![forbid(unsafe_code)]

use std::time::Duration;

/// Parse `500ms`, `30s`, `5m`, `2h`, `1d`, or a sum like `1h30m`. A bare number is refused so
/// nobody has to guess the unit.
///
/// ```
/// use std::time::Duration;
/// use verbd::policy::units::parse_duration;
/// assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
/// assert!(parse_duration("90").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration (write e.g. 30s, 5m, 1h30m)".into());
    }
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 12 {
            return Err(format!("bad duration {text:?} (write e.g. 30s, 5m, 1h30m)"));
        }
        let n: u128 = rest[..digits]
            .parse()
            .map_err(|_| format!("bad duration {text:?}"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let millis_per = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => {
                return Err(format!(
                    "bad duration {text:?}: unit must be ms, s, m, h or d"
                ));
            }
        };
        rest = &rest[unit_len..];
        total = total
            .checked_add(n * millis_per)
            .ok_or_else(|| format!("duration {text:?} is too large"))?;
    }
    let millis = u64::try_from(total).map_err(|_| format!("duration {text:?} is too large"))?;
    Ok(Duration::from_millis(millis))
}

/// Parse `1MiB`, `256KiB`, `10MB`, `4096` (bytes).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(format!("bad size {text:?} (write e.g. 4096, 256KiB, 1MiB)"));
    }
    let n: u64 = s[..digits]
        .parse()
        .map_err(|_| format!("bad size {text:?}"))?;
    let mult: u64 = match s[digits..].trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "TiB" | "T" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(format!("bad size {text:?}: unknown unit {other:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// Parse an octal file mode such as `0660` or `0o660`.
pub fn parse_mode(text: &str) -> Result<u32, String> {
    let s = text.trim().trim_start_matches("0o");
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(format!(
            "bad mode {text:?} (write it in octal, e.g. \"0660\")"
        ));
    }
    u32::from_str_radix(s, 8).map_err(|_| format!("bad mode {text:?}"))
}

/// A rate limit `N/period`, e.g. `5/h`, `100/d`, `10/30m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} per {}s", self.count, self.per.as_secs())
    }
}

/// The longest period a rate may have: run history older than this is forgotten.
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(31 * 86_400);

/// The largest count a rate may have: the daemon keeps this many runs per verb and caller.
pub const MAX_RATE_COUNT: u32 = 10_000;

/// Parse `5/h`, `10/30m`, `100/d` (at most [`MAX_RATE_PERIOD`] and [`MAX_RATE_COUNT`]).
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let (n, period) = text
        .split_once('/')
        .ok_or_else(|| format!("bad rate {text:?} (write N/period, e.g. 5/h)"))?;
    let count: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("bad rate {text:?}: {n:?} is not a count"))?;
    let period = period.trim();
    let per = if period.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
        parse_duration(period)?
    } else {
        parse_duration(&format!("1{period}"))?
    };
    if per > MAX_RATE_PERIOD {
        return Err(format!(
            "bad rate {text:?}: the period may be at most {} days (the daemon keeps that much run history)",
            MAX_RATE_PERIOD.as_secs() / 86_400
        ));
    }
    if count == 0 || per.is_zero() {
        return Err(format!(
            "bad rate {text:?}: count and period must be positive"
        ));
    }
    if count > MAX_RATE_COUNT {
        return Err(format!(
            "bad rate {text:?}: the count may be at most {MAX_RATE_COUNT} (the daemon keeps that many runs per verb and caller)"
        ));
    }
    Ok(Rate { count, per })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        for bad in ["", "30", "s", "1x", "-1s", "1h 30m"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_modes_rates() {
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("1 PiB").is_err());
        assert_eq!(parse_mode("0660").unwrap(), 0o660);
        assert!(parse_mode("0999").is_err());
        assert_eq!(parse_rate("5/h").unwrap().per, Duration::from_secs(3600));
        assert_eq!(parse_rate("10/30m").unwrap().count, 10);
        assert!(parse_rate("0/h").is_err());
        assert_eq!(parse_rate("10000/d").unwrap().count, MAX_RATE_COUNT);
        assert!(parse_rate("10001/d").is_err());
    }
}
