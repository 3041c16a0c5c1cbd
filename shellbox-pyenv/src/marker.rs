//! The completion marker `root/.complete`: what a finished root was built from.

use std::path::PathBuf;

/// The parsed marker. Text form, one `key value` line each, in this order:
///
/// ```text
/// python 3.12.12
/// lock sha256 <64 lowercase hex digits>
/// base_prefix /root/.pyenv/versions/3.11.7      (interpreter builds only)
/// ```
///
/// The first two lines are the reference library's marker; `base_prefix` records the
/// resolved `sys.base_prefix` of an external interpreter so a later
/// [`PythonEnvironment::open`](crate::PythonEnvironment::open) knows what to mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marker {
    pub python: String,
    pub lock_sha256: String,
    pub base_prefix: Option<PathBuf>,
}

impl Marker {
    pub(crate) fn render(&self) -> String {
        let mut text = format!("python {}\nlock sha256 {}\n", self.python, self.lock_sha256);
        if let Some(prefix) = &self.base_prefix {
            text.push_str(&format!("base_prefix {}\n", prefix.display()));
        }
        text
    }

    pub(crate) fn parse(text: &str) -> Result<Marker, String> {
        let mut lines = text.lines();
        let python = lines
            .next()
            .and_then(|l| l.strip_prefix("python "))
            .filter(|v| !v.is_empty())
            .ok_or("the first line is not `python <version or path>`")?;
        let lock_sha256 = lines
            .next()
            .and_then(|l| l.strip_prefix("lock sha256 "))
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or("the second line is not `lock sha256 <hex>`")?;
        let base_prefix = match lines.next() {
            None => None,
            Some(line) => Some(PathBuf::from(
                line.strip_prefix("base_prefix /")
                    .map(|rest| format!("/{rest}"))
                    .ok_or("the third line is not `base_prefix <absolute path>`")?,
            )),
        };
        if lines.next().is_some() {
            return Err("unexpected lines after the marker's fields".into());
        }
        Ok(Marker {
            python: python.to_string(),
            lock_sha256: lock_sha256.to_string(),
            base_prefix,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let hex = "ab".repeat(32);
        let managed = Marker {
            python: "3.12.12".into(),
            lock_sha256: hex.clone(),
            base_prefix: None,
        };
        assert_eq!(
            managed.render(),
            format!("python 3.12.12\nlock sha256 {hex}\n")
        );
        assert_eq!(Marker::parse(&managed.render()).unwrap(), managed);
        let external = Marker {
            python: "/opt/py/bin/python3".into(),
            lock_sha256: hex.clone(),
            base_prefix: Some("/opt/py".into()),
        };
        assert_eq!(
            external.render(),
            format!("python /opt/py/bin/python3\nlock sha256 {hex}\nbase_prefix /opt/py\n")
        );
        assert_eq!(Marker::parse(&external.render()).unwrap(), external);
        for bad in [
            String::new(),
            "python 3.12.12\n".to_string(),
            format!("python 3.12.12\nlock sha256 {}\n", "zz".repeat(32)),
            format!("python 3.12.12\nlock md5 {hex}\n"),
            format!("python 3.12.12\nlock sha256 {hex}\nbase_prefix rel\n"),
            format!("python 3.12.12\nlock sha256 {hex}\nbase_prefix /x\nmore\n"),
        ] {
            assert!(Marker::parse(&bad).is_err(), "{bad:?}");
        }
    }
}
