//! Notices a change in the static-pod manifest directory at once, as the kubelet's file source
//! does: inotify on the directory (a file written, created, moved in or out, deleted), with a
//! periodic re-read behind it for anything an event could miss (the kubelet's
//! `fileCheckFrequency`, 20 s). Where inotify can't be set up the loop polls instead, and says so.

use std::path::Path;
use std::time::Duration;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;

/// The re-read period while inotify works.
pub const RESYNC: Duration = Duration::from_secs(20);

/// An inotify watch on one directory, or nothing (polling).
#[derive(Debug)]
pub struct DirWatch {
    fd: Option<AsyncFd<Fd>>,
}

/// The inotify instance, as tokio's readiness wants it.
#[derive(Debug)]
struct Fd(Inotify);

impl std::os::fd::AsRawFd for Fd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

impl DirWatch {
    /// Watches `dir`; on failure logs why and returns a watch that never fires.
    pub fn new(dir: &Path) -> Self {
        let flags = AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF;
        // `AsyncFd::new` is deprecated because it can't check that the descriptor stays open
        // and the same while registered (`register` makes the caller promise it with `unsafe`,
        // which this workspace forbids). Here it holds: `Fd` owns the inotify instance, which
        // closes its descriptor only when dropped, after the `AsyncFd` deregistered it.
        #[allow(deprecated)]
        let watch = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .and_then(|i| i.add_watch(dir, flags).map(|_| Fd(i)))
            .map_err(std::io::Error::from)
            .and_then(AsyncFd::new);
        match watch {
            Ok(fd) => Self { fd: Some(fd) },
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e,
                    "inotify unavailable: polling the manifest directory instead");
                Self { fd: None }
            }
        }
    }

    /// True when changes wake the loop; otherwise it must poll.
    pub fn active(&self) -> bool {
        self.fd.is_some()
    }

    /// Waits until the directory changed (every pending event is consumed) or `timeout` passed.
    pub async fn changed(&mut self, timeout: Duration) {
        let Some(fd) = self.fd.as_ref() else {
            tokio::time::sleep(timeout).await;
            return;
        };
        let wait = async {
            loop {
                let Ok(mut guard) = fd.readable().await else {
                    return;
                };
                match guard.try_io(|i| i.get_ref().0.read_events().map_err(std::io::Error::from)) {
                    Ok(Ok(events)) if !events.is_empty() => {
                        // Drain what else is queued, so one write wakes the loop once.
                        while let Ok(more) = fd.get_ref().0.read_events() {
                            if more.is_empty() {
                                break;
                            }
                        }
                        return;
                    }
                    Ok(Ok(_)) | Err(_) => continue,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "reading inotify events failed");
                        return;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn a_renamed_in_manifest_wakes_the_watch_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut watch = DirWatch::new(dir.path());
        assert!(watch.active(), "inotify works on this machine");
        let t = Instant::now();
        watch.changed(Duration::from_millis(100)).await;
        assert!(
            t.elapsed() >= Duration::from_millis(100),
            "nothing changed yet"
        );

        let path = dir.path().to_owned();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let tmp = path.join(".etcd-pod.yaml.tmp");
            std::fs::write(&tmp, "kind: Pod\n").unwrap();
            std::fs::rename(&tmp, path.join("etcd-pod.yaml")).unwrap();
        });
        let t = Instant::now();
        watch.changed(Duration::from_secs(10)).await;
        let took = t.elapsed();
        writer.await.unwrap();
        assert!(
            took < Duration::from_secs(5),
            "woken by the write, took {took:?}"
        );
        // The events of that one write were consumed: the next wait runs to its timeout.
        let t = Instant::now();
        watch.changed(Duration::from_millis(100)).await;
        assert!(
            t.elapsed() >= Duration::from_millis(100),
            "no second wake-up"
        );
    }
}
