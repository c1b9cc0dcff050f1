//! What the machine offers pods, as kubelet computes it: the node's labels (kubelet's
//! defaults, then `--node-labels`), its capacity, and its allocatable resources: capacity less
//! `kubeReserved`, `systemReserved` and the hard eviction thresholds for memory
//! (`memory.available`) and the node's filesystem (`nodefs.available`), as kubelet's
//! `GetNodeAllocatableReservation` subtracts them (never below zero). Pure; the agent reads
//! the machine once at start and keeps the result in the node's facts.

use std::collections::BTreeMap;

/// Amounts of the resources admission counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub ephemeral_bytes: i64,
    pub pods: i64,
}

/// A hard eviction threshold: an amount, or a share of capacity (an `f32`, as kubelet parses
/// a percentage, kept as its bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    Bytes(i64),
    Share(u32),
}

impl Threshold {
    fn of(self, capacity: i64) -> i64 {
        match self {
            Threshold::Bytes(b) => b,
            // As kubelet's GetThresholdQuantity: int64(float64(capacity) * float64(share)).
            Threshold::Share(bits) => (capacity as f64 * f64::from(f32::from_bits(bits))) as i64,
        }
    }
}

/// What is kept from pods: `kubeReserved` plus `systemReserved`, and `evictionHard`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reserved {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub ephemeral_bytes: i64,
    pub memory_available: Option<Threshold>,
    pub nodefs_available: Option<Threshold>,
}

impl Default for Reserved {
    /// kubelet's defaults: nothing reserved, `memory.available<100Mi`, `nodefs.available<10%`.
    fn default() -> Reserved {
        Reserved {
            cpu_millis: 0,
            memory_bytes: 0,
            ephemeral_bytes: 0,
            memory_available: Some(Threshold::Bytes(100 << 20)),
            nodefs_available: Some(Threshold::Share(0.1f32.to_bits())),
        }
    }
}

/// Allocatable: `capacity` less what `r` keeps, each at least zero (pods: the capacity).
pub fn allocatable(capacity: Resources, r: &Reserved) -> Resources {
    let less = |cap: i64, kept: i64, threshold: Option<Threshold>| {
        let evict = threshold.map_or(0, |t| t.of(cap));
        cap.saturating_sub(kept).saturating_sub(evict).max(0)
    };
    Resources {
        cpu_millis: less(capacity.cpu_millis, r.cpu_millis, None),
        memory_bytes: less(capacity.memory_bytes, r.memory_bytes, r.memory_available),
        ephemeral_bytes: less(capacity.ephemeral_bytes, r.ephemeral_bytes, r.nodefs_available),
        pods: capacity.pods,
    }
}

/// Go's GOARCH name of the architecture atoll was built for.
pub fn goarch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "x86" => "386",
        other => other,
    }
}

/// The labels kubelet puts on its node, then `extra` (which wins, as `--node-labels` does).
pub fn labels(hostname: &str, extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert("kubernetes.io/hostname".to_string(), hostname.to_string());
    labels.insert("kubernetes.io/os".to_string(), "linux".to_string());
    labels.insert("kubernetes.io/arch".to_string(), goarch().to_string());
    labels.insert("beta.kubernetes.io/os".to_string(), "linux".to_string());
    labels.insert("beta.kubernetes.io/arch".to_string(), goarch().to_string());
    labels.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;

    #[test]
    fn allocatable_is_capacity_less_reservations_and_hard_eviction() {
        let cap = Resources { cpu_millis: 4000, memory_bytes: 2 * GI, ephemeral_bytes: 100 * GI, pods: 110 };
        let d = allocatable(cap, &Reserved::default());
        assert_eq!(d.memory_bytes, 2 * GI - (100 << 20));
        // kubelet's float32 arithmetic: 10% of 100 GiB is 10737418400 bytes, not 10737418240.
        assert_eq!(d.ephemeral_bytes, 100 * GI - 10_737_418_400);
        let r = Reserved {
            cpu_millis: 500,
            memory_bytes: 256 << 20,
            ephemeral_bytes: GI,
            memory_available: Some(Threshold::Share(0.05f32.to_bits())),
            nodefs_available: None,
        };
        let a = allocatable(cap, &r);
        assert_eq!(a.cpu_millis, 3500);
        assert_eq!(a.memory_bytes, 2 * GI - (256 << 20) - (2.0 * GI as f64 * f64::from(0.05f32)) as i64);
        assert_eq!(a.ephemeral_bytes, 99 * GI);
        let greedy = Reserved { cpu_millis: 9000, memory_bytes: i64::MAX, ..Reserved::default() };
        let z = allocatable(cap, &greedy);
        assert_eq!((z.cpu_millis, z.memory_bytes, z.pods), (0, 0, 110), "never below zero");
    }

    #[test]
    fn node_labels_are_kubelets_then_the_configured_ones() {
        let extra = BTreeMap::from([("site".to_string(), "north".to_string())]);
        let l = labels("gw1", &extra);
        assert_eq!(l["kubernetes.io/hostname"], "gw1");
        assert_eq!(l["kubernetes.io/os"], "linux");
        assert_eq!(l["beta.kubernetes.io/arch"], goarch());
        assert_eq!(l["site"], "north");
        let over = BTreeMap::from([("kubernetes.io/hostname".to_string(), "other".to_string())]);
        assert_eq!(labels("gw1", &over)["kubernetes.io/hostname"], "other");
    }
}
