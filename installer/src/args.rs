//! Command-line flags ([`Args`], the installer contract) and their validation into a typed
//! [`Config`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::plan::Kind;

/// Lays one static-pod revision down on this node: the revision's ConfigMaps and Secrets under
/// `<resource-dir>/<pod>-<revision>/`, then this node's manifest as `<pod-manifest-dir>/<pod>.yaml`.
#[derive(Parser, Debug, Clone)]
#[command(name = "etcd-installer", version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("GIT_REVISION"), ")"))]
pub struct Args {
    /// The revision to install (>= 1).
    #[arg(long)]
    pub revision: u64,
    /// Namespace of the revision's ConfigMaps and Secrets.
    #[arg(long)]
    pub namespace: String,
    /// Pod name and ConfigMap prefix: the manifests are keys `pod-<node>.yaml` of ConfigMap
    /// `<pod>-<revision>`, installed as `<pod>.yaml`.
    #[arg(long, default_value = "etcd-pod")]
    pub pod: String,
    /// This node's name; only its manifest (`pod-<node>.yaml`) is installed.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// Where revision directories live (e.g. /etc/kubernetes/static-pod-resources).
    #[arg(long)]
    pub resource_dir: PathBuf,
    /// The kubelet's static-pod manifest directory (e.g. /etc/kubernetes/manifests).
    #[arg(long)]
    pub pod_manifest_dir: PathBuf,
    /// Required ConfigMaps (names without the revision suffix), comma-separated. The pod
    /// ConfigMap is always required, listed or not.
    #[arg(long, value_delimiter = ',')]
    pub configmaps: Vec<String>,
    /// Required Secrets, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub secrets: Vec<String>,
    /// ConfigMaps installed when they exist, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub optional_configmaps: Vec<String>,
    /// Secrets installed when they exist, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub optional_secrets: Vec<String>,
    /// Name prefixes of per-node private keys in Secrets (`<prefix>-<node>.key`): this node gets
    /// only its own; other `.key` entries are withheld (see `keys`). Empty: every entry.
    #[arg(long, value_delimiter = ',')]
    pub own_key_prefixes: Vec<String>,
    /// Bound on the whole run, every retry included (e.g. 120s, 2m).
    #[arg(long, default_value = "120s", value_parser = membership::parse_duration)]
    pub timeout: Duration,
    /// A new or changed manifest (a restart of etcd) is written only once the operator has
    /// approved it on this installer's own pod (`POD_NAME`, `POD_NAMESPACE`), after asking the
    /// quorum gate again, and only within this long of the installer's start (e.g. 30s); else
    /// the run fails with `RestartNotApproved` and nothing restarts. See `approval`.
    #[arg(long, value_parser = membership::parse_duration)]
    pub approval_window: Option<Duration>,
    /// Kubeconfig file; without it: in-cluster config or `KUBECONFIG` (kube's inference).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Where the one-line result is also written (default: /dev/termination-log when it exists).
    #[arg(long)]
    pub termination_log: Option<PathBuf>,
    #[command(flatten)]
    pub log: etcd_cli::LogArgs,
}

/// One ConfigMap or Secret of the revision to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub kind: Kind,
    /// Name without the `-<revision>` suffix.
    pub name: String,
    pub optional: bool,
}

/// Validated flags.
#[derive(Debug, Clone)]
pub struct Config {
    pub revision: u64,
    pub namespace: String,
    pub pod: String,
    pub node: String,
    pub resource_dir: PathBuf,
    pub manifest_dir: PathBuf,
    /// Required first, pod ConfigMap included, then optional; no duplicates.
    pub wanted: Vec<Wanted>,
    /// See `--own-key-prefixes`.
    pub own_key_prefixes: Vec<String>,
    pub timeout: Duration,
    /// `--approval-window`.
    pub approval_window: Option<Duration>,
    pub kubeconfig: Option<PathBuf>,
    pub termination_log: Option<PathBuf>,
}

/// A flag is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("--revision must be at least 1")]
    ZeroRevision,
    #[error("--timeout must be more than 0")]
    ZeroTimeout,
    #[error("--approval-window must be more than 0")]
    ZeroApprovalWindow,
    #[error("--{flag} {value:?}: {why}")]
    BadName {
        flag: &'static str,
        value: String,
        why: String,
    },
    #[error("--{flag} {path:?} must be an absolute path")]
    RelativePath { flag: &'static str, path: PathBuf },
    #[error("--resource-dir and --pod-manifest-dir must differ")]
    SameDirs,
    #[error("{kind} {name:?} is listed more than once")]
    Duplicate { kind: Kind, name: String },
}

/// Checks a DNS-1123 subdomain (a Kubernetes object or node name) as kube-apiserver does
/// (`k8s_names`), and that it is at most `max` bytes.
fn check_name(flag: &'static str, value: &str, max: usize) -> Result<(), ArgsError> {
    let bad = |why: String| ArgsError::BadName {
        flag,
        value: value.to_owned(),
        why,
    };
    if value.len() > max {
        return Err(bad(format!("it is longer than {max} characters")));
    }
    k8s_names::dns1123_subdomain(value).map_err(|e| bad(e.to_string()))
}

fn names(list: &[String]) -> impl Iterator<Item = &str> {
    list.iter().map(|s| s.trim()).filter(|s| !s.is_empty())
}

impl Args {
    /// Validates the flags into a [`Config`].
    pub fn validate(&self) -> Result<Config, ArgsError> {
        self.check_limits()?;
        self.check_names()?;
        self.check_dirs()?;
        let wanted = self.wanted()?;
        for prefix in names(&self.own_key_prefixes) {
            check_name("own-key-prefixes", prefix, 200)?;
        }
        Ok(Config {
            revision: self.revision,
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            node: self.node_name.clone(),
            resource_dir: self.resource_dir.clone(),
            manifest_dir: self.pod_manifest_dir.clone(),
            wanted,
            own_key_prefixes: names(&self.own_key_prefixes).map(str::to_owned).collect(),
            timeout: self.timeout,
            approval_window: self.approval_window,
            kubeconfig: self.kubeconfig.clone(),
            termination_log: self.termination_log.clone(),
        })
    }

    /// Checks that `--revision`, `--timeout` and `--approval-window` are not zero.
    fn check_limits(&self) -> Result<(), ArgsError> {
        if self.revision == 0 {
            return Err(ArgsError::ZeroRevision);
        }
        if self.timeout.is_zero() {
            return Err(ArgsError::ZeroTimeout);
        }
        if self.approval_window.is_some_and(|w| w.is_zero()) {
            return Err(ArgsError::ZeroApprovalWindow);
        }
        Ok(())
    }

    /// Checks `--namespace`, `--pod` and `--node-name` are valid Kubernetes names.
    fn check_names(&self) -> Result<(), ArgsError> {
        k8s_names::dns1123_label(&self.namespace).map_err(|e| ArgsError::BadName {
            flag: "namespace",
            value: self.namespace.clone(),
            why: e.to_string(),
        })?;
        // Room for "-<revision>" in the object names.
        check_name("pod", &self.pod, 200)?;
        check_name("node-name", &self.node_name, 253)
    }

    /// Checks `--resource-dir` and `--pod-manifest-dir` are absolute and different.
    fn check_dirs(&self) -> Result<(), ArgsError> {
        for (flag, path) in [
            ("resource-dir", &self.resource_dir),
            ("pod-manifest-dir", &self.pod_manifest_dir),
        ] {
            if !path.is_absolute() {
                return Err(ArgsError::RelativePath {
                    flag,
                    path: path.clone(),
                });
            }
        }
        if self.resource_dir == self.pod_manifest_dir {
            return Err(ArgsError::SameDirs);
        }
        Ok(())
    }

    /// The ConfigMaps and Secrets to fetch: the pod ConfigMap unless listed, then the four
    /// lists in order, each name checked and none twice.
    fn wanted(&self) -> Result<Vec<Wanted>, ArgsError> {
        let mut wanted: Vec<Wanted> = Vec::new();
        let lists: [(&'static str, Kind, bool, &Vec<String>); 4] = [
            ("configmaps", Kind::ConfigMap, false, &self.configmaps),
            ("secrets", Kind::Secret, false, &self.secrets),
            (
                "optional-configmaps",
                Kind::ConfigMap,
                true,
                &self.optional_configmaps,
            ),
            (
                "optional-secrets",
                Kind::Secret,
                true,
                &self.optional_secrets,
            ),
        ];
        if !names(&self.configmaps).any(|n| n == self.pod) {
            wanted.push(Wanted {
                kind: Kind::ConfigMap,
                name: self.pod.clone(),
                optional: false,
            });
        }
        for (flag, kind, optional, list) in lists {
            for name in names(list) {
                check_name(flag, name, 200)?;
                if wanted.iter().any(|w| w.kind == kind && w.name == name) {
                    return Err(ArgsError::Duplicate {
                        kind,
                        name: name.to_owned(),
                    });
                }
                wanted.push(Wanted {
                    kind,
                    name: name.to_owned(),
                    optional,
                });
            }
        }
        Ok(wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract's flags, with `extra` (flag, value) pairs replacing or adding to them.
    fn parse(extra: &[&str]) -> Result<Config, ArgsError> {
        let mut flags = vec![
            ("--revision", "3"),
            ("--namespace", "ns"),
            ("--pod", "etcd-pod"),
            ("--node-name", "n1"),
            ("--resource-dir", "/r"),
            ("--pod-manifest-dir", "/m"),
        ];
        for pair in extra.chunks(2) {
            match flags.iter_mut().find(|(f, _)| *f == pair[0]) {
                Some(slot) => slot.1 = pair[1],
                None => flags.push((pair[0], pair[1])),
            }
        }
        let argv = std::iter::once("etcd-installer".to_string())
            .chain(flags.iter().map(|(f, v)| format!("{f}={v}")));
        Args::try_parse_from(argv).unwrap().validate()
    }

    #[test]
    fn the_contract_flags_parse() {
        let cfg = parse(&[
            "--configmaps",
            "etcd-pod,etcd-all-bundles",
            "--secrets",
            "etcd-all-certs",
            "--optional-configmaps",
            "extra",
            "--timeout",
            "2m",
        ])
        .unwrap();
        assert_eq!(cfg.timeout, Duration::from_secs(120));
        let got: Vec<(Kind, &str, bool)> = cfg
            .wanted
            .iter()
            .map(|w| (w.kind, w.name.as_str(), w.optional))
            .collect();
        assert_eq!(
            got,
            vec![
                (Kind::ConfigMap, "etcd-pod", false),
                (Kind::ConfigMap, "etcd-all-bundles", false),
                (Kind::Secret, "etcd-all-certs", false),
                (Kind::ConfigMap, "extra", true),
            ]
        );
    }

    #[test]
    fn the_pod_configmap_is_implied() {
        let cfg = parse(&["--secrets", ""]).unwrap();
        assert_eq!(cfg.wanted.len(), 1);
        assert_eq!(cfg.wanted[0].name, "etcd-pod");
        assert_eq!(cfg.timeout, Duration::from_secs(120));
    }

    #[test]
    fn bad_flags_are_refused() {
        assert_eq!(
            parse(&["--revision", "0"]).unwrap_err(),
            ArgsError::ZeroRevision
        );
        assert!(matches!(
            parse(&["--node-name", "../n1"]),
            Err(ArgsError::BadName { .. })
        ));
        assert!(matches!(
            parse(&["--configmaps", "a/b"]),
            Err(ArgsError::BadName { .. })
        ));
        for name in ["a-.b", "a.-b", "a..b", ".a", "a.", "-a"] {
            assert!(
                matches!(
                    parse(&["--node-name", name]),
                    Err(ArgsError::BadName { .. })
                ),
                "{name}"
            );
        }
        assert!(parse(&["--node-name", "n1.example-1.com"]).is_ok());
        assert!(matches!(
            parse(&["--secrets", "x", "--optional-secrets", "x"]),
            Err(ArgsError::Duplicate { .. })
        ));
        assert!(matches!(
            parse(&["--resource-dir", "rel"]),
            Err(ArgsError::RelativePath { .. })
        ));
        assert_eq!(
            parse(&["--pod-manifest-dir", "/r"]).unwrap_err(),
            ArgsError::SameDirs
        );
        assert!(Args::try_parse_from(["etcd-installer", "--timeout", "soon"]).is_err());
    }
}

etcd_cli::command_line_tests!(Args);
