//! What one of `atoll doctor`'s checks found: its level, its line and how to fix it.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub level: Level,
    pub name: &'static str,
    pub detail: String,
    pub fix: Option<String>,
}

pub fn ok(name: &'static str, detail: impl Into<String>) -> Check {
    Check { level: Level::Ok, name, detail: detail.into(), fix: None }
}

pub fn bad(level: Level, name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check { level, name, detail: detail.into(), fix: Some(fix.into()) }
}
