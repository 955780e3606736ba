//! Durations on command lines, in the form Kubernetes tools use: `500ms`, `30s`, `2m`, `1h`,
//! or combinations such as `1m30s`, up to [`MAX_DURATION`] (a week): every duration here is a
//! timeout or an interval added to `Instant::now()`, which panics on overflow.

use std::time::Duration;

/// The longest duration accepted: a week.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A duration that could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?}: use e.g. 500ms, 30s, 2m, 1m30s (at most 168h)")]
pub struct DurationError(pub String);

/// Parses `500ms`, `30s`, `2m`, `1h`, `1m30s`. A bare number or an empty string is an error.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let err = || DurationError(text.to_owned());
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
        if digits == 0 {
            return Err(err());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(value),
            "s" => Duration::from_secs(value),
            "m" => Duration::from_secs(value.checked_mul(60).ok_or_else(err)?),
            "h" => Duration::from_secs(value.checked_mul(3600).ok_or_else(err)?),
            _ => return Err(err()),
        };
        total = total
            .checked_add(part)
            .filter(|t| *t <= MAX_DURATION)
            .ok_or_else(err)?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_combinations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("168h"), Ok(MAX_DURATION));
        for bad in [
            "",
            "10",
            "s",
            "1x",
            "-1s",
            "1.5s",
            " 1s",
            "169h",
            "604801s",
            "18446744073709551615s",
            "18446744073709551616s",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
