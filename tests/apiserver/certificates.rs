//! certificates.k8s.io/v1 CertificateSigningRequests, as kube-apiserver keeps them and
//! kube-controller-manager's `csrapproving` and `csrsigning` controllers act on them:
//!
//! - Create (by name or `generateName`), get, list and watch (by `metadata.name`) through the
//!   generic paths; the body decoded strictly by k8scheck as a `CertificateSigningRequest`, the
//!   request parsed and its signature checked by Go's crypto/x509 (422 otherwise), the signer
//!   name required, usages known, `expirationSeconds` at least 600; `spec.username`, `groups`
//!   and `uid` set from who asked.
//! - Who may: an admin everything; a node (`system:node:*`) and a bootstrap token
//!   (`system:bootstrap:<id>`, kubeadm's `system:node-bootstrapper` role) create, get, list and
//!   watch; the `/approval` subresource is the admin's (`kubectl certificate approve`).
//! - The approver: a kubelet client CSR (`kubernetes.io/kube-apiserver-client-kubelet`, the
//!   kubelet client shape: `O=system:nodes`, `CN=system:node:*`, no SANs, usages digital
//!   signature and client auth, key encipherment allowed) from kubeadm's bootstrap token group
//!   (`nodeclient`) or from the node it names (`selfnodeclient`) is approved `AutoApproved`;
//!   serving CSRs wait for an operator. A test may have the next ones denied or left pending.
//! - The signer: an approved CSR of either kubelet signer that has the signer's shape is
//!   signed with the test CA by k8scheck (Go's x509, as the signer's authority): notBefore
//!   backdated 5 minutes, notAfter the test's lifetime (default a year; at most
//!   `expirationSeconds`) from now for short ones and from notBefore otherwise, capped by the
//!   CA; one without the shape gets a `Failed` condition. An issued client certificate then
//!   authenticates as its CN, as the real server's x509 authenticator takes any certificate of
//!   its CA.

use super::*;

pub(super) const RESOURCE: &str = "certificatesigningrequests";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
const KNOWN_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// What the test sets: how certificates are issued and what the approver does.
pub(super) struct Signing {
    pub(super) ca_cert: PathBuf,
    pub(super) ca_key: PathBuf,
    pub(super) seconds: i64,
    pub(super) backdate: i64,
    /// Deny the next client CSRs with this reason and message.
    pub(super) deny: Option<(String, String)>,
    /// Leave client CSRs pending (no approver running).
    pub(super) no_approver: bool,
}

/// The groups of a user, as the authenticators give them.
pub(super) fn groups_of(user: &str) -> Vec<String> {
    let mut g: Vec<&str> = if user.starts_with("system:bootstrap:") {
        vec!["system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token"]
    } else if user.starts_with("system:node:") {
        vec!["system:nodes"]
    } else if user == "admin" {
        vec!["system:masters"]
    } else {
        vec![]
    };
    g.push("system:authenticated");
    g.into_iter().map(String::from).collect()
}

/// RBAC as kubeadm sets it up for bootstrap tokens: CSRs only (None: allowed).
pub(super) fn bootstrap_rbac(user: &str, req: &Request, t: Option<&Target>) -> Option<Reply> {
    if !user.starts_with("system:bootstrap:") {
        return None;
    }
    let (resource, group) = match t {
        Some(t) if t.resource == RESOURCE && t.subresource.is_empty() => {
            return (!["GET", "POST"].contains(&req.method.as_str()))
                .then(|| forbidden(user, "update", RESOURCE, "certificates.k8s.io"))
        }
        Some(t) if t.resource == "leases" => (t.resource, "coordination.k8s.io"),
        Some(t) => (t.resource, ""),
        None => ("", ""),
    };
    Some(forbidden(user, &req.method.to_lowercase(), resource, group))
}

fn forbidden(user: &str, verb: &str, resource: &str, group: &str) -> Reply {
    let msg = format!("{resource} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" at the cluster scope");
    fail(403, "Forbidden", msg)
}

/// POST of a CSR.
pub(super) fn create(state: &Arc<State>, store: &mut Store, user: &str, body: Option<Value>) -> Reply {
    let Some(mut obj) = body.filter(Value::is_object) else {
        return fail(400, "BadRequest", "a JSON object is required");
    };
    if obj["kind"] != "CertificateSigningRequest" || obj["apiVersion"] != "certificates.k8s.io/v1" {
        return fail(400, "BadRequest", "expected kind CertificateSigningRequest of certificates.k8s.io/v1");
    }
    let mut name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if name.is_empty() {
        if let Some(prefix) = obj["metadata"]["generateName"].as_str() {
            store.uid_seq += 1;
            name = format!("{prefix}{:05x}", (store.uid_seq * 7919) % 0xfffff);
            obj["metadata"]["name"] = name.clone().into();
        }
    }
    let invalid = |why: String| {
        fail(422, "Invalid", format!("CertificateSigningRequest.certificates.k8s.io \"{name}\" is invalid: {why}"))
    };
    // A CSR's name is validated as a path segment (kubelet's digested names have capitals).
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '%']) {
        return invalid(format!("metadata.name: Invalid value: {name:?}: may not contain '/' or '%'"));
    }
    if store.objects.contains_key(&(RESOURCE, String::new(), name.clone())) {
        return fail(
            409,
            "AlreadyExists",
            format!("certificatesigningrequests.certificates.k8s.io \"{name}\" already exists"),
        );
    }
    let spec = &obj["spec"];
    let Some(pem) = spec["request"].as_str().and_then(|r| atoll::base64::decode(r).ok()) else {
        return invalid("spec.request: Required value".into());
    };
    if let Err((_, why)) = facts(&pem) {
        return invalid(why);
    }
    if spec["signerName"].as_str().is_none_or(str::is_empty) {
        return invalid("spec.signerName: Required value".into());
    }
    let usages: Vec<&str> = spec["usages"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if let Some(u) = usages.iter().find(|u| !KNOWN_USAGES.contains(u)) {
        return invalid(format!("spec.usages[0]: Unsupported value: {u:?}"));
    }
    if spec["expirationSeconds"].as_i64().is_some_and(|s| s < 600) {
        return invalid(
            "spec.expirationSeconds: Invalid value: may not specify a duration less than 600 seconds (10 minutes)"
                .into(),
        );
    }
    obj["spec"]["username"] = user.into();
    obj["spec"]["groups"] = json!(groups_of(user));
    obj["spec"]["uid"] = format!("uid-{user}").into();
    obj["status"] = json!({});
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    new_meta(store, &mut obj);
    store.objects.insert((RESOURCE, String::new(), name.clone()), obj.clone());
    emit(store, RESOURCE, "ADDED", obj.clone());
    approve(state, store, &name);
    let created = store.objects.get(&(RESOURCE, String::new(), name)).cloned().unwrap_or(obj);
    Reply::Json(201, created)
}

/// The CSR PEM's subject and names by Go's x509 (the request parsed, its signature checked).
fn facts(pem: &[u8]) -> Result<Value, (u16, String)> {
    check::ask(&json!({"op": "csr", "body": atoll::base64::encode(pem)}))
}

/// csrapproving's kubelet client rules, then the signer.
fn approve(state: &Arc<State>, store: &mut Store, name: &str) {
    let key = (RESOURCE, String::new(), name.to_string());
    let Some(csr) = store.objects.get(&key).cloned() else { return };
    let spec = &csr["spec"];
    let signing = state.signing.lock().unwrap();
    if spec["signerName"] != CLIENT_SIGNER || signing.no_approver {
        return;
    }
    let pem = spec["request"].as_str().and_then(|r| atoll::base64::decode(r).ok()).unwrap_or_default();
    let Ok(f) = facts(&pem) else { return };
    if shape(&f, spec, CLIENT_SIGNER).is_err() {
        return; // not a kubelet client CSR: not this approver's
    }
    let user = spec["username"].as_str().unwrap_or("");
    let groups = groups_of(user);
    let nodeclient = groups.iter().any(|g| g == "system:bootstrappers:kubeadm:default-node-token");
    let selfnodeclient = f["cn"].as_str() == Some(user);
    if !(nodeclient || selfnodeclient) {
        return;
    }
    let condition = match &signing.deny {
        Some((reason, message)) => json!({"type": "Denied", "status": "True", "reason": reason, "message": message}),
        None => json!({"type": "Approved", "status": "True", "reason": "AutoApproved",
                       "message": "Auto approving kubelet client certificate after SubjectAccessReview."}),
    };
    drop(signing);
    set_conditions(store, &key, vec![condition]);
    sign(state, store, name);
}

/// The shape each kubelet signer requires (kube-controller-manager's helpers).
fn shape(f: &Value, spec: &Value, signer: &str) -> Result<(), String> {
    let orgs: Vec<&str> = f["o"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if orgs != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if !f["cn"].as_str().unwrap_or("").starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    if f["emails"].as_i64() != Some(0) || f["uris"].as_i64() != Some(0) {
        return Err("email and URI subjectAltNames are not allowed".into());
    }
    let names = f["dns"].as_array().map_or(0, Vec::len) + f["ips"].as_array().map_or(0, Vec::len);
    let usages: std::collections::BTreeSet<&str> =
        spec["usages"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let (auth, sans_ok) =
        if signer == CLIENT_SIGNER { ("client auth", names == 0) } else { ("server auth", names > 0) };
    if !sans_ok {
        return Err(if signer == CLIENT_SIGNER {
            "SAN extension not allowed"
        } else {
            "DNS or IP subjectAltName is required"
        }
        .into());
    }
    let allowed = ["digital signature", "key encipherment", auth];
    if !usages.contains(auth) || !usages.contains("digital signature") || usages.iter().any(|u| !allowed.contains(u)) {
        return Err(format!("usages did not match [digital signature key encipherment {auth}]"));
    }
    Ok(())
}

/// Changes the CSR at `key` as a write does: a new resourceVersion, a MODIFIED event.
fn modify(store: &mut Store, key: &(&'static str, String, String), change: impl FnOnce(&mut Value)) {
    store.rv += 1;
    let rv = store.rv.to_string();
    let Some(obj) = store.objects.get_mut(key) else { return };
    change(obj);
    obj["metadata"]["resourceVersion"] = rv.into();
    let copy = obj.clone();
    emit(store, RESOURCE, "MODIFIED", copy);
}

/// The conditions replaced, each stamped with now where it has no times.
fn set_conditions(store: &mut Store, key: &(&'static str, String, String), conditions: Vec<Value>) {
    let now = now_rfc3339();
    let stamped: Vec<Value> = conditions
        .into_iter()
        .map(|mut c| {
            for k in ["lastUpdateTime", "lastTransitionTime"] {
                if c[k].is_null() {
                    c[k] = now.clone().into();
                }
            }
            c
        })
        .collect();
    modify(store, key, |obj| obj["status"]["conditions"] = json!(stamped));
}

/// The signer, for an approved CSR of a kubelet signer.
fn sign(state: &Arc<State>, store: &mut Store, name: &str) {
    let key = (RESOURCE, String::new(), name.to_string());
    let Some(csr) = store.objects.get(&key).cloned() else { return };
    let approved = csr["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Approved");
    let signer = csr["spec"]["signerName"].as_str().unwrap_or("");
    if !approved || ![CLIENT_SIGNER, SERVING_SIGNER].contains(&signer) || !csr["status"]["certificate"].is_null() {
        return;
    }
    let pem = csr["spec"]["request"].as_str().and_then(|r| atoll::base64::decode(r).ok()).unwrap_or_default();
    let mut conditions = csr["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let shaped = facts(&pem).map_err(|e| e.1).and_then(|f| shape(&f, &csr["spec"], signer).map(|()| f));
    let f = match shaped {
        Ok(f) => f,
        Err(why) => {
            conditions
                .push(json!({"type": "Failed", "status": "True", "reason": "SignerValidationFailure", "message": why}));
            return set_conditions(store, &key, conditions);
        }
    };
    let s = state.signing.lock().unwrap();
    let seconds = csr["spec"]["expirationSeconds"].as_i64().map_or(s.seconds, |e| e.min(s.seconds));
    let ask = json!({"csr": atoll::base64::encode(&pem), "caCert": s.ca_cert, "caKey": s.ca_key,
                     "usages": csr["spec"]["usages"], "seconds": seconds, "backdate": s.backdate, "short": 8 * 3600});
    drop(s);
    let signed = check::ask(&json!({"op": "sign", "body": atoll::base64::encode(&serde_json::to_vec(&ask).unwrap())}));
    let Ok(cert) = signed.map(|o| o["certificate"].as_str().unwrap_or("").to_string()) else { return };
    if signer == CLIENT_SIGNER {
        if let Some(der) = CertificateDer::pem_slice_iter(cert.as_bytes()).next().and_then(Result::ok) {
            state.certs.lock().unwrap().push((der.to_vec(), f["cn"].as_str().unwrap_or("").to_string()));
        }
    }
    modify(store, &key, |obj| obj["status"]["certificate"] = atoll::base64::encode(cert.as_bytes()).into());
}

/// PUT of `/approval` (an admin's): the conditions taken, the rest kept; then the signer.
pub(super) fn approval(state: &Arc<State>, store: &mut Store, user: &str, name: &str, body: Option<Value>) -> Reply {
    if user != "admin" {
        return forbidden(user, "update", "certificatesigningrequests/approval", "certificates.k8s.io");
    }
    let key = (RESOURCE, String::new(), name.to_string());
    if !store.objects.contains_key(&key) {
        return fail(404, "NotFound", format!("certificatesigningrequests.certificates.k8s.io \"{name}\" not found"));
    }
    let conditions = body.as_ref().and_then(|b| b["status"]["conditions"].as_array().cloned()).unwrap_or_default();
    let has = |t: &str| conditions.iter().any(|c| c["type"] == t);
    if has("Approved") && has("Denied") {
        let why = "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive";
        return fail(
            422,
            "Invalid",
            format!("CertificateSigningRequest.certificates.k8s.io \"{name}\" is invalid: {why}"),
        );
    }
    set_conditions(store, &key, conditions);
    sign(state, store, name);
    Reply::Json(200, store.objects.get(&key).cloned().unwrap_or(Value::Null))
}
