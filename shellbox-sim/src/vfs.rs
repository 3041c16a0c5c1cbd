//! The virtual filesystem: an arena of inodes (files, directories, symlinks, virtual
//! executables, character devices) with POSIX-like modes, owners, link counts and mtimes
//! taken from the machine's virtual clock.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A filesystem error, named like the errno it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Errno {
    /// No such file or directory.
    NoEnt,
    /// Not a directory.
    NotDir,
    /// Is a directory.
    IsDir,
    /// File exists.
    Exist,
    /// Directory not empty.
    NotEmpty,
    /// Permission denied.
    Acces,
    /// Too many levels of symbolic links.
    Loop,
    /// Invalid argument.
    Inval,
    /// No space left on device (the disk budget).
    NoSpc,
}

impl Errno {
    /// The message `strerror` gives.
    pub fn msg(self) -> &'static str {
        match self {
            Errno::NoEnt => "No such file or directory",
            Errno::NotDir => "Not a directory",
            Errno::IsDir => "Is a directory",
            Errno::Exist => "File exists",
            Errno::NotEmpty => "Directory not empty",
            Errno::Acces => "Permission denied",
            Errno::Loop => "Too many levels of symbolic links",
            Errno::Inval => "Invalid argument",
            Errno::NoSpc => "No space left on device",
        }
    }
}

/// Special character devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dev {
    /// `/dev/null`.
    Null,
    /// `/dev/zero`.
    Zero,
    /// `/dev/urandom` and `/dev/random`: deterministic pseudo-random bytes.
    Urandom,
    /// `/dev/stdin`, `/dev/stdout`, `/dev/stderr`: the opener's fd N.
    Fd(i32),
}

/// What an inode holds.
#[derive(Debug, Clone)]
pub enum Kind {
    /// A regular file.
    File(Vec<u8>),
    /// A directory: entries by name, and the parent directory.
    Dir(BTreeMap<String, usize>, usize),
    /// A symbolic link and its target text.
    Symlink(String),
    /// A virtual executable that runs the named built-in utility.
    Exe(&'static str),
    /// A character device.
    Dev(Dev),
}

/// One inode.
#[derive(Debug, Clone)]
pub struct Inode {
    /// Contents.
    pub kind: Kind,
    /// Permission bits (0o7777).
    pub mode: u32,
    /// Hard link count.
    pub nlink: u32,
    /// Modification time, seconds since the epoch (virtual clock).
    pub mtime: i64,
}

impl Inode {
    /// `ls -l`-style type letter.
    pub fn type_char(&self) -> char {
        match self.kind {
            Kind::Dir(..) => 'd',
            Kind::Symlink(_) => 'l',
            Kind::Dev(_) => 'c',
            _ => '-',
        }
    }
    /// Size in bytes as `stat` reports it.
    pub fn size(&self) -> u64 {
        match &self.kind {
            Kind::File(d) => d.len() as u64,
            Kind::Dir(..) => 4096,
            Kind::Symlink(t) => t.len() as u64,
            Kind::Exe(n) => 32 + n.len() as u64,
            Kind::Dev(_) => 0,
        }
    }
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        matches!(self.kind, Kind::Dir(..))
    }
}

/// The virtual filesystem.
#[derive(Debug, Clone)]
pub struct Vfs {
    /// The inodes, shared copy-on-write between a machine and its snapshots: cloning a
    /// `Vfs` (a snapshot, a fork) is O(1); the first change after a clone copies the table
    /// of inode pointers once (not the inodes), and a change to an inode copies that inode
    /// only when a snapshot or fork still shares it (issue 15: structural sharing).
    nodes: Arc<Vec<Option<Arc<Inode>>>>,
    free: Vec<usize>,
    /// Bytes held by regular files.
    pub used_bytes: u64,
    /// Most bytes regular files may hold (the disk budget).
    pub disk_limit: u64,
    /// Current virtual time, seconds since the epoch.
    pub now: i64,
    bins_ready: bool,
    /// The programs `/bin` and `/usr/bin` list (the command table's names).
    bin_names: &'static [&'static str],
}

/// The root inode.
pub const ROOT: usize = 0;

impl Vfs {
    /// A filesystem with `/`, `/tmp`, `/root`, `/dev/*`, `/bin`, `/usr/bin` (populated
    /// lazily), `/etc`, `/home`, `/var`.
    pub fn new(disk_limit: u64, now: i64, bin_names: &'static [&'static str]) -> Self {
        let mut v = Vfs {
            bin_names,
            nodes: Arc::new(Vec::with_capacity(24)),
            free: Vec::new(),
            used_bytes: 0,
            disk_limit,
            now,
            bins_ready: false,
        };
        Arc::make_mut(&mut v.nodes).push(Some(Arc::new(Inode {
            kind: Kind::Dir(BTreeMap::new(), ROOT),
            mode: 0o755,
            nlink: 2,
            mtime: now,
        })));
        for d in ["bin", "dev", "etc", "home", "root", "tmp", "usr", "var"] {
            let m = match d {
                "tmp" => 0o1777,
                "root" => 0o700,
                _ => 0o755,
            };
            v.mkdir_in(ROOT, d, m);
        }
        let usr = v.lookup_in(ROOT, "usr").unwrap();
        v.mkdir_in(usr, "bin", 0o755);
        let dev = v.lookup_in(ROOT, "dev").unwrap();
        for (n, d) in [
            ("null", Dev::Null),
            ("zero", Dev::Zero),
            ("urandom", Dev::Urandom),
            ("random", Dev::Urandom),
            ("stdin", Dev::Fd(0)),
            ("stdout", Dev::Fd(1)),
            ("stderr", Dev::Fd(2)),
        ] {
            let ino = v.alloc(Inode {
                kind: Kind::Dev(d),
                mode: 0o666,
                nlink: 1,
                mtime: now,
            });
            v.link_in(dev, n, ino);
        }
        v
    }

    fn alloc(&mut self, node: Inode) -> usize {
        let nodes = Arc::make_mut(&mut self.nodes);
        if let Some(i) = self.free.pop() {
            nodes[i] = Some(Arc::new(node));
            i
        } else {
            nodes.push(Some(Arc::new(node)));
            nodes.len() - 1
        }
    }

    /// The inode `ino` (panics never: a stale number gives a dead placeholder).
    pub fn get(&self, ino: usize) -> &Inode {
        static DEAD: Inode = Inode {
            kind: Kind::Symlink(String::new()),
            mode: 0,
            nlink: 0,
            mtime: 0,
        };
        self.nodes
            .get(ino)
            .and_then(|n| n.as_deref())
            .unwrap_or(&DEAD)
    }

    /// Mutable inode access (copies the inode first when a snapshot or fork shares it).
    pub fn get_mut(&mut self, ino: usize) -> Option<&mut Inode> {
        if !matches!(self.nodes.get(ino), Some(Some(_))) {
            return None;
        }
        Arc::make_mut(&mut self.nodes)
            .get_mut(ino)
            .and_then(|n| n.as_mut())
            .map(Arc::make_mut)
    }

    fn ensure_bins(&mut self) {
        if self.bins_ready {
            return;
        }
        self.bins_ready = true;
        let now = self.now;
        for dir in ["/bin", "/usr/bin"] {
            let Ok(d) = self.resolve("/", dir, true) else {
                continue;
            };
            for name in self.bin_names {
                let ino = self.alloc(Inode {
                    kind: Kind::Exe(name),
                    mode: 0o755,
                    nlink: 1,
                    mtime: now,
                });
                if let Some(Inode {
                    kind: Kind::Dir(map, _),
                    ..
                }) = self.get_mut(d)
                {
                    map.entry(name.to_string()).or_insert(ino);
                }
            }
        }
    }

    pub(crate) fn lookup_in(&mut self, dir: usize, name: &str) -> Option<usize> {
        if !self.bins_ready && (dir == 1 || self.is_usr_bin(dir)) {
            self.ensure_bins();
        }
        match &self.get(dir).kind {
            Kind::Dir(map, parent) => match name {
                "." => Some(dir),
                ".." => Some(*parent),
                _ => map.get(name).copied(),
            },
            _ => None,
        }
    }

    fn is_usr_bin(&self, dir: usize) -> bool {
        if let Kind::Dir(_, p) = &self.get(dir).kind {
            if let Kind::Dir(pm, pp) = &self.get(*p).kind {
                return *pp == ROOT && pm.get("bin") == Some(&dir) && *p != ROOT;
            }
        }
        false
    }

    fn mkdir_in(&mut self, parent: usize, name: &str, mode: u32) -> usize {
        let now = self.now;
        let ino = self.alloc(Inode {
            kind: Kind::Dir(BTreeMap::new(), parent),
            mode,
            nlink: 2,
            mtime: now,
        });
        self.link_in(parent, name, ino);
        ino
    }

    fn link_in(&mut self, dir: usize, name: &str, ino: usize) {
        let now = self.now;
        if let Some(Inode {
            kind: Kind::Dir(map, _),
            mtime,
            ..
        }) = self.get_mut(dir)
        {
            map.insert(name.to_string(), ino);
            *mtime = now;
        }
    }

    /// Joins `path` to `cwd` when relative.
    pub fn absolute(cwd: &str, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else if cwd.ends_with('/') {
            format!("{cwd}{path}")
        } else {
            format!("{cwd}/{path}")
        }
    }

    /// Resolves `path` (relative to `cwd`) to an inode, following symlinks (the last one
    /// only when `follow`).
    pub fn resolve(&mut self, cwd: &str, path: &str, follow: bool) -> Result<usize, Errno> {
        let abs = Self::absolute(cwd, path);
        self.resolve_abs(&abs, follow, 0)
    }

    fn resolve_abs(&mut self, abs: &str, follow: bool, depth: u32) -> Result<usize, Errno> {
        if depth > 40 {
            return Err(Errno::Loop);
        }
        let comps: Vec<&str> = abs.split('/').filter(|c| !c.is_empty()).collect();
        let mut cur = ROOT;
        let mut path_so_far = String::from("/");
        let trailing_slash = abs.ends_with('/') && abs.len() > 1;
        for (i, c) in comps.iter().enumerate() {
            if !self.get(cur).is_dir() {
                return Err(Errno::NotDir);
            }
            let next = self.lookup_in(cur, c).ok_or(Errno::NoEnt)?;
            let last = i + 1 == comps.len();
            if let Kind::Symlink(target) = &self.get(next).kind {
                if !last || follow || trailing_slash {
                    let target = target.clone();
                    let base = if target.starts_with('/') {
                        target
                    } else {
                        Self::absolute(&path_so_far, &target)
                    };
                    let rest: Vec<&str> = comps[i + 1..].to_vec();
                    let full = if rest.is_empty() {
                        base
                    } else {
                        format!("{}/{}", base, rest.join("/"))
                    };
                    return self.resolve_abs(&full, follow, depth + 1);
                }
            }
            if *c == ".." {
                // path_so_far for relative symlinks: approximate by trimming
                if let Some(p) = path_so_far.trim_end_matches('/').rfind('/') {
                    path_so_far.truncate(p + 1);
                }
            } else if *c != "." {
                if !path_so_far.ends_with('/') {
                    path_so_far.push('/');
                }
                path_so_far.push_str(c);
            }
            cur = next;
        }
        if trailing_slash && !self.get(cur).is_dir() {
            return Err(Errno::NotDir);
        }
        Ok(cur)
    }

    /// Resolves the parent directory of `path` and returns it with the last component.
    pub fn resolve_parent(&mut self, cwd: &str, path: &str) -> Result<(usize, String), Errno> {
        let abs = Self::absolute(cwd, path);
        let trimmed = abs.trim_end_matches('/');
        if trimmed.is_empty() {
            return Err(Errno::Exist);
        }
        let (dir, name) = match trimmed.rfind('/') {
            Some(p) => (&trimmed[..p.max(1)], &trimmed[p + 1..]),
            None => ("/", trimmed),
        };
        let dir = if dir.is_empty() { "/" } else { dir };
        let d = self.resolve_abs(dir, true, 0)?;
        if !self.get(d).is_dir() {
            return Err(Errno::NotDir);
        }
        Ok((d, name.to_string()))
    }

    /// Looks up a name in a directory (no symlink following).
    pub fn child(&mut self, dir: usize, name: &str) -> Option<usize> {
        self.lookup_in(dir, name)
    }

    /// The sorted entry names of a directory.
    pub fn list(&mut self, dir: usize) -> Result<Vec<(String, usize)>, Errno> {
        if dir == 1 || self.is_usr_bin(dir) {
            self.ensure_bins();
        }
        match &self.get(dir).kind {
            Kind::Dir(map, _) => Ok(map.iter().map(|(k, v)| (k.clone(), *v)).collect()),
            _ => Err(Errno::NotDir),
        }
    }

    /// Creates a directory; `Exist` when the name is taken.
    pub fn mkdir(&mut self, cwd: &str, path: &str, mode: u32) -> Result<usize, Errno> {
        let (d, name) = self.resolve_parent(cwd, path)?;
        if name == "." || name == ".." || self.lookup_in(d, &name).is_some() {
            return Err(Errno::Exist);
        }
        Ok(self.mkdir_in(d, &name, mode))
    }

    /// Opens a file for writing, creating it (with `mode`) when missing; truncates when asked.
    pub fn create(
        &mut self,
        cwd: &str,
        path: &str,
        mode: u32,
        truncate: bool,
    ) -> Result<usize, Errno> {
        match self.resolve(cwd, path, true) {
            Err(Errno::NoEnt) if path.ends_with('/') => Err(Errno::NotDir),
            Ok(ino) => {
                match self.get(ino).kind {
                    Kind::Dir(..) => return Err(Errno::IsDir),
                    Kind::File(_) if truncate => self.truncate(ino),
                    _ => {}
                }
                Ok(ino)
            }
            Err(Errno::NoEnt) => {
                // may be a dangling symlink: create its target
                let (d, name) = self.resolve_parent(cwd, path)?;
                if let Some(l) = self.lookup_in(d, &name) {
                    if let Kind::Symlink(t) = &self.get(l).kind {
                        let t = t.clone();
                        let dpath = self.path_of(d);
                        return self.create(&dpath, &t, mode, truncate);
                    }
                }
                let now = self.now;
                let ino = self.alloc(Inode {
                    kind: Kind::File(Vec::new()),
                    mode,
                    nlink: 1,
                    mtime: now,
                });
                self.link_in(d, &name, ino);
                Ok(ino)
            }
            Err(e) => Err(e),
        }
    }

    /// Empties a regular file.
    pub fn truncate(&mut self, ino: usize) {
        let now = self.now;
        let mut freed = 0;
        if let Some(n) = self.get_mut(ino) {
            if let Kind::File(d) = &mut n.kind {
                freed = d.len() as u64;
                d.clear();
                d.shrink_to_fit();
                n.mtime = now;
            }
        }
        self.used_bytes -= freed;
    }

    /// Writes `data` at `pos` (or at the end when `append`), returning the new position.
    pub fn write_at(
        &mut self,
        ino: usize,
        pos: usize,
        data: &[u8],
        append: bool,
    ) -> Result<usize, Errno> {
        let now = self.now;
        let limit = self.disk_limit;
        let used = self.used_bytes;
        let Some(n) = self.get_mut(ino) else {
            return Err(Errno::NoEnt);
        };
        let Kind::File(d) = &mut n.kind else {
            return Err(Errno::IsDir);
        };
        let start = if append { d.len() } else { pos };
        let end = start + data.len();
        let grow = end.saturating_sub(d.len()) as u64;
        if used + grow > limit {
            return Err(Errno::NoSpc);
        }
        if d.len() < start {
            d.resize(start, 0);
        }
        let overlap = (d.len() - start).min(data.len());
        d[start..start + overlap].copy_from_slice(&data[..overlap]);
        d.extend_from_slice(&data[overlap..]);
        n.mtime = now;
        self.used_bytes += grow;
        Ok(end)
    }

    /// Replaces a file's contents.
    pub fn set_data(&mut self, ino: usize, data: Vec<u8>) -> Result<(), Errno> {
        self.truncate(ino);
        if self.used_bytes + data.len() as u64 > self.disk_limit {
            return Err(Errno::NoSpc);
        }
        let len = data.len() as u64;
        if let Some(Inode {
            kind: Kind::File(d),
            ..
        }) = self.get_mut(ino)
        {
            *d = data;
            self.used_bytes += len;
        }
        Ok(())
    }

    /// A file's bytes (empty for non-files).
    pub fn data(&self, ino: usize) -> &[u8] {
        match &self.get(ino).kind {
            Kind::File(d) => d,
            _ => &[],
        }
    }

    /// Removes a non-directory entry.
    pub fn unlink(&mut self, cwd: &str, path: &str) -> Result<(), Errno> {
        let (d, name) = self.resolve_parent(cwd, path)?;
        let ino = self.lookup_in(d, &name).ok_or(Errno::NoEnt)?;
        if self.get(ino).is_dir() {
            return Err(Errno::IsDir);
        }
        self.remove_entry(d, &name, ino);
        Ok(())
    }

    fn remove_entry(&mut self, dir: usize, name: &str, ino: usize) {
        let now = self.now;
        if let Some(Inode {
            kind: Kind::Dir(map, _),
            mtime,
            ..
        }) = self.get_mut(dir)
        {
            map.remove(name);
            *mtime = now;
        }
        let mut dead = false;
        if let Some(n) = self.get_mut(ino) {
            n.nlink = n.nlink.saturating_sub(1);
            dead = n.nlink == 0 || n.is_dir();
        }
        if dead {
            if let Some(Some(n)) = self.nodes.get(ino) {
                if let Kind::File(d) = &n.kind {
                    self.used_bytes -= d.len() as u64;
                }
            }
            Arc::make_mut(&mut self.nodes)[ino] = None;
            self.free.push(ino);
        }
    }

    /// Removes an empty directory.
    pub fn rmdir(&mut self, cwd: &str, path: &str) -> Result<(), Errno> {
        let (d, name) = self.resolve_parent(cwd, path)?;
        if name == "." {
            return Err(Errno::Inval);
        }
        let ino = self.lookup_in(d, &name).ok_or(Errno::NoEnt)?;
        match &self.get(ino).kind {
            Kind::Dir(m, _) if m.is_empty() => {}
            Kind::Dir(..) => return Err(Errno::NotEmpty),
            _ => return Err(Errno::NotDir),
        }
        if ino == ROOT {
            return Err(Errno::Inval);
        }
        self.remove_entry(d, &name, ino);
        Ok(())
    }

    /// Removes a tree (the entry itself and everything below), children before their
    /// directory. The walk keeps its own stack, so a tree of any depth is removed (a
    /// recursion overflowed the host's stack at ~8,000 levels).
    pub fn remove_tree(&mut self, dir: usize, name: &str) {
        let Some(ino) = self.lookup_in(dir, name) else {
            return;
        };
        // (parent, name, inode, whether its children are on the stack already)
        let mut stack = vec![(dir, name.to_string(), ino, false)];
        while let Some((d, n, i, expanded)) = stack.pop() {
            if !expanded {
                if let Kind::Dir(map, _) = &self.get(i).kind {
                    let kids: Vec<(String, usize)> =
                        map.iter().map(|(k, v)| (k.clone(), *v)).collect();
                    stack.push((d, n, i, true));
                    for (k, v) in kids.into_iter().rev() {
                        stack.push((i, k, v, false));
                    }
                    continue;
                }
            }
            self.remove_entry(d, &n, i);
        }
    }

    /// Renames `from` to `to` (both relative to `cwd`); into a directory when `to` is one.
    pub fn rename(&mut self, cwd: &str, from: &str, to: &str) -> Result<(), Errno> {
        let (fd, fname) = self.resolve_parent(cwd, from)?;
        let ino = self.lookup_in(fd, &fname).ok_or(Errno::NoEnt)?;
        let (td, tname) = match self.resolve(cwd, to, true) {
            Ok(t) if self.get(t).is_dir() => (t, fname.clone()),
            _ => self.resolve_parent(cwd, to)?,
        };
        if let Some(existing) = self.lookup_in(td, &tname) {
            if existing == ino {
                return Ok(());
            }
            if self.get(existing).is_dir() {
                if !self.get(ino).is_dir() {
                    return Err(Errno::IsDir);
                }
                if let Kind::Dir(m, _) = &self.get(existing).kind {
                    if !m.is_empty() {
                        return Err(Errno::NotEmpty);
                    }
                }
            } else if self.get(ino).is_dir() {
                return Err(Errno::NotDir);
            }
            self.remove_entry(td, &tname, existing);
        }
        // refuse moving a directory into itself
        let mut p = td;
        loop {
            if p == ino {
                return Err(Errno::Inval);
            }
            match &self.get(p).kind {
                Kind::Dir(_, parent) if p != ROOT => p = *parent,
                _ => break,
            }
        }
        let now = self.now;
        if let Some(Inode {
            kind: Kind::Dir(map, _),
            mtime,
            ..
        }) = self.get_mut(fd)
        {
            map.remove(&fname);
            *mtime = now;
        }
        self.link_in(td, &tname, ino);
        if let Some(Inode {
            kind: Kind::Dir(_, parent),
            ..
        }) = self.get_mut(ino)
        {
            *parent = td;
        }
        Ok(())
    }

    /// Adds a hard link `to` for the file `from`.
    pub fn hard_link(&mut self, cwd: &str, from: &str, to: &str) -> Result<(), Errno> {
        let ino = self.resolve(cwd, from, false)?;
        if self.get(ino).is_dir() {
            return Err(Errno::Acces);
        }
        let (d, name) = self.link_target(cwd, to, from)?;
        if let Some(n) = self.get_mut(ino) {
            n.nlink += 1;
        }
        self.link_in(d, &name, ino);
        Ok(())
    }

    fn link_target(&mut self, cwd: &str, to: &str, from: &str) -> Result<(usize, String), Errno> {
        let (d, name) = match self.resolve(cwd, to, true) {
            Ok(t) if self.get(t).is_dir() => {
                let base = from
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or(from);
                (t, base.to_string())
            }
            _ => self.resolve_parent(cwd, to)?,
        };
        if self.lookup_in(d, &name).is_some() {
            return Err(Errno::Exist);
        }
        Ok((d, name))
    }

    /// Creates a symlink at `to` holding `target`.
    pub fn symlink(&mut self, cwd: &str, target: &str, to: &str) -> Result<(), Errno> {
        let (d, name) = self.link_target(cwd, to, target)?;
        let now = self.now;
        let ino = self.alloc(Inode {
            kind: Kind::Symlink(target.to_string()),
            mode: 0o777,
            nlink: 1,
            mtime: now,
        });
        self.link_in(d, &name, ino);
        Ok(())
    }

    /// Creates a regular file with these bytes and mode directly under `dir`.
    pub fn put_file(
        &mut self,
        dir: usize,
        name: &str,
        data: Vec<u8>,
        mode: u32,
    ) -> Result<usize, Errno> {
        if self.used_bytes + data.len() as u64 > self.disk_limit {
            return Err(Errno::NoSpc);
        }
        if let Some(old) = self.lookup_in(dir, name) {
            if self.get(old).is_dir() {
                return Err(Errno::IsDir);
            }
            self.remove_entry(dir, name, old);
        }
        self.used_bytes += data.len() as u64;
        let now = self.now;
        let ino = self.alloc(Inode {
            kind: Kind::File(data),
            mode,
            nlink: 1,
            mtime: now,
        });
        self.link_in(dir, name, ino);
        Ok(ino)
    }

    /// Creates a directory directly under `dir` or returns the existing one.
    pub fn ensure_dir_in(&mut self, dir: usize, name: &str, mode: u32) -> Result<usize, Errno> {
        match self.lookup_in(dir, name) {
            Some(i) if self.get(i).is_dir() => Ok(i),
            Some(_) => Err(Errno::NotDir),
            None => Ok(self.mkdir_in(dir, name, mode)),
        }
    }

    /// Creates a symlink directly under `dir`.
    pub fn put_symlink(&mut self, dir: usize, name: &str, target: &str) {
        if let Some(old) = self.lookup_in(dir, name) {
            self.remove_entry(dir, name, old);
        }
        let now = self.now;
        let ino = self.alloc(Inode {
            kind: Kind::Symlink(target.to_string()),
            mode: 0o777,
            nlink: 1,
            mtime: now,
        });
        self.link_in(dir, name, ino);
    }

    /// `mkdir -p` for an absolute path.
    pub fn mkdir_p(&mut self, abs: &str, mode: u32) -> Result<usize, Errno> {
        let mut cur = ROOT;
        for c in abs.split('/').filter(|c| !c.is_empty()) {
            cur = match self.lookup_in(cur, c) {
                Some(i) => {
                    let i = if matches!(self.get(i).kind, Kind::Symlink(_)) {
                        let p = format!("{}/{}", self.path_of(cur), c);
                        self.resolve("/", &p, true)?
                    } else {
                        i
                    };
                    if !self.get(i).is_dir() {
                        return Err(Errno::NotDir);
                    }
                    i
                }
                None => self.mkdir_in(cur, c, mode),
            };
        }
        Ok(cur)
    }

    /// The absolute path of a directory inode (by walking parents).
    pub fn path_of(&self, dir: usize) -> String {
        let mut parts = Vec::new();
        let mut cur = dir;
        let mut guard = 0;
        while cur != ROOT && guard < 4096 {
            guard += 1;
            let Kind::Dir(_, parent) = &self.get(cur).kind else {
                break;
            };
            if let Kind::Dir(map, _) = &self.get(*parent).kind {
                if let Some((n, _)) = map.iter().find(|(_, v)| **v == cur) {
                    parts.push(n.clone());
                }
            }
            cur = *parent;
        }
        parts.reverse();
        format!("/{}", parts.join("/"))
    }
}
