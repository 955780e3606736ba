//! The env contract of the etcd static pod, as `etcd-verify membership` reads it. Parsing is pure
//! (it takes a map of variables), strict, and every error names the variable at fault.

use std::collections::BTreeMap;
use std::path::PathBuf;

use membership::{
    ClientError, EnvFormatError, InitialCluster, MemberIds, MemberUrl, TlsFiles, UrlError,
};

/// Whether the revision bootstraps a new cluster or joins an existing one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    New,
    Existing,
}

/// Everything `etcd-verify membership` needs, validated.
#[derive(Clone, Debug)]
pub struct VerifyConfig {
    pub name: String,
    pub data_dir: PathBuf,
    pub peer_url: MemberUrl,
    pub initial_cluster: InitialCluster,
    pub member_ids: MemberIds,
    pub state: ClusterState,
    /// `ETCD_INITIAL_CLUSTER_TOKEN`, or etcd's default `etcd-cluster` when unset.
    pub cluster_token: String,
    pub endpoints: Vec<MemberUrl>,
    pub tls: Option<TlsFiles>,
    /// A directory outside the data dir, on the node's root disk (`--state-dir`), where the
    /// bootstrap mark is kept too; `None`: only the data dir's.
    pub state_dir: Option<PathBuf>,
}

/// etcd's initial-cluster token when none is given.
pub const DEFAULT_CLUSTER_TOKEN: &str = "etcd-cluster";

/// A bad or missing env var.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0} is not set")]
    Missing(&'static str),
    #[error("{var}={value:?}: {reason}")]
    Invalid {
        var: &'static str,
        value: String,
        reason: String,
    },
    #[error(transparent)]
    Format(#[from] EnvFormatError),
    #[error(transparent)]
    Tls(#[from] ClientError),
    #[error("{0}")]
    Inconsistent(String),
    #[error("{0} is not valid UTF-8")]
    NotUtf8(&'static str),
}

/// The env vars of the contract, the only ones read.
pub const CONTRACT_VARS: [&str; 11] = [
    "ETCD_NAME",
    "ETCD_DATA_DIR",
    "ETCD_INITIAL_ADVERTISE_PEER_URLS",
    "ETCD_INITIAL_CLUSTER",
    "ETCD_MEMBER_IDS",
    "ETCD_INITIAL_CLUSTER_STATE",
    "ETCDCTL_ENDPOINTS",
    "ETCD_INITIAL_CLUSTER_TOKEN",
    "ETCDCTL_CACERT",
    "ETCDCTL_CERT",
    "ETCDCTL_KEY",
];

/// The contract's variables from `vars`: any other variable is ignored whatever its bytes (a
/// pod's env holds plenty), and a contract variable that is not UTF-8 is an error naming it.
pub fn contract_env(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (key, value) in vars {
        let Some(var) = CONTRACT_VARS.iter().find(|v| key.as_os_str() == **v) else {
            continue;
        };
        let value = value.into_string().map_err(|_| ConfigError::NotUtf8(var))?;
        out.insert((*var).to_owned(), value);
    }
    Ok(out)
}

fn invalid(var: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        var,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

fn required<'a>(
    env: &'a BTreeMap<String, String>,
    var: &'static str,
) -> Result<&'a str, ConfigError> {
    match env.get(var) {
        None => Err(ConfigError::Missing(var)),
        Some(v) if v.is_empty() => Err(invalid(var, v, "must not be empty")),
        Some(v) => Ok(v),
    }
}

fn url(var: &'static str, value: &str) -> Result<MemberUrl, ConfigError> {
    value
        .parse()
        .map_err(|e: UrlError| invalid(var, value, e.to_string()))
}

/// `ETCD_NAME`: set, without ',', '=' or whitespace.
fn parse_name(env: &BTreeMap<String, String>) -> Result<String, ConfigError> {
    let name = required(env, "ETCD_NAME")?.to_owned();
    if name.contains([',', '=']) || name.chars().any(char::is_whitespace) {
        return Err(invalid(
            "ETCD_NAME",
            &name,
            "must not contain ',', '=' or whitespace",
        ));
    }
    Ok(name)
}

/// `ETCD_DATA_DIR`: set, an absolute path.
fn parse_data_dir(env: &BTreeMap<String, String>) -> Result<PathBuf, ConfigError> {
    let data_dir_text = required(env, "ETCD_DATA_DIR")?;
    let data_dir = PathBuf::from(data_dir_text);
    if !data_dir.is_absolute() {
        return Err(invalid(
            "ETCD_DATA_DIR",
            data_dir_text,
            "must be an absolute path",
        ));
    }
    Ok(data_dir)
}

/// `ETCD_INITIAL_ADVERTISE_PEER_URLS`: exactly one URL.
fn parse_peer_url(env: &BTreeMap<String, String>) -> Result<MemberUrl, ConfigError> {
    let peer_text = required(env, "ETCD_INITIAL_ADVERTISE_PEER_URLS")?;
    if peer_text.contains(',') {
        return Err(invalid(
            "ETCD_INITIAL_ADVERTISE_PEER_URLS",
            peer_text,
            "exactly one peer URL is supported",
        ));
    }
    url("ETCD_INITIAL_ADVERTISE_PEER_URLS", peer_text)
}

/// `ETCD_INITIAL_CLUSTER_STATE`: `new` or `existing`.
fn parse_state(env: &BTreeMap<String, String>) -> Result<ClusterState, ConfigError> {
    match required(env, "ETCD_INITIAL_CLUSTER_STATE")? {
        "new" => Ok(ClusterState::New),
        "existing" => Ok(ClusterState::Existing),
        other => Err(invalid(
            "ETCD_INITIAL_CLUSTER_STATE",
            other,
            "must be \"new\" or \"existing\"",
        )),
    }
}

/// `ETCD_MEMBER_IDS`: set, and empty only when `state` is new.
fn parse_member_ids(
    env: &BTreeMap<String, String>,
    state: ClusterState,
) -> Result<MemberIds, ConfigError> {
    let member_ids = MemberIds::parse(
        env.get("ETCD_MEMBER_IDS")
            .ok_or(ConfigError::Missing("ETCD_MEMBER_IDS"))?,
    )?;
    if member_ids.is_empty() && state == ClusterState::Existing {
        return Err(invalid(
            "ETCD_MEMBER_IDS",
            "",
            "may be empty only when ETCD_INITIAL_CLUSTER_STATE=new",
        ));
    }
    Ok(member_ids)
}

/// `ETCDCTL_ENDPOINTS`: comma-separated URLs, no empty entry.
fn parse_endpoints(env: &BTreeMap<String, String>) -> Result<Vec<MemberUrl>, ConfigError> {
    let endpoints_text = required(env, "ETCDCTL_ENDPOINTS")?;
    endpoints_text
        .split(',')
        .map(|e| {
            if e.is_empty() {
                Err(invalid(
                    "ETCDCTL_ENDPOINTS",
                    endpoints_text,
                    "empty entry (stray comma?)",
                ))
            } else {
                url("ETCDCTL_ENDPOINTS", e)
            }
        })
        .collect()
}

/// `ETCD_INITIAL_CLUSTER_TOKEN`, or [`DEFAULT_CLUSTER_TOKEN`] when unset or empty.
fn cluster_token(env: &BTreeMap<String, String>) -> String {
    env.get("ETCD_INITIAL_CLUSTER_TOKEN")
        .filter(|t| !t.is_empty())
        .cloned()
        .unwrap_or_else(|| DEFAULT_CLUSTER_TOKEN.to_owned())
}

impl VerifyConfig {
    /// Reads the contract from the process environment.
    pub fn from_process_env() -> Result<Self, ConfigError> {
        Self::from_env(&contract_env(std::env::vars_os())?)
    }

    /// Reads the contract from `env`.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let name = parse_name(env)?;
        let data_dir = parse_data_dir(env)?;
        let peer_url = parse_peer_url(env)?;
        let state = parse_state(env)?;
        let initial_cluster = InitialCluster::parse(required(env, "ETCD_INITIAL_CLUSTER")?)?;
        let member_ids = parse_member_ids(env, state)?;
        let endpoints = parse_endpoints(env)?;
        let tls = TlsFiles::from_parts(
            env.get("ETCDCTL_CACERT").cloned(),
            env.get("ETCDCTL_CERT").cloned(),
            env.get("ETCDCTL_KEY").cloned(),
        )?;
        let config = Self {
            name,
            data_dir,
            peer_url,
            initial_cluster,
            member_ids,
            state,
            cluster_token: cluster_token(env),
            endpoints,
            tls,
            state_dir: None,
        };
        config.check_consistency()?;
        Ok(config)
    }

    /// Whether this is the very first bootstrap manifest, as `etcd-operator render` makes it: a
    /// new cluster (`ETCD_INITIAL_CLUSTER_STATE=new`) of this member alone, with no member ids
    /// yet. Only such a manifest may start a new cluster on an empty data dir: any other one
    /// that says `new` (a recovery's manifest made from the bootstrap one lists the restored
    /// member's id; a hand-made one lists other members) names a cluster that already exists.
    pub fn is_first_bootstrap(&self) -> bool {
        self.state == ClusterState::New
            && self.member_ids.is_empty()
            && self.initial_cluster.len() == 1
    }

    /// The member id etcd gives this node's member when this revision starts a new cluster
    /// (its peer URL and `ETCD_INITIAL_CLUSTER_TOKEN`, etcd's own rule).
    pub fn bootstrap_member_id(&self) -> Option<membership::MemberId> {
        membership::new_cluster_member_id(&[self.peer_url.as_str()], &self.cluster_token)
    }

    /// Cross-checks between the variables: a revision whose parts disagree is corrupt or forged.
    fn check_consistency(&self) -> Result<(), ConfigError> {
        match self.initial_cluster.get(&self.name) {
            Some(u) if *u == self.peer_url => {}
            Some(u) => {
                return Err(ConfigError::Inconsistent(format!(
                    "ETCD_INITIAL_CLUSTER gives {} the peer URL {u}, but ETCD_INITIAL_ADVERTISE_PEER_URLS is {}",
                    self.name, self.peer_url
                )));
            }
            None => {
                return Err(ConfigError::Inconsistent(format!(
                    "ETCD_INITIAL_CLUSTER does not include this member ({}={})",
                    self.name, self.peer_url
                )));
            }
        }
        for (id, url) in self.member_ids.iter() {
            if !self.initial_cluster.iter().any(|(_, u)| u == url) {
                return Err(ConfigError::Inconsistent(format!(
                    "ETCD_MEMBER_IDS lists {id}={url}, which ETCD_INITIAL_CLUSTER does not"
                )));
            }
        }
        if !self.member_ids.is_empty() {
            for (name, url) in self.initial_cluster.iter() {
                if *url != self.peer_url && self.member_ids.id_for_url(url).is_none() {
                    return Err(ConfigError::Inconsistent(format!(
                        "ETCD_INITIAL_CLUSTER lists {name}={url}, which ETCD_MEMBER_IDS does not"
                    )));
                }
            }
        }
        if let Some(url) = self.endpoints.iter().find(|u| u.is_tls())
            && self.tls.is_none()
        {
            return Err(ConfigError::Inconsistent(format!(
                "ETCDCTL_ENDPOINTS has https endpoint {url} but ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY are not set"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn only_contract_vars_must_be_utf8() {
        let bad = || OsString::from_vec(vec![0x66, 0x6f, 0xff, 0x6f]);
        let vars = vec![
            (OsString::from("ETCD_NAME"), OsString::from("n1")),
            (OsString::from("UNRELATED"), bad()),
            (bad(), OsString::from("x")),
        ];
        let env = contract_env(vars.clone()).unwrap();
        assert_eq!(
            env,
            BTreeMap::from([("ETCD_NAME".to_owned(), "n1".to_owned())])
        );
        let mut with_bad = vars;
        with_bad.push((OsString::from("ETCD_DATA_DIR"), bad()));
        assert_eq!(
            contract_env(with_bad).unwrap_err().to_string(),
            "ETCD_DATA_DIR is not valid UTF-8"
        );
    }

    fn base() -> BTreeMap<String, String> {
        [
            ("ETCD_NAME", "n2"),
            ("ETCD_DATA_DIR", "/var/lib/etcd"),
            ("ETCD_INITIAL_ADVERTISE_PEER_URLS", "http://10.0.0.2:2380"),
            ("ETCD_INITIAL_CLUSTER_STATE", "existing"),
            (
                "ETCD_INITIAL_CLUSTER",
                "n1=http://10.0.0.1:2380,n2=http://10.0.0.2:2380",
            ),
            (
                "ETCD_MEMBER_IDS",
                "a1=http://10.0.0.1:2380,b2=http://10.0.0.2:2380",
            ),
            ("ETCDCTL_ENDPOINTS", "http://10.0.0.1:2379"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn error_with(changes: &[(&str, Option<&str>)]) -> String {
        let mut env = base();
        for (k, v) in changes {
            match v {
                Some(v) => env.insert((*k).to_owned(), (*v).to_owned()),
                None => env.remove(*k),
            };
        }
        VerifyConfig::from_env(&env).unwrap_err().to_string()
    }

    #[test]
    fn accepts_a_consistent_revision() {
        let c = VerifyConfig::from_env(&base()).unwrap();
        assert_eq!(c.member_ids.len(), 2);
        assert_eq!(c.state, ClusterState::Existing);
        assert!(c.tls.is_none());
    }

    #[test]
    fn each_bad_variable_is_named() {
        type Changes<'a> = &'a [(&'a str, Option<&'a str>)];
        let cases: &[(Changes<'_>, &str)] = &[
            (&[("ETCD_NAME", None)], "ETCD_NAME is not set"),
            (
                &[("ETCD_DATA_DIR", Some("var/lib/etcd"))],
                "ETCD_DATA_DIR=\"var/lib/etcd\": must be an absolute path",
            ),
            (
                &[("ETCD_INITIAL_CLUSTER_STATE", Some("maybe"))],
                "ETCD_INITIAL_CLUSTER_STATE=\"maybe\": must be \"new\" or \"existing\"",
            ),
            (
                &[("ETCD_MEMBER_IDS", Some(""))],
                "ETCD_MEMBER_IDS=\"\": may be empty only when ETCD_INITIAL_CLUSTER_STATE=new",
            ),
            (&[("ETCD_MEMBER_IDS", None)], "ETCD_MEMBER_IDS is not set"),
            (
                &[(
                    "ETCD_MEMBER_IDS",
                    Some("a1=http://10.0.0.1:2380,B2=http://10.0.0.2:2380"),
                )],
                "ETCD_MEMBER_IDS: entry 2",
            ),
            (
                &[("ETCDCTL_ENDPOINTS", Some("http://10.0.0.1:2379,"))],
                "ETCDCTL_ENDPOINTS=\"http://10.0.0.1:2379,\": empty entry",
            ),
            (
                &[("ETCDCTL_ENDPOINTS", Some("https://10.0.0.1:2379"))],
                "https endpoint https://10.0.0.1:2379 but ETCDCTL_CACERT",
            ),
            (
                &[("ETCDCTL_CACERT", Some("/ca.crt"))],
                "ETCDCTL_CACERT set but ETCDCTL_CERT, ETCDCTL_KEY not",
            ),
            (
                &[(
                    "ETCD_INITIAL_ADVERTISE_PEER_URLS",
                    Some("http://10.0.0.9:2380"),
                )],
                "ETCD_INITIAL_CLUSTER gives n2 the peer URL http://10.0.0.2:2380",
            ),
            (
                &[("ETCD_NAME", Some("n3"))],
                "ETCD_INITIAL_CLUSTER does not include this member (n3=http://10.0.0.2:2380)",
            ),
            (
                &[(
                    "ETCD_MEMBER_IDS",
                    Some("a1=http://10.0.0.1:2380,b2=http://10.0.0.2:2380,c3=http://10.0.0.3:2380"),
                )],
                "ETCD_MEMBER_IDS lists c3=http://10.0.0.3:2380, which ETCD_INITIAL_CLUSTER does not",
            ),
            (
                &[("ETCD_MEMBER_IDS", Some("b2=http://10.0.0.2:2380"))],
                "ETCD_INITIAL_CLUSTER lists n1=http://10.0.0.1:2380, which ETCD_MEMBER_IDS does not",
            ),
            (
                &[(
                    "ETCD_INITIAL_ADVERTISE_PEER_URLS",
                    Some("http://10.0.0.2:2380,http://10.0.1.2:2380"),
                )],
                "exactly one peer URL is supported",
            ),
        ];
        for (changes, expected) in cases {
            let got = error_with(changes);
            assert!(
                got.contains(expected),
                "for {changes:?}\n  got: {got}\n want: {expected}"
            );
        }
    }

    #[test]
    fn bootstrap_may_have_no_ids() {
        let mut env = base();
        env.insert("ETCD_INITIAL_CLUSTER_STATE".into(), "new".into());
        env.insert("ETCD_MEMBER_IDS".into(), String::new());
        assert!(VerifyConfig::from_env(&env).unwrap().member_ids.is_empty());
    }
}
