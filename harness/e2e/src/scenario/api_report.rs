//! The per-phase report of the `api-availability` scenario: what the API's clients saw of each
//! operation, from the probe's creates ([`super::api_probe`]) and the watcher's log
//! ([`super::api_watch`]). Pure: the scenario hands in what was recorded.
//!
//! A phase runs from its start to the next one's (the last to the end). A create belongs to the
//! phase it started in. Its longest write gap counts from the last acknowledgement before the
//! phase, so an outage across the boundary is not cut in two.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::api_probe::{Create, longest_gap_ms};
use super::api_watch::{Via, WatchLog};

/// What the API's clients saw during one phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ApiPhase {
    pub phase: String,
    /// Tenths of a second the phase took.
    pub deciseconds: u64,
    pub writes_acknowledged: u64,
    pub writes_failed: u64,
    /// Longest time without an acknowledged create, ms.
    pub longest_write_gap_ms: u64,
    /// Watch streams that ended early or could not be opened.
    pub watch_reconnects: u64,
    /// Lists after 410 Gone.
    pub watch_relists: u64,
    /// Acknowledged creates the watcher got no `ADDED` event for (a relist may have shown
    /// them: see `objects_unseen`).
    pub watch_events_missed: u64,
    /// Acknowledged creates the watcher was never shown, by an event or a relist.
    pub objects_unseen: u64,
    /// `ADDED` events for an object already shown by one.
    pub watch_duplicates: u64,
    /// `ADDED` events of one loop's creates out of the order they were acknowledged in.
    pub watch_out_of_order: u64,
    /// resourceVersions lower than one seen before.
    pub resource_version_backwards: u64,
    /// Acknowledged creates missing when read back.
    pub objects_lost: u64,
    /// Tenths of a second, at the phase's start, spent waiting for every control-plane pod to
    /// be Ready (part of `deciseconds`; filled in by the scenario).
    pub control_plane_wait_ds: u64,
    /// Restarts of control-plane containers during the phase (filled in by the scenario).
    pub control_plane_restarts: u64,
}

/// A phase as the scenario marked it.
#[derive(Clone, Debug)]
pub struct Mark {
    pub phase: String,
    pub started: Instant,
}

/// One report per marked phase; `end` closes the last.
pub fn phases(
    marks: &[Mark],
    end: Instant,
    creates: &[Create],
    log: &WatchLog,
    present: &BTreeSet<String>,
) -> Vec<ApiPhase> {
    let events = event_counts(log);
    let shown: BTreeSet<&str> = log.seen.iter().map(|s| s.name.as_str()).collect();
    let disorder = out_of_order(creates, log);
    marks
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let until = marks.get(i + 1).map_or(end, |n| n.started);
            let mine: Vec<&Create> = creates
                .iter()
                .filter(|c| c.started >= m.started && c.started < until)
                .collect();
            let acked: Vec<&Create> = mine.iter().copied().filter(|c| c.ok).collect();
            let within = |t: &Instant| *t >= m.started && *t < until;
            ApiPhase {
                phase: m.phase.clone(),
                deciseconds: (until.saturating_duration_since(m.started).as_millis() / 100) as u64,
                writes_acknowledged: acked.len() as u64,
                writes_failed: (mine.len() - acked.len()) as u64,
                longest_write_gap_ms: gap_ms(creates, m.started, until),
                watch_reconnects: log.reconnects.iter().filter(|t| within(t)).count() as u64,
                watch_relists: log.relists.iter().filter(|t| within(t)).count() as u64,
                watch_events_missed: acked
                    .iter()
                    .filter(|c| events.get(c.name.as_str()).is_none_or(|n| *n == 0))
                    .count() as u64,
                objects_unseen: acked
                    .iter()
                    .filter(|c| !shown.contains(c.name.as_str()))
                    .count() as u64,
                watch_duplicates: acked
                    .iter()
                    .map(|c| {
                        events
                            .get(c.name.as_str())
                            .map_or(0, |n| n.saturating_sub(1))
                    })
                    .sum(),
                watch_out_of_order: acked
                    .iter()
                    .filter(|c| disorder.contains(c.name.as_str()))
                    .count() as u64,
                resource_version_backwards: log
                    .backwards
                    .iter()
                    .filter(|(_, _, t)| within(t))
                    .count() as u64,
                objects_lost: acked.iter().filter(|c| !present.contains(&c.name)).count() as u64,
                control_plane_wait_ds: 0,
                control_plane_restarts: 0,
            }
        })
        .collect()
}

/// The longest gap between acknowledgements ended in `[from, until)`, counted from the last
/// one before `from`.
fn gap_ms(creates: &[Create], from: Instant, until: Instant) -> u64 {
    let mut ends: Vec<Instant> = creates
        .iter()
        .filter(|c| c.ok && c.ended < until)
        .map(|c| c.ended)
        .collect();
    ends.sort();
    let first = ends.partition_point(|t| *t < from).saturating_sub(1);
    let mut window: Vec<Instant> = ends
        .get(first..)
        .map(<[Instant]>::to_vec)
        .unwrap_or_default();
    // An API still down at the phase's end: the gap runs to the end.
    window.push(until);
    longest_gap_ms(&window)
}

/// `ADDED` events per object name.
fn event_counts(log: &WatchLog) -> BTreeMap<&str, u64> {
    let mut out = BTreeMap::new();
    for s in log.seen.iter().filter(|s| s.via == Via::Event) {
        *out.entry(s.name.as_str()).or_insert(0) += 1;
    }
    out
}

/// Objects whose `ADDED` event came after the event of a later acknowledged create of the same
/// loop (a loop makes its creates one after another, so their order is known).
fn out_of_order<'a>(creates: &'a [Create], log: &WatchLog) -> BTreeSet<&'a str> {
    let by_name: BTreeMap<&str, &Create> = creates
        .iter()
        .filter(|c| c.ok)
        .map(|c| (c.name.as_str(), c))
        .collect();
    let mut last: BTreeMap<(&str, u64), u64> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for s in log.seen.iter().filter(|s| s.via == Via::Event) {
        let Some(c) = by_name.get(s.name.as_str()) else {
            continue;
        };
        match last.get(&(c.server.as_str(), c.run)) {
            Some(seq) if *seq > c.seq => {
                out.insert(c.name.as_str());
            }
            _ => {
                last.insert((c.server.as_str(), c.run), c.seq);
            }
        }
    }
    out
}

/// The phases as a Markdown table.
pub fn table(phases: &[ApiPhase]) -> String {
    let mut out = String::from(
        "| phase | s | writes acked | failed | longest write gap ms | watch reconnects | relists | watch events missed | unseen | duplicates | out of order | rv backwards | objects lost | control-plane wait s | control-plane restarts |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for p in phases {
        out.push_str(&format!(
            "| {} | {}.{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}.{} | {} |\n",
            p.phase,
            p.deciseconds / 10,
            p.deciseconds % 10,
            p.writes_acknowledged,
            p.writes_failed,
            p.longest_write_gap_ms,
            p.watch_reconnects,
            p.watch_relists,
            p.watch_events_missed,
            p.objects_unseen,
            p.watch_duplicates,
            p.watch_out_of_order,
            p.resource_version_backwards,
            p.objects_lost,
            p.control_plane_wait_ds / 10,
            p.control_plane_wait_ds % 10,
            p.control_plane_restarts
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::api_watch::Seen;
    use super::*;

    fn create(t0: Instant, server: &str, seq: u64, start_ms: u64, ok: bool) -> Create {
        Create {
            server: server.into(),
            run: 1,
            seq,
            name: format!("probe-{server}-1-{seq:07}"),
            started: t0 + Duration::from_millis(start_ms),
            ended: t0 + Duration::from_millis(start_ms + 10),
            ok,
            resource_version: ok.then_some(start_ms as i64),
        }
    }

    fn seen(c: &Create, via: Via, rv: i64) -> Seen {
        Seen {
            name: c.name.clone(),
            resource_version: rv,
            at: c.ended,
            via,
        }
    }

    #[test]
    fn each_phase_counts_its_own_creates_and_what_the_watcher_made_of_them() {
        let t0 = Instant::now();
        let a = [
            create(t0, "n1", 0, 0, true),
            create(t0, "n1", 1, 100, true),
            create(t0, "n1", 2, 1000, false),
            create(t0, "n1", 3, 2500, true),
            create(t0, "n1", 4, 2600, true),
            create(t0, "n1", 5, 2700, true),
        ];
        let log = WatchLog {
            seen: vec![
                seen(&a[0], Via::Event, 10),
                seen(&a[1], Via::Event, 11),
                seen(&a[4], Via::Event, 14),
                seen(&a[3], Via::Event, 13),
                seen(&a[1], Via::Event, 11),
                seen(&a[5], Via::Relist, 15),
            ],
            reconnects: vec![t0 + Duration::from_millis(2550)],
            relists: vec![t0 + Duration::from_millis(2560)],
            backwards: vec![(14, 13, t0 + Duration::from_millis(2610))],
            last_error: None,
        };
        let present: BTreeSet<String> = a.iter().take(5).map(|c| c.name.clone()).collect();
        let marks = [
            Mark {
                phase: "one".into(),
                started: t0,
            },
            Mark {
                phase: "two".into(),
                started: t0 + Duration::from_millis(2000),
            },
        ];
        let end = t0 + Duration::from_millis(3000);
        let got = phases(&marks, end, &a, &log, &present);
        assert_eq!(got.len(), 2);
        let (one, two) = (&got[0], &got[1]);
        assert_eq!(
            (
                one.writes_acknowledged,
                one.writes_failed,
                one.watch_duplicates
            ),
            (2, 1, 1)
        );
        assert_eq!((one.longest_write_gap_ms, one.deciseconds), (1890, 20));
        assert_eq!(
            (two.writes_acknowledged, two.writes_failed, two.objects_lost),
            (3, 0, 1)
        );
        // From n1-1's acknowledgement (110 ms) to n1-3's (2510 ms).
        assert_eq!(two.longest_write_gap_ms, 2400);
        assert_eq!((two.watch_reconnects, two.watch_relists), (1, 1));
        assert_eq!((two.watch_events_missed, two.objects_unseen), (1, 0));
        assert_eq!(
            (two.watch_out_of_order, two.resource_version_backwards),
            (1, 1)
        );
        assert!(
            table(&got).contains("| two | 1.0 | 3 | 0 | 2400 | 1 | 1 | 1 | 0 | 0 | 1 | 1 | 1 |")
        );
    }
    #[test]
    fn a_servers_second_loop_counts_from_zero_without_being_out_of_order() {
        let t0 = Instant::now();
        let mut second = create(t0, "n3", 0, 500, true);
        second.run = 2;
        second.name = "probe-n3-2-0000000".into();
        let first = [create(t0, "n3", 7, 0, true), create(t0, "n3", 8, 100, true)];
        let log = WatchLog {
            seen: vec![
                seen(&first[0], Via::Event, 10),
                seen(&first[1], Via::Event, 11),
                seen(&second, Via::Event, 12),
            ],
            ..Default::default()
        };
        let creates = [first[0].clone(), first[1].clone(), second];
        assert!(out_of_order(&creates, &log).is_empty());
        // The same counts in one loop are out of order.
        let mut same = creates.clone();
        same[2].run = 1;
        assert_eq!(
            out_of_order(&same, &log).into_iter().collect::<Vec<_>>(),
            ["probe-n3-2-0000000"]
        );
    }
}
