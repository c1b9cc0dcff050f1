//! The house's rules, checked on the source: no import cycle between files of `src/`; every
//! import points down the floors `lib.rs` lists (a room imports only rooms on floors below its
//! own); no file over 600 lines; in `tests/` and `benches/` too, every file opening with a `//!`
//! note and no function over 120 lines. Imports are read as text (`crate::`, `super::`, and a parent's uses of its
//! own child modules), each resolved to the file that defines it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`runtime::worker`, `` for lib.rs) → file, for every file of src/ but main.rs
/// and the files compiled for unit tests only (whose imports are the tests', not the house's).
fn modules(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().and_then(|x| x.to_str()) == Some("rs") && !p.ends_with("main.rs") {
                files.push(p);
            }
        }
    }
    let test_only: BTreeSet<PathBuf> = files.iter().flat_map(|f| test_only_children(f)).collect();
    let mut out = BTreeMap::new();
    for p in files {
        if test_only.iter().any(|t| p == *t || t.extension().is_none() && p.starts_with(t)) {
            continue;
        }
        let rel = p.strip_prefix(root).unwrap().with_extension("");
        let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
            parts.pop();
        }
        out.insert(parts.join("::"), p);
    }
    out
}

/// The files (or module directories) `file` declares as `#[cfg(test)] mod name;`, with or
/// without a `#[path]`.
fn test_only_children(file: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(file).unwrap();
    let dir = file.parent().unwrap();
    // A file's children live in a directory named after it, a mod.rs's beside it.
    let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
    let children = if stem == "mod" || stem == "lib" { dir.to_path_buf() } else { dir.join(&stem) };
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        if *line != "#[cfg(test)]" {
            continue;
        }
        let mut next = n + 1;
        let mut path_attr = None;
        if let Some(p) = lines.get(next).and_then(|l| l.strip_prefix("#[path = \"")) {
            path_attr = p.strip_suffix("\"]").map(String::from);
            next += 1;
        }
        let Some(decl) = lines.get(next) else { continue };
        let decl = decl.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) else { continue };
        match path_attr {
            Some(p) => out.push(dir.join(p)),
            None => {
                out.push(children.join(format!("{name}.rs")));
                out.push(children.join(name));
            }
        }
    }
    out
}

/// The module a module's `super::` means (whether it is a `mod.rs` or a file of its own).
fn parent_of(module: &str) -> String {
    let base: Vec<&str> = if module.is_empty() { vec![] } else { module.split("::").collect() };
    base[..base.len().saturating_sub(1)].join("::")
}

/// The longest existing module that `path` (segments) names.
fn resolve(mods: &BTreeMap<String, PathBuf>, path: &[&str]) -> Option<String> {
    (0..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| mods.contains_key(m))
}

/// Text without comments, string literals (so doc examples and messages are not imports) and
/// the unit tests at the end of a file (whose `super::` is the file itself).
fn code_only(text: &str) -> String {
    let text = text.split_once("#[cfg(test)]\nmod tests {").map_or(text, |(code, _)| code);
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut in_str = false;
        let mut prev = ' ';
        for ch in line.chars() {
            if ch == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                out.push(ch);
            }
            prev = ch;
        }
        out.push('\n');
    }
    out
}

/// Every file's imports as module paths, resolved to files of `mods`.
fn imports(mods: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in mods {
        let text = code_only(&std::fs::read_to_string(file).unwrap());
        let parent = parent_of(module);
        let own_base: Vec<String> = parent.split("::").filter(|s| !s.is_empty()).map(String::from).collect();
        let mut targets = BTreeSet::new();
        let mut add = |base: &[String], rest: &str| {
            for item in expand(rest) {
                let mut path: Vec<&str> = base.iter().map(String::as_str).collect();
                path.extend(item.split("::").filter(|s| !s.is_empty()));
                if let Some(m) = resolve(mods, &path) {
                    if &m != module {
                        targets.insert(m);
                    }
                }
            }
        };
        let words: Vec<(usize, &str)> = text.match_indices("crate::").chain(text.match_indices("super::")).collect();
        for (at, kind) in words {
            let rest = text.get(at + kind.len()..).unwrap_or_default();
            let base: Vec<String> = if kind == "crate::" {
                vec![]
            } else {
                let mut b: Vec<String> = own_base.clone();
                // `super::super::` and the like: one level per extra `super::`.
                let mut r = rest;
                while let Some(more) = r.strip_prefix("super::") {
                    b.pop();
                    r = more;
                }
                add(&b, r);
                continue;
            };
            add(&base, rest);
        }
        // A module's uses of its own children by their bare names (`container::Kind`).
        let children: Vec<String> =
            mods.keys().filter(|m| parent_of(m) == *module && !m.is_empty() && *m != module).cloned().collect();
        if file.ends_with("mod.rs") || file.ends_with("lib.rs") {
            for child in children {
                let name = child.rsplit("::").next().unwrap_or(&child).to_string();
                let uses = text.lines().any(|l| {
                    let l = l.trim();
                    !l.starts_with("mod ") && !l.starts_with("pub mod ") && !l.starts_with("pub(crate) mod ") && {
                        l.contains(&format!(" {name}::"))
                            || l.contains(&format!("({name}::"))
                            || l.starts_with(&format!("{name}::"))
                            || l.contains(&format!("use {name}::"))
                            || l.contains(&format!("!{name}::"))
                            || l.contains(&format!("&{name}::"))
                    }
                });
                if uses {
                    targets.insert(child);
                }
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

/// `a::{b, c::d}` → [a::b, a::c::d]; `a::b::C` → [a::b::C]; stops at the path's end.
fn expand(rest: &str) -> Vec<String> {
    let mut head = String::new();
    let chars: Vec<char> = rest.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            let mut depth = 0;
            let mut j = i;
            while j < chars.len() {
                match chars[j] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            let inner: String = chars[i + 1..j.min(chars.len())].iter().collect();
            let mut out = Vec::new();
            let mut depth = 0;
            let mut item = String::new();
            for ch in inner.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.extend(expand(item.trim()).into_iter().map(|x| format!("{head}{x}")));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(ch);
            }
            out.extend(expand(item.trim()).into_iter().map(|x| format!("{head}{x}")));
            return out;
        }
        if c.is_alphanumeric() || c == '_' || c == ':' {
            head.push(c);
            i += 1;
            continue;
        }
        break;
    }
    vec![head.trim_end_matches(':').to_string()]
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// A cycle through `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut cycle = path[i..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for next in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_file_of_src_imports_itself_in_a_circle() {
    let mods = modules(&src());
    let graph = imports(&mods);
    assert!(graph.len() > 50, "the source was read: {} files", graph.len());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("an import cycle between files: {}", cycle.join(" -> "));
    }
}

/// The floors `lib.rs` documents, from the top: each a list of rooms (top-level modules).
fn floors() -> Vec<Vec<String>> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut floors: Vec<Vec<String>> = Vec::new();
    for line in lib.lines().map_while(|l| l.strip_prefix("//!")) {
        let line = line.trim_start();
        let numbered = line.split_once(". ").filter(|(n, _)| n.parse::<u32>().is_ok());
        let text = match numbered {
            Some((_, rest)) => {
                floors.push(Vec::new());
                rest
            }
            // A floor's list may go on to the next line, before its description.
            None if line.starts_with('`') && !floors.is_empty() => line,
            None => continue,
        };
        let names = text.split(':').next().unwrap_or("");
        let floor = floors.last_mut().unwrap();
        floor.extend(names.split('`').skip(1).step_by(2).map(String::from));
    }
    floors
}

#[test]
fn every_import_points_down_the_floors_lib_rs_lists() {
    let mods = modules(&src());
    let graph = imports(&mods);
    let floors = floors();
    assert!(floors.len() >= 10, "lib.rs lists its floors: {floors:?}");
    let floor_of = |room: &str| floors.iter().position(|f| f.iter().any(|r| r == room));
    let top = |m: &str| m.split("::").next().unwrap_or("").to_string();
    // Every room has a floor, and only one.
    let rooms: BTreeSet<String> = mods.keys().map(|m| top(m)).filter(|r| !r.is_empty()).collect();
    for room in &rooms {
        let on: Vec<usize> = (0..floors.len()).filter(|i| floors[*i].contains(room)).collect();
        assert_eq!(on.len(), 1, "room {room} is on floors {on:?} of lib.rs's list: {floors:?}");
    }
    let mut broken = Vec::new();
    for (from, targets) in &graph {
        let (a, Some(fa)) = (top(from), floor_of(&top(from))) else { continue };
        // lib.rs only declares the rooms (and a test file's `super::super` may name it).
        for t in targets.iter().filter(|t| !t.is_empty() && top(t) != a) {
            let ft = floor_of(&top(t)).unwrap_or(0);
            if ft <= fa {
                let how = if ft == fa { "beside it" } else { "above it" };
                broken.push(format!("{from} (floor {}) imports {t}, {how} (floor {})", fa + 1, ft + 1));
            }
        }
    }
    assert!(broken.is_empty(), "imports that do not point down:\n{}", broken.join("\n"));
}

#[test]
fn the_floor_rule_catches_an_arrow_up_or_sideways() {
    // The rule the test above applies, on a made-up house: it must see both kinds of arrow.
    let floors = floors();
    let at = |room: &str| floors.iter().position(|f| f.iter().any(|r| r == room)).unwrap();
    assert!(at("config") > at("cli"), "cli above config: config importing cli would be caught");
    assert_eq!(at("runtime"), at("probe"), "the engine and the probers are peers");
    assert_eq!(at("source"), at("images"));
    assert!(at("node") > at("runtime") && at("pod") > at("node") && at("parse") > at("pod"));
}

#[test]
fn the_reader_finds_imports_as_they_are_written() {
    assert_eq!(expand("a::{b, c::{d, e}}::X"), ["a::b", "a::c::d", "a::c::e"]);
    assert_eq!(expand("runtime::worker::Shared;"), ["runtime::worker::Shared"]);
    let mods = modules(&src());
    let graph = imports(&mods);
    assert!(graph["runtime::worker"].contains("runtime::sync"), "{:?}", graph["runtime::worker"]);
    assert!(graph["agent"].contains("runtime"), "{:?}", graph["agent"]);
}

#[test]
fn files_fit_in_a_head() {
    let mut long = Vec::new();
    for file in modules(&src()).values() {
        if file.ends_with("cri/runtime.v1.rs") {
            continue; // generated from proto/cri.proto
        }
        let lines = std::fs::read_to_string(file).unwrap().lines().count();
        if lines > 600 {
            long.push(format!("{} has {lines} lines", file.display()));
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}

#[test]
fn tasks_and_blocking_jobs_go_through_one_type() {
    // `task::spawn` boxes every future and `task::unblock` every closure, so the executor's and
    // the blocking pool's task code is compiled once; a `smol::spawn` or `smol::unblock`
    // elsewhere brings back a copy of it for its future or closure alone.
    let mut direct = Vec::new();
    for file in modules(&src()).values() {
        let text = code_only(&std::fs::read_to_string(file).unwrap());
        for (call, instead) in [("smol::spawn(", "crate::task::spawn"), ("smol::unblock(", "crate::task::unblock")] {
            if !file.ends_with("task.rs") && text.contains(call) {
                direct.push(format!("{call} in {} (use {instead})", file.display()));
            }
        }
    }
    assert!(direct.is_empty(), "outside src/task.rs: {direct:?}");
}

/// The modules whose docs say they are pure (decisions with table tests; their callers act).
const PURE: &[&str] = &[
    "admission/verdict.rs",
    "agent/readiness.rs",
    "objects/resolve.rs",
    "pod/fieldpath.rs",
    "probe/progress.rs",
    "rollback/judge.rs",
    "rollback/record.rs",
    "runtime/container.rs",
    "runtime/lifecycle.rs",
    "runtime/plan/",
    "runtime/sandbox.rs",
    "source/last_wins.rs",
    "status/mod.rs",
    "tunnel/policy.rs",
    "tunnel/pool.rs",
    "runtime/ledger.rs",
    "mirror/certs/schedule.rs",
];

/// What a pure module may not name: files, sockets, processes, the environment, threads, the
/// executor's blocking pool and timers, the records on disk, the log, the metrics, the clock
/// (time is passed in), spawned tasks.
const IMPURE: &[&str] = &[
    "std::fs",
    "std::net::Tcp",
    "std::net::Udp",
    "std::os::unix::net",
    "std::os::fd",
    "std::process",
    "std::env",
    "std::thread",
    "std::io::stdout",
    "std::io::stderr",
    "smol::fs",
    "smol::net",
    "smol::process",
    "smol::unblock",
    "smol::Timer",
    "crate::records",
    "crate::bounded::read",
    "crate::metrics::",
    "crate::task::spawn",
    "crate::task::unblock",
    "log::",
    "SystemTime::now",
    "Instant::now",
    "libc::",
];

/// The I/O `text` (a file's code) names, `use std::{fs, ...}` groups spelled out.
fn io_in(text: &str) -> Vec<&'static str> {
    let mut code = code_only(text).split_whitespace().collect::<String>();
    let groups: Vec<String> = code.split("std::{").skip(1).map(String::from).collect();
    for group in groups {
        let inner = group.split('}').next().unwrap_or("");
        for item in inner.split(',') {
            code.push_str(&format!(" std::{item}"));
        }
    }
    IMPURE.iter().copied().filter(|p| code.contains(&p.split_whitespace().collect::<String>())).collect()
}

#[test]
fn modules_labelled_pure_do_no_io() {
    let mut impure = Vec::new();
    for file in modules(&src()).values() {
        let rel = file.strip_prefix(src()).unwrap().to_string_lossy().into_owned();
        if !PURE.iter().any(|p| rel == *p || p.ends_with('/') && rel.starts_with(p)) {
            continue;
        }
        let io = io_in(&std::fs::read_to_string(file).unwrap());
        if !io.is_empty() {
            impure.push(format!("{rel}: {io:?}"));
        }
    }
    assert!(impure.is_empty(), "modules labelled pure that do I/O:\n{}", impure.join("\n"));
    for p in PURE.iter().filter(|p| !p.starts_with("//")) {
        assert!(src().join(p).exists(), "{p} is listed as pure but does not exist");
    }
    // The check itself: a read of the clock, a log line, a grouped import of std::fs.
    assert_eq!(io_in("fn f() { let t = std::time::Instant::now(); }"), ["Instant::now"]);
    assert_eq!(io_in("use std::{collections::BTreeMap, fs};\nfn f() { log::info!(\"x\") }"), ["std::fs", "log::"]);
    assert!(io_in("fn f(now: Instant) -> bool { now > now } // std::fs\n#[cfg(test)]\nmod tests {\nuse std::fs;\n}")
        .is_empty());
}

/// Every function of `text` as (its name, its first line, its length in lines), as rustfmt
/// lays them out: from `fn` to the `}` at the same indentation.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = line.strip_suffix(code).unwrap_or("");
        let mut rest = code;
        for prefix in ["pub(crate) ", "pub(super) ", "pub ", "const ", "async ", "unsafe ", "extern \"C\" "] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        let Some(name) = rest.strip_prefix("fn ") else { continue };
        if code.ends_with('}') {
            continue; // on one line
        }
        let name = name.split(['(', '<']).next().unwrap_or("").to_string();
        let Some(open) = lines[n..].iter().position(|l| l.ends_with('{') || l.ends_with(';')) else { continue };
        if lines[n + open].ends_with(';') {
            continue; // a declaration without a body
        }
        let end = format!("{indent}}}");
        if let Some(len) = lines[n..].iter().position(|l| *l == end) {
            out.push((name, n + 1, len + 1));
        }
    }
    out
}

/// The files whose functions may be long: the validator's checks and the renderers (one
/// field after another, read best in one piece).
const LONG_FUNCTIONS_ALLOWED: &[&str] = &["pod/validate/container.rs"];

#[test]
fn functions_fit_in_a_screenful() {
    let mut long = Vec::new();
    for file in modules(&src()).values() {
        let rel = file.strip_prefix(src()).unwrap().to_string_lossy().into_owned();
        if LONG_FUNCTIONS_ALLOWED.iter().any(|p| rel == *p || p.ends_with('/') && rel.starts_with(p)) {
            continue;
        }
        for (name, line, len) in functions(&std::fs::read_to_string(file).unwrap()) {
            if len > 120 {
                long.push(format!("{rel}:{line}: {name} has {len} lines"));
            }
        }
    }
    assert!(long.is_empty(), "functions over 120 lines (split them into named steps):\n{}", long.join("\n"));
    let sample =
        "impl A {\n    pub async fn f(\n        x: u8,\n    ) {\n        g();\n    }\n    fn h();\n}\nfn k() {}\n";
    assert_eq!(functions(sample), [("f".to_string(), 2, 5)]);
}

#[path = "architecture/wing.rs"]
mod wing;
