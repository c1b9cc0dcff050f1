//! How the CLI shows what the local API answers, for an 80-column serial console with no
//! colour: kubectl's ages and STATUS column, aligned tables, YAML for `-o yaml`.

use serde_json::Value;
use std::time::SystemTime;

/// kubectl's age format: 45s, 12m, 5h, 3d.
pub fn age(since: Option<SystemTime>, now: SystemTime) -> String {
    let Some(t) = since else { return "<unknown>".into() };
    let s = now.duration_since(t).unwrap_or_default().as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

pub fn str_of<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_str().unwrap_or("")
}

/// The STATUS column, as kubectl computes it from the pod's status.
pub fn status_column(pod: &Value) -> String {
    let status = &pod["status"];
    let mut reason =
        status["reason"].as_str().filter(|r| !r.is_empty()).unwrap_or(str_of(pod, &["status", "phase"])).to_string();
    let inits = status["initContainerStatuses"].as_array().cloned().unwrap_or_default();
    let mut initializing = false;
    for (i, c) in inits.iter().enumerate() {
        let term = &c["state"]["terminated"];
        let wait = &c["state"]["waiting"];
        if term.is_object() && term["exitCode"].as_i64() == Some(0) {
            continue;
        }
        // A running sidecar (restartPolicy Always) does not hold initialisation.
        if c["state"]["running"].is_object() && c["started"].as_bool() == Some(true) {
            continue;
        }
        initializing = true;
        reason = if term.is_object() {
            match term["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(r) => format!("Init:{r}"),
                None => format!("Init:ExitCode:{}", term["exitCode"].as_i64().unwrap_or(0)),
            }
        } else if let Some(r) = wait["reason"].as_str().filter(|r| !r.is_empty() && *r != "PodInitializing") {
            format!("Init:{r}")
        } else {
            format!("Init:{i}/{}", inits.len())
        };
        break;
    }
    if !initializing {
        let mut has_running = false;
        for c in status["containerStatuses"].as_array().into_iter().flatten().rev() {
            let (wait, term) = (&c["state"]["waiting"], &c["state"]["terminated"]);
            if let Some(r) = wait["reason"].as_str().filter(|r| !r.is_empty()) {
                reason = r.to_string();
            } else if let Some(r) = term["reason"].as_str().filter(|r| !r.is_empty()) {
                reason = r.to_string();
            } else if term.is_object() {
                reason = format!("ExitCode:{}", term["exitCode"].as_i64().unwrap_or(0));
            } else if c["state"]["running"].is_object() && c["ready"].as_bool() == Some(true) {
                has_running = true;
            }
        }
        if reason == "Completed" && has_running {
            let ready = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if ready { "Running" } else { "NotReady" }.into();
        }
    }
    reason
}

/// Left-aligned columns, three spaces apart (kubectl's tabwriter).
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..cols).map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 < r.len() {
                line.push_str(&format!("{c:<w$}   ", w = widths[i]));
            } else {
                line.push_str(c);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// JSON as block YAML (for `-o yaml`): strings quoted when YAML would read them otherwise.
pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    yaml_value(v, 0, &mut out, false);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn yaml_scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let plain = !s.is_empty()
                && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
                && !matches!(
                    s.to_ascii_lowercase().as_str(),
                    "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n" | "~"
                )
                && s.parse::<f64>().is_err()
                && !s.starts_with(['-', '.']);
            if plain {
                s.clone()
            } else {
                serde_json::to_string(s).unwrap_or_default()
            }
        }
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::Object(o) if o.is_empty() => "{}".into(),
        _ => String::new(),
    }
}

fn is_block(v: &Value) -> bool {
    matches!(v, Value::Array(a) if !a.is_empty()) || matches!(v, Value::Object(o) if !o.is_empty())
}

fn yaml_value(v: &Value, indent: usize, out: &mut String, in_list: bool) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(o) if !o.is_empty() => {
            for (i, (k, val)) in o.iter().enumerate() {
                let key = yaml_scalar(&Value::String(k.clone()));
                if !(in_list && i == 0) {
                    out.push_str(&pad);
                }
                if is_block(val) {
                    out.push_str(&format!("{key}:\n"));
                    let child = if matches!(val, Value::Array(_)) { indent } else { indent + 2 };
                    yaml_value(val, child, out, false);
                } else {
                    out.push_str(&format!("{key}: {}\n", yaml_scalar(val)));
                }
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for item in a {
                out.push_str(&format!("{pad}- "));
                if is_block(item) {
                    if matches!(item, Value::Array(_)) {
                        out.push('\n');
                        yaml_value(item, indent + 2, out, false);
                    } else {
                        yaml_value(item, indent + 2, out, true);
                    }
                } else {
                    out.push_str(&format!("{}\n", yaml_scalar(item)));
                }
            }
        }
        _ => out.push_str(&format!("{pad}{}\n", yaml_scalar(v))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ages_read_like_kubectl() {
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let ago = |s: u64| Some(now - std::time::Duration::from_secs(s));
        assert_eq!(age(ago(45), now), "45s");
        assert_eq!(age(ago(600), now), "10m");
        assert_eq!(age(ago(3 * 3600), now), "3h");
        assert_eq!(age(ago(3 * 86400), now), "3d");
        assert_eq!(age(None, now), "<unknown>");
    }

    #[test]
    fn the_status_column_follows_kubectl() {
        let running = json!({"status":{"phase":"Running","containerStatuses":[{"ready":true,"state":{"running":{}}}]}});
        assert_eq!(status_column(&running), "Running");
        let crash = json!({"status":{"phase":"Running","containerStatuses":[{"state":{"waiting":{"reason":"CrashLoopBackOff"}}}]}});
        assert_eq!(status_column(&crash), "CrashLoopBackOff");
        let init = json!({"status":{"phase":"Pending","initContainerStatuses":[{"state":{"terminated":{"exitCode":0}}},{"state":{"running":{}}}],"containerStatuses":[]}});
        assert_eq!(status_column(&init), "Init:1/2");
        let init_err = json!({"status":{"phase":"Pending","initContainerStatuses":[{"state":{"terminated":{"exitCode":3,"reason":"Error"}}}]}});
        assert_eq!(status_column(&init_err), "Init:Error");
        let failed = json!({"status":{"phase":"Failed","reason":"DeadlineExceeded"}});
        assert_eq!(status_column(&failed), "DeadlineExceeded");
    }

    #[test]
    fn yaml_output_reads_back_as_the_same_json() {
        let v = json!({"apiVersion":"v1","items":[{"metadata":{"name":"web","labels":{"on":"yes"}},"spec":{"containers":[{"args":["-c","echo: hi"],"ports":[]}]},"n":3,"t":true,"e":"","z":null,"nested":[[1,2],[]]}]});
        let text = to_yaml(&v);
        let back: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, v, "{text}");
    }

    #[test]
    fn tables_align_and_fit_a_console() {
        let rows = vec![
            vec!["NAME".to_string(), "READY".into(), "STATUS".into()],
            vec!["hello-web-edge1".to_string(), "1/1".into(), "Running".into()],
        ];
        assert_eq!(table(&rows), "NAME              READY   STATUS\nhello-web-edge1   1/1     Running\n");
    }
}
