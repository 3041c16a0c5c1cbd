//! A structured fuzzer for the transfer code every backend shares: `archive::unpack_safe`
//! (untrusted tar streams), `pack_path` → `unpack_safe` round trips, and guest-path
//! validation.
//!
//! Properties checked for every case:
//! - `unpack_safe` never panics; whatever it returns, nothing is written outside the target
//!   (the sandbox holding the target contains only it and an untouched canary), and every
//!   symlink left under the target resolves inside it; when it fails, a target that did not
//!   exist before does not exist after (what it created is removed);
//! - a generated tree packed with `pack_path` and unpacked with `unpack_safe` comes back
//!   equal: names, kinds, contents, modes (`0o1777`) and link texts;
//! - `validate_guest_path` accepts exactly the normalised absolute paths (an independent
//!   oracle built on `std::path::Path::components`).
//!
//! The seed corpus in `tests/fuzz-corpus/` (tar streams of past findings: issue 16's
//! climbing link left after an error, the 2⁶³ mtime) is replayed first, then mutated and
//! extended with generated streams.
//!
//! `cargo test -p shellbox-core --test fuzz_archive` runs it for 3 s (seed 1). For an hour:
//! `SHELLBOX_FUZZ_SECS=3600 cargo test --release -p shellbox-core --test fuzz_archive --
//! --nocapture`; `SHELLBOX_FUZZ_SEED=n` picks another seed. A failure prints the seed, the
//! case number and writes the stream to `$TMPDIR/shellbox-fuzz-archive-failure.tar`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use shellbox_core::archive::{pack_path, unpack_safe, UnpackLayout};
use shellbox_core::validate::validate_guest_path;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

fn budget() -> Duration {
    let secs = std::env::var("SHELLBOX_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(3);
    Duration::from_secs(secs)
}

fn seed() -> u64 {
    std::env::var("SHELLBOX_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1)
}

const COMPONENTS: &[&str] = &["a", "b", "m", "x", "d", ".", "..", "", "root", "a b", "λ"];
const LINK_PARTS: &[&str] = &["a", "b", "m", "x", ".", "..", "", "d", "root"];

/// One raw tar entry: names are written into the header bytes as they are, so unsafe
/// names reach the unpacker.
struct RawEntry {
    name: String,
    kind: tar::EntryType,
    data: Vec<u8>,
    link: Option<String>,
    mode: u32,
    mtime: u64,
}

fn raw_stream(entries: &[RawEntry]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(e.kind);
        h.set_mode(e.mode);
        h.set_size(e.data.len() as u64);
        h.set_mtime(e.mtime);
        {
            let gnu = h.as_gnu_mut().unwrap();
            let n = e.name.len().min(gnu.name.len());
            gnu.name[..n].copy_from_slice(&e.name.as_bytes()[..n]);
            if let Some(l) = &e.link {
                let n = l.len().min(gnu.linkname.len());
                gnu.linkname[..n].copy_from_slice(&l.as_bytes()[..n]);
            }
        }
        h.set_cksum();
        b.append(&h, &e.data[..]).unwrap();
    }
    b.into_inner().unwrap()
}

fn gen_name(rng: &mut Rng, root: Option<&str>) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(r) = root {
        parts.push(r.to_string());
    }
    for _ in 0..rng.below(4) {
        parts.push(rng.pick(COMPONENTS).to_string());
    }
    let mut name = parts.join("/");
    if rng.chance(5) {
        name.insert(0, '/');
    }
    if rng.chance(10) {
        name.push('/');
    }
    if name.is_empty() {
        name = ".".into();
    }
    name
}

fn gen_link(rng: &mut Rng) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for _ in 0..=rng.below(4) {
        parts.push(rng.pick(LINK_PARTS));
    }
    let mut link = parts.join("/");
    if rng.chance(10) {
        link.insert(0, '/');
    }
    link
}

fn gen_stream(rng: &mut Rng) -> (Vec<u8>, UnpackLayout) {
    let layout = if rng.chance(50) {
        UnpackLayout::StripRoot
    } else {
        UnpackLayout::AsIs
    };
    let root = (layout == UnpackLayout::StripRoot && rng.chance(90)).then_some("root");
    let mut entries = Vec::new();
    if root.is_some() && rng.chance(80) {
        entries.push(RawEntry {
            name: "root/".into(),
            kind: tar::EntryType::Directory,
            data: Vec::new(),
            link: None,
            mode: 0o755,
            mtime: 0,
        });
    }
    for _ in 0..rng.below(10) {
        use tar::EntryType::*;
        let kind = [
            Regular, Regular, Directory, Directory, Symlink, Symlink, Symlink, Link, Fifo, Char,
        ][rng.below(10)];
        let data = if kind == Regular {
            vec![b'x'; rng.below(3)]
        } else {
            Vec::new()
        };
        let link = matches!(kind, Symlink | Link).then(|| {
            if kind == Link && rng.chance(70) {
                gen_name(rng, root)
            } else {
                gen_link(rng)
            }
        });
        let mtime = match rng.below(10) {
            0 => u64::MAX,
            1 => 1 << 63,
            2 => (1 << 33) + rng.next() % 1000,
            _ => rng.next() % 2_000_000_000,
        };
        let mode = [0o644, 0o755, 0o000, 0o500, 0o4755, 0o1777][rng.below(6)];
        entries.push(RawEntry {
            name: gen_name(rng, root),
            kind,
            data,
            link,
            mode,
            mtime,
        });
    }
    let mut data = raw_stream(&entries);
    if rng.chance(15) && !data.is_empty() {
        // Byte-level mutation of a well-formed stream.
        for _ in 0..=rng.below(4) {
            let i = rng.below(data.len());
            data[i] = rng.next() as u8;
        }
    }
    if rng.chance(5) {
        let n = rng.below(data.len() + 1);
        data.truncate(n);
    }
    (data, layout)
}

/// Every path under `dir` (not following links), relative.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p.clone());
            }
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    out.sort();
    out
}

fn make_writable(dir: &Path) {
    let Ok(m) = fs::symlink_metadata(dir) else {
        return;
    };
    if !m.is_dir() {
        return;
    }
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            make_writable(&e.path());
        }
    }
}

/// Checks the unpack properties for one stream; `Err` describes the violation.
fn check_unpack(data: &[u8], layout: UnpackLayout, existing: bool) -> Result<(), String> {
    let sandbox = tempfile::tempdir().map_err(|e| e.to_string())?;
    let canary = sandbox.path().join("outside");
    fs::create_dir(&canary).unwrap();
    fs::write(canary.join("c"), b"canary").unwrap();
    let target = sandbox.path().join("t");
    if existing {
        fs::create_dir(&target).unwrap();
        fs::write(target.join("pre"), b"pre").unwrap();
    }
    let result = std::panic::catch_unwind(|| unpack_safe(data, &target, layout))
        .map_err(|_| "unpack_safe panicked".to_string())?;
    let mut top: Vec<_> = fs::read_dir(sandbox.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    let allowed: &[&[&str]] = &[&["outside"], &["outside", "t"]];
    if !allowed.contains(
        &top.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
    ) {
        return Err(format!("wrote beside the target: {top:?}"));
    }
    if walk(&canary) != [PathBuf::from("c")] || fs::read(canary.join("c")).unwrap() != b"canary" {
        return Err("changed the canary directory".into());
    }
    if result.is_err() && !existing && target.exists() {
        return Err(format!(
            "a failed unpack left the new target: {:?} ({:?})",
            walk(&target),
            result
        ));
    }
    let real_target = fs::canonicalize(&target).ok();
    if let Some(real_target) = &real_target {
        for rel in walk(&target) {
            let p = target.join(&rel);
            if fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
                if let Ok(real) = fs::canonicalize(&p) {
                    if !real.starts_with(real_target) {
                        return Err(format!(
                            "symlink {} resolves outside to {} ({result:?})",
                            rel.display(),
                            real.display()
                        ));
                    }
                }
            }
        }
    }
    make_writable(sandbox.path());
    Ok(())
}

/// A generated tree under `dir`: directories, files, links that stay inside.
fn gen_tree(rng: &mut Rng, dir: &Path, depth: usize, files: &mut Vec<PathBuf>) {
    for i in 0..rng.below(5) {
        let name = format!("{}{i}", rng.pick(&["f", "d", "l", "é", "sp ace"]));
        let p = dir.join(&name);
        match rng.below(4) {
            0 | 1 => {
                let len = [0, 1, 100, 70_000][rng.below(4)];
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                fs::write(&p, data).unwrap();
                let mode = [0o644, 0o600, 0o755, 0o1755][rng.below(4)];
                fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
                files.push(p);
            }
            2 if depth < 4 => {
                fs::create_dir(&p).unwrap();
                gen_tree(rng, &p, depth + 1, files);
                let mode = [0o755, 0o750, 0o700][rng.below(3)];
                fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            }
            _ => {
                // A link to an earlier file at the same level or below stays inside.
                let text = files
                    .iter()
                    .filter_map(|f| f.strip_prefix(dir).ok())
                    .next()
                    .map(|r| r.to_path_buf())
                    .unwrap_or_else(|| PathBuf::from("."));
                std::os::unix::fs::symlink(text, &p).unwrap();
            }
        }
    }
}

/// (relative path, kind, mode, content or link text) of every entry under `dir`.
fn describe(dir: &Path) -> Vec<(PathBuf, char, u32, Vec<u8>)> {
    walk(dir)
        .into_iter()
        .map(|rel| {
            let p = dir.join(&rel);
            let m = fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                let t = fs::read_link(&p).unwrap();
                (rel, 'l', 0, t.as_os_str().as_encoded_bytes().to_vec())
            } else if m.is_dir() {
                (rel, 'd', m.permissions().mode() & 0o1777, Vec::new())
            } else {
                (
                    rel,
                    'f',
                    m.permissions().mode() & 0o1777,
                    fs::read(&p).unwrap(),
                )
            }
        })
        .collect()
}

fn check_round_trip(rng: &mut Rng) -> Result<(), String> {
    let src = tempfile::tempdir().unwrap();
    let top = src.path().join("top");
    fs::create_dir(&top).unwrap();
    gen_tree(rng, &top, 0, &mut Vec::new());
    let data = pack_path(&top, Some("top"), Vec::new()).map_err(|e| e.to_string())?;
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("copy");
    unpack_safe(&data[..], &target, UnpackLayout::StripRoot).map_err(|e| e.to_string())?;
    let (a, b) = (describe(&top), describe(&target));
    if a != b {
        return Err(format!("round trip differs:\n{a:?}\n{b:?}"));
    }
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o1777;
    if mode(&top) != mode(&target) {
        return Err("the root's mode differs".into());
    }
    make_writable(src.path());
    make_writable(out.path());
    Ok(())
}

/// The independent oracle: absolute, no NUL, and exactly what `Path::components` rebuilds,
/// without `..`.
fn is_normalised(p: &str) -> bool {
    if !p.starts_with('/') || p.contains('\0') {
        return false;
    }
    let mut rebuilt = String::new();
    for c in Path::new(p).components() {
        match c {
            Component::RootDir => {}
            Component::Normal(s) => {
                rebuilt.push('/');
                rebuilt.push_str(s.to_str().unwrap());
            }
            _ => return false,
        }
    }
    if rebuilt.is_empty() {
        rebuilt.push('/');
    }
    rebuilt == p
}

fn gen_path(rng: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "/", "/", "/", "a", "b", ".", "..", "\0", "é", " ", "a.b", "...",
    ];
    let mut s = String::new();
    for _ in 0..rng.below(8) {
        s.push_str(rng.pick(PIECES));
    }
    s
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus");
    let mut seeds: Vec<_> = fs::read_dir(&dir)
        .expect("the seed corpus is committed")
        .map(|e| e.unwrap().path())
        .collect();
    seeds.sort();
    seeds
        .into_iter()
        .map(|p| (p.display().to_string(), fs::read(&p).unwrap()))
        .collect()
}

fn fail(seed: u64, case: u64, data: &[u8], why: &str) -> ! {
    let path = std::env::temp_dir().join("shellbox-fuzz-archive-failure.tar");
    let _ = fs::write(&path, data);
    panic!(
        "seed {seed}, case {case}: {why} (stream written to {})",
        path.display()
    );
}

#[test]
fn fuzz_archive_and_guest_paths() {
    let seed = seed();
    let mut rng = Rng(seed);
    let seeds = corpus();
    assert!(!seeds.is_empty());
    for (name, data) in &seeds {
        for layout in [UnpackLayout::AsIs, UnpackLayout::StripRoot] {
            for existing in [false, true] {
                if let Err(why) = check_unpack(data, layout, existing) {
                    panic!("seed file {name} ({layout:?}, existing {existing}): {why}");
                }
            }
        }
    }
    let deadline = Instant::now() + budget();
    let (mut streams, mut trips, mut paths) = (0u64, 0u64, 0u64);
    let mut case = 0u64;
    while Instant::now() < deadline {
        case += 1;
        match rng.below(10) {
            0 => {
                if let Err(why) = check_round_trip(&mut rng) {
                    panic!("seed {seed}, case {case}: {why}");
                }
                trips += 1;
            }
            1 => {
                for _ in 0..200 {
                    let p = gen_path(&mut rng);
                    let ok = validate_guest_path(&p).is_ok();
                    if ok != is_normalised(&p) {
                        panic!("seed {seed}, case {case}: validate_guest_path({p:?}) = {ok}");
                    }
                    paths += 1;
                }
            }
            _ => {
                let (mut data, layout) = gen_stream(&mut rng);
                if rng.chance(20) {
                    // Mutate a corpus seed instead.
                    let (_, s) = &seeds[rng.below(seeds.len())];
                    data = s.clone();
                    for _ in 0..=rng.below(8) {
                        let i = rng.below(data.len());
                        data[i] = rng.next() as u8;
                    }
                }
                let existing = rng.chance(30);
                if let Err(why) = check_unpack(&data, layout, existing) {
                    fail(
                        seed,
                        case,
                        &data,
                        &format!("{layout:?}, existing {existing}: {why}"),
                    );
                }
                streams += 1;
            }
        }
    }
    eprintln!(
        "fuzz_archive: seed {seed}: {streams} streams, {trips} round trips, {paths} guest paths"
    );
}
