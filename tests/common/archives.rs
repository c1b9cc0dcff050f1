//! Image tarballs for the image tests, made offline from the test bed's busybox archive: docker
//! and OCI archives under names of their own, plain, gzip or zstd, and the helpers to put them
//! into an images directory.

use super::Testbed;
use std::path::Path;

/// Image tarballs made from the test bed's busybox archive under a name of their own.
pub struct Archives {
    work: super::Scratch,
    /// The busybox archive unpacked: manifest.json, the config and layer.tar.
    pub config: String,
}

pub fn sh(cmd: &str) {
    let st = std::process::Command::new("sh").args(["-c", cmd]).status().expect("sh");
    assert!(st.success(), "{cmd}");
}

pub fn sha256(bytes: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

impl Archives {
    pub fn new(tb: &Testbed, name: &str) -> Archives {
        let work = super::Scratch::new(&format!("archives-{name}"));
        std::fs::create_dir_all(work.join("docker")).unwrap();
        let busybox = Path::new(tb.var("ATOLL_TB_DIR")).join("images/busybox.tar");
        sh(&format!("tar -C {} -xf {}", work.join("docker").display(), busybox.display()));
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(work.join("docker/manifest.json")).unwrap()).unwrap();
        let config = manifest[0]["Config"].as_str().unwrap().to_string();
        Archives { work, config }
    }

    /// A docker archive naming `image`, compressed with `compress` ("", "gzip", "zstd").
    pub fn docker(&self, image: &str, compress: &str) -> Vec<u8> {
        let d = self.work.join("docker");
        let manifest = format!(r#"[{{"Config":"{}","RepoTags":["{image}"],"Layers":["layer.tar"]}}]"#, self.config);
        std::fs::write(d.join("manifest.json"), manifest).unwrap();
        let out = self.work.join("out.tar");
        sh(&format!("tar -C {} -cf {} manifest.json {} layer.tar", d.display(), out.display(), self.config));
        self.compressed(&out, compress)
    }

    /// A docker archive naming `image` with a second layer holding one file of `text`.
    pub fn docker_with_layer(&self, image: &str, text: &str) -> Vec<u8> {
        let d = self.work.join("docker");
        let extra = self.work.join("extra");
        std::fs::create_dir_all(&extra).unwrap();
        std::fs::write(extra.join("extra.txt"), text).unwrap();
        sh(&format!("tar -C {} -cf {} extra.txt", extra.display(), d.join("extra.tar").display()));
        let diff_id = format!("sha256:{}", sha256(&std::fs::read(d.join("extra.tar")).unwrap()));
        let mut config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join(&self.config)).unwrap()).unwrap();
        config["rootfs"]["diff_ids"].as_array_mut().unwrap().push(diff_id.into());
        std::fs::write(d.join("extra-config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
        let manifest =
            format!(r#"[{{"Config":"extra-config.json","RepoTags":["{image}"],"Layers":["layer.tar","extra.tar"]}}]"#);
        std::fs::write(d.join("manifest.json"), manifest).unwrap();
        let out = self.work.join("out.tar");
        sh(&format!(
            "tar -C {} -cf {} manifest.json extra-config.json layer.tar extra.tar",
            d.display(),
            out.display()
        ));
        std::fs::read(out).unwrap()
    }

    /// An OCI archive naming `image` (io.containerd.image.name).
    pub fn oci(&self, image: &str, compress: &str) -> Vec<u8> {
        let d = self.work.join("oci");
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("blobs/sha256")).unwrap();
        let blob = |bytes: &[u8]| {
            let hex = sha256(bytes);
            std::fs::write(d.join("blobs/sha256").join(&hex), bytes).unwrap();
            (format!("sha256:{hex}"), bytes.len())
        };
        let (layer, layer_size) = blob(&std::fs::read(self.work.join("docker/layer.tar")).unwrap());
        let (config, config_size) = blob(&std::fs::read(self.work.join("docker").join(&self.config)).unwrap());
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{config}","size":{config_size}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{layer}","size":{layer_size}}}]}}"#
        );
        let (m, m_size) = blob(manifest.as_bytes());
        let tag = image.rsplit(':').next().unwrap();
        let index = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{m}","size":{m_size},"annotations":{{"io.containerd.image.name":"{image}","org.opencontainers.image.ref.name":"{tag}"}}}}]}}"#
        );
        std::fs::write(d.join("index.json"), index).unwrap();
        std::fs::write(d.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        let out = self.work.join("out.tar");
        sh(&format!("tar -C {} -cf {} oci-layout index.json blobs", d.display(), out.display()));
        self.compressed(&out, compress)
    }

    fn compressed(&self, tar: &Path, compress: &str) -> Vec<u8> {
        match compress {
            "" => std::fs::read(tar).unwrap(),
            tool => {
                let out = std::process::Command::new(tool).args(["-q", "-c"]).arg(tar).output().unwrap();
                assert!(out.status.success(), "{tool}");
                out.stdout
            }
        }
    }
}

impl Drop for Archives {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// Where the header of the entry whose name starts with `name` is in a tar.
pub fn header_of(tar: &[u8], name: &[u8]) -> usize {
    (0..tar.len()).step_by(512).find(|&at| tar[at..].starts_with(name)).expect("the entry's header")
}

/// Puts `bytes` into `dir` as `name` the way an operator should: written under a hidden name,
/// then renamed into place.
pub fn drop_file(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{name}.part"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}
