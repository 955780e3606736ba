//! The rotation's phases: when one starts, waits and ends.

use super::*;

fn status(phase: &str) -> CaRotationStatus {
    CaRotationStatus {
        trigger: "r1".into(),
        phase: phase.into(),
        ..Default::default()
    }
}

const NEXT: Cas = Cas {
    next_exists: true,
    swapped: false,
    ca_due: false,
    scrapers_signed: false,
};

fn view(settled: bool, old: bool, new: bool, leaves_new: bool) -> RolloutView {
    RolloutView {
        settled,
        bundle_has_old: old,
        bundle_has_new: new,
        leaves_new,
        consumers_current: true,
    }
}

#[test]
fn a_consumer_secret_behind_holds_the_phase() {
    let run = |p| Step::Run {
        phase: p,
        trigger: "r1".into(),
    };
    let behind = |v: RolloutView| RolloutView {
        consumers_current: false,
        ..v
    };
    for (phase, leaves_new, why) in [
        (
            Phase::TrustBoth,
            false,
            "a consumer without the two-CA bundle would refuse leaves of the new CA",
        ),
        (
            Phase::ReissueLeaves,
            true,
            "a consumer with a certificate of the old CA would be refused once it is dropped",
        ),
    ] {
        let s = status(phase.as_str());
        let v = behind(view(true, true, true, leaves_new));
        assert_eq!(decide("r1", "", Some(&s), NEXT, &v), run(phase), "{why}");
    }
    let swapped = Cas {
        swapped: true,
        ..NEXT
    };
    assert_eq!(
        decide(
            "r1",
            "",
            Some(&status("DropOld")),
            swapped,
            &behind(view(true, false, true, true))
        ),
        run(Phase::DropOld),
        "the rotation ends only once every consumer has the new CA alone"
    );
}

#[test]
fn a_request_or_an_aging_ca_starts_a_rotation() {
    let none = Cas {
        next_exists: false,
        ..NEXT
    };
    let v = view(true, true, false, false);
    assert_eq!(decide("", "", None, none, &v), Step::Idle);
    assert_eq!(decide("r1", "r1", None, none, &v), Step::Idle, "handled");
    assert_eq!(
        decide("r2", "r1", None, none, &v),
        Step::Start {
            trigger: "r2".into()
        }
    );
    let due = Cas {
        ca_due: true,
        ..none
    };
    assert_eq!(
        decide("", "", None, due, &v),
        Step::Start {
            trigger: "expiry".into()
        }
    );
    // A CA that signed a scraper's certificate is rotated away, request or not; a running
    // rotation (whatever its trigger) is finished first.
    let signed = Cas {
        scrapers_signed: true,
        ..none
    };
    assert_eq!(
        decide("r1", "r1", None, signed, &v),
        Step::Start {
            trigger: "scraperRevocation".into()
        }
    );
    let running = status("ReissueLeaves");
    assert!(matches!(
        decide(
            "",
            "",
            Some(&running),
            Cas {
                scrapers_signed: true,
                ..NEXT
            },
            &v
        ),
        Step::Run {
            phase: Phase::ReissueLeaves,
            ..
        }
    ));
}

#[test]
fn each_phase_waits_until_every_node_runs_its_material() {
    let run = |p| Step::Run {
        phase: p,
        trigger: "r1".into(),
    };
    let s = status("TrustBoth");
    // The two-CA bundle not yet everywhere.
    assert_eq!(
        decide("r1", "", Some(&s), NEXT, &view(false, true, true, false)),
        run(Phase::TrustBoth)
    );
    assert_eq!(
        decide("r1", "", Some(&s), NEXT, &view(true, true, false, false)),
        run(Phase::TrustBoth)
    );
    assert_eq!(
        decide("r1", "", Some(&s), NEXT, &view(true, true, true, false)),
        run(Phase::ReissueLeaves)
    );
    let s = status("ReissueLeaves");
    assert_eq!(
        decide("r1", "", Some(&s), NEXT, &view(true, true, true, false)),
        run(Phase::ReissueLeaves),
        "an old-CA leaf still runs somewhere"
    );
    assert_eq!(
        decide("r1", "", Some(&s), NEXT, &view(true, true, true, true)),
        run(Phase::DropOld)
    );
    let swapped = Cas {
        swapped: true,
        ..NEXT
    };
    assert_eq!(
        decide("r1", "", Some(&s), swapped, &view(false, true, true, true)),
        run(Phase::DropOld),
        "a swap that status has not recorded yet"
    );
    let s = status("DropOld");
    assert_eq!(
        decide("r1", "", Some(&s), swapped, &view(true, true, true, true)),
        run(Phase::DropOld),
        "the old CA is still trusted somewhere"
    );
    assert_eq!(
        decide("r1", "", Some(&s), swapped, &view(true, false, true, true)),
        Step::Finish {
            trigger: "r1".into()
        }
    );
}

#[test]
fn a_lost_next_ca_starts_over_only_while_nothing_was_signed_with_it() {
    let gone = Cas {
        next_exists: false,
        ..NEXT
    };
    assert_eq!(
        decide(
            "r1",
            "",
            Some(&status("TrustBoth")),
            gone,
            &RolloutView::default()
        ),
        Step::Start {
            trigger: "r1".into()
        }
    );
    assert!(matches!(
        decide(
            "r1",
            "",
            Some(&status("ReissueLeaves")),
            gone,
            &RolloutView::default()
        ),
        Step::Broken { .. }
    ));
}

#[test]
fn only_the_request_s_own_rotation_marks_it_handled() {
    use super::handled_after;
    assert_eq!(handled_after("r1", "r0", "r1"), "r1");
    // An automatic rotation leaves the handled request as it was: "r1" stays handled.
    assert_eq!(handled_after("r1", "r1", "expiry"), "r1");
    assert_eq!(handled_after("r1", "r1", "scraperRevocation"), "r1");
    // A request changed while another rotation ran is still new afterwards.
    assert_eq!(handled_after("r2", "r0", "r1"), "r0");
}
