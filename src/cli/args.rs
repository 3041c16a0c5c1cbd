//! Parsers for the CLI's value syntaxes: durations, byte sizes, `A:B` pairs.

use std::path::PathBuf;
use std::time::Duration;

/// Parses `30s`, `1.5s`, `250ms`, `2m`, `1h` or plain (fractional) seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
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
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("invalid duration {text:?} (use e.g. 30s, 1.5s, 2m, 250ms or seconds)")
    })?;
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("invalid duration {text:?}: must be finite and not negative"))
}

/// Parses a byte count: plain bytes, or with `B`, `KiB`, `MiB`, `GiB` (also `K`, `M`, `G`).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
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
pub struct HostGuest {
    pub host: PathBuf,
    pub guest: String,
}

/// Parses `HOST:GUEST` where GUEST is absolute.
pub fn parse_host_guest(text: &str) -> Result<HostGuest, String> {
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
pub fn parse_guest_host(text: &str) -> Result<HostGuest, String> {
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
pub fn parse_env(text: &str) -> Result<(String, String), String> {
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
        for bad in ["", "s", "-1", "abc", "1x", "inf", "NaN"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
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
