//! # etcd-snapshot
//!
//! etcd snapshots as the operator's backups and `etcd-recover`'s restores see them:
//!
//! * [`mod@file`]: a snapshot file is whole (etcd's trailing SHA-256), and the record kept beside it
//!   ([`file::Record`], `<snapshot>.json`) names it by its SHA-256;
//! * [`bolt`]: what the database inside holds (members, latest revision, raft index), read from
//!   the file itself;
//! * [`tool`]: which tool of an etcd image restores a snapshot, and whether it can move the store
//!   revision forward;
//! * [`store`]: where backups live: a directory or an S3-compatible bucket, one interface
//!   (writes land whole or not at all), and [`store::BackupName`], the one naming scheme.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

pub mod bolt;
pub mod file;
pub mod store;
pub mod tool;
