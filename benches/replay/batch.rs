//! The replay bench's batches: `n` pods at once, atoll's (manifests renamed in together) and
//! the replay's (that many recorded starts sent at once), in turns, each on a quiet machine,
//! with the CPU the bench's process used in each one's window.

use super::*;

/// `n` pods at once, `rounds` times, atoll and the replay alternating which goes first (the
/// runtime's state after a batch, its metadata store and the shims' exits, is the other's
/// handicap otherwise), each on a quiet machine ([`quiet`]). Returns the row, and a line on
/// this process's CPU in atoll's windows and in the replay's, and on the waits.
pub fn batch(rig: &Rig, n: usize, rounds: usize, failed: &mut Vec<String>) -> (String, String) {
    let (mut atoll, mut replayed) = (vec![], vec![]);
    let (mut cpu_atoll, mut cpu_replay, mut waits) = (vec![], vec![], vec![]);
    for r in 0..rounds {
        for by_atoll in [r % 2 == 0, r % 2 == 1] {
            let (cpus, cpu, waited) = if by_atoll {
                let b = batch_atoll(rig, n, r);
                atoll.push(b.took);
                (&mut cpu_atoll, b.cpu, b.waited)
            } else {
                let b = batch_replay(rig, n, r, failed);
                replayed.push(b.took);
                (&mut cpu_replay, b.cpu, b.waited)
            };
            cpus.push(cpu);
            waits.push(waited);
        }
    }
    let what = format!("{n} pods at once -> all started ({rounds} rounds)");
    let median = |v: &[(Duration, Duration)], sys: bool| {
        ms(pct(&v.iter().map(|c| if sys { c.1 } else { c.0 }).collect::<Vec<_>>(), 50))
    };
    let restless = waits.iter().filter(|w| **w >= SETTLE).count();
    let note = format!(
        "{n} at once: the bench's process's CPU in a batch's window, user / system (median, in 10 ms ticks): in atoll's (atoll, and the bench waiting on its trace) {} / {}, in the replay's (its client, and the agent idle beside it) {} / {}; each batch began once the machine was quiet (a 100 ms window at most 5% busy) after {} (p90 {}){}",
        median(&cpu_atoll, false),
        median(&cpu_atoll, true),
        median(&cpu_replay, false),
        median(&cpu_replay, true),
        ms(pct(&waits, 50)),
        ms(pct(&waits, 90)),
        match restless {
            0 => String::new(),
            k => format!(", except {k} of {} that began busy after {} s", waits.len(), SETTLE.as_secs()),
        }
    );
    (pairs::row(&what, &atoll, &replayed, n * rig.rec.start.calls.len()), note)
}

/// One batch: how long it took, this process's CPU (user, system) meanwhile, and how long the
/// machine took to go quiet before it.
struct Batch<T> {
    took: T,
    cpu: (Duration, Duration),
    waited: Duration,
}

/// The longest wait for a quiet machine before a batch (a busy machine is measured as it is).
const SETTLE: Duration = Duration::from_secs(5);

/// atoll's batch: the manifests renamed in -> the reply to the last StartContainer, and this
/// process's CPU (user, system) until the bench saw that reply. Then removed, and waited for
/// until the runtime holds none of them.
fn batch_atoll(rig: &Rig, n: usize, r: usize) -> Batch<Timed> {
    let Rig { manifests, cri, .. } = rig;
    let name = |i: usize| format!("b{n}r{r}x{i}");
    let staged: Vec<_> = (0..n).map(|i| stage(manifests, &name(i), &pod_yaml(&name(i), STOPS_ON_TERM))).collect();
    let waited = quiet(SETTLE);
    let (from, t0, cpu0) = (mark(), Instant::now(), own_cpu());
    staged.into_iter().for_each(rename_in);
    let end = nth_call(from, "StartContainer", n);
    let cpu = cpu_since(cpu0);
    let took = Timed::between(from, t0, end);
    wait("the batch running", || (0..n).all(|i| !running(cri, &format!("{}-bench", name(i))).is_empty()));
    for i in 0..n {
        std::fs::remove_file(manifests.join(format!("{}.yaml", name(i)))).unwrap();
    }
    wait("the batch gone", || (0..n).all(|i| sandboxes(cri, &format!("{}-bench", name(i))) == 0));
    Batch { took, cpu, waited }
}

/// The replay's batch: `n` recorded starts sent at once -> the last reply, and this process's
/// CPU (user, system) meanwhile. Then removed.
fn batch_replay(rig: &Rig, n: usize, r: usize, failed: &mut Vec<String>) -> Batch<Duration> {
    let Rig { rec, ch, state, cri, .. } = rig;
    let first = 2000 + ((n * 100 + r) * 100) as u64;
    let prepared: Vec<_> = (0..n).map(|i| prepare(&rec.start, state, first + i as u64)).collect();
    let calls = Arc::new(rec.start.calls.clone());
    let waited = quiet(SETTLE);
    let (t0, cpu0) = (Instant::now(), own_cpu());
    let results = smol::block_on(async {
        let tasks: Vec<_> = prepared
            .iter()
            .map(|(_, subs)| {
                let (ch, calls, mut subs) = (ch.clone(), calls.clone(), subs.clone());
                smol::spawn(async move { replay(&ch, &calls, &mut subs).await.1 })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await);
        }
        all
    });
    let (replayed, cpu) = (t0.elapsed(), cpu_since(cpu0));
    failed.extend(results);
    for (uid, _) in &prepared {
        clean(cri, uid);
    }
    Batch { took: replayed, cpu, waited }
}
