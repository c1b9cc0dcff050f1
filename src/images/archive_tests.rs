use super::*;
use std::io::Read;

/// A ustar header block for an entry `name` of type `kind` holding `size` bytes.
pub(crate) fn header(name: &str, kind: u8, size: u64) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    h
}

/// A ustar archive of `entries` (name, type flag, data), ended by two zero blocks.
fn tar(entries: &[(&str, u8, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, kind, data) in entries {
        out.extend_from_slice(&header(name, *kind, data.len() as u64));
        out.extend_from_slice(data);
        out.resize(out.len() + padding(data.len() as u64) as usize, 0);
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    out
}

fn docker(tags: &str) -> Vec<u8> {
    let manifest = format!(r#"[{{"Config":"c.json","RepoTags":{tags},"Layers":["l.tar"]}}]"#);
    tar(&[("c.json", b'0', b"{}"), ("l.tar", b'0', &[7u8; 1500]), ("manifest.json", b'0', manifest.as_bytes())])
}

fn scan(bytes: &[u8], piece: usize) -> Result<Contents, Error> {
    let mut s = TarScan::default();
    for chunk in bytes.chunks(piece) {
        s.feed(chunk)?;
    }
    s.finish()
}

#[test]
fn a_docker_archive_names_its_repo_tags_in_pieces_of_any_size() {
    let bytes = docker(r#"["app:1","registry.example/app:1"]"#);
    for piece in [1, 7, 512, 513, 100_000] {
        let c = scan(&bytes, piece).unwrap();
        assert_eq!(c.format, "docker");
        assert_eq!(c.images, ["app:1", "registry.example/app:1"], "pieces of {piece}");
    }
}

#[test]
fn an_oci_archive_names_what_containerd_names() {
    let index = r#"{"schemaVersion":2,"manifests":[
        {"digest":"sha256:1","annotations":{"io.containerd.image.name":"docker.io/library/app:1","org.opencontainers.image.ref.name":"1"}},
        {"digest":"sha256:2","annotations":{"org.opencontainers.image.ref.name":"registry.example/tool:2"}},
        {"digest":"sha256:3","annotations":{"org.opencontainers.image.ref.name":"latest"}}]}"#;
    let bytes = tar(&[
        ("oci-layout", b'0', br#"{"imageLayoutVersion":"1.0.0"}"#),
        ("blobs/", b'5', b""),
        ("./index.json", b'0', index.as_bytes()),
    ]);
    let c = scan(&bytes, 64).unwrap();
    assert_eq!(c.format, "oci");
    assert_eq!(c.images, ["docker.io/library/app:1", "registry.example/tool:2"], "a bare tag names nothing");
}

#[test]
fn a_long_name_entry_keeps_the_stream_in_step() {
    let long = format!("blobs/sha256/{}", "a".repeat(120));
    let manifest = br#"[{"RepoTags":["app:1"]}]"#;
    let bytes =
        tar(&[("././@LongLink", b'L', long.as_bytes()), ("x", b'0', &[1u8; 700]), ("manifest.json", b'0', manifest)]);
    assert_eq!(scan(&bytes, 100).unwrap().images, ["app:1"]);
}

#[test]
fn truncated_corrupt_and_foreign_files_are_refused_with_the_reason() {
    let bytes = docker(r#"["app:1"]"#);
    let cut = scan(&bytes[..1024 + 700], 4096).unwrap_err().to_string();
    assert!(cut.contains("truncated") && cut.contains("l.tar"), "{cut}");
    let mut corrupt = bytes.clone();
    corrupt[BLOCK * 2 + 20] ^= 0x01; // a byte of the second entry's header
    let e = scan(&corrupt, 4096).unwrap_err().to_string();
    assert!(e.contains("checksum"), "{e}");
    let e =
        scan(b"this is not a tarball at all, only some text\n".repeat(20).as_slice(), 4096).unwrap_err().to_string();
    assert!(e.contains("not a tar archive"), "{e}");
    let e = scan(&tar(&[("a.txt", b'0', b"hello")]), 4096).unwrap_err().to_string();
    assert!(e.contains("no manifest.json"), "{e}");
    let e = scan(&[], 4096).unwrap_err().to_string();
    assert!(e.contains("empty"), "{e}");
}

#[test]
fn an_oversized_index_is_refused_before_it_is_kept() {
    let big = vec![b' '; MAX_INDEX + 1];
    let mut s = TarScan::default();
    let e = s.feed(&tar(&[("manifest.json", b'0', &big)])).unwrap_err().to_string();
    assert!(e.contains("larger than"), "{e}");
}

#[test]
fn gzip_and_zstd_are_told_by_their_first_bytes_and_read_as_one_stream() {
    use std::io::Write;
    let plain = docker(r#"["app:1"]"#);
    // gzip, two members (pigz writes several).
    let mut gz = Vec::new();
    for half in plain.chunks(plain.len() / 2 + 1) {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(half).unwrap();
        gz.extend(e.finish().unwrap());
    }
    // zstd, two frames with a skippable frame between them (pzstd's layout).
    let mut zst = Vec::new();
    let halves: Vec<&[u8]> = plain.chunks(plain.len() / 2 + 1).collect();
    zst.extend(ruzstd::encoding::compress_to_vec(halves[0], ruzstd::encoding::CompressionLevel::Fastest));
    zst.extend([0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 9, 9, 9]);
    zst.extend(ruzstd::encoding::compress_to_vec(halves[1], ruzstd::encoding::CompressionLevel::Fastest));
    for (bytes, kind) in [(&plain, Compression::None), (&gz, Compression::Gzip), (&zst, Compression::Zstd)] {
        assert_eq!(Compression::sniff(bytes), kind);
        let mut out = Vec::new();
        kind.decoder(bytes.as_slice()).read_to_end(&mut out).unwrap();
        assert_eq!(out, plain, "{kind:?}");
    }
    // A truncated compressed file is an error, not a shorter archive.
    for (bytes, kind) in [(&gz, Compression::Gzip), (&zst, Compression::Zstd)] {
        let mut out = Vec::new();
        let cut = &bytes[..bytes.len() - 10];
        let r = kind.decoder(cut).read_to_end(&mut out);
        assert!(r.is_err() || scan(&out, 4096).is_err(), "{kind:?} truncated read as whole");
    }
}

#[test]
fn a_zstd_frame_asking_for_a_large_window_is_refused_before_anything_is_allocated() {
    // A frame header declaring a 64 MiB window (exponent 16: above atoll's limit, within the
    // decoder's own default), then an empty last raw block.
    let frame = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 16 << 3, 0x01, 0x00, 0x00];
    let mut out = Vec::new();
    let e = Compression::Zstd.decoder(&frame[..]).read_to_end(&mut out).unwrap_err();
    assert!(e.to_string().to_lowercase().contains("window"), "{e}");
    // The same frame with a 16 MiB window (exponent 14) is read.
    let small = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 14 << 3, 0x01, 0x00, 0x00];
    Compression::Zstd.decoder(&small[..]).read_to_end(&mut out).unwrap();
    assert!(out.is_empty());
}
