//! Bounded downloads of many files, built only on [`Machine::run`].
//!
//! The behaviour is the reference library's `download_files` (REFERENCE.md section 3.1): a
//! guest `sh` inspects each path, a guest `tar` archives it, and the host parses the archive
//! under file, byte and time budgets. Any violation fails the whole call: no partial result.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use crate::validate::validate_guest_path;
use crate::{Command, Error, ExitReason, Machine};

/// Budgets of [`download_files`]. In JSON the timeout is in (fractional) seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DownloadLimits {
    /// Most entries in the result.
    pub max_files: usize,
    /// Most bytes in the result, all files together.
    pub max_bytes: u64,
    /// Most bytes of any one file.
    pub max_file_bytes: u64,
    /// Deadline of each guest command (the inspection and the archive of each path).
    #[serde(with = "crate::serde_secs::required")]
    pub timeout: Duration,
}

impl Default for DownloadLimits {
    /// 1,000 files, 64 MiB in all, 16 MiB per file, 60 s per guest command.
    fn default() -> Self {
        Self {
            max_files: 1000,
            max_bytes: 64 << 20,
            max_file_bytes: 16 << 20,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Exit status of the inspection script for a missing path (or a non-file, non-directory).
const MISSING: i32 = 44;
/// Exit status of the inspection script when the path or an ancestor is a symlink.
const LINK: i32 = 45;

const INSPECT: &str = r#"p=$1; a=; rest=${p#/}
while [ -n "$rest" ]; do
  c=${rest%%/*}
  if [ "$c" = "$rest" ]; then rest=; else rest=${rest#*/}; fi
  a=$a/$c
  if [ -L "$a" ]; then exit 45; fi
done
if [ -d "$p" ]; then echo directory; elif [ -f "$p" ]; then echo file; else exit 44; fi"#;

/// Reads the regular files at `paths` (files, or directories read recursively) out of
/// `machine` into a map from absolute guest path to bytes.
///
/// For each path in order: a missing path (or one that is neither file nor directory) is
/// skipped; a path that is, or lies below, a symlink is refused; a directory's regular files
/// and hard links are read, its symlinks and subdirectory entries ignored (never followed).
/// A hard link becomes its own key with its target's bytes. A key listed twice is counted
/// once. Needs `sh` and `tar` in the guest and runs as the default user.
///
/// # Errors
/// - [`Error::InvalidInput`]: a path is not absolute and normalised, or the archive holds a
///   member name that is absolute, has `..`, or (for a file) is not the requested path;
/// - [`Error::Transfer`]: a symlink in the way ("links are not allowed"), a member that is
///   not a regular file or hard link, a file over `max_file_bytes`, a hard link to a file not
///   earlier in the archive, an archive over its budget
///   (`max_bytes + 1 MiB + 1 KiB × max_files`), a failed or timed-out guest command, or an
///   unreadable archive;
/// - [`Error::DownloadLimitExceeded`]: the result would exceed `max_files` or `max_bytes`;
/// - whatever [`Machine::run`] returns (e.g. [`Error::Closed`]).
pub async fn download_files(
    machine: &dyn Machine,
    paths: &[&str],
    limits: DownloadLimits,
) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    for path in paths {
        validate_guest_path(path)?;
    }
    let mut result: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut total: u64 = 0;
    for &path in paths {
        let inspect = machine
            .run(
                Command::from_argv(["sh", "-c", INSPECT, "sh", path])
                    .timeout(limits.timeout)
                    .output_limit_bytes(64),
            )
            .await?;
        let kind = match (inspect.reason, inspect.exit_code) {
            (ExitReason::Exited, Some(MISSING)) => continue,
            (ExitReason::Exited, Some(0)) if !inspect.stdout_truncated => {
                match &inspect.stdout[..] {
                    b"directory\n" => Kind::Directory,
                    b"file\n" => Kind::File,
                    other => {
                        return Err(Error::transfer(
                            path,
                            format!(
                                "unexpected inspection output {:?}",
                                String::from_utf8_lossy(other)
                            ),
                        ))
                    }
                }
            }
            (ExitReason::Exited, Some(LINK)) => {
                return Err(Error::transfer(
                    path,
                    "the path or an ancestor is a symlink: links are not allowed",
                ))
            }
            _ => {
                return Err(Error::transfer(
                    path,
                    format!(
                        "inspection failed ({:?}, exit {:?}): links are not allowed or the path is unreadable",
                        inspect.reason, inspect.exit_code
                    ),
                ))
            }
        };
        let (base, name) = match kind {
            Kind::Directory => (path.to_string(), ".".to_string()),
            Kind::File => {
                let (parent, file) = path.rsplit_once('/').expect("validated absolute path");
                let parent = if parent.is_empty() { "/" } else { parent };
                (parent.to_string(), file.replace('\\', "\\\\"))
            }
        };
        let archive_limit = limits.max_bytes.saturating_add(1 << 20).saturating_add(
            u64::try_from(limits.max_files)
                .unwrap_or(u64::MAX)
                .saturating_mul(1024),
        );
        let archived = machine
            .run(
                Command::from_argv(["tar", "-cf", "-", "-C", &base, "--", &name])
                    .timeout(limits.timeout)
                    .output_limit_bytes(archive_limit.saturating_add(1)),
            )
            .await?;
        if archived.reason != ExitReason::Exited
            || archived.exit_code != Some(0)
            || archived.stdout_truncated
            || archived.stdout.len() as u64 > archive_limit
        {
            let stderr = String::from_utf8_lossy(&archived.stderr);
            let tail: String = stderr
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Err(Error::transfer(
                path,
                format!(
                    "archiving failed or exceeded the archive budget of {archive_limit} bytes ({:?}, exit {:?}): {}",
                    archived.reason, archived.exit_code, tail.trim_end()
                ),
            ));
        }
        read_archive(
            &archived.stdout,
            path,
            &base,
            kind,
            &limits,
            &mut result,
            &mut total,
        )?;
    }
    Ok(result)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Directory,
    File,
}

/// Joins a relative archive member name onto `base` and normalises `.` components;
/// `None` for an absolute name or one with `..`.
fn member_key(base: &str, name: &str) -> Option<String> {
    if name.starts_with('/') {
        return None;
    }
    let mut key = base.trim_end_matches('/').to_string();
    for component in name.split('/') {
        match component {
            "" | "." => {}
            ".." => return None,
            c => {
                key.push('/');
                key.push_str(c);
            }
        }
    }
    if key.is_empty() {
        key.push('/');
    }
    Some(key)
}

fn read_archive(
    bytes: &[u8],
    path: &str,
    base: &str,
    kind: Kind,
    limits: &DownloadLimits,
    result: &mut BTreeMap<String, Vec<u8>>,
    total: &mut u64,
) -> Result<(), Error> {
    let bad = |e: std::io::Error| Error::transfer(path, format!("unreadable archive: {e}"));
    let mut archive = tar::Archive::new(bytes);
    // Keys of regular files seen earlier in this archive, for hard links.
    let mut seen: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let name_bytes = entry.path_bytes().into_owned();
        let name = String::from_utf8(name_bytes)
            .map_err(|_| Error::transfer(path, "an archive member name is not UTF-8"))?;
        let key = member_key(base, &name).ok_or_else(|| {
            Error::invalid(format!(
                "archive member {name:?} of {path} is not a safe relative name"
            ))
        })?;
        let entry_type = entry.header().entry_type();
        let data = if entry_type.is_dir() || entry_type.is_symlink() {
            continue;
        } else if entry_type.is_file() {
            let size = entry.size();
            if size > limits.max_file_bytes {
                return Err(Error::transfer(
                    &key,
                    format!(
                        "file of {size} bytes exceeds max_file_bytes {}",
                        limits.max_file_bytes
                    ),
                ));
            }
            let mut data = Vec::with_capacity(size as usize);
            entry.read_to_end(&mut data).map_err(bad)?;
            data
        } else if entry_type.is_hard_link() {
            let target = entry
                .link_name_bytes()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let target_key = member_key(base, &target).ok_or_else(|| {
                Error::transfer(
                    &key,
                    format!("hard link target {target:?} is not a safe relative name"),
                )
            })?;
            seen.get(&target_key).cloned().ok_or_else(|| {
                Error::transfer(
                    &key,
                    format!("hard link target {target:?} is not a file earlier in the archive"),
                )
            })?
        } else {
            return Err(Error::transfer(
                &key,
                format!(
                    "not a regular file (tar type {:?})",
                    entry_type.as_byte() as char
                ),
            ));
        };
        if kind == Kind::File && key != path {
            return Err(Error::invalid(format!(
                "archive member {key} does not match the requested file {path}"
            )));
        }
        seen.insert(key.clone(), data.clone());
        if result.contains_key(&key) {
            continue;
        }
        let size = data.len() as u64;
        if result.len() >= limits.max_files || total.saturating_add(size) > limits.max_bytes {
            return Err(Error::DownloadLimitExceeded(format!(
                "{key} would exceed the file or byte budget ({} files, {} bytes)",
                limits.max_files, limits.max_bytes
            )));
        }
        *total += size;
        result.insert(key, data);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_json_round_trip() {
        let limits = DownloadLimits::default();
        let json = serde_json::to_string(&limits).unwrap();
        assert!(json.contains(r#""timeout":60.0"#), "{json}");
        assert_eq!(
            serde_json::from_str::<DownloadLimits>(&json).unwrap(),
            limits
        );
    }

    #[test]
    fn member_keys() {
        assert_eq!(member_key("/app", "./a/b").unwrap(), "/app/a/b");
        assert_eq!(member_key("/app", "a").unwrap(), "/app/a");
        assert_eq!(member_key("/", "./x").unwrap(), "/x");
        assert_eq!(member_key("/", ".").unwrap(), "/");
        assert!(member_key("/app", "../x").is_none());
        assert!(member_key("/app", "/etc/passwd").is_none());
    }

    fn tar_with(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, kind, data, link) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            if let Some(link) = link {
                header.set_link_name(link).unwrap();
            }
            builder.append_data(&mut header, name, *data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn limits(max_files: usize, max_bytes: u64) -> DownloadLimits {
        DownloadLimits {
            max_files,
            max_bytes,
            max_file_bytes: 100,
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn archive_rules() {
        let archive = tar_with(&[
            ("./", tar::EntryType::Directory, b"", None),
            ("./a", tar::EntryType::Regular, b"answer\0", None),
            ("./alias", tar::EntryType::Link, b"", Some("./a")),
            (
                "./private",
                tar::EntryType::Symlink,
                b"",
                Some("/etc/passwd"),
            ),
        ]);
        let mut out = BTreeMap::new();
        let mut total = 0;
        read_archive(
            &archive,
            "/app",
            "/app",
            Kind::Directory,
            &limits(10, 100),
            &mut out,
            &mut total,
        )
        .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out["/app/a"], b"answer\0");
        assert_eq!(out["/app/alias"], b"answer\0");
        assert_eq!(total, 14);

        // Budgets: files and bytes.
        let mut out = BTreeMap::new();
        let err = read_archive(
            &archive,
            "/app",
            "/app",
            Kind::Directory,
            &limits(1, 100),
            &mut out,
            &mut 0,
        )
        .unwrap_err();
        assert!(matches!(err, Error::DownloadLimitExceeded(_)), "{err:?}");
        let err = read_archive(
            &archive,
            "/app",
            "/app",
            Kind::Directory,
            &limits(10, 10),
            &mut BTreeMap::new(),
            &mut 0,
        )
        .unwrap_err();
        assert!(matches!(err, Error::DownloadLimitExceeded(_)), "{err:?}");

        // A hard link to something not seen before, a device, an oversized file.
        for bad in [
            tar_with(&[("./alias", tar::EntryType::Link, b"", Some("./later"))]),
            tar_with(&[("./dev", tar::EntryType::Char, b"", None)]),
            tar_with(&[("./big", tar::EntryType::Regular, &[0u8; 101], None)]),
        ] {
            let err = read_archive(
                &bad,
                "/app",
                "/app",
                Kind::Directory,
                &limits(10, 1000),
                &mut BTreeMap::new(),
                &mut 0,
            )
            .unwrap_err();
            assert!(matches!(err, Error::Transfer { .. }), "{err:?}");
        }
        // A file selection must match the requested path exactly.
        let one = tar_with(&[("other", tar::EntryType::Regular, b"x", None)]);
        let err = read_archive(
            &one,
            "/app/f",
            "/app",
            Kind::File,
            &limits(10, 100),
            &mut BTreeMap::new(),
            &mut 0,
        )
        .unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
        assert!(read_archive(
            b"garbage that is not tar",
            "/x",
            "/",
            Kind::Directory,
            &limits(1, 1),
            &mut BTreeMap::new(),
            &mut 0
        )
        .is_err());
    }
}
