//! Records what `atoll version` prints about the build: the target triple and the git commit.

use std::process::Command;

fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=ATOLL_TARGET={target}");
    // ATOLL_GIT_COMMIT may be given by a packager building from a tarball.
    let commit = std::env::var("ATOLL_GIT_COMMIT").ok().or_else(git_commit).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ATOLL_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-env-changed=ATOLL_GIT_COMMIT");
    // Rebuild when HEAD moves so the commit stays true.
    for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

fn git_commit() -> Option<String> {
    let out = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let mut commit = String::from_utf8(out.stdout).ok()?.trim().to_string();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    if dirty {
        commit.push_str("-dirty");
    }
    Some(commit)
}
