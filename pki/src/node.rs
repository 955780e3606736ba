//! What each certificate must contain: the per-node kinds (peer, serving, metrics) and their key
//! names in `etcd-all-certs`, the client certificates, SANs and usages, and the CA bundles.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose, SanType};

use crate::{CaRole, CertError, EtcdCa};

/// Secret holding every node's certificates: `<kind>-<node>.crt` / `.key`.
pub const ALL_CERTS_SECRET: &str = "etcd-all-certs";
/// ConfigMap holding the CA bundles.
pub const BUNDLES_CONFIGMAP: &str = "etcd-all-bundles";
/// Bundle clients use to verify etcd's serving certificates.
pub const SERVER_CA_BUNDLE_KEY: &str = "server-ca-bundle.crt";
/// Bundle members use to verify each other's peer certificates.
pub const PEER_CA_BUNDLE_KEY: &str = "peer-ca-bundle.crt";
/// Bundle scrapers use to verify the metrics endpoint (the metrics CA).
pub const METRICS_CA_BUNDLE_KEY: &str = "metrics-ca-bundle.crt";
/// Every key of [`BUNDLES_CONFIGMAP`], sorted.
pub const BUNDLE_KEYS: [&str; 3] = [
    METRICS_CA_BUNDLE_KEY,
    PEER_CA_BUNDLE_KEY,
    SERVER_CA_BUNDLE_KEY,
];

/// The CAs that sign: the etcd CA and the metrics CA.
#[derive(Clone, Copy, Debug)]
pub struct Signers<'a> {
    pub etcd: &'a EtcdCa,
    pub metrics: &'a EtcdCa,
}

impl<'a> Signers<'a> {
    /// The CA of `role`.
    pub fn of(&self, role: CaRole) -> &'a EtcdCa {
        match role {
            CaRole::Etcd => self.etcd,
            CaRole::Metrics => self.metrics,
        }
    }
}

/// A CA's PEM, ending with a newline.
pub fn pem_line(ca: &EtcdCa) -> String {
    let mut pem = ca.cert_pem().to_owned();
    if !pem.ends_with('\n') {
        pem.push('\n');
    }
    pem
}

/// Data of ConfigMap [`BUNDLES_CONFIGMAP`]: the server and peer bundles are the etcd CA's PEM,
/// the metrics bundle the metrics CA's.
pub fn bundle_data(signers: Signers<'_>) -> BTreeMap<String, String> {
    BUNDLE_KEYS
        .iter()
        .map(|key| {
            let role = if *key == METRICS_CA_BUNDLE_KEY {
                CaRole::Metrics
            } else {
                CaRole::Etcd
            };
            ((*key).to_owned(), pem_line(signers.of(role)))
        })
        .collect()
}

/// The per-node certificate kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CertKind {
    /// `etcd-peer-<node>`: member-to-member TLS, server and client usage.
    Peer,
    /// `etcd-serving-<node>`: the client port, server and client usage.
    Serving,
    /// `etcd-serving-metrics-<node>`: the metrics proxy's port, server usage, of the metrics CA.
    Metrics,
}

impl CertKind {
    /// Every kind, in the order they appear in a plan.
    pub const ALL: [CertKind; 3] = [CertKind::Peer, CertKind::Serving, CertKind::Metrics];

    /// The name prefix (`etcd-peer`, `etcd-serving`, `etcd-serving-metrics`).
    pub fn prefix(self) -> &'static str {
        match self {
            CertKind::Peer => "etcd-peer",
            CertKind::Serving => "etcd-serving",
            CertKind::Metrics => "etcd-serving-metrics",
        }
    }

    /// A short label for metrics (`peer`, `serving`, `metrics`).
    pub fn as_str(self) -> &'static str {
        match self {
            CertKind::Peer => "peer",
            CertKind::Serving => "serving",
            CertKind::Metrics => "metrics",
        }
    }

    /// The certificate's name for `node`, also its common name: `etcd-peer-<node>`.
    pub fn name(self, node: &str) -> String {
        format!("{}-{node}", self.prefix())
    }

    /// Key of the certificate in [`ALL_CERTS_SECRET`]: `etcd-peer-<node>.crt`.
    pub fn cert_key(self, node: &str) -> String {
        format!("{}.crt", self.name(node))
    }

    /// Key of the private key in [`ALL_CERTS_SECRET`]: `etcd-peer-<node>.key`.
    pub fn key_key(self, node: &str) -> String {
        format!("{}.key", self.name(node))
    }

    /// The extended key usages.
    pub fn usage(self) -> Usage {
        match self {
            CertKind::Peer | CertKind::Serving => Usage::SERVER_CLIENT,
            CertKind::Metrics => Usage::SERVER,
        }
    }

    /// The CA that signs it.
    pub fn role(self) -> CaRole {
        match self {
            CertKind::Peer | CertKind::Serving => CaRole::Etcd,
            CertKind::Metrics => CaRole::Metrics,
        }
    }

    /// What the certificate for `node` at `ips` must contain.
    pub fn spec(self, node: &str, ips: &BTreeSet<IpAddr>) -> LeafSpec {
        LeafSpec {
            common_name: self.name(node),
            sans: Sans::for_node(node, ips),
            usage: self.usage(),
        }
    }

    /// Splits a Secret key `<prefix>-<node>.crt|.key` into kind and node, trying the longest
    /// prefix first. Ambiguous for a node named `metrics-*` (read as a metrics key); callers
    /// that know the desired nodes compare against generated keys instead.
    pub fn parse_key(key: &str) -> Option<(CertKind, &str)> {
        let stem = key
            .strip_suffix(".crt")
            .or_else(|| key.strip_suffix(".key"))?;
        [CertKind::Metrics, CertKind::Serving, CertKind::Peer]
            .into_iter()
            .find_map(|kind| {
                let node = stem.strip_prefix(kind.prefix())?.strip_prefix('-')?;
                (!node.is_empty()).then_some((kind, node))
            })
    }
}

impl fmt::Display for CertKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Client certificates, each in its own Secret with keys `tls.crt` / `tls.key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientCertKind {
    /// Secret `etcd-client`, CN `etcd-operator`: the operator's own etcd client.
    Operator,
    /// Secret `etcd-metric-client`, CN `etcd-metric`: for scraping the metrics port, of the
    /// metrics CA (etcd does not trust it).
    Metrics,
}

impl ClientCertKind {
    /// Every client kind.
    pub const ALL: [ClientCertKind; 2] = [ClientCertKind::Operator, ClientCertKind::Metrics];
    /// Key of the certificate in the client Secret.
    pub const CERT_KEY: &str = "tls.crt";
    /// Key of the private key in the client Secret.
    pub const KEY_KEY: &str = "tls.key";
    /// Key of the trusted CAs in the client Secret (clients verify etcd's serving certificate
    /// with them).
    pub const CA_KEY: &str = "ca.crt";

    /// The Secret's name.
    pub fn secret_name(self) -> &'static str {
        match self {
            ClientCertKind::Operator => "etcd-client",
            ClientCertKind::Metrics => "etcd-metric-client",
        }
    }

    /// The certificate's common name.
    pub fn common_name(self) -> &'static str {
        match self {
            ClientCertKind::Operator => "etcd-operator",
            ClientCertKind::Metrics => "etcd-metric",
        }
    }

    /// The CA that signs it.
    pub fn role(self) -> CaRole {
        match self {
            ClientCertKind::Operator => CaRole::Etcd,
            ClientCertKind::Metrics => CaRole::Metrics,
        }
    }

    /// What the certificate must contain: the common name, client usage, no SANs.
    pub fn spec(self) -> LeafSpec {
        LeafSpec {
            common_name: self.common_name().to_owned(),
            sans: Sans::default(),
            usage: Usage::CLIENT,
        }
    }
}

/// Extended key usages (only the two that matter for etcd).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usage {
    pub server: bool,
    pub client: bool,
}

impl Usage {
    pub const SERVER_CLIENT: Usage = Usage {
        server: true,
        client: true,
    };
    pub const SERVER: Usage = Usage {
        server: true,
        client: false,
    };
    pub const CLIENT: Usage = Usage {
        server: false,
        client: true,
    };
}

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match (self.server, self.client) {
            (true, true) => "server+client",
            (true, false) => "server",
            (false, true) => "client",
            (false, false) => "none",
        })
    }
}

/// Subject alternative names, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sans {
    pub ips: BTreeSet<IpAddr>,
    pub dns: BTreeSet<String>,
}

impl Sans {
    /// A node's SANs: its IPs, `127.0.0.1`, `::1`, `localhost`, and its name if that is a DNS
    /// name. (On loopback, peer connections leave from 127.0.0.1 and etcd 3.4 with
    /// `--peer-client-cert-auth` checks the peer certificate against that source address.)
    pub fn for_node(node: &str, ips: &BTreeSet<IpAddr>) -> Sans {
        let mut sans = Sans {
            ips: ips.clone(),
            dns: BTreeSet::from(["localhost".to_owned()]),
        };
        sans.ips.insert(IpAddr::V4(Ipv4Addr::LOCALHOST));
        sans.ips.insert(IpAddr::V6(Ipv6Addr::LOCALHOST));
        if is_dns_name(node) {
            sans.dns.insert(node.to_owned());
        }
        sans
    }

    /// Entries of `self` missing from `other`, as text (`IP:10.0.0.1`, `DNS:n1`).
    pub fn missing_from(&self, other: &Sans) -> Vec<String> {
        let ips = self.ips.difference(&other.ips).map(|ip| format!("IP:{ip}"));
        let dns = self.dns.difference(&other.dns).map(|d| format!("DNS:{d}"));
        dns.chain(ips).collect()
    }
}

impl fmt::Display for Sans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dns = self.dns.iter().map(|d| format!("DNS:{d}"));
        let ips = self.ips.iter().map(|ip| format!("IP:{ip}"));
        f.write_str(&dns.chain(ips).collect::<Vec<_>>().join(", "))
    }
}

/// What a leaf certificate must contain; the plan compares existing certificates against it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafSpec {
    pub common_name: String,
    pub sans: Sans,
    pub usage: Usage,
}

impl LeafSpec {
    /// rcgen parameters for this spec (validity is set by the issuer).
    pub fn to_params(&self) -> Result<CertificateParams, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, self.common_name.as_str());
        let mut sans = Vec::new();
        for dns in &self.sans.dns {
            sans.push(SanType::DnsName(dns.as_str().try_into()?));
        }
        sans.extend(self.sans.ips.iter().copied().map(SanType::IpAddress));
        params.subject_alt_names = sans;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        if self.usage.server {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if self.usage.client {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        Ok(params)
    }
}

/// Whether `name` is a DNS name (RFC 1123 subdomain, lowercase, as Kubernetes names are) and not
/// an IP address.
pub fn is_dns_name(name: &str) -> bool {
    // A Kubernetes name may have a part longer than a DNS label may be.
    k8s_names::dns1123_subdomain(name).is_ok()
        && name
            .split('.')
            .all(|label| label.len() <= k8s_names::MAX_LABEL)
        && name.parse::<IpAddr>().is_err()
}

/// Whether `node` can be part of a Secret key (`[-._a-zA-Z0-9]+`, as the API requires).
pub fn is_key_safe(node: &str) -> bool {
    !node.is_empty()
        && node.len() <= 253 - "etcd-serving-metrics-.crt".len()
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}
