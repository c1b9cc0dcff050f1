//! `atoll validate`: the same pipeline as `run` (decode, API defaults, static pod identity,
//! validation, static-pod restrictions), once, over files, directories and URLs, with a line
//! per manifest: `ok`, `warning` or `error`, each naming the file and the field. Across
//! everything given, start ordering and the pods' references to ConfigMaps and Secrets are
//! checked too (a reference that is not optional must find its object and key), and kubelet's
//! admission of the pods together against this node (`admission`). A file (or URL) with any
//! error gets no `ok` line: the lines are printed once everything is checked.

use super::Flags;
use crate::config::Settings;
use crate::objects::{self, resolve, LocalObject};
use crate::pod::{self, Origin, Policy, StaticPod};
use crate::source::payload::{Intake, Opened, Payload};
use crate::source::{http, scan};
use std::sync::Arc;

/// `atoll validate`: the same pipeline as `run`, once, with a line per manifest.
/// Returns whether everything was valid.
pub fn run(flags: &Flags, targets: &[String]) -> Result<bool, super::error::Error> {
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
    let mut out = Lines::default();
    for target in targets {
        let lower = target.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            let (ok, loaded) = validate_url(&s, target, &intake, &mut out);
            all_ok &= ok;
            let shown = http::redact_url(target);
            pods.extend(loaded.pods.into_iter().map(|sp| (sp, shown.clone())));
            found.extend(loaded.objects);
            continue;
        }
        let path = std::path::Path::new(target);
        let scan = scan::scan(path, &intake);
        if let Some(p) = &scan.path_problem {
            out.add(target, "error", p.to_string());
            all_ok = false;
        }
        for (p, why) in &scan.skipped {
            out.add(&p.display().to_string(), "skipped", why.to_string());
        }
        let mut files: Vec<&std::path::PathBuf> = scan.good.keys().chain(scan.errors.keys()).collect();
        files.sort();
        for f in files {
            let file = f.display().to_string();
            if let Some(good) = scan.good.get(f) {
                let m = &good.opened.manifests;
                let signed = signed_by(&good.opened);
                for sp in &m.pods {
                    out.add(&file, "ok", format!("pod {} uid {}{signed}", sp.pod.key(), sp.uid));
                    let deps = pod::order::depends_on(&sp.pod).unwrap_or_default();
                    ordered.push((pod::order::written_key(&sp.pod), deps, file.clone()));
                    pods.push((sp.clone(), file.clone()));
                }
                for o in &m.objects {
                    out.add(&file, "ok", format!("{}{signed}", object_line(o)));
                    found.push(o.clone());
                }
                for w in &m.warnings {
                    out.add(&file, "warning", w.to_string());
                }
            }
            if let Some(e) = scan.errors.get(f) {
                all_ok = false;
                for p in &e.problems {
                    out.add(&file, "error", p.to_string());
                }
            }
        }
    }
    let graph: Vec<(String, Vec<String>)> = ordered.iter().map(|(k, d, _)| (k.clone(), d.clone())).collect();
    for (key, problems) in pod::order::problems(&graph) {
        let file = ordered.iter().find(|(k, _, _)| *k == key).map(|(_, _, f)| f.as_str()).unwrap_or_default();
        for p in problems {
            out.add(file, "error", format!("{}: {p}", pod::order::FIELD));
        }
        all_ok = false;
    }
    let known: resolve::Snapshot =
        found.into_iter().map(|o| ((o.kind, o.namespace.clone(), o.name.clone()), o)).collect();
    for (sp, file) in &pods {
        for (path, problem) in resolve::unresolved(&sp.pod, &known) {
            out.add(file, "error", format!("{path}: {problem} (not among the manifests given)"));
            all_ok = false;
        }
    }
    // Admission, as this node would give it to these pods together (its labels, allocatable
    // resources, maxPods and AppArmor, from the same settings `run` reads).
    let info = crate::admission::node_info(&crate::agent::node_facts(&s));
    let all: Vec<&StaticPod> = pods.iter().map(|(sp, _)| sp).collect();
    for (sp, r) in crate::admission::admit_together(&all, &info) {
        let file = pods.iter().find(|(p, _)| p.uid == sp.uid).map(|(_, f)| f.as_str()).unwrap_or_default();
        let why =
            format!("pod {} rejected by admission on node {}: {}: {}", sp.pod.key(), info.name, r.reason, r.message);
        out.add(file, "error", why);
        all_ok = false;
    }
    out.print();
    Ok(all_ok)
}

/// The report's lines, `source: verdict: text`, kept until everything is checked.
#[derive(Default)]
struct Lines(Vec<(String, &'static str, String)>);

impl Lines {
    fn add(&mut self, source: &str, verdict: &'static str, text: String) {
        self.0.push((source.to_string(), verdict, text));
    }

    /// Prints every line but the `ok` lines of a source with an error.
    fn print(&self) {
        let failed = |src: &str| self.0.iter().any(|(s, v, _)| *v == "error" && s == src);
        for (source, verdict, text) in &self.0 {
            if *verdict != "ok" || !failed(source) {
                println!("{source}: {verdict}: {text}");
            }
        }
    }
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
fn validate_url(s: &Settings, url: &str, intake: &Intake, lines: &mut Lines) -> (bool, objects::Manifests) {
    let mut loaded = objects::Manifests::default();
    let ok = check_url(s, url, intake, &mut loaded, lines);
    (ok, loaded)
}

/// The URL's payload, opened as the URL source opens it: its signature first (an empty body's
/// too), then its pods and objects.
fn check_url(s: &Settings, url: &str, intake: &Intake, out: &mut objects::Manifests, lines: &mut Lines) -> bool {
    let shown = http::redact_url(url);
    let client = match http::Client::new(
        url,
        s.sources.url.headers.clone(),
        http::DEFAULT_TIMEOUT,
        s.sources.url.ca_file.as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            lines.add(&shown, "error", e.to_string());
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
                        lines.add(&shown, "ok", format!("empty body (no pods){signed}"));
                    }
                    for sp in &opened.manifests.pods {
                        lines.add(&shown, "ok", format!("pod {} uid {}{signed}", sp.pod.key(), sp.uid));
                    }
                    for o in &opened.manifests.objects {
                        lines.add(&shown, "ok", format!("{}{signed}", object_line(o)));
                    }
                    for w in &opened.manifests.warnings {
                        lines.add(&shown, "warning", w.to_string());
                    }
                    *out = opened.manifests;
                    true
                }
                Err(e) => {
                    for p in &e.problems {
                        lines.add(&shown, "error", p.to_string());
                    }
                    false
                }
            }
        }
        Ok(http::Fetched::NotModified) => {
            lines.add(&shown, "error", "answered 304 Not Modified to an unconditional request".into());
            false
        }
        Err(e) => {
            let (e, prefix) = (e.to_string(), format!("{shown}: "));
            lines.add(&shown, "error", e.strip_prefix(&prefix).unwrap_or(&e).to_string());
            false
        }
    }
}
