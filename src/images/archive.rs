//! What an image tarball holds, learnt as it streams by: its compression (plain, gzip or
//! zstd, from the first bytes, whatever the file's name), and a tar reader that passes every
//! byte on untouched while it checks the archive's structure (header checksums, sizes, a
//! proper end) and keeps the two small files that name its images: `manifest.json` (a docker
//! archive: `RepoTags`) and `index.json` (an OCI archive: the `io.containerd.image.name`
//! annotation, or `org.opencontainers.image.ref.name` when that is a whole reference). Those
//! are kept under [`MAX_INDEX`] bytes; nothing else is buffered. Pure: bytes in, facts out.

use std::io::Read;

/// The most of `manifest.json` or `index.json` kept (and of a long-name or pax record).
pub const MAX_INDEX: usize = 1 << 20;
const BLOCK: usize = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "tar",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }

    /// From the file's first bytes (at least 4 of them, or the whole file).
    pub fn sniff(head: &[u8]) -> Compression {
        match head {
            [0x1f, 0x8b, ..] => Compression::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Compression::Zstd,
            _ => Compression::None,
        }
    }

    /// A reader of the plain tar from `r` (every gzip member, every zstd frame).
    pub fn decoder<'a, R: Read + 'a>(self, r: R) -> Box<dyn Read + 'a> {
        match self {
            Compression::None => Box::new(r),
            Compression::Gzip => Box::new(super::gzip::Members::new(std::io::BufReader::new(r))),
            Compression::Zstd => Box::new(ZstdFrames::Between(std::io::BufReader::new(r))),
        }
    }
}

/// The largest zstd window accepted: levels 1 to 19 and `--long` up to 25 fit; a frame asking
/// for more is refused rather than allocated (the agent runs under a memory limit).
pub const MAX_ZSTD_WINDOW: u64 = 32 << 20;

/// zstd frames one after another (as `zstd -T0` and `pzstd` write them), decoded as one stream.
enum ZstdFrames<R: Read> {
    Between(std::io::BufReader<R>),
    InFrame(Box<ruzstd::decoding::StreamingDecoder<std::io::BufReader<R>, ruzstd::decoding::FrameDecoder>>),
    Failed,
}

impl<R: Read> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::BufRead;
        loop {
            match std::mem::replace(self, ZstdFrames::Failed) {
                ZstdFrames::InFrame(mut frame) => {
                    let n = frame.read(buf)?;
                    if n > 0 || buf.is_empty() {
                        *self = ZstdFrames::InFrame(frame);
                        return Ok(n);
                    }
                    *self = ZstdFrames::Between(frame.into_inner());
                }
                ZstdFrames::Between(mut input) => {
                    let head = input.fill_buf()?;
                    if head.is_empty() {
                        *self = ZstdFrames::Between(input);
                        return Ok(0);
                    }
                    if head.len() >= 4 && u32::from_le_bytes([head[0], head[1], head[2], head[3]]) & !0xf == 0x184d_2a50
                    {
                        // A skippable frame (pzstd's): its 4-byte length, then that many bytes.
                        let mut header = [0u8; 8];
                        input.read_exact(&mut header)?;
                        let length = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
                        let mut left = length as usize;
                        while left > 0 {
                            let n = input.fill_buf()?.len().min(left);
                            if n == 0 {
                                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "zstd: truncated"));
                            }
                            input.consume(n);
                            left -= n;
                        }
                        *self = ZstdFrames::Between(input);
                        continue;
                    }
                    let frame = ruzstd::decoding::StreamingDecoder::new_with_max_window_size(input, MAX_ZSTD_WINDOW)
                        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("zstd: {e}")))?;
                    *self = ZstdFrames::InFrame(Box::new(frame));
                }
                ZstdFrames::Failed => {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "zstd: the stream failed earlier"))
                }
            }
        }
    }
}

/// What the archive names and how it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    /// The image names, as the archive writes them (not normalized), in order.
    pub images: Vec<String>,
    /// `docker` or `oci`.
    pub format: &'static str,
}

/// The tar reader: feed it the plain tar, in pieces of any size.
#[derive(Default)]
pub struct TarScan {
    /// A header being gathered.
    header: Vec<u8>,
    /// Bytes of the current entry's data (and padding) still to pass.
    left: u64,
    /// The current entry's data, kept when it names images or the next entry.
    keep: Option<(Kind, Vec<u8>)>,
    /// A GNU long name or pax path for the next entry.
    next_name: Option<String>,
    /// The current entry's name, for errors.
    entry: String,
    /// Data bytes of the current entry (without padding).
    size: u64,
    zero_blocks: u32,
    manifest: Option<Vec<u8>>,
    index: Option<Vec<u8>>,
    ended: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Manifest,
    Index,
    LongName,
    Pax,
}

/// Why a stream is not a whole image archive.
#[derive(Debug)]
pub enum Error {
    /// Not a tar archive, or a corrupt one (what gave it away).
    NotTar(&'static str),
    /// A header's checksum does not match (after the entry named).
    BadChecksum { after: String },
    /// A header's size field is not a number (after the entry named).
    BadSize { after: String },
    /// `manifest.json` or `index.json` over [`MAX_INDEX`].
    TooLarge { name: String },
    /// Less than one header (0: nothing at all).
    Short(usize),
    /// The stream ends inside this entry.
    Truncated { inside: String },
    /// `manifest.json` or `index.json` is not JSON.
    Json { file: &'static str, error: crate::parse::Error },
    /// Neither `manifest.json` nor `index.json`.
    NotImage,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NotTar(why) => f.write_str(why),
            Error::BadChecksum { after } => {
                write!(f, "not a tar archive, or a corrupt one: bad header checksum after {after:?}")
            }
            Error::BadSize { after } => write!(f, "corrupt tar header after {after:?}: bad size"),
            Error::TooLarge { name } => write!(f, "{name} in the archive is larger than {MAX_INDEX} bytes"),
            Error::Short(0) => f.write_str("empty: not a tar archive"),
            Error::Short(n) => write!(f, "not a tar archive: {n} bytes, less than one header"),
            Error::Truncated { inside } => write!(f, "truncated: the archive ends inside {inside:?}"),
            Error::Json { file, error } => write!(f, "{file}: {error}"),
            Error::NotImage => f.write_str("not an image archive: no manifest.json (docker) nor index.json (OCI)"),
        }
    }
}

impl std::error::Error for Error {}

impl TarScan {
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), Error> {
        while !bytes.is_empty() {
            if self.ended {
                return Ok(()); // whatever follows the end (zero padding) is not read
            }
            if self.left > 0 {
                let n = (self.left.min(bytes.len() as u64)) as usize;
                let data_left = self.left.saturating_sub(padding(self.size));
                if let Some((_, buf)) = &mut self.keep {
                    let take = (data_left.min(n as u64)) as usize;
                    buf.extend_from_slice(&bytes[..take]);
                }
                self.left -= n as u64;
                bytes = &bytes[n..];
                if self.left == 0 {
                    self.entry_done()?;
                }
                continue;
            }
            let want = BLOCK - self.header.len();
            let n = want.min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() == BLOCK {
                let header = std::mem::take(&mut self.header);
                self.header_done(&header)?;
            }
        }
        Ok(())
    }

    fn header_done(&mut self, h: &[u8]) -> Result<(), Error> {
        if h.iter().all(|&b| b == 0) {
            self.zero_blocks += 1;
            self.ended = self.zero_blocks >= 2;
            return Ok(());
        }
        if self.zero_blocks > 0 {
            return Err(Error::NotTar("not a tar archive: a zero block inside it"));
        }
        let stored = octal(&h[148..156]).ok_or(Error::NotTar("not a tar archive (no header checksum)"))?;
        let sum: u64 = h.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { 32 } else { b as u64 }).sum();
        if stored != sum {
            return Err(Error::BadChecksum { after: self.entry.clone() });
        }
        let size = if h[124] & 0x80 != 0 {
            h[125..136].iter().try_fold(0u64, |a, &b| a.checked_mul(256).and_then(|a| a.checked_add(b as u64)))
        } else {
            octal(&h[124..136])
        }
        .ok_or_else(|| Error::BadSize { after: self.entry.clone() })?;
        let mut name = cstr(&h[0..100]);
        if &h[257..262] == b"ustar" && h[345] != 0 {
            name = format!("{}/{name}", cstr(&h[345..500]));
        }
        if let Some(long) = self.next_name.take() {
            name = long;
        }
        let name = name.trim_start_matches("./").to_string();
        let kind = match h[156] {
            b'L' => Some(Kind::LongName),
            b'x' => Some(Kind::Pax),
            b'0' | 0 if name == "manifest.json" => Some(Kind::Manifest),
            b'0' | 0 if name == "index.json" => Some(Kind::Index),
            _ => None,
        };
        if kind.is_some() && size > MAX_INDEX as u64 {
            return Err(Error::TooLarge { name });
        }
        self.keep = kind.map(|k| (k, Vec::new()));
        self.entry = name;
        self.size = size;
        self.left = size.saturating_add(padding(size));
        if self.left == 0 {
            self.entry_done()?;
        }
        Ok(())
    }

    fn entry_done(&mut self) -> Result<(), Error> {
        match self.keep.take() {
            Some((Kind::Manifest, data)) => self.manifest = Some(data),
            Some((Kind::Index, data)) => self.index = Some(data),
            Some((Kind::LongName, data)) => self.next_name = Some(cstr(&data)),
            Some((Kind::Pax, data)) => self.next_name = pax_path(&data),
            None => {}
        }
        Ok(())
    }

    /// The archive is over: what it names, or why it is not a whole image archive.
    pub fn finish(self) -> Result<Contents, Error> {
        if self.zero_blocks == 0 && self.entry.is_empty() {
            return Err(Error::Short(self.header.len()));
        }
        if self.left > 0 || !self.header.is_empty() {
            return Err(Error::Truncated { inside: self.entry });
        }
        let mut out = Contents::default();
        if let Some(index) = &self.index {
            out.format = "oci";
            let v: serde_json::Value =
                crate::parse::json(index).map_err(|error| Error::Json { file: "index.json", error })?;
            for m in v.get("manifests").and_then(|m| m.as_array()).into_iter().flatten() {
                let a = m.get("annotations");
                let get = |k: &str| a.and_then(|a| a.get(k)).and_then(|v| v.as_str());
                if let Some(name) = get("io.containerd.image.name") {
                    out.images.push(name.to_string());
                } else if let Some(name) =
                    get("org.opencontainers.image.ref.name").filter(|n| n.contains([':', '/', '@']))
                {
                    out.images.push(name.to_string());
                }
            }
        }
        if let Some(manifest) = &self.manifest {
            out.format = "docker";
            let v: serde_json::Value =
                crate::parse::json(manifest).map_err(|error| Error::Json { file: "manifest.json", error })?;
            for m in v.as_array().into_iter().flatten() {
                for tag in m.get("RepoTags").and_then(|t| t.as_array()).into_iter().flatten() {
                    if let Some(tag) = tag.as_str() {
                        out.images.push(tag.to_string());
                    }
                }
            }
        }
        if self.index.is_none() && self.manifest.is_none() {
            return Err(Error::NotImage);
        }
        out.images.dedup();
        Ok(out)
    }
}

/// Padding after `size` data bytes, up to the next block.
fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

/// A NUL- or space-terminated octal field.
fn octal(field: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(field).ok()?;
    let text = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

fn cstr(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// The `path` record of a pax header (`<len> path=<value>\n` records).
fn pax_path(data: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(data);
    text.lines().find_map(|l| l.split_once(' ').and_then(|(_, kv)| kv.strip_prefix("path=")).map(str::to_string))
}

#[cfg(test)]
#[path = "archive_tests.rs"]
pub(crate) mod tests;
