//! What `render` accepts as the first node's identity: only a name and an address a Node can
//! really have, since both end up in etcd's flags, `ETCD_INITIAL_CLUSTER` and certificates.

use std::net::IpAddr;

/// A Node name: a DNS-1123 subdomain as Kubernetes requires of Node objects (lowercase
/// alphanumerics, `-` and `.`, at most 253 characters, each dot-separated label starting and
/// ending with an alphanumeric). So never `""`, `a b`, `N1`, nor `n1,n2=http://x:1`, which
/// would inject a second member into `ETCD_INITIAL_CLUSTER`.
pub fn node_name(text: &str) -> Result<String, String> {
    k8s_names::dns1123_subdomain(text)
        .map(|()| text.to_owned())
        .map_err(|e| {
            // Name the first character that can never be in a node name, when there is one.
            let stray = text
                .chars()
                .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
                .map(|c| format!(" ({c:?} is not allowed)"))
                .unwrap_or_default();
            format!("{text:?} is not a valid node name: {e}{stray}")
        })
}

/// A node address etcd can listen on and peers can dial: a unicast IP. Loopback is allowed (the
/// local control plane gives each simulated node its own 127.0.x.y).
pub fn node_ip(text: &str) -> Result<IpAddr, String> {
    let ip: IpAddr = text
        .parse()
        .map_err(|_| format!("{text:?} is not an IP address"))?;
    let why = match ip {
        _ if ip.is_unspecified() => Some("the unspecified address names no node"),
        _ if ip.is_multicast() => Some("a multicast address names no node"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address names no node"),
        _ => None,
    };
    match why {
        Some(why) => Err(format!("{text:?} is not a node address: {why}")),
        None => Ok(ip),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names() {
        for good in ["n1", "master-0", "cp-1.example.com", "0"] {
            assert_eq!(node_name(good).as_deref(), Ok(good));
        }
        for bad in [
            "",
            "a b",
            "N1",
            "n1,n2=http://x:1",
            "-n1",
            "n1-",
            "n1..n2",
            ".n1",
            "n_1",
        ] {
            assert!(node_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(node_name(&"a".repeat(254)).is_err());
        assert_eq!(
            node_name("n1,n2=http://x:1").unwrap_err(),
            r#""n1,n2=http://x:1" is not a valid node name: it must be lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit (',' is not allowed)"#
        );
    }

    #[test]
    fn node_addresses() {
        for good in ["10.0.0.1", "127.0.100.2", "::1", "fd00::5"] {
            assert!(node_ip(good).is_ok(), "{good}");
        }
        for bad in [
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "ff02::1",
            "255.255.255.255",
            "10.0.0",
            "x",
        ] {
            assert!(node_ip(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(
            node_ip("0.0.0.0").unwrap_err(),
            r#""0.0.0.0" is not a node address: the unspecified address names no node"#
        );
    }
}
