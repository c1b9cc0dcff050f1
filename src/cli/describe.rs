//! `atoll describe`'s text: a pod's identity, containers (state, last state, probes in one
//! line each, ports, command), the local ConfigMaps and Secrets it uses (keys and sizes),
//! conditions and recent events, as `kubectl describe pod` lays them out, for an 80-column
//! console.

use super::render::{age, status_column, str_of, table};
use serde_json::Value;
use std::time::SystemTime;

/// A probe in kubectl describe's one-line form.
pub fn probe_line(p: &Value) -> String {
    let handler = if let Some(h) = p.get("httpGet") {
        let port =
            h["port"].as_i64().map(|n| n.to_string()).unwrap_or_else(|| h["port"].as_str().unwrap_or("").to_string());
        let scheme = h["scheme"].as_str().unwrap_or("HTTP").to_ascii_lowercase();
        format!("http-get {scheme}://{}:{port}{}", h["host"].as_str().unwrap_or(""), h["path"].as_str().unwrap_or("/"))
    } else if let Some(t) = p.get("tcpSocket") {
        let port =
            t["port"].as_i64().map(|n| n.to_string()).unwrap_or_else(|| t["port"].as_str().unwrap_or("").to_string());
        format!("tcp-socket {}:{port}", t["host"].as_str().unwrap_or(""))
    } else if let Some(e) = p.get("exec") {
        let cmd: Vec<&str> = e["command"].as_array().into_iter().flatten().filter_map(|c| c.as_str()).collect();
        format!("exec [{}]", cmd.join(" "))
    } else if let Some(g) = p.get("grpc") {
        format!("grpc <pod>:{} {}", g["port"], g["service"].as_str().unwrap_or(""))
    } else {
        "<no handler>".into()
    };
    let n = |k: &str, d: i64| p[k].as_i64().unwrap_or(d);
    format!(
        "{handler} delay={}s timeout={}s period={}s #success={} #failure={}",
        n("initialDelaySeconds", 0),
        n("timeoutSeconds", 1),
        n("periodSeconds", 10),
        n("successThreshold", 1),
        n("failureThreshold", 3)
    )
}

fn state_lines(out: &mut String, title: &str, state: &Value) {
    if let Some(r) = state.get("running") {
        out.push_str(&format!("    {title:<15}Running\n      Started:     {}\n", str_of(r, &["startedAt"])));
    } else if let Some(w) = state.get("waiting") {
        out.push_str(&format!("    {title:<15}Waiting\n"));
        if let Some(r) = w["reason"].as_str().filter(|r| !r.is_empty()) {
            out.push_str(&format!("      Reason:      {r}\n"));
        }
        if let Some(m) = w["message"].as_str().filter(|m| !m.is_empty()) {
            out.push_str(&format!("      Message:     {m}\n"));
        }
    } else if let Some(t) = state.get("terminated") {
        out.push_str(&format!("    {title:<15}Terminated\n"));
        if let Some(r) = t["reason"].as_str().filter(|r| !r.is_empty()) {
            out.push_str(&format!("      Reason:      {r}\n"));
        }
        out.push_str(&format!("      Exit Code:   {}\n", t["exitCode"].as_i64().unwrap_or(0)));
        out.push_str(&format!("      Started:     {}\n", str_of(t, &["startedAt"])));
        out.push_str(&format!("      Finished:    {}\n", str_of(t, &["finishedAt"])));
        if let Some(m) = t["message"].as_str().filter(|m| !m.is_empty()) {
            out.push_str(&format!("      Message:     {m}\n"));
        }
    } else {
        out.push_str(&format!("    {title:<15}<none>\n"));
    }
}

/// One line per local object the pod uses: found (keys and sizes), or what is missing.
fn object_lines(out: &mut String, objects: &[Value]) {
    if objects.is_empty() {
        return;
    }
    out.push_str("Objects:\n");
    for o in objects {
        let what = format!("{} {}", o["kind"].as_str().unwrap_or(""), o["name"].as_str().unwrap_or(""));
        let optional = if o["optional"] == true { " (optional)" } else { "" };
        let state = if o["found"] != true {
            format!("not found{optional}")
        } else {
            let keys: Vec<String> = o["keys"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|k| format!("{} {} B", k["key"].as_str().unwrap_or(""), k["bytes"]))
                .collect();
            let missing: Vec<&str> =
                o["missingKeys"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            match missing.is_empty() {
                true => format!("ok: {}", keys.join(", ")),
                false => format!("missing key(s) {}{optional}; has {}", missing.join(", "), keys.join(", ")),
            }
        };
        out.push_str(&format!("  {what:<28}{state}\n"));
    }
}

/// `atoll describe`'s text for a pod, the local objects it uses and its events.
pub fn describe_text(pod: &Value, objects: &[Value], events: &[Value], now: SystemTime) -> String {
    let mut out = String::new();
    let field = |out: &mut String, k: &str, v: &str| {
        out.push_str(&format!("{:<14}{}\n", format!("{k}:"), if v.is_empty() { "<none>" } else { v }))
    };
    field(&mut out, "Name", str_of(pod, &["metadata", "name"]));
    field(&mut out, "Namespace", str_of(pod, &["metadata", "namespace"]));
    field(&mut out, "UID", str_of(pod, &["metadata", "uid"]));
    field(&mut out, "Node", str_of(pod, &["spec", "nodeName"]));
    field(&mut out, "Start Time", str_of(pod, &["status", "startTime"]));
    let labels: Vec<String> = pod["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    field(&mut out, "Labels", &labels.join(","));
    field(&mut out, "Source", pod["metadata"]["annotations"]["kubernetes.io/config.source"].as_str().unwrap_or(""));
    if let Some(m) = pod["metadata"]["annotations"][crate::api::pods::ANNOTATION_MIRROR_STATE].as_str() {
        let api = pod["metadata"]["annotations"]["kubernetes.io/config.source"] == "api";
        field(&mut out, if api { "API server" } else { "Mirror" }, m);
    }
    field(&mut out, "Status", &status_column(pod));
    if let Some(r) = pod["status"]["reason"].as_str() {
        field(&mut out, "Reason", r);
    }
    if let Some(m) = pod["status"]["message"].as_str() {
        field(&mut out, "Message", m);
    }
    field(&mut out, "IP", str_of(pod, &["status", "podIP"]));
    field(&mut out, "QoS Class", str_of(pod, &["status", "qosClass"]));
    for (title, spec_key, status_key) in [
        ("Init Containers", "initContainers", "initContainerStatuses"),
        ("Containers", "containers", "containerStatuses"),
    ] {
        let specs = pod["spec"][spec_key].as_array().cloned().unwrap_or_default();
        if specs.is_empty() {
            continue;
        }
        out.push_str(&format!("{title}:\n"));
        let statuses = pod["status"][status_key].as_array().cloned().unwrap_or_default();
        for c in &specs {
            let name = c["name"].as_str().unwrap_or("");
            let st = statuses.iter().find(|s| s["name"] == name).cloned().unwrap_or(Value::Null);
            out.push_str(&format!("  {name}:\n"));
            let line = |out: &mut String, k: &str, v: &str| {
                out.push_str(&format!("    {:<15}{}\n", format!("{k}:"), if v.is_empty() { "<none>" } else { v }))
            };
            line(&mut out, "Container ID", str_of(&st, &["containerID"]));
            line(&mut out, "Image", c["image"].as_str().unwrap_or(""));
            line(&mut out, "Image ID", str_of(&st, &["imageID"]));
            let ports: Vec<String> = c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!("{}/{}", p["containerPort"], p["protocol"].as_str().unwrap_or("TCP")))
                .collect();
            line(&mut out, "Ports", &ports.join(", "));
            let cmd: Vec<&str> = c["command"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(c["args"].as_array().into_iter().flatten())
                .filter_map(|s| s.as_str())
                .collect();
            if !cmd.is_empty() {
                line(&mut out, "Command", &cmd.join(" "));
            }
            state_lines(&mut out, "State:", &st["state"]);
            if st["lastState"].as_object().is_some_and(|o| !o.is_empty()) {
                state_lines(&mut out, "Last State:", &st["lastState"]);
            }
            line(&mut out, "Ready", if st["ready"].as_bool() == Some(true) { "True" } else { "False" });
            line(&mut out, "Restart Count", &st["restartCount"].as_i64().unwrap_or(0).to_string());
            for (k, key) in
                [("Liveness", "livenessProbe"), ("Readiness", "readinessProbe"), ("Startup", "startupProbe")]
            {
                if c[key].is_object() {
                    line(&mut out, k, &probe_line(&c[key]));
                }
            }
        }
    }
    object_lines(&mut out, objects);
    out.push_str("Conditions:\n  Type                        Status\n");
    for c in pod["status"]["conditions"].as_array().into_iter().flatten() {
        out.push_str(&format!("  {:<28}{}\n", c["type"].as_str().unwrap_or(""), c["status"].as_str().unwrap_or("")));
    }
    if events.is_empty() {
        out.push_str("Events:       <none>\n");
    } else {
        let mut rows = vec![vec!["Type".to_string(), "Reason".into(), "Age".into(), "Message".into()]];
        for e in events {
            let mut msg = e["message"].as_str().unwrap_or("").to_string();
            let count = e["count"].as_i64().unwrap_or(1);
            if count > 1 {
                msg = format!("{msg} (x{count})");
            }
            rows.push(vec![
                e["type"].as_str().unwrap_or("").into(),
                e["reason"].as_str().unwrap_or("").into(),
                age(crate::rfc3339::parse_seconds(e["time"].as_str().unwrap_or("")), now),
                msg,
            ]);
        }
        out.push_str("Events:\n");
        for l in table(&rows).lines() {
            out.push_str(&format!("  {l}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn probes_describe_in_one_line() {
        let p = json!({"httpGet":{"path":"/healthz","port":8080},"periodSeconds":5});
        assert_eq!(probe_line(&p), "http-get http://:8080/healthz delay=0s timeout=1s period=5s #success=1 #failure=3");
        let e = json!({"exec":{"command":["cat","/tmp/x"]},"failureThreshold":1});
        assert_eq!(probe_line(&e), "exec [cat /tmp/x] delay=0s timeout=1s period=10s #success=1 #failure=1");
    }
}
