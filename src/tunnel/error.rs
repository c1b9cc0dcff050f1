//! The tunnel's errors, as far as they leave it (`atoll doctor` checks the settings and the
//! server's TLS with `link`).

/// Why a link cannot be made: what the node's settings name cannot be used (`Config`: the
/// configuration is to fix), or the server cannot be reached or refused the call (`Reach`).
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    Config(String),
    Reach(String),
}

impl Error {
    /// What went wrong, in words.
    pub fn into_message(self) -> String {
        match self {
            Error::Config(why) | Error::Reach(why) => why,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Error::Config(why) | Error::Reach(why) => f.write_str(why),
        }
    }
}
