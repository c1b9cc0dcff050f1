//! The documentation's links checked: every relative link and `#anchor` in `README.md` and
//! `docs/src/**/*.md` resolves (the file exists; the anchor is a heading's slug, as GitHub
//! and mdBook make it), and every page of `docs/src` is in `SUMMARY.md`.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The markdown files under `dir`, recursively.
fn pages(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            pages(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

/// A heading's anchor as GitHub and mdBook make it: lower case, letters, digits, `-` and `_`
/// kept, spaces made `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The lines outside code fences.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    prose(text).iter().filter_map(|l| l.strip_prefix('#')).map(|h| slug(h.trim_start_matches('#'))).collect()
}

/// The targets of `[text](target)` links in prose, without inline code spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let line: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        let mut rest = line.as_str();
        while let Some((_, after)) = rest.split_once("](") {
            let Some((target, tail)) = after.split_once(')') else { break };
            out.push(target.to_string());
            rest = tail;
        }
    }
    out
}

/// Every broken link of `file`, as `file: target: why`.
fn broken(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut bad = Vec::new();
    for target in links(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let dest = if path.is_empty() { file.to_path_buf() } else { file.parent().unwrap().join(path) };
        if !dest.exists() {
            bad.push(format!("{}: {target}: no such file", file.display()));
            continue;
        }
        if !anchor.is_empty() {
            let dest_text = std::fs::read_to_string(&dest).unwrap_or_default();
            if !anchors(&dest_text).iter().any(|a| a == anchor) {
                bad.push(format!("{}: {target}: no such heading", file.display()));
            }
        }
    }
    bad
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut files = vec![root().join("README.md")];
    pages(&root().join("docs/src"), &mut files);
    let bad: Vec<String> = files.iter().flat_map(|f| broken(f)).collect();
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn every_page_is_in_the_summary() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed = links(&summary);
    let mut files = Vec::new();
    pages(&src, &mut files);
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if rel != "SUMMARY.md" {
            assert!(listed.contains(&rel), "docs/src/{rel} is not in SUMMARY.md");
        }
    }
}

#[test]
fn the_checker_sees_a_broken_link_and_a_broken_anchor() {
    assert_eq!(slug(" The CLI, flags and `config` keys"), "the-cli-flags-and-config-keys");
    assert_eq!(links("see [a](b.md#c) and `[x](y)` [d](e)"), vec!["b.md#c", "e"]);
    let dir = std::env::temp_dir().join(format!("atoll-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("a.md");
    std::fs::write(&page, "# A page\n[ok](a.md#a-page) [gone](b.md) [bad](#nope)\n```\n[x](fenced.md)\n```\n").unwrap();
    let bad = broken(&page);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].ends_with("b.md: no such file") && bad[1].ends_with("#nope: no such heading"), "{bad:?}");
}
