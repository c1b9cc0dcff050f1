//! One tarball into containerd's `k8s.io` namespace (the one CRI uses), streamed: the file is
//! read once, hashed (sha256, the tarball's identity) and decompressed as it goes, its tar
//! structure and image names read on the way (`archive`), and the plain tar piped into
//! `ctr images import -`, containerd's own importer, which checks every blob against its digest
//! as it commits it, creates the images and unpacks them for the snapshotter, so a container can
//! be created from them at once. No copy of the tarball is written anywhere.
//!
//! Why `ctr`: CRI has no import call, and containerd's client-side import (docker and OCI
//! layouts, content written under a lease, GC labels, unpack with layer checks) is what k3s,
//! k0s and RKE2 get by linking the Go client. `ctr` ships in every containerd package, matched
//! to the daemon's version, with the same `images import` and `images label` in 1.6, 1.7 and
//! 2.x; speaking containerd's own gRPC services instead would re-implement that importer.
//!
//! A truncated or corrupt archive is found before `ctr` sees the end of its input: `ctr` is
//! then killed, and since containerd creates images only at the end of the stream, nothing is
//! left named (blobs written so far are unreferenced, and containerd collects them). So is one
//! that would take the image filesystem above the collector's high threshold: its plain size
//! is counted twice as it streams (the content store's copy and the unpacked layers), so a
//! small compressed file that decompresses to more than fits is stopped at the limit, not when
//! the disk is full. The file is opened non-blocking and must be a regular file. Each
//! imported image is labelled `io.cri-containerd.pinned=pinned` (containerd 1.7 and later
//! keep such images from every collector, kubelet's included) and `atoll.io/imported=<file>`.

use super::archive::{Compression, TarScan};
use std::collections::BTreeSet;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why an import did not happen.
#[derive(Debug)]
pub enum ImportError {
    /// The file would take more than the image filesystem may still take below
    /// imageGCHighThresholdPercent: tried again when the room changes.
    NoRoom {
        needed: u64,
        room: u64,
    },
    /// ctr stopped reading its input: it failed on the stream before atoll did.
    CtrGaveUp,
    /// The stream is not a whole image archive.
    Archive(super::archive::Error),
    /// An imported image could not be labelled.
    Label {
        image: String,
        error: CtrError,
    },
    Failed(String),
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImportError::NoRoom { needed, room } => write!(
                f,
                "too large for the image filesystem: {needed} bytes or more once stored and unpacked, and {room} bytes are left below imageGCHighThresholdPercent"
            ),
            ImportError::CtrGaveUp => f.write_str("ctr stopped reading"),
            ImportError::Archive(e) => e.fmt(f),
            ImportError::Label { image, error } => write!(f, "labelling {image}: {error}"),
            ImportError::Failed(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for ImportError {}

impl From<super::archive::Error> for ImportError {
    fn from(e: super::archive::Error) -> Self {
        ImportError::Archive(e)
    }
}

/// Why a `ctr` command failed.
#[derive(Debug)]
pub enum CtrError {
    /// `ctr` could not be run.
    Spawn { ctr: PathBuf, source: std::io::Error },
    /// It failed: what it wrote to its standard error (printable, at most 4 KiB).
    Said(String),
}

impl std::fmt::Display for CtrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CtrError::Spawn { ctr, source } => write!(f, "{}: {source}", ctr.display()),
            CtrError::Said(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for CtrError {}

/// No `ctr` to import with.
#[derive(Debug)]
pub struct NoCtr;

impl std::fmt::Display for NoCtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "containerd's `ctr` is not on PATH (every containerd package ships it; set ctrPath in atoll's config)",
        )
    }
}

impl std::error::Error for NoCtr {}

impl From<String> for ImportError {
    fn from(e: String) -> Self {
        ImportError::Failed(e)
    }
}

impl From<&str> for ImportError {
    fn from(e: &str) -> Self {
        ImportError::Failed(e.to_string())
    }
}

/// Where to import: the `ctr` binary and containerd's socket.
#[derive(Clone, Debug)]
pub struct Containerd {
    pub ctr: PathBuf,
    pub address: PathBuf,
}

/// What one import did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Imported {
    /// `sha256:<hex>` of the file as it is on disk.
    pub digest: String,
    /// The images as containerd names them.
    pub images: Vec<String>,
    /// The file's size.
    pub bytes: u64,
}

/// The `ctr` to use: the configured one, else the first on PATH.
pub fn find_ctr(configured: Option<&Path>) -> Result<PathBuf, NoCtr> {
    if let Some(p) = configured {
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join("ctr")).find(|p| p.is_file()).ok_or(NoCtr)
}

/// The file's sha256, read through once (to skip a file already imported under another name
/// or time).
pub fn digest_of(path: &Path) -> std::io::Result<String> {
    let mut f = crate::bounded::open_following(path)?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match f.read(&mut buf)? {
            0 => break,
            n => ctx.update(&buf[..n]),
        }
    }
    Ok(format!("sha256:{}", hex(ctx.finish().as_ref())))
}

/// Streams `path` into the runtime; `progress(read, total)` after each piece of the file.
/// `present`: the image names the runtime had before, which a failed import leaves alone;
/// `room`: the bytes the image filesystem may still take (`None`: no limit).
pub fn import_file(
    path: &Path,
    target: &Containerd,
    present: &BTreeSet<String>,
    room: Option<u64>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Imported, ImportError> {
    let file = crate::bounded::open_following(path).map_err(|e| format!("open: {e}"))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    // Stored and unpacked: about twice the plain tar (never less than the file itself).
    let fits = |plain: u64| room.is_none_or(|r| plain.saturating_mul(2) <= r);
    let too_big = |plain: u64| ImportError::NoRoom { needed: plain.saturating_mul(2), room: room.unwrap_or_default() };
    if !fits(total) {
        return Err(too_big(total));
    }
    let mut input = std::io::BufReader::with_capacity(1 << 16, file);
    let compression = Compression::sniff(input.fill_buf().map_err(|e| format!("read: {e}"))?);
    let read = std::cell::Cell::new(0u64);
    let mut hashing = Hashing { inner: input, ctx: ring::digest::Context::new(&ring::digest::SHA256), read: &read };
    let mut child = Command::new(&target.ctr)
        .arg("--address")
        .arg(&target.address)
        .args(["--namespace", "k8s.io", "images", "import", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", target.ctr.display()))?;
    let stderr = child.stderr.take().map(|s| std::thread::spawn(move || tail(s)));
    let streamed = (|| {
        let mut stdin = child.stdin.take().ok_or("ctr has no stdin")?;
        let mut scan = TarScan::default();
        let mut decoder = compression.decoder(&mut hashing);
        let mut buf = vec![0u8; 1 << 16];
        let mut plain = 0u64;
        loop {
            let n = decoder.read(&mut buf).map_err(|e| format!("reading the {} archive: {e}", compression.name()))?;
            if n == 0 {
                break;
            }
            plain = plain.saturating_add(n as u64);
            if !fits(plain) {
                return Err(too_big(plain));
            }
            scan.feed(&buf[..n])?;
            stdin.write_all(&buf[..n]).map_err(|_| ImportError::CtrGaveUp)?;
            progress(read.get(), total);
        }
        drop(decoder);
        // Only a whole, well-formed archive reaches the end of ctr's input.
        let contents = scan.finish()?;
        drop(stdin);
        Ok::<_, ImportError>(contents)
    })();
    let contents = match streamed {
        Ok(c) => c,
        Err(e) => {
            let _ = child.kill();
            let status = child.wait();
            if matches!(e, ImportError::CtrGaveUp) {
                // ctr refused the stream first: its words say why.
                let said = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
                let status = status.map(|s| s.to_string()).unwrap_or_default();
                return Err(format!("ctr images import failed ({status}): {}", said.trim()).into());
            }
            return Err(e);
        }
    };
    let status = child.wait().map_err(|e| format!("ctr: {e}"))?;
    let said = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let images: Vec<String> = contents
        .images
        .iter()
        .map(|i| if contents.format == "docker" { crate::pod::derived::normalized_image(i) } else { i.clone() })
        .collect();
    if !status.success() {
        // containerd names the images before it unpacks them: a layer that fails its check
        // leaves names behind. Those that were not there before go.
        for image in images.iter().filter(|i| !present.contains(*i)) {
            let _ = ctr(target, &["images", "rm", "--", image]);
        }
        return Err(format!("ctr images import failed ({status}): {}", said.trim()).into());
    }
    let digest = format!("sha256:{}", hex(hashing.ctx.finish().as_ref()));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for image in &images {
        label(target, image, &name)?;
    }
    Ok(Imported { digest, images, bytes: read.get() })
}

/// Pins `image` for containerd's collectors and notes where it came from.
fn label(target: &Containerd, image: &str, file: &str) -> Result<(), ImportError> {
    let file: String = file.chars().filter(|c| c.is_ascii_graphic()).take(200).collect();
    let from = format!("atoll.io/imported={file}");
    ctr(target, &["images", "label", "--", image, "io.cri-containerd.pinned=pinned", &from])
        .map_err(|error| ImportError::Label { image: image.into(), error })
}

/// One short `ctr` command in the `k8s.io` namespace.
fn ctr(target: &Containerd, args: &[&str]) -> Result<(), CtrError> {
    ctr_output(target, args).map(drop)
}

/// One short `ctr` command in the `k8s.io` namespace: what it printed (at most 1 MiB). Image
/// names come from archives and manifests: callers put `--` before them, so a name that
/// starts with `-` is never read as a flag.
pub fn ctr_output(target: &Containerd, args: &[&str]) -> Result<String, CtrError> {
    let out = Command::new(&target.ctr)
        .arg("--address")
        .arg(&target.address)
        .args(["--namespace", "k8s.io"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| CtrError::Spawn { ctr: target.ctr.clone(), source })?;
    if !out.status.success() {
        return Err(CtrError::Said(crate::node::events::printable(&String::from_utf8_lossy(&out.stderr), 4096)));
    }
    let text = &out.stdout[..out.stdout.len().min(1 << 20)];
    Ok(String::from_utf8_lossy(text).into_owned())
}

/// The last 4 KiB of what a child writes (its error, for ours).
fn tail(mut r: impl Read) -> String {
    let mut kept: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = r.read(&mut buf) {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 4096 {
            kept.drain(..kept.len() - 4096);
        }
    }
    crate::node::events::printable(&String::from_utf8_lossy(&kept), 4096)
}

/// A reader that hashes and counts what passes.
struct Hashing<'a, R> {
    inner: R,
    ctx: ring::digest::Context,
    read: &'a std::cell::Cell<u64>,
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.ctx.update(&buf[..n]);
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for ctr in `d` that runs `script` (the real one is in the end-to-end tests).
    fn fake_ctr(d: &Path, script: &str) -> Containerd {
        use std::os::unix::fs::PermissionsExt;
        let ctr = d.join("ctr");
        std::fs::write(&ctr, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&ctr, std::fs::Permissions::from_mode(0o755)).unwrap();
        Containerd { ctr, address: d.join("containerd.sock") }
    }

    fn fresh(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("atoll-import-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_small_file_that_decompresses_beyond_the_room_left_is_stopped_at_the_limit() {
        let d = fresh("bomb");
        // It takes whatever it is given: what reached it is what containerd would have stored.
        let target = fake_ctr(&d, &format!("exec cat > {}", d.join("received").display()));
        // 64 MiB of zeros as one tar entry, gzipped to a few dozen KiB.
        let file = d.join("bomb.tar.gz");
        let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&file).unwrap(), flate2::Compression::best());
        gz.write_all(&super::super::archive::tests::header("layer", b'0', 64 << 20)).unwrap();
        for _ in 0..64 {
            gz.write_all(&[0u8; 1 << 20]).unwrap();
        }
        gz.finish().unwrap();
        assert!(std::fs::metadata(&file).unwrap().len() < 1 << 20);
        let room = 16u64 << 20;
        let e = import_file(&file, &target, &BTreeSet::new(), Some(room), &mut |_, _| {}).unwrap_err();
        assert!(matches!(e, ImportError::NoRoom { room: r, .. } if r == room), "{e}");
        assert!(e.to_string().starts_with("too large for the image filesystem: "), "{e}");
        let received = std::fs::metadata(d.join("received")).map(|m| m.len()).unwrap_or(0);
        assert!(received <= room / 2, "{received} bytes reached the runtime with {room} bytes of room");
        // A file already larger than the room is refused before it is read.
        let e = import_file(&file, &target, &BTreeSet::new(), Some(1000), &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("and 1000 bytes are left below imageGCHighThresholdPercent"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_image_name_from_an_archive_is_never_read_as_a_flag_by_ctr() {
        let d = fresh("args");
        let target = fake_ctr(&d, &format!("echo \"$@\" >> {}", d.join("args").display()));
        label(&target, "--address=/elsewhere.sock", "app.tar").unwrap();
        let args = std::fs::read_to_string(d.join("args")).unwrap();
        assert!(args.contains("images label -- --address=/elsewhere.sock io.cri-containerd.pinned=pinned"), "{args}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
