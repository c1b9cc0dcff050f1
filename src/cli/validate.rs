//! `atoll validate`: the same pipeline as `run` (decode, API defaults, static pod identity,
//! validation, static-pod restrictions), once, over files, directories and URLs, with a line
//! per manifest: `ok`, `warning` or `error`, each naming the file and the field.

use super::Flags;
use crate::config::Settings;
use crate::pod::{self, Origin, Policy, Shape};
use crate::source::{file, http};

/// `atoll validate`: the same pipeline as `run`, once, with a line per manifest.
/// Returns whether everything was valid.
pub fn run(flags: &Flags, targets: &[String]) -> Result<bool, String> {
    let s = Settings::load(flags)?;
    let policy = Policy { strict: s.strict };
    let mut all_ok = true;
    // Start ordering is checked across everything given: (pod as written, its dependencies, file).
    let mut ordered: Vec<(String, Vec<String>, String)> = Vec::new();
    for target in targets {
        let lower = target.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            all_ok &= validate_url(&s, target, policy);
            continue;
        }
        let scan = file::scan(std::path::Path::new(target), &s.node_name, policy, s.manifest_trust.as_ref());
        if let Some(p) = &scan.path_problem {
            println!("{target}: error: {p}");
            all_ok = false;
        }
        for (p, why) in &scan.skipped {
            println!("{}: skipped: {why}", p.display());
        }
        let mut files: Vec<&std::path::PathBuf> = scan.by_file.keys().chain(scan.errors.keys()).collect();
        files.sort();
        for f in files {
            if let Some(pods) = scan.by_file.get(f) {
                let signed = scan.signed.get(f).map(|v| format!(", signed by key {}", v.key)).unwrap_or_default();
                for sp in pods {
                    println!("{}: ok: pod {} uid {}{signed}", f.display(), sp.pod.key(), sp.uid);
                    let deps = pod::order::depends_on(&sp.pod).unwrap_or_default();
                    ordered.push((pod::order::written_key(&sp.pod), deps, f.display().to_string()));
                }
                for (_, w) in scan.warnings.iter().filter(|(p, _)| p == f) {
                    println!("{}: warning: {w}", f.display());
                }
            }
            if let Some(e) = scan.errors.get(f) {
                all_ok = false;
                for p in &e.problems {
                    println!("{}: error: {p}", f.display());
                }
            }
        }
    }
    let graph: Vec<(String, Vec<String>)> = ordered.iter().map(|(k, d, _)| (k.clone(), d.clone())).collect();
    for (key, problems) in pod::order::problems(&graph) {
        let file = ordered.iter().find(|(k, _, _)| *k == key).map(|(_, _, f)| f.as_str()).unwrap_or_default();
        for p in problems {
            println!("{file}: error: {}: {p}", pod::order::FIELD);
        }
        all_ok = false;
    }
    Ok(all_ok)
}

fn validate_url(s: &Settings, url: &str, policy: Policy) -> bool {
    let shown = http::redact_url(url);
    let client = match http::Client::new(
        url,
        s.manifest_url_headers.clone(),
        http::DEFAULT_TIMEOUT,
        s.manifest_url_ca_file.as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            println!("{shown}: error: {e}");
            return false;
        }
    };
    let trust = s.manifest_trust.as_ref();
    match client.fetch(&Default::default(), trust.is_some()) {
        Ok(http::Fetched::Body { bytes, .. }) if bytes.iter().all(u8::is_ascii_whitespace) => {
            println!("{shown}: ok: empty body (no pods)");
            true
        }
        Ok(http::Fetched::Body { bytes, signature, .. }) => {
            let signed = match trust.map(|t| t.check(&bytes, signature.as_deref(), &http::signature_url(&shown))) {
                Some(Err(e)) => {
                    println!("{shown}: error: signature: {e}");
                    return false;
                }
                Some(Ok(Some(v))) => format!(", signed by key {}", v.key),
                _ => String::new(),
            };
            match pod::load(&bytes, Shape::PodOrList, &Origin::Url(url.to_string()), &s.node_name, policy) {
                Ok(loaded) => {
                    for sp in &loaded.pods {
                        println!("{shown}: ok: pod {} uid {}{signed}", sp.pod.key(), sp.uid);
                    }
                    for w in &loaded.warnings {
                        println!("{shown}: warning: {w}");
                    }
                    true
                }
                Err(e) => {
                    for p in &e.problems {
                        println!("{shown}: error: {p}");
                    }
                    false
                }
            }
        }
        Ok(http::Fetched::NotModified) => {
            println!("{shown}: error: answered 304 Not Modified to an unconditional request");
            false
        }
        Err(e) => {
            let prefix = format!("{shown}: ");
            println!("{shown}: error: {}", e.strip_prefix(&prefix).unwrap_or(&e));
            false
        }
    }
}
