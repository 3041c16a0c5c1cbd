//! What a resolve makes in the package cache is writable by its owner only, whatever the
//! owner's umask (second break-it pass of issue 12: under umask 000 the cache root, the
//! environment and its `site-packages` were 0777 and the lock 0666, and another user
//! planted a `.pth` file that the next machine imported). Its own test binary: the umask is
//! the whole process's.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use shellbox_pyenv::{resolve_python_environment_with, ResolveOptions};

/// The first path under `dir` (itself included) that group or others may write.
fn writable_by_others(dir: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(dir).ok()?;
    if !meta.file_type().is_symlink() && meta.permissions().mode() & 0o022 != 0 {
        return Some(format!("{} {:o}", dir.display(), meta.permissions().mode()));
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(dir).ok()? {
            if let Some(found) = writable_by_others(&entry.ok()?.path()) {
                return Some(found);
            }
        }
    }
    None
}

#[test]
fn the_cache_is_writable_by_its_owner_only_under_umask_000() {
    let test = "the_cache_is_writable_by_its_owner_only_under_umask_000";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let cache = dir.path().join("cache");
    let version = version_of(&python);
    let options = ResolveOptions::default()
        .python_interpreter(&python)
        .build(shellbox_pyenv::BuildOptions::default().uv(&uv));
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    let env = resolve_python_environment_with(&cache, &Vec::<String>::new(), &version, &options);
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let env = env.unwrap();
    assert!(env.root().starts_with(cache.canonicalize().unwrap()));
    assert_eq!(writable_by_others(&cache), None);
}
