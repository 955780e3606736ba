//! Prometheus text scraped over plain HTTP (etcd's `--listen-metrics-urls`, the operator's
//! `/metrics`), with a raw HTTP/1.0 GET so no HTTP client crate is needed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET http://<addr><path>`; the body.
pub async fn get(addr: SocketAddr, path: &str) -> Result<String, String> {
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        match text.split_once("\r\n\r\n") {
            Some((_, body)) => Ok(body.to_owned()),
            None => Err(format!("{addr}: no HTTP body")),
        }
    };
    tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .map_err(|_| format!("{addr}: timed out"))?
}

/// Sum of every sample of metric `name` (all label sets), grouped by the value of `label`
/// (`""` when the sample has no such label).
pub fn sum_by(text: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let key = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{label}=\"")))
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_default()
            .to_owned();
        *out.entry(key).or_insert(0.0) += v;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_by_label() {
        let text = "# HELP x\n\
            grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Status\",grpc_service=\"m\"} 3\n\
            grpc_server_handled_total{grpc_code=\"Unavailable\",grpc_method=\"Status\",grpc_service=\"m\"} 1\n\
            grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"MemberList\",grpc_service=\"c\"} 2\n\
            grpc_server_handled_total_other 9\n";
        let m = sum_by(text, "grpc_server_handled_total", "grpc_method");
        assert_eq!(m.get("Status"), Some(&4.0));
        assert_eq!(m.get("MemberList"), Some(&2.0));
        assert_eq!(m.len(), 2);
    }
}
