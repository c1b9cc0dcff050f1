//! The end-to-end tests that share one containerd test bed without disturbing it: pods, agents,
//! the kubelet server, the mirror, the tunnel. One binary, one test bed start; each file's
//! tests run concurrently, and the files take turns (`common::room`), because every `atoll run`
//! removes the atoll-made pods it was not given.

#[path = "../apiserver/mod.rs"]
mod apiserver;
#[path = "../common/mod.rs"]
mod common;
#[path = "../konnectivity/mod.rs"]
mod konnectivity;
#[path = "../summary/mod.rs"]
mod summary;

mod admission;
mod adversary;
mod agent_config;
mod api_pods;
mod apparmor;
mod downward_api;
mod encrypted_pods;
mod engine;
mod engine_containers;
mod exec_cli;
mod hostile;
mod image_volumes;
mod kube_prometheus;
mod kubelet_metrics;
mod kubelet_server;
mod local_api;
mod local_objects;
mod lockout;
mod mirror;
mod pod_resources;
mod probes;
mod restart_safety;
mod runtime_signals;
mod serving_certificate;
mod signed_manifests;
mod tunnel;
