//! The volume manager (kubelet's `volumemanager`, and the host side of its volume plugins): a
//! pod's directory and what is mounted or written below it before its containers start.
//!
//! - `poddir`: `<root>/pods/<uid>`, emptyDir and hostPath volumes, the hosts file, the
//!   termination-log files, subPath targets, and the directory's removal (never across a mount);
//! - `object_volumes`: ConfigMap, Secret and projected volumes, written by `atomic_writer`
//!   (kubelet's atomic writer) from the node's local objects, Secrets on a tmpfs;
//! - `subpath`: subPath mounts resolved below the volume's root without following a link;
//! - `termination`: a container's `terminated.message`, read back through a bounded reader.
//!
//! Every path comes from `pod::paths`, which proves it stays under its base.

pub mod atomic_writer;
pub mod object_volumes;
pub mod poddir;
pub mod subpath;
pub mod termination;
