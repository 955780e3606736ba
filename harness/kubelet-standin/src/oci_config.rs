//! The OCI runtime configuration (`config.json` of a bundle) the runc runtime starts one
//! container with: a pure function of what the container needs, so its shape is tested here
//! and `runc` only reads the result.
//!
//! What it says, as a kubelet and containerd would for a `hostNetwork` pod:
//! - the image's root filesystem, **read-only** (`root.readonly`), shared by every container
//!   of that image digest;
//! - new PID, IPC and mount namespaces; the host's network and UTS namespaces (host network:
//!   the pod's IP and hostname are the node's);
//! - `/proc`, `/dev` (tmpfs), `/dev/pts`, `/dev/shm`, `/dev/mqueue`, `/sys` (read-only), then
//!   the pod's volumes as bind mounts (`rbind`, `rprivate`, `ro` for `readOnly`), parents
//!   before children;
//! - the process: arguments, environment, working directory and user already resolved by the
//!   caller; capabilities are containerd's default set (for `privileged`, every one the agent
//!   itself has, as containerd does), effective
//!   only for uid 0, as for a non-root user the kernel clears them at `execve` anyway;
//! - masked and read-only `/proc` paths as containerd sets them, none for `privileged`.
//!
//! Not modelled: cgroup resource limits (requests and limits are not enforced here), seccomp,
//! AppArmor, `securityContext.capabilities` add/drop.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::mounts::BindMount;

/// containerd's default capability set for a container that is not privileged.
const DEFAULT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Every capability by its bit number (`linux/capability.h`), for decoding a capability mask.
const CAPS_BY_BIT: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The capabilities set in `mask` (a `CapBnd` line of `/proc/self/status`): what a privileged
/// container gets, as containerd gives it every capability it has itself.
pub fn caps_in_mask(mask: u64) -> Vec<String> {
    CAPS_BY_BIT
        .iter()
        .enumerate()
        .filter(|(bit, _)| mask & (1u64 << bit) != 0)
        .map(|(_, name)| (*name).to_owned())
        .collect()
}

const MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
];

const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Everything one container's runtime configuration is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerConfig {
    pub rootfs: PathBuf,
    pub args: Vec<String>,
    /// `KEY=value`, in order.
    pub env: Vec<String>,
    pub cwd: PathBuf,
    pub uid: u32,
    pub gid: u32,
    pub privileged: bool,
    /// The capabilities a privileged container gets ([`caps_in_mask`] of the runtime's own).
    pub privileged_caps: Vec<String>,
    pub binds: Vec<BindMount>,
}

fn standard_mounts() -> Vec<Value> {
    vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev", "ro"]}),
    ]
}

fn bind_mount(b: &BindMount) -> Value {
    let mut options = vec!["rbind", "rprivate"];
    if b.read_only {
        options.push("ro");
    }
    json!({
        "destination": b.target,
        "type": "bind",
        "source": b.source,
        "options": options,
    })
}

/// The binds, parents before children (by path depth; equal depths keep their order).
fn ordered_binds(binds: &[BindMount]) -> Vec<&BindMount> {
    let mut v: Vec<&BindMount> = binds.iter().collect();
    v.sort_by_key(|b| Path::new(&b.target).components().count());
    v
}

/// The `config.json` for `c`.
pub fn runtime_config(c: &ContainerConfig) -> Value {
    let caps: Vec<&str> = if c.privileged {
        c.privileged_caps.iter().map(String::as_str).collect()
    } else {
        DEFAULT_CAPS.to_vec()
    };
    let effective: Vec<&str> = if c.uid == 0 { caps.clone() } else { Vec::new() };
    let mut mounts = standard_mounts();
    mounts.extend(ordered_binds(&c.binds).into_iter().map(bind_mount));
    let (masked, readonly): (&[&str], &[&str]) = if c.privileged {
        (&[], &[])
    } else {
        (MASKED_PATHS, READONLY_PATHS)
    };
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": c.uid, "gid": c.gid},
            "args": c.args,
            "env": c.env,
            "cwd": c.cwd,
            "capabilities": {
                "bounding": caps,
                "permitted": effective,
                "effective": effective,
            },
            "noNewPrivileges": !c.privileged,
        },
        "root": {"path": c.rootfs, "readonly": true},
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}],
            "maskedPaths": masked,
            "readonlyPaths": readonly,
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn config(uid: u32, privileged: bool) -> ContainerConfig {
        ContainerConfig {
            rootfs: "/cache/abc".into(),
            args: vec!["etcd".into(), "--name=n1".into()],
            env: vec!["PATH=/usr/local/bin".into()],
            cwd: "/".into(),
            uid,
            gid: uid,
            privileged,
            privileged_caps: caps_in_mask(0x1fffeffffff),
            binds: vec![
                BindMount {
                    source: "/n1/etc/kubernetes/static-pod-resources/etcd-pod-3".into(),
                    target: "/etc/kubernetes/static-pod-resources/etcd-pod-3/secrets".into(),
                    read_only: true,
                },
                BindMount {
                    source: "/n1/etc/kubernetes".into(),
                    target: "/etc/kubernetes".into(),
                    read_only: false,
                },
            ],
        }
    }

    #[test]
    fn root_is_read_only_and_the_network_is_the_hosts() {
        let v = runtime_config(&config(0, false));
        assert_eq!(v["root"], json!({"path": "/cache/abc", "readonly": true}));
        let ns: Vec<&str> = v["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        assert_eq!(ns, ["pid", "ipc", "mount"]);
        assert_eq!(v["process"]["args"], json!(["etcd", "--name=n1"]));
    }

    #[test]
    fn volumes_mount_parents_first_and_read_only_when_asked() {
        let v = runtime_config(&config(0, false));
        let binds: Vec<&Value> = v["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["type"] == "bind")
            .collect();
        assert_eq!(binds[0]["destination"], "/etc/kubernetes");
        assert_eq!(binds[0]["options"], json!(["rbind", "rprivate"]));
        assert_eq!(
            binds[1]["options"],
            json!(["rbind", "rprivate", "ro"]),
            "{}",
            binds[1]
        );
    }

    #[test]
    fn capabilities_follow_user_and_privilege() {
        let nonroot = runtime_config(&config(65532, false));
        assert_eq!(nonroot["process"]["capabilities"]["effective"], json!([]));
        assert_eq!(nonroot["process"]["noNewPrivileges"], true);
        let root = runtime_config(&config(0, false));
        assert!(
            root["process"]["capabilities"]["effective"]
                .as_array()
                .unwrap()
                .contains(&json!("CAP_DAC_OVERRIDE"))
        );
        assert!(
            !root["process"]["capabilities"]["bounding"]
                .as_array()
                .unwrap()
                .contains(&json!("CAP_SYS_ADMIN"))
        );
        let privileged = runtime_config(&config(0, true));
        assert!(
            privileged["process"]["capabilities"]["bounding"]
                .as_array()
                .unwrap()
                .contains(&json!("CAP_SYS_ADMIN"))
        );
        assert_eq!(privileged["linux"]["maskedPaths"], json!([]));
        // This machine's bounding set lacks CAP_SYS_RESOURCE (bit 24): a privileged container
        // cannot get it either.
        assert!(
            !privileged["process"]["capabilities"]["bounding"]
                .as_array()
                .unwrap()
                .contains(&json!("CAP_SYS_RESOURCE"))
        );
        assert_eq!(caps_in_mask(0b101), ["CAP_CHOWN", "CAP_DAC_READ_SEARCH"]);
    }
}
