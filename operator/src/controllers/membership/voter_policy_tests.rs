use super::*;

#[test]
fn the_voter_target_is_the_largest_odd_count() {
    let targets: Vec<usize> = (0..=7).map(voter_target).collect();
    assert_eq!(targets, vec![0, 1, 1, 3, 3, 5, 5, 7]);
    // (voters, eligible, remaining) -> desired
    for (v, e, r, d) in [
        (1, 3, 3, 3), // grow
        (1, 2, 2, 1), // the second node is a standby
        (3, 4, 4, 3), // the fourth too
        (4, 4, 4, 3), // four voters on four nodes: shrink to three
        (5, 4, 5, 5), // a NotReady node removes nothing
        (3, 2, 2, 3), // never below three by shrinking
        (2, 2, 2, 2), // two voters on two nodes stay (removing one leaves no margin)
        (0, 3, 3, 3),
    ] {
        assert_eq!(desired_voters(v, e, r), d, "desired_voters({v}, {e}, {r})");
    }
}
