//! A process's cost from `/proc`: resident memory (`VmRSS`, split into anonymous memory, the
//! heap and stacks, and file-backed pages, mostly the binary's own code) and CPU time
//! (`utime + stime`).

use std::time::Instant;

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ; 100 on every Linux we run on).
const TICKS_PER_S: f64 = 100.0;

/// One reading of a process.
#[derive(Clone, Copy, Debug)]
pub struct ProcSample {
    pub at: Instant,
    pub rss_kib: u64,
    /// `RssAnon`: heap, stacks, anonymous mappings.
    pub rss_anon_kib: u64,
    /// `RssFile`: pages of mapped files (the binary and its shared libraries).
    pub rss_file_kib: u64,
    pub cpu_s: f64,
}

/// The value in KiB of `field` (e.g. `VmRSS:`) in `/proc/<pid>/status`.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Reads `/proc/<pid>/status` and `/proc/<pid>/stat`; `None` when the process is gone.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status_kib(&status, "VmRSS:")?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(ProcSample {
        at: Instant::now(),
        rss_kib,
        rss_anon_kib: status_kib(&status, "RssAnon:").unwrap_or(0),
        rss_file_kib: status_kib(&status, "RssFile:").unwrap_or(0),
        cpu_s: (utime + stime) as f64 / TICKS_PER_S,
    })
}

/// CPU use between two samples, in percent of one core.
pub fn cpu_percent(from: &ProcSample, to: &ProcSample) -> f64 {
    let wall = to.at.duration_since(from.at).as_secs_f64();
    if wall <= 0.0 {
        return 0.0;
    }
    100.0 * (to.cpu_s - from.cpu_s) / wall
}

/// The machine's load averages (1, 5, 15 min) from `/proc/loadavg`.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_this_process() {
        let s = sample(std::process::id());
        assert!(s.is_some_and(|s| s.rss_kib > 0));
        let s = s.unwrap();
        assert!(s.rss_anon_kib > 0 && s.rss_file_kib > 0, "{s:?}");
        assert!(s.rss_anon_kib + s.rss_file_kib <= s.rss_kib, "{s:?}");
    }
}
