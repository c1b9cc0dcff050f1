//! The engine's settings. [`EngineConfig`] is fixed at start (the relist's period, an optional
//! resync of quiet workers, log rotation). [`Tuning`] is what SIGHUP replaces under running pods: the CrashLoopBackOff
//! and ImagePullBackOff limits (with their per-container state), the registry credentials and
//! the runtime class table. Workers read it at every sync.

use super::backoff::Backoff;
use super::credentials::{Credential, Keyring};
use super::logs::Rotation;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, RwLock};
use std::time::{Duration, SystemTime};

/// Settings fixed for the engine's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// How often a worker syncs when nothing wakes it: never unless set (kubelet's
    /// `syncFrequency`, given explicitly). The PLEG wakes a worker on every change of its pod
    /// in the runtime, its probes and its own timers on the rest, so a quiet pod costs nothing.
    pub resync: Option<Duration>,
    /// The relist's period while runtime events or process exits are watched (the safety net
    /// for anything they miss); without them it relists every second.
    pub relist: Duration,
    /// containerLogMaxSize / containerLogMaxFiles.
    pub log_rotation: Rotation,
    /// atoll's `strictImagePullPolicy`: an unreachable registry fails a pull with policy
    /// Always even when the image is on disk (kubelet's rule).
    pub strict_image_pull_policy: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            resync: None,
            relist: super::pleg::RELIST_SAFETY_NET,
            log_rotation: Rotation::default(),
            strict_image_pull_policy: false,
        }
    }
}

/// What SIGHUP may change: back-off limits, credentials, runtime classes.
#[derive(Debug)]
pub struct Tuning {
    /// CrashLoopBackOff, by pod UID and container.
    crash: Mutex<Backoff>,
    /// ImagePullBackOff, by pod UID and image.
    image: Mutex<Backoff>,
    /// Registry credentials for pulls.
    keyring: Mutex<Keyring>,
    /// runtimeClassName → CRI runtime handler.
    classes: RwLock<BTreeMap<String, String>>,
}

/// Back-off limits: (initial delay, cap).
pub type Limits = (Duration, Duration);

/// The settings [`Tuning`] is made from, and which SIGHUP may replace.
#[derive(Clone, Debug)]
pub struct TuningConfig {
    /// CrashLoopBackOff and ImagePullBackOff.
    pub crash_loop_back_off: Limits,
    pub image_pull_back_off: Limits,
    pub keyring: Keyring,
    /// runtimeClassName → CRI runtime handler.
    pub runtime_handlers: BTreeMap<String, String>,
}

impl Default for TuningConfig {
    fn default() -> Self {
        let kubelet = (super::backoff::DEFAULT_INITIAL, super::backoff::DEFAULT_MAX);
        TuningConfig {
            crash_loop_back_off: kubelet,
            image_pull_back_off: kubelet,
            keyring: Keyring::default(),
            runtime_handlers: BTreeMap::new(),
        }
    }
}

impl TuningConfig {
    /// Both back-offs `limits`, nothing else.
    pub fn back_off(limits: Limits) -> TuningConfig {
        TuningConfig { crash_loop_back_off: limits, image_pull_back_off: limits, ..Default::default() }
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning::new(&TuningConfig::default())
    }
}

impl Tuning {
    pub fn new(c: &TuningConfig) -> Tuning {
        let (crash, image) = (c.crash_loop_back_off, c.image_pull_back_off);
        Tuning {
            crash: Mutex::new(Backoff::new(crash.0, crash.1)),
            image: Mutex::new(Backoff::new(image.0, image.1)),
            keyring: Mutex::new(c.keyring.clone()),
            classes: RwLock::new(c.runtime_handlers.clone()),
        }
    }

    /// Takes new settings; back-off state so far is kept under the new limits.
    pub fn reload(&self, c: &TuningConfig) {
        let (crash, image) = (c.crash_loop_back_off, c.image_pull_back_off);
        self.crash_backoff().set_limits(crash.0, crash.1);
        self.image_backoff().set_limits(image.0, image.1);
        *crate::locks::lock(&self.keyring) = c.keyring.clone();
        *crate::locks::write(&self.classes) = c.runtime_handlers.clone();
    }

    pub fn crash_backoff(&self) -> MutexGuard<'_, Backoff> {
        crate::locks::lock(&self.crash)
    }

    pub fn image_backoff(&self) -> MutexGuard<'_, Backoff> {
        crate::locks::lock(&self.image)
    }

    /// The credentials that apply to `image`, most specific first.
    pub fn credentials(&self, image: &str) -> Vec<Credential> {
        crate::locks::lock(&self.keyring).lookup(image)
    }

    /// The CRI handler of a runtime class, if the table has it.
    pub fn runtime_handler(&self, class: &str) -> Option<String> {
        crate::locks::read(&self.classes).get(class).cloned()
    }

    /// Forgets back-off entries not advanced for twice their cap (kubelet's backOff.GC), so a
    /// node that runs many short-lived pods does not grow.
    pub fn housekeeping(&self, now: SystemTime) {
        self.crash_backoff().gc(now);
        self.image_backoff().gc(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn housekeeping_forgets_old_back_off_entries() {
        let tuning = Tuning::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        for i in 0..100 {
            tuning.crash_backoff().advance(&format!("pod{i}_c"), t0, t0);
            tuning.image_backoff().advance(&format!("pod{i}_img"), t0, t0);
        }
        tuning.housekeeping(t0 + Duration::from_secs(60));
        assert_eq!(tuning.crash_backoff().len(), 100, "recent entries stay");
        tuning.housekeeping(t0 + Duration::from_secs(3600));
        assert!(tuning.crash_backoff().is_empty());
        assert!(tuning.image_backoff().is_empty());
    }

    #[test]
    fn a_reload_replaces_classes_and_limits() {
        let tuning = Tuning::default();
        assert_eq!(tuning.runtime_handler("gvisor"), None);
        let s = Duration::from_secs(1);
        let classes = BTreeMap::from([("gvisor".into(), "runsc".into())]);
        tuning.reload(&TuningConfig { runtime_handlers: classes, ..TuningConfig::back_off((s, s * 4)) });
        assert_eq!(tuning.runtime_handler("gvisor").as_deref(), Some("runsc"));
    }
}
