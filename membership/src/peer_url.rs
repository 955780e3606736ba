//! Member URLs (peer and client) in the one strict form the contracts use:
//! `scheme://host:port` with scheme `http` or `https`, an explicit port, and nothing else
//! (no path, query, fragment or credentials). IPv6 hosts are bracketed.

use std::fmt;
use std::str::FromStr;

/// `ip` as the host of a URL: IPv6 in brackets (`[fd00::1]`), IPv4 as it is.
pub fn url_host(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// A validated member URL, kept in its canonical text form (`https://10.0.0.1:2380`).
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct MemberUrl(String);

/// Why a string is not a usable member URL.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("URL {url:?} is not an absolute URL: {reason}")]
    NotAbsolute { url: String, reason: String },
    #[error("URL {0:?} must use scheme http or https")]
    Scheme(String),
    #[error("URL {0:?} has no explicit port")]
    NoPort(String),
    #[error("URL {0:?} must be scheme://host:port with no path, query, fragment or credentials")]
    Extra(String),
    #[error("URL {0:?} is not in canonical form (expected {1:?})")]
    NotCanonical(String, String),
}

impl MemberUrl {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `host:port` part (what a socket connects to).
    pub fn authority(&self) -> &str {
        self.0
            .split_once("://")
            .map_or(self.0.as_str(), |(_, rest)| rest)
    }

    /// The host without port (IPv6 keeps its brackets).
    pub fn host(&self) -> &str {
        let auth = self.authority();
        auth.rsplit_once(':').map_or(auth, |(host, _)| host)
    }

    /// True for `https://`.
    pub fn is_tls(&self) -> bool {
        self.0.starts_with("https://")
    }
}

impl fmt::Display for MemberUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for MemberUrl {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parsed = url::Url::parse(s).map_err(|e| UrlError::NotAbsolute {
            url: s.to_owned(),
            reason: e.to_string(),
        })?;
        if parsed.scheme() != "http" && parsed.scheme() != "https" {
            return Err(UrlError::Scheme(s.to_owned()));
        }
        let Some(host) = parsed.host_str() else {
            return Err(UrlError::NotAbsolute {
                url: s.to_owned(),
                reason: "no host".into(),
            });
        };
        // `url` reports a default port (80/443) as absent even when it was written out.
        let written_default = parsed
            .port_or_known_default()
            .filter(|p| s.ends_with(&format!(":{p}")));
        let Some(port) = parsed.port().or(written_default) else {
            return Err(UrlError::NoPort(s.to_owned()));
        };
        if !parsed.username().is_empty()
            || parsed.password().is_some()
            || parsed.query().is_some()
            || parsed.fragment().is_some()
            || !matches!(parsed.path(), "" | "/")
        {
            return Err(UrlError::Extra(s.to_owned()));
        }
        let canonical = format!("{}://{}:{}", parsed.scheme(), host, port);
        if canonical != s {
            return Err(UrlError::NotCanonical(s.to_owned(), canonical));
        }
        Ok(Self(canonical))
    }
}

impl TryFrom<String> for MemberUrl {
    type Error = UrlError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<MemberUrl> for String {
    fn from(u: MemberUrl) -> String {
        u.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_canonical_urls() {
        let u: MemberUrl = "https://10.0.0.1:2380".parse().unwrap();
        assert_eq!(u.authority(), "10.0.0.1:2380");
        assert_eq!(u.host(), "10.0.0.1");
        assert!(u.is_tls());
        let v6: MemberUrl = "https://[fd00::1]:2380".parse().unwrap();
        assert_eq!(v6.host(), "[fd00::1]");
        assert!("http://node-a.example:2380".parse::<MemberUrl>().is_ok());
        assert!("https://10.0.0.1:443".parse::<MemberUrl>().is_ok());
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "10.0.0.1:2380",
            "/var/run/etcd",
            "unix://sock:1",
            "https://10.0.0.1",
            "https://10.0.0.1:2380/",
            "https://10.0.0.1:2380/path",
            "https://u:p@10.0.0.1:2380",
            "https://10.0.0.1:2380?x=1",
            "HTTPS://10.0.0.1:2380",
            "https://[FD00::1]:2380",
        ] {
            assert!(
                bad.parse::<MemberUrl>().is_err(),
                "{bad} should be rejected"
            );
        }
    }
}
