//! `etcd-operator`: runs etcd as static pods and changes membership through one quorum gate.
//! Not built yet: this binary only reports that and fails.

fn main() -> anyhow::Result<()> {
    anyhow::bail!("etcd-operator is not implemented yet")
}
