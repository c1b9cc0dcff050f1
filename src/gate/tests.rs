//! The gate's choice of which pending connection gives way, and its budgets as connections
//! arrive, finish, stall and leave.

use super::*;

const LIMITS: Limits = Limits { pending: 4, per_source: 2, deadline: Duration::from_secs(10), sessions: 2 };

fn ip(last: u8) -> Option<IpAddr> {
    Some(IpAddr::from([10, 0, 0, last]))
}

#[test]
fn the_oldest_gives_way_and_a_source_first_makes_room_among_its_own() {
    type Case<'a> = (&'a str, &'a [(u64, Option<IpAddr>)], Option<IpAddr>, Option<u64>);
    let cases: &[Case] = &[
        ("room left", &[(1, ip(1)), (2, ip(2))], ip(3), None),
        (
            "full: the oldest of the source holding most",
            &[(1, ip(1)), (2, ip(2)), (3, ip(3)), (4, ip(2))],
            ip(5),
            Some(2),
        ),
        (
            "full, sources even: the one whose came first",
            &[(1, ip(1)), (2, ip(2)), (3, ip(2)), (4, ip(1))],
            ip(5),
            Some(1),
        ),
        ("a source at its share: its own oldest", &[(1, ip(1)), (2, ip(2)), (3, ip(2))], ip(2), Some(2)),
        ("full and at its share: still its own", &[(1, ip(1)), (2, ip(3)), (3, ip(2)), (4, ip(2))], ip(2), Some(3)),
        ("no source known: only the total counts", &[(1, None), (2, None), (3, None)], None, None),
        ("no source known, full", &[(1, None), (2, None), (3, None), (4, None)], None, Some(1)),
        ("unknown sources count as one", &[(1, ip(1)), (2, None), (3, None), (4, ip(2))], ip(3), Some(2)),
        ("nothing pending", &[], ip(1), None),
    ];
    for (what, pending, source, want) in cases {
        assert_eq!(victim(pending, *source, &LIMITS), *want, "{what}");
    }
    let none = Limits { pending: 0, per_source: 0, ..LIMITS };
    assert_eq!(victim(&[], ip(1), &none), None, "a zero budget with nothing pending has nobody to evict");
}

#[test]
fn a_new_connection_evicts_the_oldest_pending_and_the_evicted_step_ends() {
    smol::block_on(async {
        let gate = Gate::new("test", LIMITS);
        let first = gate.arrive(ip(1));
        let _others: Vec<Pending> = (2..=4).map(|n| gate.arrive(ip(n))).collect();
        assert_eq!(gate.pending(), 4);
        let newest = gate.arrive(ip(9));
        assert_eq!(gate.pending(), 4, "full: one left as one came");
        let stalled = first.step(smol::future::pending::<()>()).await;
        assert_eq!(stalled, Err(Cut::Evicted));
        assert_eq!(newest.step(async { 7 }).await, Ok(7), "the newest is never the one cut");
    });
}

#[test]
fn the_pending_phase_has_one_deadline_across_its_steps() {
    smol::block_on(async {
        let gate = Gate::new("test", Limits { deadline: Duration::from_millis(50), ..LIMITS });
        let p = gate.arrive(None);
        assert_eq!(p.step(smol::Timer::after(Duration::from_millis(30))).await.map(|_| ()), Ok(()));
        let second = p.step(smol::Timer::after(Duration::from_millis(30))).await.map(|_| ());
        assert_eq!(second, Err(Cut::Deadline), "the second step ran past the phase's deadline");
    });
}

#[test]
fn sessions_have_their_own_budget_and_leaving_frees_places() {
    let gate = Gate::new("test", LIMITS);
    let a = gate.arrive(ip(1)).admit().expect("a place");
    let b = gate.arrive(ip(1)).admit().expect("a place");
    assert_eq!(gate.pending(), 0, "admitted connections are no longer pending");
    let pending: Vec<Pending> = (0..4).map(|n| gate.arrive(ip(n))).collect();
    assert!(gate.arrive(ip(7)).admit().is_none(), "sessions full");
    drop(a);
    assert!(gate.arrive(ip(7)).admit().is_some(), "a session ended: a place again");
    drop((b, pending));
    assert_eq!(gate.pending(), 0, "a dropped pending connection leaves the budget");
}
