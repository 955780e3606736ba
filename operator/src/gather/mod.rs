//! `etcd-operator gather`: everything an admin needs to debug an incident, in one archive
//! (`.tar.gz`) to attach to a ticket. It holds the EtcdCluster with its conditions, the Events
//! about it and in the etcd and operator namespaces, each node's revision status with its etcd
//! and installer pods (container states, `etcd-verify`'s termination message), every member as
//! etcd answers now (raft and applied index, database size, leader, alarms, version, cluster
//! version), the `plan` output, and the operator's recent logs (its pods', and files named with
//! `--log-file`).
//!
//! What it never holds: Secrets, or any private key. The operator's client certificate is read
//! (in memory) only to ask etcd; Secrets are neither listed nor written. Every JSON document has
//! each of its strings redacted before it is serialized ([`redact::redact_value`]) and every
//! file, whatever it holds, passes [`redact::redact`] before it is archived, which removes PEM
//! private keys in raw, escaped or base64 form. A part that cannot be read (the API or etcd down
//! during the very incident) is named in `problems.txt` and the rest is still gathered; the
//! archive is written to a dot-prefixed temporary file and linked into place, which fails when
//! anything exists at the output path at that moment, so it never replaces a file.

pub mod redact;
pub mod render;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, LogParams};
use kube::runtime::events::Reporter;
use kube::{Api, Client, Resource};
use time::OffsetDateTime;

use crate::context::{Context, OperatorConfig};
use crate::etcd::EtcdObservation;

/// What to gather and where to put it.
#[derive(Clone, Debug)]
pub struct GatherOptions {
    pub config: OperatorConfig,
    /// The archive to write (must not exist).
    pub output: PathBuf,
    /// Log files to include (an operator not running as a pod, a node's files).
    pub log_files: Vec<PathBuf>,
    /// Lines of each operator pod's log.
    pub log_lines: i64,
    /// The API server, for the README.
    pub server: String,
}

/// The files read, by path in the archive, and what could not be read.
#[derive(Clone, Debug, Default)]
pub struct Gathered {
    pub files: BTreeMap<String, Vec<u8>>,
    pub problems: Vec<String>,
    /// Private keys removed from each JSON document before it was serialized.
    redacted: BTreeMap<String, usize>,
}

/// Why the archive could not be written.
#[derive(Debug, thiserror::Error)]
pub enum GatherError {
    #[error("{0} exists already: choose another --output (a gather never overwrites)")]
    Exists(PathBuf),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

const OPERATOR_POD_LABELS: &str = "app.kubernetes.io/name=etcd-operator";

/// Reads everything; never fails as a whole (see `problems`). Boxed so that its state machine
/// is compiled once, in this crate, and a binary that polls it does not compile it again
/// (docs/benchmarks.md, "Release build").
pub fn collect<'a>(
    client: &'a Client,
    opts: &'a GatherOptions,
    now: OffsetDateTime,
) -> BoxFuture<'a, Gathered> {
    Box::pin(collect_all(client, opts, now))
}

async fn collect_all(client: &Client, opts: &GatherOptions, now: OffsetDateTime) -> Gathered {
    let mut g = Gathered::default();
    let ns = opts.config.operator_namespace.clone();
    match crate::run::read_inputs(client, &ns).await {
        Ok(inputs) => {
            let status = inputs
                .cluster
                .as_ref()
                .and_then(|c| c.status.clone())
                .unwrap_or_default();
            if let Some(c) = &inputs.cluster {
                g.json("etcdcluster.json", &without_managed_fields(c.clone()));
            } else if let Some(u) = &inputs.unreadable {
                g.problems.push(u.to_string());
            } else {
                g.problems.push("no EtcdCluster `cluster` exists".into());
            }
            g.text("conditions.txt", render::conditions(&status));
            g.text("nodes.txt", render::nodes(&status, &inputs.pods));
            let pods: Vec<Pod> = inputs
                .pods
                .iter()
                .cloned()
                .map(without_managed_fields)
                .collect();
            g.json("pods-etcd.json", &pods);
            let budgets: Vec<_> = inputs
                .pdbs
                .iter()
                .cloned()
                .map(without_managed_fields)
                .collect();
            g.json("poddisruptionbudgets-etcd.json", &budgets);
            let (plan, obs) = plan_and_etcd(client, &opts.config, &inputs, now).await;
            g.text("plan.txt", plan);
            g.text("etcd.txt", render::etcd(&obs));
        }
        Err(e) => g.problems.push(format!(
            "reading the EtcdCluster, Nodes and pods from the API: {}",
            crate::writer::describe(&e)
        )),
    }
    events(client, &ns, &mut g).await;
    operator_logs(
        client,
        &ns,
        opts.log_lines,
        !opts.log_files.is_empty(),
        &mut g,
    )
    .await;
    for path in &opts.log_files {
        let name = path
            .file_name()
            .map_or_else(|| "log".into(), |n| n.to_string_lossy().into_owned());
        match std::fs::read(path) {
            Ok(bytes) => g.add(format!("logs/files/{name}"), bytes),
            Err(e) => g.problems.push(format!("reading {}: {e}", path.display())),
        }
    }
    g
}

/// The plan pass (read-only) and, through the client it built, etcd as it answers now.
async fn plan_and_etcd(
    client: &Client,
    config: &OperatorConfig,
    inputs: &crate::observed::Inputs,
    now: OffsetDateTime,
) -> (String, EtcdObservation) {
    let reporter = Reporter {
        controller: "etcd-operator-gather".into(),
        instance: None,
    };
    let ctx = Context::new(client.clone(), config.clone(), reporter, true);
    let mut driver = crate::driver::Driver::default();
    let report = driver.pass(&ctx, inputs, now).await;
    let etcd_client = driver.etcd_client();
    let obs = match etcd_client {
        Some(c) => crate::etcd::observe(&c).await,
        None => EtcdObservation {
            error: Some(
                "no etcd client: the operator's client certificate or the etcd endpoints could not be read"
                    .into(),
            ),
            ..Default::default()
        },
    };
    (report.plan_text(), obs)
}

/// Events about the EtcdCluster (in `default`) and every Event of the etcd and operator
/// namespaces.
async fn events(client: &Client, operator_ns: &str, g: &mut Gathered) {
    for ns in ["default", crate::podspec::STATIC_POD_NAMESPACE, operator_ns] {
        match Api::<Event>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
        {
            Ok(list) => {
                let mut items: Vec<Event> = list
                    .items
                    .into_iter()
                    .filter(|e| {
                        ns != "default"
                            || e.regarding
                                .as_ref()
                                .is_some_and(|r| r.kind.as_deref() == Some("EtcdCluster"))
                    })
                    .map(without_managed_fields)
                    .collect();
                items
                    .sort_by_key(|e| (e.event_time.as_ref().map(|t| t.0), e.metadata.name.clone()));
                g.json(&format!("events-{ns}.json"), &items);
            }
            Err(e) => g.problems.push(format!("listing Events in {ns}: {e}")),
        }
    }
}

/// The last `lines` of every operator pod's log (none is only a problem when no log file was
/// given either).
async fn operator_logs(client: &Client, ns: &str, lines: i64, have_files: bool, g: &mut Gathered) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = match pods
        .list(&ListParams::default().labels(OPERATOR_POD_LABELS))
        .await
    {
        Ok(l) => l.items,
        Err(e) => {
            g.problems
                .push(format!("listing operator pods in {ns}: {e}"));
            return;
        }
    };
    if list.is_empty() && !have_files {
        g.problems.push(format!(
            "no operator pod in {ns} ({OPERATOR_POD_LABELS}): pass its log with --log-file"
        ));
    }
    for p in list {
        let name = p.metadata.name.clone().unwrap_or_default();
        let params = LogParams {
            tail_lines: Some(lines),
            timestamps: true,
            ..Default::default()
        };
        match pods.logs(&name, &params).await {
            Ok(text) => g.text(&format!("logs/{name}.log"), text),
            Err(e) => g
                .problems
                .push(format!("reading the log of pod {ns}/{name}: {e}")),
        }
    }
}

fn without_managed_fields<K: Resource>(mut o: K) -> K {
    o.meta_mut().managed_fields = None;
    o
}

impl Gathered {
    fn add(&mut self, name: String, bytes: Vec<u8>) {
        self.files.insert(name, bytes);
    }

    fn text(&mut self, name: &str, text: String) {
        self.add(name.to_owned(), text.into_bytes());
    }

    /// Adds `value` as JSON, each of its strings redacted before it is serialized.
    fn json<T: serde::Serialize>(&mut self, name: &str, value: &T) {
        let encoded = serde_json::to_value(value).and_then(|mut v| {
            let removed = redact::redact_value(&mut v);
            serde_json::to_vec_pretty(&v).map(|bytes| (bytes, removed))
        });
        match encoded {
            Ok((bytes, removed)) => {
                if removed > 0 {
                    self.redacted.insert(name.to_owned(), removed);
                }
                self.add(name.to_owned(), bytes);
            }
            Err(e) => self.problems.push(format!("encoding {name}: {e}")),
        }
    }

    /// The files as archived: each redacted, plus `problems.txt` and `README.txt`.
    pub fn finish(
        mut self,
        opts: &GatherOptions,
        now: OffsetDateTime,
    ) -> BTreeMap<String, Vec<u8>> {
        let mut removed = Vec::new();
        for (name, bytes) in &mut self.files {
            let (text, n) = redact::redact(&String::from_utf8_lossy(bytes));
            if n > 0 {
                *bytes = text.into_bytes();
            }
            let n = n + self.redacted.get(name).copied().unwrap_or(0);
            if n > 0 {
                removed.push(format!("{name}: {n} private key(s) removed"));
            }
        }
        self.problems.extend(removed);
        let problems = if self.problems.is_empty() {
            "none\n".to_owned()
        } else {
            self.problems.join("\n") + "\n"
        };
        self.text("problems.txt", problems);
        let listing: Vec<String> = self.files.keys().cloned().collect();
        let readme = format!(
            "etcd-operator gather {}\nAPI server: {}\ntaken: {}\nfiles: {}\nSecrets are not included; private keys are removed from every file.\n",
            env!("CARGO_PKG_VERSION"),
            opts.server,
            crate::certs::format_time(now),
            listing.join(", ")
        );
        self.text("README.txt", readme);
        self.files
    }
}

/// Writes `files` as `<output>` (a `.tar.gz` whose entries sit under one directory named for
/// the time), through a temporary file linked into place: never over anything at `output`.
pub fn write_archive(
    files: &BTreeMap<String, Vec<u8>>,
    output: &Path,
    now: OffsetDateTime,
) -> Result<(), GatherError> {
    // Fails early, before the work; `publish` is what guarantees it.
    if output.symlink_metadata().is_ok() {
        return Err(GatherError::Exists(output.to_owned()));
    }
    let tmp = temp_path(output);
    if let Err(source) = write_tar(files, &tmp, now) {
        let _ = std::fs::remove_file(&tmp);
        return Err(GatherError::Write { path: tmp, source });
    }
    publish(&tmp, output)
}

/// `.<name>.partial-<pid>` beside `output`.
fn temp_path(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map_or_else(|| "gather".into(), |n| n.to_string_lossy().into_owned());
    output.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

fn write_tar(
    files: &BTreeMap<String, Vec<u8>>,
    tmp: &Path,
    now: OffsetDateTime,
) -> std::io::Result<()> {
    let file = std::fs::File::create_new(tmp)?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let top = format!(
        "etcd-gather-{}",
        crate::certs::format_time(now).replace(':', "")
    );
    let mtime = u64::try_from(now.unix_timestamp()).unwrap_or(0);
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(mtime);
        header.set_cksum();
        tar.append_data(&mut header, format!("{top}/{name}"), bytes.as_slice())?;
    }
    let mut file = tar.into_inner()?.finish()?;
    file.flush()?;
    file.sync_all()
}

/// Gives the finished `tmp` the name `output` in one step that fails when anything (a file, a
/// directory, a dangling symlink) is there by then, so whatever appeared at `output` after any
/// earlier check is never replaced; `tmp` is removed either way.
fn publish(tmp: &Path, output: &Path) -> Result<(), GatherError> {
    let linked = std::fs::hard_link(tmp, output);
    let _ = std::fs::remove_file(tmp);
    match linked {
        Ok(()) => sync_dir(output).map_err(|source| GatherError::Write {
            path: output.to_owned(),
            source,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(GatherError::Exists(output.to_owned()))
        }
        Err(source) => Err(GatherError::Write {
            path: output.to_owned(),
            source,
        }),
    }
}

/// Makes the new name durable: fsync of the directory holding `path`.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
