//! The node's certificates through the certificates API, as kubelet keeps them: TLS bootstrap
//! of the client certificate from a bootstrap kubeconfig (`bootstrap`), its rotation
//! (`rotate`, `rotateCertificates`), the kubelet server's certificate issued and rotated
//! (`serving`, `serverTLSBootstrap`); the CSRs they send and wait on (`request`), the files in
//! `certDir` (`store`) and when to renew (`schedule`, pure). Everything here runs on the
//! mirror's threads: pods never wait on a certificate.

pub mod bootstrap;
pub mod request;
pub mod rotate;
pub mod schedule;
pub mod serving;
pub mod store;
