//! The gate's choice of which pending connection gives way, and its budgets as connections
//! arrive, finish, stall and leave.

use super::*;

const LIMITS: Limits = Limits { pending: 4, per_source: 2, deadline: Duration::from_secs(10), sessions: 2 };

fn ip(last: u8) -> Option<Source> {
    Some(Source::Addr(std::net::IpAddr::from([10, 0, 0, last])))
}

fn user(uid: u32) -> Option<Source> {
    Some(Source::User(uid))
}

fn seen(id: u64, source: Option<Source>) -> Seen {
    Seen { id, source, progressed: false }
}

fn done(id: u64, source: Option<Source>) -> Seen {
    Seen { id, source, progressed: true }
}

#[test]
fn the_oldest_without_progress_gives_way_and_a_source_first_makes_room_among_its_own() {
    type Case<'a> = (&'a str, &'a [Seen], Option<Source>, Option<u64>);
    let cases: &[Case] = &[
        ("room left", &[seen(1, ip(1)), seen(2, ip(2))], ip(3), None),
        ("full: the oldest", &[seen(1, ip(1)), seen(2, ip(2)), seen(3, ip(3)), seen(4, ip(2))], ip(5), Some(1)),
        (
            "full: the oldest of those without progress",
            &[done(1, ip(1)), done(2, ip(2)), seen(3, ip(3)), seen(4, ip(2))],
            ip(5),
            Some(3),
        ),
        (
            "full, all progressed: the oldest",
            &[done(1, ip(1)), done(2, ip(2)), done(3, ip(3)), done(4, ip(2))],
            ip(5),
            Some(1),
        ),
        ("a source at its share: its own oldest", &[seen(1, ip(1)), seen(2, ip(2)), seen(3, ip(2))], ip(2), Some(2)),
        ("at its share: its own without progress", &[seen(1, ip(1)), done(2, ip(2)), seen(3, ip(2))], ip(2), Some(3)),
        (
            "full and at its share: still its own",
            &[seen(1, ip(1)), seen(2, ip(3)), seen(3, ip(2)), seen(4, ip(2))],
            ip(2),
            Some(3),
        ),
        (
            "many addresses, one each: the oldest idle, not the client",
            &[done(1, ip(9)), seen(2, ip(2)), seen(3, ip(3)), seen(4, ip(4))],
            ip(5),
            Some(2),
        ),
        ("no source known: only the total counts", &[seen(1, None), seen(2, None), seen(3, None)], None, None),
        ("no source known, full", &[seen(1, None), seen(2, None), seen(3, None), seen(4, None)], None, Some(1)),
        ("nothing pending", &[], ip(1), None),
        (
            "a local user at its share, root's older: the user's own",
            &[seen(1, user(0)), seen(2, user(65534)), seen(3, user(65534))],
            user(65534),
            Some(2),
        ),
    ];
    for (what, pending, source, want) in cases {
        assert_eq!(victim(pending, *source, &LIMITS), *want, "{what}");
    }
    let none = Limits { pending: 0, per_source: 0, ..LIMITS };
    assert_eq!(victim(&[], ip(1), &none), None, "a zero budget with nothing pending has nobody to evict");
}

/// Whether `p`'s phase is cut within 100 ms (evicted or out of time) while it waits.
fn cut_soon(p: &Pending) -> Option<Cut> {
    smol::block_on(smol::future::or(async { p.step(smol::future::pending::<()>()).await.err() }, async {
        smol::Timer::after(Duration::from_millis(100)).await;
        None
    }))
}

#[test]
fn a_new_connection_evicts_the_oldest_pending_and_the_evicted_step_ends() {
    let gate = Gate::new("test", LIMITS);
    let first = gate.arrive(ip(1), false);
    let second = gate.arrive(ip(2), false);
    second.progressed();
    let _others: Vec<Pending> = (3..=4).map(|n| gate.arrive(ip(n), false)).collect();
    assert_eq!(gate.pending(), 4);
    let newest = gate.arrive(ip(9), false);
    assert_eq!(gate.pending(), 4, "full: one left as one came");
    assert_eq!(cut_soon(&first), Some(Cut::Evicted));
    assert_eq!(cut_soon(&newest), None, "the newest is never the one cut");
    let _more: Vec<Pending> = (10..=11).map(|n| gate.arrive(ip(n), false)).collect();
    assert_eq!(cut_soon(&second), None, "the one that progressed outlasts older idle ones");
}

#[test]
fn a_connection_whose_first_bytes_came_in_outlasts_older_silent_ones() {
    use smol::io::AsyncReadExt;
    let gate = Gate::new("test", LIMITS);
    let (silent, talker) = (gate.arrive(ip(1), false), gate.arrive(ip(2), false));
    let mut nothing: &[u8] = b"";
    let mut head: &[u8] = b"GET ";
    let mut buf = [0u8; 8];
    assert_eq!(smol::block_on(silent.marking(&mut nothing).read(&mut buf)).ok(), Some(0));
    assert_eq!(smol::block_on(talker.marking(&mut head).read(&mut buf)).ok(), Some(4));
    let _newer: Vec<Pending> = (3..=6).map(|n| gate.arrive(ip(n), false)).collect();
    assert_eq!(cut_soon(&silent), Some(Cut::Evicted), "an end of stream is not progress");
    assert_eq!(cut_soon(&talker), None, "the older one, having sent, stayed");
}

#[test]
fn the_pending_phase_has_one_deadline_across_its_steps() {
    smol::block_on(async {
        let gate = Gate::new("test", Limits { deadline: Duration::from_millis(300), ..LIMITS });
        let p = gate.arrive(None, false);
        assert_eq!(p.step(smol::Timer::after(Duration::from_millis(200))).await.map(|_| ()), Ok(()));
        let second = p.step(smol::Timer::after(Duration::from_millis(200))).await.map(|_| ());
        assert_eq!(second, Err(Cut::Deadline), "the second step ran past the phase's deadline");
    });
}

#[test]
fn sessions_have_their_own_budget_and_leaving_frees_places() {
    let gate = Gate::new("test", LIMITS);
    let a = gate.arrive(ip(1), false).admit().expect("a place");
    let b = gate.arrive(ip(1), false).admit().expect("a place");
    assert_eq!(gate.pending(), 0, "admitted connections are no longer pending");
    let pending: Vec<Pending> = (0..4).map(|n| gate.arrive(ip(n), false)).collect();
    assert!(gate.arrive(ip(7), false).admit().is_none(), "sessions full");
    drop(a);
    assert!(gate.arrive(ip(7), false).admit().is_some(), "a session ended: a place again");
    drop((b, pending));
    assert_eq!(gate.pending(), 0, "a dropped pending connection leaves the budget");
}
