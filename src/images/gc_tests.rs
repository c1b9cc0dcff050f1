use super::*;

const MIN: Duration = Duration::from_secs(60);
const GB: u64 = 1 << 30;

fn image(id: &str, size_gb: u64, used_min_ago: u64, seen_min_ago: u64, now: SystemTime) -> Candidate {
    Candidate {
        id: id.into(),
        names: vec![format!("docker.io/library/{id}:1")],
        size: size_gb * GB,
        first_seen: now - MIN * seen_min_ago as u32,
        last_used: now - MIN * used_min_ago as u32,
        in_use: false,
        pinned: None,
    }
}

fn ids(p: &Plan) -> Vec<&str> {
    p.remove.iter().map(|(id, _)| id.as_str()).collect()
}

#[test]
fn below_the_high_threshold_nothing_goes() {
    let now = SystemTime::now();
    let images = [image("a", 1, 60, 60, now)];
    let disk = Disk { capacity: 100 * GB, available: 16 * GB }; // 84% used
    assert!(plan(&images, Some(disk), Policy::default(), now, false).remove.is_empty());
}

#[test]
fn above_it_the_least_recently_used_go_until_the_low_threshold() {
    let now = SystemTime::now();
    // 90% used: 10 GB free and 20 GB wanted free, so 10 GB must go: the two least recently
    // used 5 GB images.
    let images = [image("new", 5, 5, 600, now), image("old", 5, 300, 600, now), image("older", 5, 400, 600, now)];
    let disk = Disk { capacity: 100 * GB, available: 10 * GB };
    let p = plan(&images, Some(disk), Policy::default(), now, false);
    assert_eq!(ids(&p), ["older", "old"]);
    assert_eq!(p.short, 0);
    assert!(p.remove[0].1.contains("90% full"), "{:?}", p.remove);
}

#[test]
fn in_use_pinned_and_young_images_stay_and_a_shortfall_is_reported() {
    let now = SystemTime::now();
    let mut used = image("used", 5, 500, 600, now);
    used.in_use = true;
    let mut pinned = image("pinned", 5, 500, 600, now);
    pinned.pinned = Some("imported from app.tar.zst".into());
    let young = image("young", 5, 500, 1, now); // seen a minute ago: under imageMinimumGCAge
    let free = image("free", 1, 500, 600, now);
    let disk = Disk { capacity: 100 * GB, available: 5 * GB };
    let p = plan(&[used, pinned, young, free], Some(disk), Policy::default(), now, false);
    assert_eq!(ids(&p), ["free"]);
    assert_eq!(p.short, 14 * GB, "20 GB wanted free, 5 free, 1 freed");
}

#[test]
fn maximum_age_removes_unused_images_whatever_the_disk() {
    let now = SystemTime::now();
    let images = [image("stale", 1, 60 * 24 * 8, 60 * 24 * 9, now), image("fresh", 1, 60, 60 * 24 * 9, now)];
    let policy = Policy { max_age: Some(Duration::from_secs(7 * 24 * 3600)), ..Policy::default() };
    let p = plan(&images, Some(Disk { capacity: 100 * GB, available: 90 * GB }), policy, now, false);
    assert_eq!(ids(&p), ["stale"]);
    assert!(p.remove[0].1.contains("imageMaximumGCAge"));
}

#[test]
fn prune_takes_every_image_that_may_go_even_young_ones() {
    let now = SystemTime::now();
    let mut used = image("used", 1, 0, 600, now);
    used.in_use = true;
    let mut pinned = image("pinned", 1, 500, 600, now);
    pinned.pinned = Some("used by pod default/web".into());
    let images = [used, pinned, image("young", 1, 500, 0, now), image("old", 1, 500, 600, now)];
    let p = plan(&images, None, Policy::default(), now, true);
    assert_eq!(ids(&p), ["old", "young"], "least recently used first, then first seen");
}

#[test]
fn no_disk_figures_means_no_threshold_collection() {
    let now = SystemTime::now();
    assert!(plan(&[image("a", 1, 600, 600, now)], None, Policy::default(), now, false).remove.is_empty());
    let empty = Disk { capacity: 0, available: 0 };
    assert!(plan(&[image("a", 1, 600, 600, now)], Some(empty), Policy::default(), now, false).remove.is_empty());
}

#[test]
fn an_image_a_pod_names_by_digest_is_kept_by_that_name() {
    let kept: BTreeMap<String, String> =
        [(super::super::names::runtime_name("busybox:1.36@sha256:abc"), "used by pod default/web".to_string())].into();
    let tags = vec!["docker.io/library/busybox:1.37".to_string()];
    let digests = vec!["docker.io/library/busybox@sha256:abc".to_string()];
    assert_eq!(kept_by_name(&tags, &digests, &kept).as_deref(), Some("used by pod default/web"));
    assert_eq!(kept_by_name(&tags, &[], &kept), None, "another image of the same name");
}

#[test]
fn an_import_may_fill_the_disk_up_to_the_high_threshold_only() {
    let disk = Disk { capacity: 100 * GB, available: 20 * GB };
    assert_eq!(disk.room_below(85), 5 * GB);
    assert_eq!(disk.room_below(75), 0, "already above it");
    assert_eq!(disk.room_below(100), 20 * GB);
}
