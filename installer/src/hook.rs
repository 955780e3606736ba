//! Test-only fault injection, off unless `ETCD_INSTALLER_TEST_HOOK` is set. The tests use it to
//! stop the writer at a chosen point and then kill it (a crash between files) or make it fail.
//!
//! Format: `<action>:<point>` with action `pause` (log a marker and block until the deadline,
//! so the test can SIGKILL the process) or `fail` (return an error), and point `file:<K>`
//! (after the K-th file was written) or `before-manifest` (everything but the manifest is in
//! place).

use std::time::Instant;

/// The env var that turns the hook on.
pub const HOOK_ENV: &str = "ETCD_INSTALLER_TEST_HOOK";
/// Logged (to stderr) when a `pause` hook stops the writer.
pub const PAUSE_MARKER: &str = "test hook: paused";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pause,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    AfterFile(usize),
    BeforeManifest,
}

/// A fault to inject, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hook(Option<(Action, Point)>);

/// The hook fired with `fail`, or a `pause` ran out of time.
#[derive(Debug, thiserror::Error)]
#[error("test hook fired at {0}")]
pub struct HookFired(pub String);

impl Hook {
    /// No fault.
    pub fn none() -> Self {
        Self(None)
    }

    /// Parses the hook's text; unknown text is an error (a typo must not silently test nothing).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (action, point) = text
            .split_once(':')
            .ok_or_else(|| format!("{HOOK_ENV}={text:?}: expected <pause|fail>:<point>"))?;
        let action = match action {
            "pause" => Action::Pause,
            "fail" => Action::Fail,
            _ => return Err(format!("{HOOK_ENV}={text:?}: unknown action")),
        };
        let point = match point.strip_prefix("file:") {
            Some(k) => Point::AfterFile(
                k.parse()
                    .map_err(|_| format!("{HOOK_ENV}={text:?}: bad file count"))?,
            ),
            None if point == "before-manifest" => Point::BeforeManifest,
            None => return Err(format!("{HOOK_ENV}={text:?}: unknown point")),
        };
        Ok(Self(Some((action, point))))
    }

    /// From the environment.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(HOOK_ENV) {
            Ok(text) if !text.is_empty() => Self::parse(&text),
            _ => Ok(Self::none()),
        }
    }

    /// Called after each file write with the number of files written so far.
    pub fn after_file(&self, written: usize, deadline: Instant) -> Result<(), HookFired> {
        match self.0 {
            Some((action, Point::AfterFile(k))) if k == written => {
                fire(action, &format!("file {written}"), deadline)
            }
            _ => Ok(()),
        }
    }

    /// Called once the revision directory is in place, before the manifest is written.
    pub fn before_manifest(&self, deadline: Instant) -> Result<(), HookFired> {
        match self.0 {
            Some((action, Point::BeforeManifest)) => fire(action, "before-manifest", deadline),
            _ => Ok(()),
        }
    }
}

fn fire(action: Action, at: &str, deadline: Instant) -> Result<(), HookFired> {
    if action == Action::Pause {
        tracing::warn!(at, "{PAUSE_MARKER}");
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
    }
    Err(HookFired(at.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_hook() {
        assert_eq!(
            Hook::parse("pause:file:3"),
            Ok(Hook(Some((Action::Pause, Point::AfterFile(3)))))
        );
        assert_eq!(
            Hook::parse("fail:before-manifest"),
            Ok(Hook(Some((Action::Fail, Point::BeforeManifest))))
        );
        for bad in ["pause", "stop:file:1", "fail:file:x", "fail:after"] {
            assert!(Hook::parse(bad).is_err(), "{bad}");
        }
        assert!(Hook::none().after_file(1, Instant::now()).is_ok());
        assert!(
            Hook::parse("fail:file:2")
                .unwrap()
                .after_file(2, Instant::now())
                .is_err()
        );
    }
}
