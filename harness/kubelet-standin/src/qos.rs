//! A pod's quality-of-service class, computed from its spec the way the kubelet and
//! kube-apiserver do, so the status the agent writes carries the class the API already set at
//! creation (`status.qosClass` is immutable: a different value makes the real API reject the
//! whole status update).
//!
//! The rules (Kubernetes' `ComputePodQOS`, without pod-level resources, which our pods never set):
//! only `cpu` and `memory` count, and only quantities above zero; a container's missing request
//! defaults to its limit (API defaulting); init containers count like the others.
//! * **BestEffort**: no container requests or limits cpu or memory;
//! * **Guaranteed**: every container limits both cpu and memory, and for each resource the summed
//!   requests equal the summed limits;
//! * **Burstable**: anything else.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The QoS class of a pod with `spec`: `BestEffort`, `Burstable` or `Guaranteed`.
pub fn qos_class(spec: &PodSpec) -> &'static str {
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        let (c_requests, c_limits) = container_resources(c);
        for (name, v) in &c_requests {
            *requests.entry(name).or_default() += v;
        }
        for (name, v) in &c_limits {
            *limits.entry(name).or_default() += v;
        }
        if !(c_limits.contains_key("cpu") && c_limits.contains_key("memory")) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed && requests == limits {
        return "Guaranteed";
    }
    "Burstable"
}

/// A container's positive cpu and memory requests (defaulted from its limits) and limits, in
/// nano-units.
fn container_resources(
    c: &Container,
) -> (BTreeMap<&'static str, i128>, BTreeMap<&'static str, i128>) {
    let resources = c.resources.clone().unwrap_or_default();
    let pick = |list: &Option<BTreeMap<String, Quantity>>| -> BTreeMap<&'static str, i128> {
        ["cpu", "memory"]
            .into_iter()
            .filter_map(|name| {
                let v = parse_quantity(&list.as_ref()?.get(name)?.0)?;
                (v > 0).then_some((name, v))
            })
            .collect()
    };
    let limits = pick(&resources.limits);
    let mut requests = pick(&resources.requests);
    // API defaulting: a limit without a request sets the request.
    let declared = resources.requests.unwrap_or_default();
    for (name, v) in &limits {
        if !declared.contains_key(*name) {
            requests.insert(name, *v);
        }
    }
    (requests, limits)
}

/// A Kubernetes quantity (`100m`, `0.5`, `64Mi`, `1e3`, `2G`) in nano-units, rounded up;
/// `None` when it does not parse or does not fit.
pub fn parse_quantity(text: &str) -> Option<i128> {
    let text = text.trim();
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let (binary, exp10): (i128, i32) = match suffix {
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "" => (1, 0),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        s if s.starts_with(['e', 'E']) => (1, s[1..].parse().ok()?),
        _ => return None,
    };
    // mantissa = whole.fraction as an integer scaled by 10^-len(fraction).
    let digits = format!("{whole}{fraction}");
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let scale = 9 + exp10 - i32::try_from(fraction.len()).ok()?;
    let value = if scale >= 0 {
        mantissa
            .checked_mul(10_i128.checked_pow(u32::try_from(scale).ok()?)?)?
            .checked_mul(binary)?
    } else {
        let divisor = 10_i128.checked_pow(u32::try_from(-scale).ok()?)?;
        let scaled = mantissa.checked_mul(binary)?;
        // Round up, as Kubernetes does when a quantity is finer than its precision.
        scaled / divisor + i128::from(scaled % divisor != 0)
    };
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    fn list(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                .collect()
        })
    }

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: list(requests),
                limits: list(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> PodSpec {
        PodSpec {
            containers,
            init_containers: (!init.is_empty()).then_some(init),
            ..Default::default()
        }
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("100m"), Some(100_000_000));
        assert_eq!(parse_quantity("0.1"), Some(100_000_000));
        assert_eq!(parse_quantity("1"), Some(1_000_000_000));
        assert_eq!(parse_quantity("1e3"), Some(1_000_000_000_000));
        assert_eq!(parse_quantity("1k"), parse_quantity("1000"));
        assert_eq!(parse_quantity("64Mi"), Some(64 * (1 << 20) * 1_000_000_000));
        assert_eq!(parse_quantity("1n"), Some(1));
        assert_eq!(parse_quantity("0.1n"), Some(1), "rounded up");
        assert_eq!(parse_quantity("-1"), Some(-1_000_000_000));
        for bad in [
            "",
            "m",
            "1x",
            "1..0",
            "abc",
            "1e",
            "99999999999999999999999999999999E",
        ] {
            assert_eq!(parse_quantity(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn classes() {
        let be = pod(vec![container(&[], &[])], vec![]);
        assert_eq!(qos_class(&be), "BestEffort");
        // Only cpu and memory count; zero counts as nothing.
        let other = pod(
            vec![container(
                &[("ephemeral-storage", "1Gi"), ("cpu", "0")],
                &[],
            )],
            vec![],
        );
        assert_eq!(qos_class(&other), "BestEffort");
        // The etcd pod's shape: requests only.
        let etcd = pod(
            vec![container(&[("cpu", "100m"), ("memory", "200Mi")], &[])],
            vec![container(&[], &[])],
        );
        assert_eq!(qos_class(&etcd), "Burstable");
        // Limits only: requests default to them.
        let limits_only = pod(
            vec![container(&[], &[("cpu", "1"), ("memory", "1Gi")])],
            vec![],
        );
        assert_eq!(qos_class(&limits_only), "Guaranteed");
        // Equal in other spellings.
        let spelled = pod(
            vec![container(
                &[("cpu", "1000m"), ("memory", "1073741824")],
                &[("cpu", "1"), ("memory", "1Gi")],
            )],
            vec![],
        );
        assert_eq!(qos_class(&spelled), "Guaranteed");
        // An init container without limits breaks Guaranteed.
        let init = pod(
            vec![container(&[], &[("cpu", "1"), ("memory", "1Gi")])],
            vec![container(&[("cpu", "10m")], &[])],
        );
        assert_eq!(qos_class(&init), "Burstable");
        // Requests below limits.
        let below = pod(
            vec![container(
                &[("cpu", "500m"), ("memory", "1Gi")],
                &[("cpu", "1"), ("memory", "1Gi")],
            )],
            vec![],
        );
        assert_eq!(qos_class(&below), "Burstable");
    }
}
