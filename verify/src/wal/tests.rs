//! The WAL readers on crafted frames and files: identity, commit index, hostile input.

use super::*;

fn varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn record(kind: u64, data: &[u8]) -> Vec<u8> {
    let mut r = Vec::new();
    r.push(0x08);
    varint(kind, &mut r);
    r.push(0x10);
    varint(12345, &mut r);
    if !data.is_empty() {
        r.push(0x1a);
        varint(data.len() as u64, &mut r);
        r.extend_from_slice(data);
    }
    r
}

fn frame(rec: &[u8], out: &mut Vec<u8>) {
    let pad = (8 - rec.len() % 8) % 8;
    let mut word = rec.len() as u64;
    if pad > 0 {
        word |= (1 << 63) | ((pad as u64) << 56);
    }
    out.extend_from_slice(&word.to_le_bytes());
    out.extend_from_slice(rec);
    out.extend(std::iter::repeat_n(0, pad));
}

#[test]
fn finds_metadata_after_the_crc_record() {
    let mut meta = Vec::new();
    meta.push(0x08);
    varint(0x8e9e05c52164694d, &mut meta);
    meta.push(0x10);
    varint(0xcdf818194e3a8c32, &mut meta);
    let mut wal = Vec::new();
    frame(&record(4, &[]), &mut wal);
    frame(&record(1, &meta), &mut wal);
    wal.extend_from_slice(&[0u8; 64]);
    assert_eq!(
        identity_from_bytes(&wal).unwrap(),
        WalIdentity {
            member_id: 0x8e9e05c52164694d,
            cluster_id: 0xcdf818194e3a8c32
        }
    );
}

#[test]
fn reports_truncated_and_empty_wals() {
    assert_eq!(
        identity_from_bytes(&[0u8; 32]).unwrap_err(),
        "WAL has no metadata record"
    );
    let mut wal = Vec::new();
    frame(&record(4, &[]), &mut wal);
    wal.truncate(8 + 2);
    assert!(identity_from_bytes(&wal).unwrap_err().contains("truncated"));
    assert!(
        identity_from_bytes(&[])
            .unwrap_err()
            .contains("ends before")
    );
}

#[test]
fn crafted_lengths_are_errors_not_panics() {
    // The largest length word: 2^56-1 bytes of record, padding 7.
    let mut wal = u64::MAX.to_le_bytes().to_vec();
    wal.extend_from_slice(&[0u8; 16]);
    assert!(identity_from_bytes(&wal).unwrap_err().contains("truncated"));
    // A record whose bytes field claims u64::MAX bytes.
    let mut rec = vec![0x08];
    varint(METADATA_RECORD, &mut rec);
    rec.push(0x1a);
    varint(u64::MAX, &mut rec);
    let mut wal = Vec::new();
    frame(&rec, &mut wal);
    assert!(identity_from_bytes(&wal).is_err());
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    nix::unistd::mkfifo(
        &dir.path().join("0000000000000000-0000000000000000.wal"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let err = read_identity(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
}

#[test]
fn a_symlinked_wal_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::write(&outside, [0u8; 64]).unwrap();
    let wal = dir.path().join("wal");
    std::fs::create_dir(&wal).unwrap();
    std::os::unix::fs::symlink(&outside, wal.join("0000000000000000-0000000000000000.wal"))
        .unwrap();
    assert!(read_identity(&wal).is_err());
}

fn state(term: u64, commit: u64) -> Vec<u8> {
    let mut hs = vec![0x08];
    varint(term, &mut hs);
    hs.push(0x10);
    varint(7, &mut hs);
    hs.push(0x18);
    varint(commit, &mut hs);
    record(STATE_RECORD, &hs)
}

#[test]
fn the_last_hard_state_wins_and_a_torn_tail_ends_the_file() {
    let mut wal = Vec::new();
    frame(&record(4, &[]), &mut wal);
    frame(&state(2, 10), &mut wal);
    frame(&record(2, &[1, 2, 3]), &mut wal);
    frame(&state(3, 41), &mut wal);
    let whole = wal.clone();
    // A record torn by a crash, then stale bytes: ignored, as etcd ignores them.
    frame(&state(9, 999), &mut wal);
    wal.truncate(wal.len() - 3);
    let want = Some(WalCommit {
        term: 3,
        commit: 41,
    });
    assert_eq!(commit_from_bytes(&wal).unwrap(), want);
    let mut preallocated = whole.clone();
    preallocated.extend_from_slice(&[0u8; 64]);
    frame(&state(9, 999), &mut preallocated);
    assert_eq!(commit_from_bytes(&preallocated).unwrap(), want);
    assert_eq!(commit_from_bytes(&[0u8; 16]).unwrap(), None);
}

#[test]
fn read_commit_takes_the_newest_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut old = Vec::new();
    frame(&state(2, 10), &mut old);
    let mut new = Vec::new();
    frame(&state(4, 77), &mut new);
    std::fs::write(
        dir.path().join("0000000000000000-0000000000000000.wal"),
        old,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("0000000000000001-0000000000000011.wal"),
        new,
    )
    .unwrap();
    assert_eq!(
        read_commit(dir.path()).unwrap(),
        WalCommit {
            term: 4,
            commit: 77
        }
    );
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        read_commit(empty.path()),
        Err(WalError::NoWalFiles(_))
    ));
}

proptest::proptest! {
    /// Any bytes give an identity or an error: never a panic, never a hang.
    #[test]
    fn any_bytes_decode_or_fail(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let _ = identity_from_bytes(&bytes);
    }

    /// Frames of arbitrary records, with arbitrary length words among them.
    #[test]
    fn any_frames_decode_or_fail(
        records in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..64), 0..8),
        word in proptest::num::u64::ANY,
    ) {
        let mut wal = Vec::new();
        for r in &records {
            frame(r, &mut wal);
        }
        wal.extend_from_slice(&word.to_le_bytes());
        let _ = identity_from_bytes(&wal);
        let _ = commit_from_bytes(&wal);
    }
}
