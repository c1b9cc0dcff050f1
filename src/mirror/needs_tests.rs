//! `needs`: which objects and tokens pods need, when a token is due, and the kept copy's
//! round trip.

use super::*;
use crate::pod::load::load_api;

fn pod(name: &str, uid: &str, spec: Value) -> StaticPod {
    let mut spec = spec;
    spec["nodeName"] = json!("edge-1");
    if spec["containers"].is_null() {
        spec["containers"] = json!([{"name": "c", "image": "busybox:1.36"}]);
    }
    load_api(json!({"metadata": {"name": name, "namespace": "shop", "uid": uid, "resourceVersion": "1"}, "spec": spec}))
        .unwrap()
}

#[test]
fn what_pods_need_is_every_object_they_name_and_a_token_per_projection() {
    let kube_api_access = json!({"name": "kube-api-access-x1", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}});
    let a = pod(
        "a",
        "u1",
        json!({"serviceAccountName": "agent", "imagePullSecrets": [{"name": "registry"}], "volumes": [kube_api_access],
               "containers": [{"name": "c", "image": "x:1", "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]}]}),
    );
    let b = pod(
        "b",
        "u2",
        json!({"volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "vault"}}]}}]}),
    );
    let (refs, tokens) = wanted(&[a, b]);
    let names: Vec<String> = refs.iter().map(|(k, ns, n)| format!("{} {ns}/{n}", k.as_str())).collect();
    assert_eq!(names, ["ConfigMap shop/kube-root-ca.crt", "Secret shop/db", "Secret shop/registry"]);
    assert_eq!(tokens.len(), 2);
    let names: Vec<&str> = tokens.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["u1/kube-api-access-x1/0", "u2/t/0"]);
    let (ta, tb) = (&tokens[0].1, &tokens[1].1);
    assert_eq!((ta.service_account.as_str(), ta.seconds, ta.audience.as_str()), ("agent", 3607, ""));
    assert_eq!((ta.pod.as_str(), ta.uid.as_str(), ta.namespace.as_str()), ("a", "u1", "shop"));
    assert_eq!((tb.service_account.as_str(), tb.seconds, tb.audience.as_str()), ("default", 3600, "vault"));
}

#[test]
fn a_token_is_due_at_80_percent_of_what_was_asked_or_after_a_day() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let hour = Duration::from_secs(3600);
    let s = |n| Duration::from_secs(n);
    // (expires, asked seconds, now, due)
    let table = [
        (t0 + hour, 3600, t0, false),
        (t0 + hour, 3600, t0 + s(2879), false),
        (t0 + hour, 3600, t0 + s(2881), true),
        // The server capped it at 125 s (its answer says so): due at 100 s.
        (t0 + s(125), 125, t0 + s(99), false),
        (t0 + s(125), 125, t0 + s(101), true),
        // A year-long token (a server that extends them) is asked again after a day.
        (t0 + s(365 * 24 * 3600), 365 * 24 * 3600, t0 + s(24 * 3600 - 1), false),
        (t0 + s(365 * 24 * 3600), 365 * 24 * 3600, t0 + s(24 * 3600 + 1), true),
        // The clock went back before its issue: due.
        (t0 + hour, 3600, t0 - s(1), true),
        // Expired, or an expiry before the epoch's lifetime: due.
        (t0, 3600, t0 + s(1), true),
        (SystemTime::UNIX_EPOCH, 3600, t0, true),
    ];
    for (i, (expires, asked, now, want)) in table.into_iter().enumerate() {
        assert_eq!(due(expires, asked, now, Duration::ZERO), want, "row {i}");
    }
    // Times from a server or the disk at the clock's limits: no overflow, an answer.
    let far = SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(i64::MAX as u64)).unwrap();
    assert!(due(far, 0, t0, s(10)), "issued after now: the clock went back");
    assert!(due(t0, u64::MAX, far, Duration::MAX));
    // The jitter makes it due earlier, never later.
    assert!(due(t0 + hour, 3600, t0 + s(2875), s(10)));
}

#[test]
fn kept_objects_and_tokens_serve_offline_even_a_token_past_its_expiry() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000);
    let cm = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "kube-root-ca.crt", "namespace": "shop"},
                    "data": {"ca.crt": "PEM"}});
    let secret = json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "db", "namespace": "shop"},
                        "data": {"pw": "aHVudGVyMg=="}});
    let token = |name: &str, expires: u64| json!({"object": name, "token": "eyJ.t", "expires": expires, "ask": ["shop", "default", "a", "u1", "", 3600]});
    let mut n = Needs::from_kept(vec![cm, secret], vec![token("u1/v/0", 2_000_100), token("u1/old/0", 1_999_999)]);
    let a = pod(
        "a",
        "u1",
        json!({"volumes": [
            {"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}, {"configMap": {"name": "kube-root-ca.crt"}}]}},
            {"name": "old", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            {"name": "s", "secret": {"secretName": "db"}}]}),
    );
    // Offline (no client): nothing is asked, the kept ones serve.
    n.sync(None, std::slice::from_ref(&a), true, now);
    let objects = n.objects();
    let names: Vec<String> = objects.iter().map(|o| format!("{} {}", o.kind.as_str(), o.name)).collect();
    assert_eq!(
        names,
        ["ConfigMap kube-root-ca.crt", "Secret db", "Secret u1/v/0", "Secret u1/old/0"],
        "offline, a token past its expiry still serves (the server may honour it longer)"
    );
    assert_eq!(objects[1].data["pw"], b"hunter2");
    assert_eq!(objects[2].data["token"], b"eyJ.t");
    let (kept, tokens) = n.to_keep();
    assert_eq!(kept.len(), 2);
    assert_eq!(tokens.len(), 2);
    // A kept token whose expiry is past what the clock holds is read as expired, not a crash.
    let mut odd = token("u1/v/0", u64::MAX);
    odd["seconds"] = json!(u64::MAX);
    let mut far = Needs::from_kept(vec![], vec![odd]);
    far.sync(None, std::slice::from_ref(&a), true, now);
    assert_eq!(far.objects().len(), 1);
    // What the pods want is worked out again only when the caller says they changed.
    let bare = pod("a", "u1", json!({}));
    n.sync(None, std::slice::from_ref(&bare), false, now);
    assert_eq!(n.objects().len(), 4, "the pods were said to be unchanged");
    // A pod that no longer names them: they go.
    n.sync(None, &[bare], true, now);
    assert!(n.objects().is_empty());
}
