//! What is wrong with a manifest, said so a user can act on it: a [`Finding`] at a field path
//! (kubectl's spelling, `spec.containers[0].image`), and a [`ManifestError`] naming where the
//! manifest came from and everything wrong with it.

use std::fmt;

/// One problem or warning about a manifest, at a field path (empty for the whole document).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub path: String,
    pub message: String,
}

impl Finding {
    pub fn new(path: &str, message: impl Into<String>) -> Finding {
        Finding { path: path.to_string(), message: message.into() }
    }

    pub fn root(message: impl Into<String>) -> Finding {
        Finding::new("", message)
    }

    /// This warning as `--strict` refuses it: nothing is ignored then.
    pub fn strict(self) -> Finding {
        let message = self.message.strip_suffix("; ignored").unwrap_or(&self.message);
        Finding { message: format!("{message} (--strict)"), ..self }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// A manifest that could not be used: where it came from and everything wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError {
    pub origin: String,
    pub problems: Vec<Finding>,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}: {p}", self.origin)?;
        }
        Ok(())
    }
}

impl std::error::Error for ManifestError {}
