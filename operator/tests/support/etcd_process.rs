//! An etcd process a test started, killed (and reaped) on drop, also when the test panics, with
//! its log file.

use std::path::PathBuf;
use std::process::Child;

pub struct Etcd {
    pub child: Child,
    pub log: PathBuf,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Etcd {
    /// The whole log (empty when unreadable).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log's last `lines` lines.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log();
        let all: Vec<_> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}
