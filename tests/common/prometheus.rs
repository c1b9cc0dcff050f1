//! Debian's Prometheus for the metrics tests: started on a configuration, asked instant
//! queries over its HTTP API, killed when dropped.

use super::{eventually, free_port};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Debian's prometheus, scraping one target every second, killed when dropped.
pub struct Prometheus {
    child: Child,
    pub port: u16,
}

impl Prometheus {
    pub fn start(bin: &str, dir: &Path, target: u16) -> Prometheus {
        let text = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n- job_name: kubelet\n  static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n"
        );
        Prometheus::with_config(bin, dir, &text)
    }

    /// Prometheus with this configuration (`prometheus.yml` in `dir`).
    pub fn with_config(bin: &str, dir: &Path, text: &str) -> Prometheus {
        let port = free_port();
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, text).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("start prometheus");
        Prometheus { child, port }
    }

    /// An instant query's result: each series' labels and value (NaN as Prometheus gives it).
    pub fn query(&self, expr: &str) -> Vec<(Value, f64)> {
        let encoded: String = expr
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else { return Vec::new() };
        // HTTP/1.0: the answer is never chunked.
        write!(s, "GET /api/v1/query?query={encoded} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
        let Ok(v) = serde_json::from_str::<Value>(body) else { return Vec::new() };
        assert_eq!(v["status"], "success", "{expr}: {body}");
        let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
        result
            .into_iter()
            .map(|r| {
                let value = r["value"][1].as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
                (r["metric"].clone(), value)
            })
            .collect()
    }

    /// The one value of `expr`, once Prometheus has one.
    pub fn value(&self, expr: &str) -> f64 {
        eventually(Duration::from_secs(60), expr, || match self.query(expr).as_slice() {
            [(_, v)] => Some(*v),
            _ => None,
        })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
