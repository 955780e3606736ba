//! Filling an etcd database with puts of 100 KiB values, a few writers at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use membership::EtcdClient;

/// Size of one value.
pub const VALUE_BYTES: usize = 100 * 1024;
/// Concurrent writers.
const WRITERS: u64 = 4;

/// What a fill did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FillReport {
    pub puts: u64,
    pub bytes: u64,
    pub seconds: f64,
}

/// Puts keys `<prefix><n>` for n in `from..to`, each a 100 KiB value, `WRITERS` at a time.
/// A put that fails is retried (up to 20 times, backing off), so the database ends up with
/// every key or the fill fails.
pub async fn fill(
    client: Arc<EtcdClient>,
    prefix: &str,
    from: u64,
    to: u64,
) -> Result<FillReport, String> {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(from));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (client, next, prefix) = (client.clone(), next.clone(), prefix.to_owned());
        tasks.push(tokio::spawn(async move {
            let value: Vec<u8> = (0..VALUE_BYTES)
                .map(|i| (i as u64).wrapping_mul(31).wrapping_add(w) as u8)
                .collect();
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= to {
                    return Ok(());
                }
                let key = format!("{prefix}{n:08}");
                let mut tries = 0;
                loop {
                    match client.put(&key, value.clone()).await {
                        Ok(_) => break,
                        Err(e) if tries < 20 => {
                            tries += 1;
                            tracing::debug!(error = %e, key, "fill put failed; retrying");
                            tokio::time::sleep(Duration::from_millis(100 * tries)).await;
                        }
                        Err(e) => return Err(format!("put {key}: {e}")),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| format!("fill writer: {e}"))??;
    }
    let puts = to.saturating_sub(from);
    Ok(FillReport {
        puts,
        bytes: puts * VALUE_BYTES as u64,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The largest `db_size` any endpoint of `client` reports.
pub async fn db_size(client: &EtcdClient) -> u64 {
    let mut max = 0u64;
    for e in client.endpoints() {
        if let Ok(s) = client.status_of(e).await {
            max = max.max(u64::try_from(s.db_size).unwrap_or(0));
        }
    }
    max
}

/// Database sizes the bench knows: `empty`, `100MB`, `1GB` (or any `<n>MB` / `<n>GB`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Size {
    pub label: String,
    /// Number of 100 KiB puts that make it.
    pub puts: u64,
}

impl std::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        let mb = if lower == "empty" || lower == "0" {
            0
        } else if let Some(n) = lower.strip_suffix("gb") {
            n.parse::<u64>().map_err(|e| format!("{t}: {e}"))? * 1000
        } else if let Some(n) = lower.strip_suffix("mb") {
            n.parse::<u64>().map_err(|e| format!("{t}: {e}"))?
        } else {
            return Err(format!("{t}: expected empty, <n>MB or <n>GB"));
        };
        // 100 KiB values: ten puts per (decimal) megabyte, slightly over the label.
        Ok(Self {
            label: if mb == 0 {
                "empty".into()
            } else {
                t.to_owned()
            },
            puts: mb * 10,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!("empty".parse::<Size>().map(|s| s.puts), Ok(0));
        assert_eq!("100MB".parse::<Size>().map(|s| s.puts), Ok(1000));
        assert_eq!("1GB".parse::<Size>().map(|s| s.puts), Ok(10000));
        assert!("1TB".parse::<Size>().is_err());
    }
}
