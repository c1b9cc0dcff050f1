//! `atoll images`: the runtime's images as the running agent keeps them (size, in use, pinned
//! and why, the tarball each came from) and the images directory's files; `atoll images prune
//! [--dry-run]`: every image neither in use nor pinned removed (or listed); `atoll images import
//! FILE`: a tarball streamed into containerd by this command, exactly as the images directory
//! does it (progress on a terminal), for a file that is not to stay on the box.

use super::error::Error;
use super::local_api::get_json;
use super::render::table;
use super::{Flag, Flags};
use serde_json::Value;
use std::io::IsTerminal;

pub fn run(flags: &Flags, args: &[String]) -> Result<u8, Error> {
    match args.first().map(String::as_str) {
        None => list(flags),
        Some("prune") => prune(flags),
        Some("import") => import(flags, args.get(1).map(String::as_str).unwrap_or_default()),
        Some(other) => Err(Error::Failed(format!("unknown images command {other:?}"))),
    }
}

fn list(flags: &Flags) -> Result<u8, Error> {
    let v = get_json(flags, "GET", "/images")?;
    if flags.get(Flag::Output) == Some("json") {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(0);
    }
    let mut rows = vec![["IMAGE", "ID", "SIZE", "IN USE", "KEPT BECAUSE"].map(String::from).to_vec()];
    for i in v["items"].as_array().into_iter().flatten() {
        let names: Vec<&str> = i["names"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let id = i["id"].as_str().unwrap_or("");
        let short = id.strip_prefix("sha256:").unwrap_or(id).chars().take(12).collect::<String>();
        let size = format!("{:.1} MB", i["size"].as_f64().unwrap_or(0.0) / 1e6);
        let used = if i["inUse"].as_bool() == Some(true) { "yes" } else { "no" };
        let why = i["pinned"].as_str().unwrap_or("-");
        rows.push(vec![names.join(","), short, size, used.into(), why.into()]);
    }
    print!("{}", table(&rows));
    let files = v["files"].as_array().cloned().unwrap_or_default();
    if !files.is_empty() {
        println!();
        let mut rows = vec![["FILE", "STATE", "IMAGES OR ERROR"].map(String::from).to_vec()];
        for f in &files {
            let what = match f["error"].as_str() {
                Some(e) => e.to_string(),
                None => {
                    f["images"].as_array().into_iter().flatten().filter_map(Value::as_str).collect::<Vec<_>>().join(",")
                }
            };
            rows.push(vec![f["file"].as_str().unwrap_or("").into(), f["state"].as_str().unwrap_or("").into(), what]);
        }
        print!("{}", table(&rows));
    }
    Ok(0)
}

fn prune(flags: &Flags) -> Result<u8, Error> {
    let dry = flags.get(Flag::DryRun).is_some_and(|v| v != "false");
    let v = get_json(flags, "POST", &format!("/images/prune?dryRun={dry}"))?;
    let removed = v["removed"].as_array().cloned().unwrap_or_default();
    let verb = if dry { "would remove" } else { "removed" };
    for r in &removed {
        println!("{verb} {}", r["image"].as_str().unwrap_or(""));
    }
    let freed = v["freed"].as_f64().unwrap_or(0.0) / 1e6;
    println!("{} image(s) {verb}, {freed:.1} MB", removed.len());
    let errors: Vec<&str> = v["errors"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    for e in &errors {
        eprintln!("error: {e}");
    }
    Ok(if errors.is_empty() { 0 } else { 1 })
}

fn import(flags: &Flags, file: &str) -> Result<u8, Error> {
    let endpoint = flags.get(Flag::ContainerRuntimeEndpoint).unwrap_or("unix:///run/containerd/containerd.sock");
    let endpoint = crate::cri::Endpoint::parse(endpoint).map_err(Error::Endpoint)?;
    let ctr = crate::images::import::find_ctr(None).map_err(Error::NoCtr)?;
    let target = crate::images::import::Containerd { ctr, address: endpoint.path().to_path_buf() };
    let cri = crate::cri::Cri::new(&endpoint);
    let present = smol::block_on(crate::images::dir::names_present(&cri));
    // kubelet's default high threshold: an import never fills the image filesystem past it.
    let high = crate::images::gc::Policy::default().high_percent;
    let room = smol::block_on(crate::images::gc::disk(&cri)).map(|d| d.room_below(high));
    let terminal = std::io::stderr().is_terminal();
    let mut shown = 0u64;
    let mut progress = |read: u64, total: u64| {
        if terminal && total > 0 && (read - shown >= total / 100 || read == total) {
            shown = read;
            eprint!("\r{file}: {:.0}% of {:.1} MB", read as f64 * 100.0 / total as f64, total as f64 / 1e6);
        }
    };
    let done = crate::images::import::import_file(std::path::Path::new(file), &target, &present, room, &mut progress);
    if terminal {
        eprintln!();
    }
    let done = done.map_err(|e| Error::Import { file: file.into(), error: Box::new(e) })?;
    println!("imported {} ({}, {} bytes): {}", file, done.digest, done.bytes, done.images.join(", "));
    Ok(0)
}
