//! `etcd-installer`: lays one static-pod revision down on a node (see the installer contract in
//! `docs/architecture.md`). Not built yet: this binary only reports that and fails.

fn main() -> anyhow::Result<()> {
    anyhow::bail!("etcd-installer is not implemented yet")
}
