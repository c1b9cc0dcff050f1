//! `/images`: the runtime's images as atoll keeps them (size, in use, pinned and why, the
//! tarball each came from) and the images directory's files with their import state;
//! `POST /images/prune?dryRun=true`: every image that may go (not in use, not pinned) is
//! removed, or only listed.

use super::server::Response;
use super::view::Api;
use crate::cri::RuntimeService;
use crate::node::imports::FileState;
use serde_json::json;

pub async fn list<RT: RuntimeService>(api: &Api<RT>) -> Response {
    let Some(collector) = api.images.get() else { return off() };
    let images = match collector.inventory(&api.node, &api.runtime).await {
        Ok(i) => i,
        Err(e) => return Response::error(503, "ServiceUnavailable", format!("the runtime: {e}")),
    };
    let items: Vec<_> = images
        .iter()
        .map(|c| {
            let from = c.names.iter().find_map(|n| api.node.imports().source_of(n));
            json!({
                "id": c.id,
                "names": c.names,
                "size": c.size,
                "inUse": c.in_use,
                "pinned": c.pinned,
                "importedFrom": from,
            })
        })
        .collect();
    let files: Vec<_> = api
        .node
        .imports()
        .all()
        .into_iter()
        .map(|(file, state)| match state {
            FileState::Pending => json!({"file": file, "state": "Pending"}),
            FileState::Importing => json!({"file": file, "state": "Importing"}),
            FileState::Imported { digest, images } => {
                json!({"file": file, "state": "Imported", "digest": digest, "images": images})
            }
            FileState::Failed(why) => json!({"file": file, "state": "Failed", "error": why}),
        })
        .collect();
    Response::json(200, &json!({ "items": items, "files": files }))
}

pub async fn prune<RT: RuntimeService>(api: &Api<RT>, dry_run: bool) -> Response {
    let Some(collector) = api.images.get() else { return off() };
    match collector.collect(&api.node, &api.runtime, true, dry_run).await {
        Ok(r) => {
            let removed: Vec<_> = r.removed.iter().map(|(name, why)| json!({"image": name, "reason": why})).collect();
            Response::json(200, &json!({"dryRun": dry_run, "removed": removed, "freed": r.freed, "errors": r.errors}))
        }
        Err(e) => Response::error(503, "ServiceUnavailable", format!("the runtime: {e}")),
    }
}

fn off() -> Response {
    Response::error(404, "NotFound", "this agent does not keep images".to_string())
}
