//! The one-line result: printed alone on stdout, written to the termination-message file, and
//! mapped to the exit code.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// The kubelet's default termination-message path.
pub const DEFAULT_TERMINATION_LOG: &str = "/dev/termination-log";
/// The kubelet keeps at most 4096 bytes of a termination message; stay below it even when JSON
/// escaping doubles every byte of the message.
const MAX_MESSAGE: usize = 1800;

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The revision is now installed; something was written.
    Installed,
    /// The revision was already installed exactly; nothing was written.
    Unchanged,
    /// A transient failure (API, missing required object, timeout, I/O): retry.
    Failed,
    /// Flags are invalid.
    Invalid,
    /// The revision's content or the node's state forbids the install (hostile key, downgrade,
    /// manifest for another node): retrying the same revision will not help.
    Refused,
    /// Another installer holds the lock: retry later.
    Busy,
}

impl Outcome {
    /// The process exit code.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Installed | Outcome::Unchanged => 0,
            Outcome::Failed => 1,
            Outcome::Invalid => 2,
            Outcome::Refused => 3,
            Outcome::Busy => 4,
        }
    }

    /// Whether the run succeeded.
    pub fn ok(self) -> bool {
        self.exit_code() == 0
    }
}

/// The result of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub outcome: Outcome,
    pub revision: u64,
    pub node: String,
    /// A short static category (`Installed`, `HostileKey`, `Downgrade`, `MissingResource`, ...).
    pub reason: &'static str,
    pub message: String,
}

impl Report {
    /// The report as one line of JSON (message shortened to fit a termination message).
    pub fn line(&self) -> String {
        let mut short = self.clone();
        short.message = short
            .message
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if short.message.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !short.message.is_char_boundary(end) {
                end -= 1;
            }
            short.message.truncate(end);
            short.message.push_str("...");
        }
        serde_json::to_string(&short).unwrap_or_else(|e| {
            format!(
                "{{\"outcome\":\"failed\",\"reason\":\"Internal\",\"message\":\"cannot encode the result: {e}\"}}"
            )
        })
    }

    /// Writes the line to the termination-message file: `explicit`, or the kubelet's default
    /// path when it exists (as it does in a pod).
    pub fn write_termination_log(&self, explicit: Option<&Path>) -> std::io::Result<()> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => {
                let default = PathBuf::from(DEFAULT_TERMINATION_LOG);
                if !default.exists() {
                    return Ok(());
                }
                default
            }
        };
        // In place: the kubelet bind-mounts this file into the container.
        let mut file = std::fs::File::create(&path)?;
        writeln!(file, "{}", self.line())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_one_short_json_line() {
        let report = Report {
            outcome: Outcome::Refused,
            revision: 3,
            node: "n1".into(),
            reason: "Downgrade",
            message: "x\n".repeat(5000),
        };
        let line = report.line();
        assert!(!line.contains('\n'));
        assert!(line.len() < 4096);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["outcome"], "refused");
        assert_eq!(v["revision"], 3);
        assert_eq!(v["reason"], "Downgrade");
        assert_eq!(Outcome::Refused.exit_code(), 3);
        assert!(Outcome::Unchanged.ok());
    }
}
