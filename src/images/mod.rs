//! Image custody for boxes without a registry: tarballs side-loaded from the images directory
//! (`dir`), streamed into the runtime (`import`) after their structure and names are read on
//! the way (`archive`); kubelet's image garbage collection, which never takes an image a pod
//! needs (`gc`); the runtime's pin on those images, for the other collectors (`pins`); what a
//! pod's image references come to as the runtime names images (`names`). What the node may
//! know of it lives in `node::imports`; workers read
//! that to wait for an import under way. This room talks to the runtime beyond CRI (CRI has no
//! import call); it imports neither the engine nor the sources.

pub mod archive;
pub mod dir;
pub mod gc;
mod gzip;
pub mod import;
pub mod names;
pub mod pins;
