//! The bounded walk on a real directory: what it counts, what it refuses to follow, where it
//! stops; kubelet's local ephemeral volumes; a statvfs turned into sizes.

use super::*;
use std::os::unix::fs::symlink;

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("atoll-disks-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_walk_counts_the_tree_and_follows_no_symlink() {
    let base = scratch("walk");
    let outside = base.join("outside");
    std::fs::create_dir_all(outside.join("deep")).unwrap();
    std::fs::write(outside.join("big"), vec![7u8; 4 << 20]).unwrap();
    let top = base.join("volume");
    std::fs::create_dir_all(top.join("sub")).unwrap();
    std::fs::write(top.join("a"), vec![1u8; 8192]).unwrap();
    std::fs::write(top.join("sub/b"), vec![2u8; 8192]).unwrap();
    std::fs::hard_link(top.join("a"), top.join("sub/a-again")).unwrap();
    symlink(&outside, top.join("to-dir")).unwrap();
    symlink(outside.join("big"), top.join("to-file")).unwrap();
    let mut budget = SCRAPE_ENTRIES;
    let (used, fs) = walk(&top, WALK_ENTRIES, &mut budget).unwrap();
    // top, a, sub, sub/b, the two links (each itself); a's second name is the same inode.
    assert_eq!(used.inodes, 6, "{used:?}");
    assert!(used.complete);
    assert!(used.bytes >= 16384 && used.bytes < 1 << 20, "the 4 MiB behind a link is not counted: {used:?}");
    assert!(fs.capacity > 0 && fs.capacity >= fs.available && fs.inodes >= fs.inodes_free, "{fs:?}");
    assert_eq!(budget, SCRAPE_ENTRIES - 6, "six entries read (the hard link's second name too)");
    // The top itself a symlink: refused.
    assert_eq!(walk(&top.join("to-dir"), WALK_ENTRIES, &mut budget), None);
    assert_eq!(walk(&base.join("absent"), WALK_ENTRIES, &mut budget), None);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn the_walk_stops_at_its_limits() {
    let base = scratch("limit");
    for i in 0..50 {
        std::fs::write(base.join(format!("f{i}")), b"x").unwrap();
    }
    let mut budget = SCRAPE_ENTRIES;
    let (used, _) = walk(&base, 10, &mut budget).unwrap();
    assert_eq!((used.inodes, used.complete), (11, false), "the top and ten entries");
    assert_eq!(budget, SCRAPE_ENTRIES - 10);
    // The scrape's budget bounds it too, and once spent, a walk counts only its top.
    let mut budget = 20;
    assert_eq!(walk(&base, WALK_ENTRIES, &mut budget).map(|(u, _)| u.inodes), Some(21));
    assert_eq!(budget, 0);
    assert_eq!(walk(&base, WALK_ENTRIES, &mut budget).map(|(u, _)| (u.inodes, u.complete)), Some((1, false)));
    // Depth: a chain deeper than WALK_DEPTH is cut there.
    let deep = scratch("deep");
    let mut p = deep.clone();
    for _ in 0..WALK_DEPTH + 5 {
        p = p.join("d");
    }
    std::fs::create_dir_all(&p).unwrap();
    let (used, _) = walk(&deep, WALK_ENTRIES, &mut SCRAPE_ENTRIES.clone()).unwrap();
    assert_eq!((used.inodes, used.complete), (WALK_DEPTH as u64 + 2, false), "{used:?}");
    let _ = std::fs::remove_dir_all(&base);
    let _ = std::fs::remove_dir_all(&deep);
}

#[test]
fn log_files_are_the_regular_files_of_the_directory() {
    let base = scratch("logs");
    std::fs::write(base.join("0.log"), vec![b'l'; 5000]).unwrap();
    std::fs::write(base.join("0.log.20240101-000000.gz"), b"z").unwrap();
    std::fs::create_dir(base.join("nested")).unwrap();
    std::fs::write(base.join("nested/x"), vec![b'x'; 1 << 20]).unwrap();
    symlink("/etc/passwd", base.join("link")).unwrap();
    let mut budget = 100;
    let used = files(&base, &mut budget).unwrap();
    assert_eq!((used.inodes, used.complete), (2, true), "{used:?}");
    assert!(used.bytes >= 5000 && used.bytes < 1 << 20, "{used:?}");
    assert_eq!(files(&base.join("absent"), &mut budget), None);
    assert_eq!(file(&base.join("0.log")).map(|u| u.inodes), Some(1));
    assert_eq!(file(&base.join("link")), None, "a symlink is not a file");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn local_ephemeral_volumes_are_kubelets() {
    let volume = |json: &str| -> Volume { serde_json::from_str(json).unwrap() };
    let table = [
        (r#"{"name":"v","emptyDir":{}}"#, true),
        (r#"{"name":"v","emptyDir":{"medium":""}}"#, true),
        (r#"{"name":"v","emptyDir":{"medium":"Memory"}}"#, false),
        (r#"{"name":"v","configMap":{"name":"c"}}"#, true),
        (r#"{"name":"v","downwardAPI":{"items":[]}}"#, true),
        (r#"{"name":"v","secret":{"secretName":"s"}}"#, false),
        (r#"{"name":"v","projected":{"sources":[]}}"#, false),
        (r#"{"name":"v","hostPath":{"path":"/srv"}}"#, false),
    ];
    for (v, want) in table {
        assert_eq!(ephemeral(&volume(v)), want, "{v}");
    }
}

#[test]
fn statvfs_sizes_are_in_fragments() {
    let st = rustix::fs::statvfs("/").unwrap();
    let fs = sizes(&st);
    assert_eq!(fs.capacity, st.f_blocks * st.f_frsize);
    assert_eq!(fs.used, (st.f_blocks - st.f_bfree) * st.f_frsize);
    assert_eq!((fs.inodes, fs.inodes_free), (st.f_files, st.f_ffree));
}
