//! The file source's pure steps: what a scan reports, as notes with a level that are logged
//! once while they last ([`news`]), and kubelet's rule for a name two files define: the
//! lexically last file wins, with a warning naming both ([`last_wins`]), for pods and local
//! objects alike.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// How loud a note is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
}

/// One line a scan has to say.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Note {
    pub level: Level,
    pub text: String,
}

impl Note {
    pub fn new(level: Level, text: String) -> Note {
        Note { level, text }
    }

    /// A note about `file`.
    pub fn about(level: Level, file: &Path, what: impl std::fmt::Display) -> Note {
        Note { level, text: format!("{}: {what}", file.display()) }
    }
}

/// The notes of this scan that the last one did not have: each is logged once while it lasts.
pub fn news<'a>(now: &'a BTreeSet<Note>, before: &'a BTreeSet<Note>) -> impl Iterator<Item = &'a Note> {
    now.difference(before)
}

/// Items by name from files in lexical order (`(file, name, how the item is shown, item)`):
/// the last file wins a name, and each name taken again gives a warning naming both files.
pub fn last_wins<K: Ord, V>(
    items: impl IntoIterator<Item = (PathBuf, K, String, V)>,
) -> (BTreeMap<K, (PathBuf, V)>, Vec<Note>) {
    let mut out: BTreeMap<K, (PathBuf, V)> = BTreeMap::new();
    let mut notes = Vec::new();
    for (file, name, shown, item) in items {
        if let Some((prev, _)) = out.insert(name, (file.clone(), item)) {
            let (p, prev) = (file.display(), prev.display());
            notes.push(Note::new(Level::Warn, format!("{p}: {shown} is also defined in {prev}; using {p}")));
        }
    }
    (out, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_file_wins_a_name_and_says_so() {
        let items = vec![
            (PathBuf::from("/m/a.yaml"), "default/web", "pod default/web".to_string(), 1),
            (PathBuf::from("/m/b.yaml"), "default/db", "pod default/db".to_string(), 2),
            (PathBuf::from("/m/c.yaml"), "default/web", "pod default/web".to_string(), 3),
        ];
        let (by_name, notes) = last_wins(items);
        assert_eq!(by_name["default/web"], (PathBuf::from("/m/c.yaml"), 3));
        assert_eq!(by_name["default/db"].1, 2);
        let text = "/m/c.yaml: pod default/web is also defined in /m/a.yaml; using /m/c.yaml";
        assert_eq!(notes, [Note::new(Level::Warn, text.into())]);
    }

    #[test]
    fn a_note_is_news_once_while_it_lasts() {
        let warn = Note::about(Level::Warn, Path::new("/m/a.yaml"), "unknown field spec.x");
        let error = Note::new(Level::Error, "/m/b.yaml: bad".into());
        let first: BTreeSet<Note> = [warn.clone(), error.clone()].into();
        assert_eq!(news(&first, &BTreeSet::new()).count(), 2);
        assert_eq!(news(&first, &first).count(), 0, "the same scan again says nothing");
        let second: BTreeSet<Note> = [warn.clone()].into();
        let third: BTreeSet<Note> = [warn, error.clone()].into();
        assert_eq!(news(&third, &second).collect::<Vec<_>>(), [&error], "gone and back: news again");
    }
}
