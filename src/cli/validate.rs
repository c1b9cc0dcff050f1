//! `atoll validate`: the same pipeline as `run` (decode, API defaults, static pod identity,
//! validation, static-pod restrictions), once, over files, directories and URLs, with a line
//! per manifest: `ok`, `warning` or `error`, each naming the file and the field. Across
//! everything given, start ordering and the pods' references to ConfigMaps and Secrets are
//! checked too (a reference that is not optional must find its object and key).

use super::Flags;
use crate::config::Settings;
use crate::objects::{self, resolve, LocalObject};
use crate::pod::{self, Origin, Policy, StaticPod};
use crate::source::payload::{Intake, Opened, Payload};
use crate::source::{http, scan};
use std::sync::Arc;

/// `atoll validate`: the same pipeline as `run`, once, with a line per manifest.
/// Returns whether everything was valid.
pub fn run(flags: &Flags, targets: &[String]) -> Result<bool, String> {
    let s = Settings::load(flags)?;
    let policy = Policy { strict: s.sources.strict };
    let intake =
        Intake { trust: s.sources.trust.clone(), key: s.sources.decryption.clone(), node: s.node.name.clone(), policy };
    let mut all_ok = true;
    // Start ordering is checked across everything given: (pod as written, its dependencies, file).
    let mut ordered: Vec<(String, Vec<String>, String)> = Vec::new();
    // Pods (with where they came from) and objects, for the references across files.
    let mut pods: Vec<(StaticPod, String)> = Vec::new();
    let mut found: Vec<Arc<LocalObject>> = Vec::new();
    for target in targets {
        let lower = target.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            let (ok, loaded) = validate_url(&s, target, &intake);
            all_ok &= ok;
            let shown = http::redact_url(target);
            pods.extend(loaded.pods.into_iter().map(|sp| (sp, shown.clone())));
            found.extend(loaded.objects);
            continue;
        }
        let path = std::path::Path::new(target);
        let scan = scan::scan(path, &intake);
        if let Some(p) = &scan.path_problem {
            println!("{target}: error: {p}");
            all_ok = false;
        }
        for (p, why) in &scan.skipped {
            println!("{}: skipped: {why}", p.display());
        }
        let mut files: Vec<&std::path::PathBuf> = scan.good.keys().chain(scan.errors.keys()).collect();
        files.sort();
        for f in files {
            if let Some(good) = scan.good.get(f) {
                let m = &good.opened.manifests;
                let signed = signed_by(&good.opened);
                for sp in &m.pods {
                    println!("{}: ok: pod {} uid {}{signed}", f.display(), sp.pod.key(), sp.uid);
                    let deps = pod::order::depends_on(&sp.pod).unwrap_or_default();
                    ordered.push((pod::order::written_key(&sp.pod), deps, f.display().to_string()));
                    pods.push((sp.clone(), f.display().to_string()));
                }
                for o in &m.objects {
                    println!("{}: ok: {}{signed}", f.display(), object_line(o));
                    found.push(o.clone());
                }
                for w in &m.warnings {
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
    let known: resolve::Snapshot =
        found.into_iter().map(|o| ((o.kind, o.namespace.clone(), o.name.clone()), o)).collect();
    for (sp, file) in &pods {
        for (path, problem) in resolve::unresolved(&sp.pod, &known) {
            println!("{file}: error: {path}: {problem} (not among the manifests given)");
            all_ok = false;
        }
    }
    Ok(all_ok)
}

/// `configmap default/app (2 keys)`: never a value.
fn object_line(o: &LocalObject) -> String {
    let keys = if o.data.len() == 1 { "key" } else { "keys" };
    format!("{} {} ({} {keys}, {} bytes)", o.kind.resource(), o.key(), o.data.len(), o.size())
}

/// `, signed by key K` when the payload was signed.
fn signed_by(opened: &Opened) -> String {
    opened.signed.as_ref().map(|v| format!(", signed by key {}", v.key)).unwrap_or_default()
}

/// Whether the URL's payload is valid, and what it holds.
fn validate_url(s: &Settings, url: &str, intake: &Intake) -> (bool, objects::Manifests) {
    let mut loaded = objects::Manifests::default();
    let ok = check_url(s, url, intake, &mut loaded);
    (ok, loaded)
}

/// The URL's payload, opened as the URL source opens it: its signature first (an empty body's
/// too), then its pods and objects.
fn check_url(s: &Settings, url: &str, intake: &Intake, out: &mut objects::Manifests) -> bool {
    let shown = http::redact_url(url);
    let client = match http::Client::new(
        url,
        s.sources.url.headers.clone(),
        http::DEFAULT_TIMEOUT,
        s.sources.url.ca_file.as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            println!("{shown}: error: {e}");
            return false;
        }
    };
    match client.fetch(&Default::default(), intake.trust.is_some()) {
        Ok(http::Fetched::Body { bytes, signature, .. }) => {
            let payload = Payload { origin: Origin::Url(url.to_string()), bytes, signature };
            match intake.open(&payload) {
                Ok(opened) => {
                    let signed = signed_by(&opened);
                    if payload.blank() {
                        println!("{shown}: ok: empty body (no pods){signed}");
                    }
                    for sp in &opened.manifests.pods {
                        println!("{shown}: ok: pod {} uid {}{signed}", sp.pod.key(), sp.uid);
                    }
                    for o in &opened.manifests.objects {
                        println!("{shown}: ok: {}{signed}", object_line(o));
                    }
                    for w in &opened.manifests.warnings {
                        println!("{shown}: warning: {w}");
                    }
                    *out = opened.manifests;
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
