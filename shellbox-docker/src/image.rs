//! Image sources: find, pull, build or load the image a machine runs.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bollard::auth::DockerCredentials;
use bollard::errors::Error as BollardError;
use bollard::query_parameters::{BuildImageOptions, CreateImageOptions, ImportImageOptions};
use bollard::{body_full, body_try_stream, Docker};
use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use shellbox_core::{
    DockerfileSource, Error, ImageArchive, ImageSource, RegistryCredentials, RegistryImage,
};
use tokio::sync::mpsc;

use crate::bridge::{receiver_stream, ChannelWriter};

/// The tag [`ensure_busybox_image`] is usually given in shellbox's own tests and benches.
pub const BUSYBOX_TEST_IMAGE: &str = "shellbox-test/busybox:1";

/// Repository of images built from Dockerfiles: `shellbox-build:<64 hex fingerprint>`.
const BUILD_REPOSITORY: &str = "shellbox-build";

pub(crate) fn is_not_found(e: &BollardError) -> bool {
    matches!(
        e,
        BollardError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// One lock per key, so concurrent callers in this process prepare an image once.
async fn key_lock(key: &str) -> tokio::sync::OwnedMutexGuard<()> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let lock = {
        let mut map = LOCKS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.entry(key.to_string()).or_default().clone()
    };
    lock.lock_owned().await
}

/// Resolves a spec's source to an image reference or ID the engine has now.
pub(crate) async fn resolve(docker: &Docker, source: &ImageSource) -> Result<String, Error> {
    match source {
        ImageSource::Docker(image) => find(docker, &image.reference).await,
        ImageSource::Registry(image) => pull(docker, image).await,
        ImageSource::Dockerfile(source) => build(docker, source).await,
        ImageSource::Archive(archive) => load(docker, archive).await,
        other => Err(refuse_source(other)),
    }
}

/// What [`resolve`] refuses of a source before it pulls, builds or loads anything, found
/// without acquiring anything (for `check_environment`): a Docker image the engine does not
/// have (asked with `GET /images/{name}/json`) or an empty reference, a malformed registry
/// reference, a Dockerfile or build context that is missing or not a directory, a missing
/// image archive, a source kind this backend does not run. Same errors as [`resolve`].
/// Whether a pull or a build would succeed is not judged.
pub(crate) async fn check(docker: &Docker, source: &ImageSource) -> Result<(), Error> {
    match source {
        ImageSource::Docker(image) => find(docker, &image.reference).await.map(drop),
        ImageSource::Registry(image) => normalize_reference(&image.reference).map(drop),
        ImageSource::Dockerfile(source) => dockerfile_paths(source).map(drop),
        ImageSource::Archive(archive) => match std::fs::metadata(&archive.path) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::not_found(archive.path.display().to_string()))
            }
            Err(e) => Err(Error::io(format!("open {}", archive.path.display()), e)),
        },
        other => Err(refuse_source(other)),
    }
}

/// The refusal of a source kind this backend does not run.
fn refuse_source(source: &ImageSource) -> Error {
    match source {
        ImageSource::Packages(_) => Error::unsupported(
            "the docker backend does not install software by name (ImageSource::Packages) yet: \
             build an image that installs it with ImageSource::Dockerfile (or use the local \
             backend, which resolves PyPI packages with uv)",
        ),
        other => Error::unsupported(format!(
            "the docker backend cannot run a {} image source (it runs docker, registry, \
             dockerfile and archive sources)",
            other.kind()
        )),
    }
}

/// Why `reference` is not an image reference the Engine would parse, or `None`: the grammar
/// of Docker's reference package (`distribution/reference`, which the Engine parses every
/// `image` and `fromImage` with): `[host[:port]/]component[/component...][:tag][@digest]`,
/// where a host is DNS labels (letters of either case, digits, inner `-`) joined by `.` (no
/// `[IPv6]` literal: Docker 20.10's parser has none); a path component is lowercase letters and digits joined by one `.` or `_`, two
/// `_`, or dashes; a tag is 1 to 128 of `[A-Za-z0-9_.-]` not starting with `.` or `-`; a
/// digest is `algorithm:hex` with a lowercase algorithm (32 or more hex digits; exactly 64
/// lowercase ones for `sha256`, 128 for `sha512`); the name is at most 255 bytes; no
/// leading or trailing white space (the engine would not trim it). An image ID (`sha256:<64 hex>`, or a prefix of
/// its hex) also parses. Break-it of issue 12: `a b`, `UPPER`, `x@sha256:zz` reached the
/// engine and came back as [`Error::Backend`]; they are the caller's mistake.
pub(crate) fn reference_problem(reference: &str) -> Option<String> {
    static GRAMMAR: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        let alphanumeric = "[a-z0-9]+";
        let separator = "(?:[._]|__|-+)";
        let component = format!("{alphanumeric}(?:{separator}{alphanumeric})*");
        let label = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
        let host = format!(r"{label}(?:\.{label})*");
        let domain = format!("{host}(?::[0-9]+)?");
        let name = format!("(?:{domain}/)?{component}(?:/{component})*");
        let tag = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}";
        let digest = "[a-z0-9]+(?:[-_+.][a-z0-9]+)*:[0-9a-fA-F]{32,}";
        regex::Regex::new(&format!("^({name})(?::({tag}))?(?:@({digest}))?$"))
            .expect("the reference grammar is a valid regex")
    });
    let bad = |why: &str| {
        Some(format!(
            "bad image reference {reference:?}: {why} (expected e.g. ghcr.io/org/img:tag or \
             img@sha256:<64 hex digits>)"
        ))
    };
    if reference.trim().is_empty() {
        return bad("it is empty");
    }
    if reference.trim() != reference {
        return bad("it has leading or trailing white space");
    }
    let Some(parts) = GRAMMAR.captures(reference) else {
        return bad(
            "not [host[:port]/]name[:tag][@digest] with a lowercase name, a tag of at most \
             128 characters and a hex digest",
        );
    };
    if parts[1].len() > 255 {
        return bad("the name is longer than 255 characters");
    }
    if let Some(digest) = parts.get(3) {
        let (algorithm, hex) = digest.as_str().split_once(':').unwrap_or_default();
        let wanted = match algorithm {
            "sha256" => Some(64),
            "sha384" => Some(96),
            "sha512" => Some(128),
            _ => None,
        };
        if wanted.is_some_and(|n| n != hex.len()) {
            return bad("the digest has the wrong number of hex digits for its algorithm");
        }
        if wanted.is_some() && hex.bytes().any(|b| b.is_ascii_uppercase()) {
            return bad("a sha256/sha384/sha512 digest is written in lowercase hex");
        }
    }
    None
}

/// A Docker source's image, which the engine must have (it is never pulled).
async fn find(docker: &Docker, reference: &str) -> Result<String, Error> {
    if let Some(problem) = reference_problem(reference) {
        return Err(Error::invalid(problem));
    }
    match docker.inspect_image(reference).await {
        Ok(_) => Ok(reference.to_string()),
        Err(e) if is_not_found(&e) => Err(Error::backend(
            format!("find image {reference}"),
            format!(
                "the engine has no image {reference:?} (Docker sources are never pulled: \
                 `docker pull` or `docker load` it first, or use a Registry source, which pulls)"
            ),
        )),
        Err(e) => Err(Error::backend(format!("inspect image {reference}"), e)),
    }
}

/// Checks a registry reference ([`reference_problem`]) and returns it with `:latest` added
/// when it names neither a tag nor a digest (the engine would otherwise pull every tag).
///
/// # Errors
/// [`Error::InvalidInput`] for a reference that does not parse.
pub(crate) fn normalize_reference(reference: &str) -> Result<String, Error> {
    let r = reference;
    if let Some(problem) = reference_problem(r) {
        return Err(Error::invalid(problem));
    }
    if r.contains('@') {
        return Ok(r.to_string());
    }
    let last = r.rsplit('/').next().unwrap_or(r);
    if last.contains(':') {
        Ok(r.to_string())
    } else {
        Ok(format!("{r}:latest"))
    }
}

/// The registry host of a reference (`docker.io` when the first part is not a host).
pub(crate) fn registry_host(reference: &str) -> String {
    match reference.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_string()
        }
        _ => "docker.io".to_string(),
    }
}

fn credentials_for(reference: &str, c: &RegistryCredentials) -> DockerCredentials {
    DockerCredentials {
        username: Some(c.username.clone()),
        password: Some(c.password.clone()),
        serveraddress: Some(registry_host(reference)),
        ..Default::default()
    }
}

/// Credentials for `host` stored by `docker login` in a Docker client config
/// (`{"auths": {"<host>": {"auth": base64("user:password")}}}`; Docker Hub is also looked up
/// as `https://index.docker.io/v1/`). Credential helpers (`credsStore`) are not consulted.
pub(crate) fn config_credentials(config_json: &str, host: &str) -> Option<DockerCredentials> {
    use base64::Engine as _;
    let config: serde_json::Value = serde_json::from_str(config_json).ok()?;
    let auths = config.get("auths")?.as_object()?;
    let mut keys = vec![
        host.to_string(),
        format!("https://{host}"),
        format!("http://{host}"),
    ];
    if host == "docker.io" {
        keys.push("https://index.docker.io/v1/".to_string());
        keys.push("index.docker.io".to_string());
    }
    let entry = keys.iter().find_map(|k| auths.get(k))?;
    let auth = entry.get("auth")?.as_str()?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth)
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some(DockerCredentials {
        username: Some(user.to_string()),
        password: Some(password.to_string()),
        serveraddress: Some(host.to_string()),
        ..Default::default()
    })
}

/// The Docker client config of this user: `$DOCKER_CONFIG/config.json`, else
/// `$HOME/.docker/config.json`.
fn docker_config() -> Option<String> {
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")))?;
    std::fs::read_to_string(dir.join("config.json")).ok()
}

/// Logs engine progress lines: each new status at debug, a summary at info every 5 s.
struct Progress {
    what: String,
    started: Instant,
    last_info: Instant,
    lines: u64,
}

impl Progress {
    fn new(what: String) -> Self {
        tracing::info!(target: "shellbox_docker", "{what}: started");
        let now = Instant::now();
        Self {
            what,
            started: now,
            last_info: now,
            lines: 0,
        }
    }

    fn line(&mut self, id: Option<&str>, status: &str) {
        self.lines += 1;
        let status = status.trim_end();
        tracing::debug!(target: "shellbox_docker", what = %self.what, id = id.unwrap_or(""), "{status}");
        if self.last_info.elapsed() >= Duration::from_secs(5) {
            self.last_info = Instant::now();
            tracing::info!(
                target: "shellbox_docker",
                "{}: still running after {:.0?} ({} progress lines; last: {status})",
                self.what,
                self.started.elapsed(),
                self.lines
            );
        }
    }

    fn done(&self) {
        tracing::info!(target: "shellbox_docker", "{}: done in {:.1?}", self.what, self.started.elapsed());
    }
}

/// Registry source: use the local copy when the engine has the reference, else pull it.
async fn pull(docker: &Docker, image: &RegistryImage) -> Result<String, Error> {
    let reference = normalize_reference(&image.reference)?;
    let _guard = key_lock(&format!("registry:{reference}")).await;
    if docker.inspect_image(&reference).await.is_ok() {
        return Ok(reference);
    }
    let options = CreateImageOptions {
        from_image: Some(reference.clone()),
        platform: "linux/amd64".to_string(),
        ..Default::default()
    };
    let credentials = match &image.credentials {
        Some(c) => Some(credentials_for(&reference, c)),
        None => docker_config()
            .and_then(|config| config_credentials(&config, &registry_host(&reference))),
    };
    let mut progress = Progress::new(format!("pull {reference}"));
    let mut stream = docker.create_image(Some(options), None, credentials);
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => progress.line(info.id.as_deref(), info.status.as_deref().unwrap_or("")),
            Err(e) => return Err(Error::backend(format!("pull image {reference}"), e)),
        }
    }
    progress.done();
    docker
        .inspect_image(&reference)
        .await
        .map_err(|e| Error::backend(format!("inspect pulled image {reference}"), e))?;
    Ok(reference)
}

/// REFERENCE 5.6 `image_source_key` of a Dockerfile source: `dockerfile:<sha256 hex>` over
/// the Dockerfile's path relative to the context (or `<external>`) + NUL, then for every
/// path under the context in sorted order its relative path + NUL, its lstat mode + NUL, and
/// its symlink target or file bytes (directories contribute no bytes), then the Dockerfile's
/// bytes when it lies outside the context. Identical contexts in different directories give
/// the same key; any change of content or mode gives another.
///
/// # Errors
/// [`Error::NotFound`] when the context or Dockerfile is missing, [`Error::InvalidInput`]
/// when the context is not a directory, [`Error::Io`] for read failures.
pub fn image_source_key(source: &DockerfileSource) -> Result<String, Error> {
    let (context, dockerfile, inside) = dockerfile_paths(source)?;
    let mut h = Sha256::new();
    match &inside {
        Some(rel) => h.update(rel.as_bytes()),
        None => h.update(b"<external>"),
    }
    h.update([0]);
    let mut paths = Vec::new();
    walk(&context, &context, &mut paths)?;
    paths.sort();
    for rel in paths {
        let full = context.join(&rel);
        let meta = std::fs::symlink_metadata(&full)
            .map_err(|e| Error::io(format!("stat {}", full.display()), e))?;
        h.update(rel.as_os_str().as_encoded_bytes());
        h.update([0]);
        h.update(meta.mode().to_string().as_bytes());
        h.update([0]);
        if meta.file_type().is_symlink() {
            let link = std::fs::read_link(&full)
                .map_err(|e| Error::io(format!("read link {}", full.display()), e))?;
            h.update(link.as_os_str().as_encoded_bytes());
        } else if meta.is_file() {
            let mut f = std::fs::File::open(&full)
                .map_err(|e| Error::io(format!("open {}", full.display()), e))?;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = f
                    .read(&mut buf)
                    .map_err(|e| Error::io(format!("read {}", full.display()), e))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
            }
        }
    }
    if inside.is_none() {
        let bytes = std::fs::read(&dockerfile)
            .map_err(|e| Error::io(format!("read {}", dockerfile.display()), e))?;
        h.update(&bytes);
    }
    Ok(format!("dockerfile:{}", hex(&h.finalize())))
}

/// The tag an image built from `source` gets: `shellbox-build:<64 hex>` (the fingerprint of
/// [`image_source_key`]). Remove it with the Engine API to force a rebuild.
///
/// # Errors
/// As [`image_source_key`].
pub fn dockerfile_image_tag(source: &DockerfileSource) -> Result<String, Error> {
    let key = image_source_key(source)?;
    Ok(format!(
        "{BUILD_REPOSITORY}:{}",
        key.trim_start_matches("dockerfile:")
    ))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// (canonical context, canonical dockerfile, dockerfile path relative to the context if inside)
fn dockerfile_paths(
    source: &DockerfileSource,
) -> Result<(PathBuf, PathBuf, Option<String>), Error> {
    let canon = |p: &Path| {
        std::fs::canonicalize(p).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::not_found(p.display().to_string())
            } else {
                Error::io(format!("resolve {}", p.display()), e)
            }
        })
    };
    let context = canon(&source.context)?;
    if !context.is_dir() {
        return Err(Error::invalid(format!(
            "build context {} is not a directory",
            source.context.display()
        )));
    }
    let dockerfile_in = if source.dockerfile.is_relative() {
        source.context.join(&source.dockerfile)
    } else {
        source.dockerfile.clone()
    };
    let dockerfile = canon(&dockerfile_in)?;
    let inside = dockerfile
        .strip_prefix(&context)
        .ok()
        .and_then(|rel| rel.to_str().map(str::to_string))
        .filter(|rel| !rel.is_empty());
    Ok((context, dockerfile, inside))
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("read {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(format!("read {}", dir.display()), e))?;
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
        let ft = entry
            .file_type()
            .map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        out.push(rel);
        if ft.is_dir() {
            walk(root, &path, out)?;
        }
    }
    Ok(())
}

/// Dockerfile source: reuse `shellbox-build:<fingerprint>` if the engine has it, else build.
async fn build(docker: &Docker, source: &DockerfileSource) -> Result<String, Error> {
    let src = source.clone();
    let (tag, inside) = tokio::task::spawn_blocking(move || {
        let tag = dockerfile_image_tag(&src)?;
        let (_, _, inside) = dockerfile_paths(&src)?;
        Ok::<_, Error>((tag, inside))
    })
    .await
    .map_err(|e| Error::backend("fingerprint build context", e))??;
    let _guard = key_lock(&tag).await;
    if docker.inspect_image(&tag).await.is_ok() {
        tracing::debug!(target: "shellbox_docker", %tag, "build context unchanged; reusing image");
        return Ok(tag);
    }
    const EXTERNAL_NAME: &str = ".shellbox-external.Dockerfile";
    let dockerfile_name = inside.clone().unwrap_or_else(|| EXTERNAL_NAME.to_string());

    // Stream the context as a tar from a blocking thread.
    let (tx, rx) = mpsc::channel(4);
    let context = source.context.clone();
    let external = inside.is_none().then(|| {
        if source.dockerfile.is_relative() {
            source.context.join(&source.dockerfile)
        } else {
            source.dockerfile.clone()
        }
    });
    let packer = tokio::task::spawn_blocking(move || {
        let writer = ChannelWriter::new(tx);
        let mut builder = tar::Builder::new(writer);
        builder.follow_symlinks(false);
        let result = (|| {
            shellbox_core::archive::append_path(&mut builder, &context, None)?;
            if let Some(df) = &external {
                let data = std::fs::read(df)
                    .map_err(|e| Error::io(format!("read {}", df.display()), e))?;
                let mut header = tar::Header::new_gnu();
                header.set_size(data.len() as u64);
                header.set_mode(0o644);
                header.set_entry_type(tar::EntryType::Regular);
                builder
                    .append_data(&mut header, EXTERNAL_NAME, &data[..])
                    .map_err(|e| Error::io("pack Dockerfile", e))?;
            }
            let mut writer = builder
                .into_inner()
                .map_err(|e| Error::io("finish build context", e))?;
            std::io::Write::flush(&mut writer).map_err(|e| Error::io("send build context", e))?;
            Ok::<_, Error>(writer)
        })();
        match result {
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    });
    let options = BuildImageOptions {
        dockerfile: dockerfile_name,
        t: Some(tag.clone()),
        rm: true,
        forcerm: true,
        platform: String::new(),
        ..Default::default()
    };
    let mut progress = Progress::new(format!("build {}", source.dockerfile.display()));
    let mut stream = docker.build_image(options, None, Some(body_try_stream(receiver_stream(rx))));
    let mut failure: Option<String> = None;
    let mut log_tail = String::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(detail) = info.error_detail.and_then(|d| d.message) {
                    failure = Some(detail);
                }
                if let Some(line) = info.stream.as_deref().or(info.status.as_deref()) {
                    progress.line(None, line);
                    log_tail.push_str(line);
                    if log_tail.len() > 4000 {
                        log_tail.drain(..log_tail.len() - 2000);
                    }
                }
            }
            Err(BollardError::DockerStreamError { error }) => {
                failure = Some(error);
                break;
            }
            Err(e) => {
                failure = Some(e.to_string());
                break;
            }
        }
    }
    drop(stream);
    let packed = packer
        .await
        .map_err(|e| Error::backend("pack build context", e))?;
    if let Err(e) = packed {
        // A pack error that is not just the engine hanging up first.
        if failure.is_none() {
            return Err(e);
        }
    }
    if let Some(message) = failure {
        let tail = log_tail.trim_end();
        return Err(Error::backend(
            format!("build image from {}", source.dockerfile.display()),
            format!("{message}\n{tail}"),
        ));
    }
    progress.done();
    docker
        .inspect_image(&tag)
        .await
        .map_err(|e| Error::backend(format!("inspect built image {tag}"), e))?;
    Ok(tag)
}

/// Archive source: load a `docker save` tarball (streamed) and return the image it holds.
async fn load(docker: &Docker, archive: &ImageArchive) -> Result<String, Error> {
    let path = archive.path.clone();
    let file = tokio::fs::File::open(&path).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::not_found(path.display().to_string())
        } else {
            Error::io(format!("open {}", path.display()), e)
        }
    })?;
    let body = futures::stream::unfold(file, |mut f| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 64 * 1024];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(Bytes::from(buf)), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    });
    let mut progress = Progress::new(format!("load {}", path.display()));
    let mut stream = docker.import_image_stream(
        ImportImageOptions {
            quiet: true,
            ..Default::default()
        },
        body,
        None,
    );
    let mut loaded: Option<String> = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(line) = info.stream.as_deref() {
                    progress.line(None, line);
                    for l in line.lines() {
                        if let Some(id) = l.strip_prefix("Loaded image ID: ") {
                            loaded.get_or_insert_with(|| id.trim().to_string());
                        } else if let Some(name) = l.strip_prefix("Loaded image: ") {
                            loaded.get_or_insert_with(|| name.trim().to_string());
                        }
                    }
                }
            }
            Err(e) => {
                return Err(Error::backend(
                    format!("load image archive {}", path.display()),
                    e,
                ))
            }
        }
    }
    progress.done();
    loaded.ok_or_else(|| {
        Error::backend(
            format!("load image archive {}", path.display()),
            "the engine loaded no image (is it a `docker save` tarball?)",
        )
    })
}

/// Makes sure the engine has a minimal image tagged `tag` (e.g. [`BUSYBOX_TEST_IMAGE`]) and
/// returns its image ID.
///
/// When the tag is missing, the image is imported through the Engine API
/// (`POST /images/create?fromSrc=-`, Docker's image import) from a root filesystem made of
/// this host's `/bin/busybox` (it must be statically linked, e.g. Debian's
/// `busybox-static`): `bin/busybox`, a symlink in `bin/` for every applet it lists
/// (`busybox --list`), `etc/passwd` and `etc/group` with `root` (0) and `nobody` (65534),
/// and empty `tmp` (1777), `root`, `proc`, `sys`, `dev`. `PATH` is set in the image config.
/// Nothing is pulled. An existing tag is reused as it is (delete it to re-import).
///
/// # Errors
/// [`Error::Unsupported`] when `/bin/busybox` is missing or cannot list its applets,
/// [`Error::InvalidInput`] for an empty or malformed tag (outside the Engine's reference grammar),
/// [`Error::Backend`] when the engine refuses the import.
pub async fn ensure_busybox_image(docker: &Docker, tag: &str) -> Result<String, Error> {
    if let Some(problem) = reference_problem(tag.trim()) {
        return Err(Error::invalid(problem));
    }
    let _guard = key_lock(&format!("busybox:{tag}")).await;
    if let Ok(image) = docker.inspect_image(tag).await {
        return image
            .id
            .ok_or_else(|| Error::backend("inspect image", "the engine gave no image ID"));
    }
    let rootfs = tokio::task::spawn_blocking(busybox_rootfs)
        .await
        .map_err(|e| Error::backend("build busybox root filesystem", e))??;
    // The whole reference goes in `repo` (the API: "the repo may include a tag"): Podman's
    // compatible API ignores a separate `tag` on import and would tag the image `latest`.
    let reference = match tag.rsplit_once(':') {
        Some((_, t)) if !t.contains('/') => tag.to_string(),
        _ => format!("{tag}:latest"),
    };
    let options = CreateImageOptions {
        from_src: Some("-".to_string()),
        repo: Some(reference),
        changes: vec![
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ],
        ..Default::default()
    };
    let mut stream = docker.create_image(Some(options), Some(body_full(rootfs.into())), None);
    while let Some(item) = stream.next().await {
        item.map_err(|e| Error::backend(format!("import image {tag}"), e))?;
    }
    let image = docker
        .inspect_image(tag)
        .await
        .map_err(|e| Error::backend(format!("inspect imported image {tag}"), e))?;
    image
        .id
        .ok_or_else(|| Error::backend("inspect image", "the engine gave no image ID"))
}

fn busybox_rootfs() -> Result<Vec<u8>, Error> {
    let busybox = Path::new("/bin/busybox");
    let binary = std::fs::read(busybox).map_err(|e| {
        Error::unsupported(format!(
            "cannot read /bin/busybox to make the test image ({e}); install busybox-static"
        ))
    })?;
    let out = std::process::Command::new(busybox)
        .arg("--list")
        .output()
        .map_err(|e| Error::unsupported(format!("cannot run /bin/busybox --list: {e}")))?;
    if !out.status.success() {
        return Err(Error::unsupported("/bin/busybox --list failed"));
    }
    let applets: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && !a.contains('/') && *a != "busybox")
        .map(str::to_string)
        .collect();
    let mut b = tar::Builder::new(Vec::new());
    let dir = |b: &mut tar::Builder<Vec<u8>>, name: &str, mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(mode);
        h.set_size(0);
        b.append_data(&mut h, name, std::io::empty())
    };
    let file = |b: &mut tar::Builder<Vec<u8>>, name: &str, mode: u32, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data)
    };
    let result = (|| -> std::io::Result<Vec<u8>> {
        for (d, m) in [
            ("bin/", 0o755),
            ("etc/", 0o755),
            ("tmp/", 0o1777),
            ("root/", 0o700),
            ("proc/", 0o555),
            ("sys/", 0o555),
            ("dev/", 0o755),
        ] {
            dir(&mut b, d, m)?;
        }
        file(&mut b, "bin/busybox", 0o755, &binary)?;
        for applet in &applets {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_mode(0o777);
            h.set_size(0);
            b.append_link(&mut h, format!("bin/{applet}"), "busybox")?;
        }
        file(
            &mut b,
            "etc/passwd",
            0o644,
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        )?;
        file(&mut b, "etc/group", 0o644, b"root:x:0:\nnogroup:x:65534:\n")?;
        b.into_inner()
    })();
    result.map_err(|e| Error::io("build busybox root filesystem", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        assert_eq!(normalize_reference("busybox").unwrap(), "busybox:latest");
        assert_eq!(
            normalize_reference("127.0.0.1:5000/a/b").unwrap(),
            "127.0.0.1:5000/a/b:latest"
        );
        assert_eq!(
            normalize_reference("127.0.0.1:5000/a/b:1").unwrap(),
            "127.0.0.1:5000/a/b:1"
        );
        let hex = "0123456789abcdef".repeat(4);
        assert_eq!(
            normalize_reference(&format!("h/a@sha256:{hex}")).unwrap(),
            format!("h/a@sha256:{hex}")
        );
        for bad in ["", " ", "https://x/y", "a b"] {
            assert!(matches!(
                normalize_reference(bad),
                Err(Error::InvalidInput(_))
            ));
        }
        // The Engine's grammar (distribution/reference); break-it of issue 12: these reached
        // the engine and came back as Backend errors.
        for good in [
            "busybox".to_string(),
            "shellbox-test/busybox:1".to_string(),
            "127.0.0.1:5000/a/b:1".to_string(),
            "localhost:5000/x_y__z-w.v".to_string(),
            "UPPER.example/x".to_string(),
            format!("x:t@sha256:{hex}"),
            format!("sha256:{hex}"),
            format!("x:{}", "t".repeat(128)),
            "a---b/c".to_string(),
        ] {
            assert_eq!(reference_problem(&good), None, "{good:?}");
        }
        for bad in [
            "UPPER".to_string(),
            "x@sha256:zz".to_string(),
            format!("x@sha256:{}", &hex[..40]),
            "x:".to_string(),
            ":tag".to_string(),
            "x::y".to_string(),
            "-x".to_string(),
            "x/".to_string(),
            "x//y".to_string(),
            "x_".to_string(),
            "x..y".to_string(),
            "x:.t".to_string(),
            format!("x:{}", "t".repeat(129)),
            format!("{}/x", "a".repeat(255)),
            "x\ny".to_string(),
            "x\0".to_string(),
            // Second break-it pass: these came back from the engine as Backend.
            format!("x@SHA256:{hex}"),
            format!("x@sha256:{}", hex.to_uppercase()),
            "[::1]:5000/x".to_string(),
            " busybox".to_string(),
            "busybox\n".to_string(),
        ] {
            assert!(reference_problem(&bad).is_some(), "{bad:?}");
            assert!(
                matches!(normalize_reference(&bad), Err(Error::InvalidInput(_))),
                "{bad:?}"
            );
        }
        assert_eq!(registry_host("127.0.0.1:5000/a:1"), "127.0.0.1:5000");
        assert_eq!(registry_host("library/busybox"), "docker.io");
        assert_eq!(registry_host("busybox"), "docker.io");
        assert_eq!(registry_host("ghcr.io/o/i"), "ghcr.io");
    }

    #[test]
    fn login_config_credentials() {
        let config = r#"{"auths": {"127.0.0.1:5000": {"auth": "dTpw"},
            "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="}}}"#;
        let c = config_credentials(config, "127.0.0.1:5000").unwrap();
        assert_eq!(c.username.as_deref(), Some("u"));
        assert_eq!(c.password.as_deref(), Some("p"));
        let hub = config_credentials(config, "docker.io").unwrap();
        assert_eq!(hub.username.as_deref(), Some("hub"));
        assert!(config_credentials(config, "ghcr.io").is_none());
        assert!(config_credentials("not json", "ghcr.io").is_none());
    }

    #[test]
    fn source_key_follows_content_not_location() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        for d in [a.path(), b.path()] {
            std::fs::write(d.join("Dockerfile"), "FROM x\n").unwrap();
            std::fs::create_dir(d.join("sub")).unwrap();
            std::fs::write(d.join("sub/f"), "data").unwrap();
        }
        let src = |d: &Path| DockerfileSource {
            context: d.to_path_buf(),
            dockerfile: d.join("Dockerfile"),
        };
        let ka = image_source_key(&src(a.path())).unwrap();
        assert!(ka.starts_with("dockerfile:") && ka.len() == "dockerfile:".len() + 64);
        assert_eq!(ka, image_source_key(&src(b.path())).unwrap());
        std::fs::write(b.path().join("sub/f"), "datb").unwrap();
        assert_ne!(ka, image_source_key(&src(b.path())).unwrap());
        // Relative Dockerfile paths are relative to the context.
        let rel = DockerfileSource {
            context: a.path().to_path_buf(),
            dockerfile: "Dockerfile".into(),
        };
        assert_eq!(ka, image_source_key(&rel).unwrap());
        // An external Dockerfile is hashed as such.
        let ext = tempfile::tempdir().unwrap();
        std::fs::write(ext.path().join("Dockerfile"), "FROM x\n").unwrap();
        let k_ext = image_source_key(&DockerfileSource {
            context: a.path().to_path_buf(),
            dockerfile: ext.path().join("Dockerfile"),
        })
        .unwrap();
        assert_ne!(ka, k_ext);
        assert!(dockerfile_image_tag(&src(a.path()))
            .unwrap()
            .starts_with("shellbox-build:"));
        assert!(matches!(
            image_source_key(&src(&a.path().join("missing"))),
            Err(Error::NotFound { .. })
        ));
    }
}
