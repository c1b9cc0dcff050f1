//! What a runtime can do that CRI gives no way to ask, by the name and version its Version
//! call reports.

/// Whether the runtime mounts image volumes (CRI's `Mount.image`): containerd from 2.1,
/// CRI-O from 1.31. An older runtime drops the field it does not know and would run the
/// container without the volume.
pub fn mounts_image_volumes(runtime_name: &str, runtime_version: &str) -> bool {
    let Some((major, minor)) = major_minor(runtime_version) else { return false };
    match runtime_name {
        "containerd" => (major, minor) >= (2, 1),
        "cri-o" => (major, minor) >= (1, 31),
        _ => false,
    }
}

/// `v2.1.9`, `2.1.9+unknown`, `1.6.20~ds1` → (major, minor).
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let v = version.trim().trim_start_matches('v');
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_volumes_need_containerd_2_1_or_cri_o_1_31() {
        assert!(mounts_image_volumes("containerd", "2.1.9+unknown"));
        assert!(mounts_image_volumes("containerd", "v2.2.0"));
        assert!(!mounts_image_volumes("containerd", "v2.0.5"));
        assert!(!mounts_image_volumes("containerd", "1.7.24~ds1"));
        assert!(!mounts_image_volumes("containerd", "1.6.20~ds1"));
        assert!(mounts_image_volumes("cri-o", "1.31.0"));
        assert!(!mounts_image_volumes("cri-o", "1.30.4"));
        assert!(!mounts_image_volumes("containerd", "unknown"));
        assert!(!mounts_image_volumes("other", "9.9"));
    }
}
