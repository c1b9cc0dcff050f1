//! Local ConfigMaps and Secrets: the objects a static pod's `configMap`, `secret` and
//! `projected` volumes, `configMapKeyRef`/`secretKeyRef` and `envFrom` name, which live on the
//! box instead of in an API server.
//!
//! They come in with the pods: a manifest file may hold one ConfigMap or Secret instead of a
//! Pod, a URL's v1 List may mix them (`load` is the intake both sources use). `decode`
//! turns one into a [`LocalObject`] (`model`; field paths in every error); `store` is the
//! node's set of them, written by the agent from the sources' snapshots and read by the workers;
//! `resolve` is the pure part of their use (a volume's files, a container's environment).
//!
//! Secret values never leave these types except into a container: [`LocalObject`]'s `Debug`
//! shows keys and sizes only, and nothing here logs. Above `pod`, below the sources and the
//! node.

pub mod decode;
pub mod load;
mod missing;
pub mod model;
pub mod resolve;
pub mod store;

pub use crate::pod::references::ObjectKind;
pub use load::{load, Manifests};
pub use missing::Missing;
pub use model::{LocalObject, MAX_OBJECT_BYTES};
pub use store::Store;

#[cfg(test)]
mod tests;
