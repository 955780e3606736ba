//! Running what an admin would type: the `sh scenario` blocks of a runbook, and one command
//! bounded in time with its output kept for the step log.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::controlplane::ControlPlaneError;

/// `--confirm-down`'s value for a recovery on `node`: every other node of `nodes`, whose etcd
/// the story has stopped for good.
pub fn confirm_down_but(nodes: &[&str], node: &str) -> String {
    nodes
        .iter()
        .filter(|n| **n != node)
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}

/// The info string of the runbook blocks a scenario runs.
pub const SCENARIO_INFO: &str = "sh scenario";
/// How much of a command's output goes into one step.
const EXCERPT_LINES: usize = 40;
const EXCERPT_CHARS: usize = 4000;

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// The command lines of every fenced block whose info string is exactly [`SCENARIO_INFO`], one
/// `Vec` per block, in order: every line that is neither blank nor a `#` comment, trimmed.
pub fn scenario_blocks(markdown: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    // The open fence: its character, its length, and whether its block is collected.
    let mut open: Option<(char, usize, Option<Vec<String>>)> = None;
    for line in markdown.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let body = line.trim_start_matches(' ');
        let fence = (indent <= 3)
            .then(|| {
                ['`', '~'].into_iter().find_map(|c| {
                    let n = body.len() - body.trim_start_matches(c).len();
                    (n >= 3).then_some((c, n))
                })
            })
            .flatten();
        match open.take() {
            None => {
                if let Some((c, n)) = fence {
                    let info = body[n..].trim();
                    if c == '`' && info.contains('`') {
                        // Not a fence (CommonMark): an inline code span.
                        continue;
                    }
                    open = Some((c, n, (info == SCENARIO_INFO).then(Vec::new)));
                }
            }
            Some((c, n, lines)) => {
                let closes = fence
                    .is_some_and(|(fc, fn_)| fc == c && fn_ >= n && body[fn_..].trim().is_empty());
                if closes {
                    if let Some(lines) = lines {
                        blocks.push(lines);
                    }
                } else {
                    let lines = lines.map(|mut l| {
                        let cmd = line.trim();
                        if !cmd.is_empty() && !cmd.starts_with('#') {
                            l.push(cmd.to_owned());
                        }
                        l
                    });
                    open = Some((c, n, lines));
                }
            }
        }
    }
    // A block left open runs to the end of the document (CommonMark).
    if let Some((_, _, Some(lines))) = open {
        blocks.push(lines);
    }
    blocks
}

/// What a refused or invalid recovery command must leave as it was on a node: its etcd manifest
/// (bytes), its manifests dir (names) and no recovery record dir.
#[derive(Debug)]
pub struct Untouched {
    manifest: PathBuf,
    bytes: Vec<u8>,
    listing: Vec<String>,
    record: PathBuf,
}

impl Untouched {
    /// Takes the node's state (`root`, manifests dir `manifests`); fails when a recovery record
    /// already exists.
    pub fn take(root: &Path, manifests: &Path) -> Result<Self, ControlPlaneError> {
        let manifest = manifests.join("etcd-pod.yaml");
        let bytes = std::fs::read(&manifest)
            .map_err(|e| failed(format!("reading {}: {e}", manifest.display())))?;
        let record = root.join(RECORD_DIR);
        if record.exists() {
            return Err(failed(format!(
                "{} exists before any recovery",
                record.display()
            )));
        }
        Ok(Self {
            listing: listing(manifests),
            manifest,
            bytes,
            record,
        })
    }

    /// What changed since [`Untouched::take`].
    pub fn changes(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        match std::fs::read(&self.manifest) {
            Ok(now) if now == self.bytes => {}
            Ok(_) => wrong.push(format!("{} changed", self.manifest.display())),
            Err(e) => wrong.push(format!("{} is gone: {e}", self.manifest.display())),
        }
        let dir = self.manifest.parent().unwrap_or(Path::new("/"));
        let now = listing(dir);
        if now != self.listing {
            wrong.push(format!(
                "{} changed: {:?} -> {now:?}",
                dir.display(),
                self.listing
            ));
        }
        if self.record.exists() {
            wrong.push(format!("it made {}", self.record.display()));
        }
        wrong
    }
}

impl Untouched {
    /// Checks a command `what` that must have been refused: exit `code`, its output naming
    /// `says`, nothing changed since [`Untouched::take`], and nothing in `also` (what the caller
    /// found wrong besides). Returns the output line naming `says`.
    pub fn refused(
        &self,
        what: &str,
        ran: &Ran,
        code: i32,
        says: &str,
        also: Vec<String>,
    ) -> Result<String, ControlPlaneError> {
        let mut wrong = self.changes();
        if ran.code != Some(code) {
            wrong.insert(0, format!("exit {:?} instead of {code}", ran.code));
        }
        if !ran.stdout.contains(says) {
            wrong.push(format!("its output does not say {says:?}"));
        }
        wrong.extend(also);
        if !wrong.is_empty() {
            return Err(failed(format!(
                "{what}: {}\n{}",
                wrong.join("; "),
                ran.said()
            )));
        }
        Ok(ran
            .stdout
            .lines()
            .find(|l| l.contains(says))
            .unwrap_or_default()
            .trim()
            .to_owned())
    }
}

/// `etcd-recover args` on the node whose `/` is `root` (`ETCD_RECOVER_NODE_ROOT`), with `env`
/// besides, bounded by `limit`.
pub async fn etcd_recover(
    limit: Duration,
    root: &Path,
    args: &[&str],
    env: &[(&str, String)],
) -> Result<Ran, ControlPlaneError> {
    let binary = crate::binaries::binary("etcd-recover")
        .map_err(|e| failed(format!("etcd-recover: {e}")))?;
    let mut env = env.to_vec();
    env.push(("ETCD_RECOVER_NODE_ROOT", root.display().to_string()));
    run(limit, &binary, args, &env).await
}

/// The record dir `etcd-recover` keeps below a node root.
pub const RECORD_DIR: &str = "var/lib/etcd-recovery";

/// The file names in `dir`, sorted (empty when it cannot be read).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// How a command ended.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Ran {
    pub fn said(&self) -> String {
        let mut out = excerpt(&self.stdout);
        if !self.stderr.trim().is_empty() {
            out.push_str(&format!("\n[stderr]\n{}", excerpt(&self.stderr)));
        }
        out
    }
}

/// The text trimmed, at most [`EXCERPT_LINES`] lines and about [`EXCERPT_CHARS`] characters.
pub fn excerpt(text: &str) -> String {
    let text = text.trim();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines
        .iter()
        .take(EXCERPT_LINES)
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    if out.len() > EXCERPT_CHARS {
        let mut end = EXCERPT_CHARS;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str(" [...]");
    } else if lines.len() > EXCERPT_LINES {
        out.push_str(&format!(
            "\n[... {} more line(s)]",
            lines.len() - EXCERPT_LINES
        ));
    }
    out
}

/// Runs `program args` with `envs`, bounded by `limit` (killed past it).
pub async fn run(
    limit: Duration,
    program: &Path,
    args: &[&str],
    envs: &[(&str, String)],
) -> Result<Ran, ControlPlaneError> {
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .map_err(|e| failed(format!("starting {}: {e}", program.display())))?;
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| {
            failed(format!(
                "{} {args:?} did not end within {limit:?} (killed)",
                program.display()
            ))
        })?
        .map_err(|e| failed(format!("running {}: {e}", program.display())))?;
    Ok(Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_blocks_tagged_sh_scenario_in_order() {
        let md = "intro\n\n```sh scenario\netcd-recover status\n```\n\n```sh\nkubectl get x\n```\n\n```sh scenario extra\nno\n```\n\n  ```sh scenario\n  # a comment\n\n  etcd-recover from-member --dry-run\n  echo two\n  ```\n\n````sh scenario\n```\nnested\n````\n";
        assert_eq!(
            scenario_blocks(md),
            vec![
                vec!["etcd-recover status".to_owned()],
                vec![
                    "etcd-recover from-member --dry-run".to_owned(),
                    "echo two".to_owned()
                ],
                vec!["```".to_owned(), "nested".to_owned()],
            ]
        );
    }

    #[test]
    fn no_blocks_and_tilde_fences() {
        assert!(scenario_blocks("# title\n\ntext\n```sh\nls\n```\n").is_empty());
        assert_eq!(
            scenario_blocks("~~~sh scenario\nls\n~~~\n"),
            vec![vec!["ls".to_owned()]]
        );
        // A backtick fence is not closed by tildes, and an unclosed block runs to the end.
        assert_eq!(
            scenario_blocks("```sh scenario\nls\n~~~\npwd"),
            vec![vec!["ls".to_owned(), "~~~".to_owned(), "pwd".to_owned()]]
        );
    }

    #[test]
    fn excerpts_are_bounded() {
        let long: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let e = excerpt(&long);
        assert!(e.starts_with("line 0\n"));
        assert!(e.ends_with("[... 60 more line(s)]"), "{e}");
        assert_eq!(excerpt("  hi \n"), "hi");
    }
}
