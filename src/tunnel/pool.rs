//! The link pool's decisions, pure: how many links to hold (one per server instance, as many as
//! the last server's `serverCount`), what to do with a link just made (serve it, or close it
//! when it reached an instance already linked), when to dial again (after the back-off's
//! wait; not at all while every instance is linked), and when an outage is worth a warning
//! (its first failed attempt only). `run` executes what it says.

use super::policy::BackOff;
use std::collections::BTreeSet;
use std::time::Duration;

/// What happened to the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A connection attempt made a link to server instance `server`, which says there are
    /// `count` instances.
    Linked { server: &'a str, count: usize },
    /// A connection attempt failed.
    Failed,
    /// The link to `server` ended.
    Ended { server: &'a str },
}

/// What to do about it, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Serve the link just made until it ends (then report `Event::Ended`).
    Serve,
    /// Close the link just made: its instance is linked already (the load balancer's choice).
    Close,
    /// Say the server cannot be reached: as a warning at an outage's first attempt (`warn`),
    /// quietly after, so a box that stays offline does not fill its log.
    Unreachable { warn: bool },
    /// Wait this long before dialling again.
    Wait(Duration),
}

/// The links held, the count wanted, and the back-off between attempts.
#[derive(Clone, Debug)]
pub struct Pool {
    linked: BTreeSet<String>,
    count: usize,
    failing: bool,
    back_off: BackOff,
}

impl Pool {
    /// An empty pool that wants one link until a server says how many instances there are.
    pub fn new(back_off: BackOff) -> Pool {
        Pool { linked: BTreeSet::new(), count: 1, failing: false, back_off }
    }

    /// How many instances are linked.
    pub fn linked(&self) -> usize {
        self.linked.len()
    }

    /// How many instances the servers count.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Every instance is linked: nothing to dial until one link ends.
    pub fn full(&self) -> bool {
        self.linked.len() >= self.count
    }

    /// What to do about `event`; `random` (in 0..1) is the back-off's jitter.
    pub fn decide(&mut self, event: Event, random: f64) -> Vec<Action> {
        match event {
            Event::Linked { server, .. } if self.linked.contains(server) => {
                // Not a failure: as the upstream agent, try again for another instance after
                // the first interval.
                vec![Action::Close, Action::Wait(self.back_off.succeeded(random))]
            }
            Event::Linked { server, count } => {
                self.count = count;
                self.failing = false;
                self.linked.insert(server.to_string());
                let wait = self.back_off.succeeded(random);
                let mut out = vec![Action::Serve];
                out.extend((!self.full()).then_some(Action::Wait(wait)));
                out
            }
            Event::Failed => {
                let warn = !std::mem::replace(&mut self.failing, true);
                vec![Action::Unreachable { warn }, Action::Wait(self.back_off.failed(random))]
            }
            Event::Ended { server } => {
                // A full pool dials again after the first interval; one that is dialling
                // already goes on at its own pace.
                let was_full = self.full();
                self.linked.remove(server);
                match was_full {
                    true => vec![Action::Wait(self.back_off.succeeded(random))],
                    false => Vec::new(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;

    const S: Duration = Duration::from_secs(1);

    fn pool() -> Pool {
        Pool::new(BackOff::new(S, 10 * S))
    }

    fn linked(server: &str, count: usize) -> Event<'_> {
        Event::Linked { server, count }
    }

    fn ended(server: &str) -> Event<'_> {
        Event::Ended { server }
    }

    /// A row: what it shows, the events so far, the last one's actions, then linked, count, full.
    type Row<'a> = (&'a str, Vec<Event<'a>>, Vec<Action>, usize, usize, bool);

    #[test]
    fn each_rule_of_the_pool() {
        let ms = Duration::from_millis;
        let rows: Vec<Row> = vec![
            ("one link is wanted before any server answers", vec![], vec![], 0, 1, false),
            ("a lone server: served, nothing more to dial", vec![linked("a", 1)], vec![Serve], 1, 1, true),
            ("the count comes from the server", vec![linked("a", 3)], vec![Serve, Wait(S)], 1, 3, false),
            ("a second instance", vec![linked("a", 2), linked("b", 2)], vec![Serve], 2, 2, true),
            (
                "an instance already linked is closed, and the next dial waits the first interval",
                vec![linked("a", 2), linked("a", 2)],
                vec![Close, Wait(S)],
                1,
                2,
                false,
            ),
            ("the first failure warns", vec![Event::Failed], vec![Unreachable { warn: true }, Wait(S)], 0, 1, false),
            (
                "later failures are quiet and wait longer",
                vec![Event::Failed, Event::Failed],
                vec![Unreachable { warn: false }, Wait(ms(1500))],
                0,
                1,
                false,
            ),
            (
                "a link resets the back-off and the outage",
                vec![Event::Failed, Event::Failed, linked("a", 2), Event::Failed],
                vec![Unreachable { warn: true }, Wait(S)],
                1,
                2,
                false,
            ),
            (
                "a link that ends in a full pool is replaced after the first interval",
                vec![Event::Failed, Event::Failed, linked("a", 1), ended("a")],
                vec![Wait(S)],
                0,
                1,
                false,
            ),
            (
                "a link that ends while dialling changes no wait",
                vec![linked("a", 3), linked("b", 3), ended("a")],
                vec![],
                1,
                3,
                false,
            ),
            ("an unknown link's end changes nothing", vec![ended("x")], vec![], 0, 1, false),
            (
                "a smaller count: full with the links held",
                vec![linked("a", 3), linked("b", 3), linked("c", 1)],
                vec![Serve],
                3,
                1,
                true,
            ),
        ];
        for (what, events, want, n, count, full) in rows {
            let mut p = pool();
            let mut last = Vec::new();
            for e in events {
                last = p.decide(e, 0.0);
            }
            assert_eq!(last, want, "{what}");
            assert_eq!((p.linked(), p.count(), p.full()), (n, count, full), "{what}");
        }
    }

    #[test]
    fn waits_carry_the_jitter() {
        let mut p = pool();
        assert_eq!(p.decide(Event::Failed, 1.0), [Unreachable { warn: true }, Wait(S + S / 2)]);
        assert_eq!(p.decide(linked("a", 2), 0.5), [Serve, Wait(S + S / 4)]);
    }
}
