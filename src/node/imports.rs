//! The images directory's progress, as the rest of the node may see it: which tarballs are
//! waiting to be imported or being imported now, and what the last import of each file did.
//! The importer (`images::`) writes it; a worker whose image is not on disk reads it, so it
//! waits for an import under way instead of failing the pull, and the local API shows it.
//! Nothing here talks to the runtime.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// One tarball's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileState {
    /// Seen, not imported yet (or changed since).
    Pending,
    /// Being streamed into the runtime.
    Importing,
    /// Imported: the sha256 of the file and the image names it holds.
    Imported { digest: String, images: Vec<String> },
    /// The last try failed (the file is tried again when it changes).
    Failed(String),
}

#[derive(Debug, Default)]
pub struct Imports {
    /// By file name in the images directory.
    files: Mutex<BTreeMap<String, FileState>>,
}

impl Imports {
    pub fn set(&self, file: &str, state: FileState) {
        crate::locks::lock(&self.files).insert(file.to_string(), state);
    }

    /// Forgets the files not in `present` (deleted from the directory).
    pub fn retain(&self, present: &[String]) {
        crate::locks::lock(&self.files).retain(|f, _| present.contains(f));
    }

    /// A file still to be imported or being imported, if any: an image that is not on disk
    /// may be in it.
    pub fn under_way(&self) -> Option<String> {
        let files = crate::locks::lock(&self.files);
        files.iter().find(|(_, s)| matches!(s, FileState::Pending | FileState::Importing)).map(|(f, _)| f.clone())
    }

    /// The file an image was imported from, if any (`image` as the archive names it,
    /// normalized).
    pub fn source_of(&self, image: &str) -> Option<String> {
        let files = crate::locks::lock(&self.files);
        files.iter().find_map(|(f, s)| match s {
            FileState::Imported { images, .. } if images.iter().any(|i| i == image) => Some(f.clone()),
            _ => None,
        })
    }

    /// Every image imported from the directory (pinned: never collected).
    pub fn images(&self) -> Vec<String> {
        let files = crate::locks::lock(&self.files);
        let mut out: Vec<String> = files
            .values()
            .flat_map(|s| match s {
                FileState::Imported { images, .. } => images.clone(),
                _ => Vec::new(),
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Every file and its state, for the local API.
    pub fn all(&self) -> Vec<(String, FileState)> {
        crate::locks::lock(&self.files).iter().map(|(f, s)| (f.clone(), s.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_import_is_under_way_until_every_file_is_done() {
        let i = Imports::default();
        assert_eq!(i.under_way(), None);
        i.set("a.tar", FileState::Pending);
        i.set("b.tar.zst", FileState::Importing);
        assert_eq!(i.under_way().as_deref(), Some("a.tar"));
        i.set("a.tar", FileState::Failed("corrupt".into()));
        assert_eq!(i.under_way().as_deref(), Some("b.tar.zst"));
        let images = vec!["docker.io/library/app:1".to_string()];
        i.set("b.tar.zst", FileState::Imported { digest: "sha256:1".into(), images });
        assert_eq!(i.under_way(), None);
        assert_eq!(i.source_of("docker.io/library/app:1").as_deref(), Some("b.tar.zst"));
        assert_eq!(i.images(), ["docker.io/library/app:1"]);
        i.retain(&["a.tar".to_string()]);
        assert!(i.images().is_empty(), "a deleted file's images are no longer pinned by it");
    }
}
