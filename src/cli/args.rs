//! Parsers for the CLI's value syntaxes: durations, byte sizes, `A:B` pairs.

use std::path::PathBuf;
use std::time::Duration;

/// The forms [`parse_duration`] accepts, for error messages.
const DURATION_FORMS: &str =
    "use seconds (30, 1.5, 1e3) or a number with ms, s, m or h (250ms, 2m)";

/// Parses `30s`, `1.5s`, `250ms`, `2m`, `1h` or plain (fractional, or exponent) seconds.
///
/// Refused: no number, an unknown unit, NaN, negative values ("negative"), and durations
/// longer than [`Duration::MAX`] or infinite ("too large").
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = text.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| !v.is_nan())
        .ok_or_else(|| format!("invalid duration {text:?} ({DURATION_FORMS})"))?;
    if value < 0.0 {
        return Err(format!(
            "invalid duration {text:?}: negative durations are refused (0 means no limit)"
        ));
    }
    let duration = Duration::try_from_secs_f64(value * scale).map_err(|_| {
        format!("duration {text:?} is too large (durations must be below 2^64 seconds)")
    })?;
    if duration.is_zero() && value > 0.0 {
        return Err(format!(
            "duration {text:?} is shorter than a nanosecond (0 means no limit)"
        ));
    }
    Ok(duration)
}

/// A command deadline from `--timeout`: `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeout(pub(crate) Option<Duration>);

/// Longer timeouts than this mean no limit: no command outlives it, and deadlines this far
/// ahead overflow clocks (`Instant + Duration`).
pub(crate) const TIMEOUT_SATURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Parses `--timeout`: [`parse_duration`]'s forms; `0` and anything longer than
/// [`TIMEOUT_SATURATION`] (100 years) mean no limit, as `0` does for timeout(1); values past
/// [`Duration::MAX`] (about 5.8e11 years) or infinite are refused as "too large".
pub(crate) fn parse_timeout(text: &str) -> Result<Timeout, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() || duration > TIMEOUT_SATURATION {
        Ok(Timeout(None))
    } else {
        Ok(Timeout(Some(duration)))
    }
}

/// Parses a byte count: plain bytes, or with `B`, `KiB`, `MiB`, `GiB` (also `K`, `M`, `G`).
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let units: [(&str, u64); 8] = [
        ("KiB", 1 << 10),
        ("MiB", 1 << 20),
        ("GiB", 1 << 30),
        ("K", 1 << 10),
        ("M", 1 << 20),
        ("G", 1 << 30),
        ("B", 1),
        ("", 1),
    ];
    for (suffix, scale) in units {
        if let Some(number) = text.strip_suffix(suffix) {
            if number.is_empty() {
                continue;
            }
            let value: u64 = number.trim().parse().map_err(|_| {
                format!("invalid size {text:?} (use bytes, or a whole number with KiB, MiB or GiB)")
            })?;
            return value
                .checked_mul(scale)
                .ok_or_else(|| format!("size {text:?} is too large"));
        }
    }
    Err(format!("invalid size {text:?}"))
}

/// A host path paired with a guest path, e.g. `--upload ./in:/workspace/in`. The guest side
/// starts at the last `:` followed by `/`, so host paths may hold `:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostGuest {
    /// The host path, as given (relative to the current directory).
    pub(crate) host: PathBuf,
    /// The absolute machine path.
    pub(crate) guest: String,
}

/// Parses `HOST:GUEST` where GUEST is absolute.
pub(crate) fn parse_host_guest(text: &str) -> Result<HostGuest, String> {
    let at = text
        .rmatch_indices(":/")
        .next()
        .map(|(i, _)| i)
        .ok_or_else(|| {
            format!("expected HOST_PATH:MACHINE_PATH with an absolute machine path, got {text:?}")
        })?;
    let (host, guest) = (&text[..at], &text[at + 1..]);
    if host.is_empty() {
        return Err(format!("empty host path in {text:?}"));
    }
    Ok(HostGuest {
        host: PathBuf::from(host),
        guest: guest.to_string(),
    })
}

/// Parses `GUEST:HOST` where GUEST is absolute; the host side starts after the first `:`.
pub(crate) fn parse_guest_host(text: &str) -> Result<HostGuest, String> {
    let (guest, host) = text
        .split_once(':')
        .ok_or_else(|| format!("expected MACHINE_PATH:HOST_PATH, got {text:?}"))?;
    if !guest.starts_with('/') {
        return Err(format!("the machine path in {text:?} must be absolute"));
    }
    if host.is_empty() {
        return Err(format!("empty host path in {text:?}"));
    }
    Ok(HostGuest {
        host: PathBuf::from(host),
        guest: guest.to_string(),
    })
}

/// Parses `KEY=VALUE`.
pub(crate) fn parse_env(text: &str) -> Result<(String, String), String> {
    let (k, v) = text
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))?;
    Ok((k.to_string(), v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1e3").unwrap(), Duration::from_secs(1000));
        for bad in ["", "s", "abc", "1x", "NaN"] {
            assert!(parse_duration(bad).unwrap_err().contains("250ms"), "{bad}");
        }
        for negative in ["-1", "-0.5s", "-2m"] {
            let err = parse_duration(negative).unwrap_err();
            assert!(err.contains("negative"), "{negative}: {err}");
        }
        for large in ["1e20", "inf", "1e300h"] {
            let err = parse_duration(large).unwrap_err();
            assert!(err.contains("too large"), "{large}: {err}");
        }
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("0").unwrap(), Timeout(None));
        assert_eq!(parse_timeout("0s").unwrap(), Timeout(None));
        assert_eq!(parse_timeout("1e19").unwrap(), Timeout(None));
        for tiny in ["1e-10", "0.0000001ms"] {
            let err = parse_timeout(tiny).unwrap_err();
            assert!(err.contains("shorter than a nanosecond"), "{tiny}: {err}");
        }
        assert_eq!(
            parse_timeout("90").unwrap(),
            Timeout(Some(Duration::from_secs(90)))
        );
        assert!(parse_timeout("-1").unwrap_err().contains("negative"));
        assert!(parse_timeout("1e20").unwrap_err().contains("too large"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("100").unwrap(), 100);
        assert_eq!(parse_bytes("4KiB").unwrap(), 4096);
        assert_eq!(parse_bytes("2MiB").unwrap(), 2 << 20);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("10B").unwrap(), 10);
        for bad in ["", "KiB", "-1", "1.5MiB", "99999999999999999999GiB", "x"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pairs() {
        let hg = parse_host_guest("./a:b:/w/x").unwrap();
        assert_eq!(hg.host, PathBuf::from("./a:b"));
        assert_eq!(hg.guest, "/w/x");
        assert!(parse_host_guest("noguest").is_err());
        assert!(parse_host_guest(":/x").is_err());
        let gh = parse_guest_host("/w/out.txt:./res:1").unwrap();
        assert_eq!(
            (gh.guest.as_str(), gh.host),
            ("/w/out.txt", PathBuf::from("./res:1"))
        );
        assert!(parse_guest_host("rel:x").is_err());
        assert!(parse_guest_host("/x:").is_err());
        assert_eq!(parse_env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert!(parse_env("A").is_err());
    }
}
