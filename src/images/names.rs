//! Image names as the runtime lists them (CRI `repoTags` and `repoDigests`): what a pod's
//! references come to, so that image collection and the runtime's pins find the images the
//! pods need, named by tag or by digest.

/// A pod's images, as the runtime names them: its containers' and its image volumes'.
pub fn pod_images(pod: &crate::pod::types::Pod) -> Vec<String> {
    let spec = &pod.spec;
    let containers = spec.containers.iter().chain(spec.init_containers.iter()).map(|c| c.image.as_str());
    let volumes = spec.volumes.iter().filter_map(|v| v.image.as_ref().map(|i| i.reference.as_str()));
    containers.chain(volumes).map(runtime_name).collect()
}

/// An image reference as the runtime lists it: normalized, and `name@digest` when a digest is
/// given (a tag beside the digest is not one of the image's names).
pub fn runtime_name(image: &str) -> String {
    let normalized = crate::pod::derived::normalized_image(image);
    match normalized.split_once('@') {
        Some((name, digest)) => {
            let repo = name.rsplit_once(':').filter(|(_, tag)| !tag.contains('/')).map_or(name, |(repo, _)| repo);
            format!("{repo}@{digest}")
        }
        None => normalized,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_names_its_images_as_the_runtime_lists_them() {
        for (given, listed) in [
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("busybox@sha256:abc", "docker.io/library/busybox@sha256:abc"),
            ("busybox:1.36@sha256:abc", "docker.io/library/busybox@sha256:abc"),
            ("127.0.0.1:5000/app:1@sha256:abc", "127.0.0.1:5000/app@sha256:abc"),
            ("127.0.0.1:5000/app@sha256:abc", "127.0.0.1:5000/app@sha256:abc"),
        ] {
            assert_eq!(runtime_name(given), listed, "{given}");
        }
    }
}
