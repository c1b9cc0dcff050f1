//! Mirroring to an API server when one is reachable (node, lease, mirror pods, status).
//! So far: reading the kubeconfig that says how to reach it.

pub mod kubeconfig;
