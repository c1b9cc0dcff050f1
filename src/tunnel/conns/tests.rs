//! The connection table's decisions: what is queued, charged, dropped, refused, closed.

use super::*;

/// A socket pair: the table's end, and the kubelet server's.
fn socket() -> (Socket, std::os::unix::net::UnixStream) {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    (Socket::try_from(ours).unwrap(), theirs)
}

type Opened = (smol::channel::Receiver<Bytes>, Arc<Shared>, std::os::unix::net::UnixStream);

fn opened(conns: &Conns, id: i64) -> Opened {
    assert!(conns.reserve());
    let (ours, theirs) = socket();
    let (inbox, shared) = conns.open(id, &ours).unwrap();
    (inbox, shared, theirs)
}

/// Whether the kubelet server's end sees its connection shut down.
fn shut(theirs: &mut std::os::unix::net::UnixStream) -> bool {
    use std::io::Read;
    theirs.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 1];
    matches!(theirs.read(&mut b), Ok(0))
}

#[test]
fn a_connection_that_falls_behind_is_closed_alone_and_its_socket_shut() {
    let conns = Conns::default();
    let (stuck_inbox, stuck, mut stuck_end) = opened(&conns, 1);
    let (moving_inbox, moving, _moving_end) = opened(&conns, 2);
    let chunk = vec![0u8; 64 << 10];
    let cost = chunk.len() + OVERHEAD;
    // Nobody takes connection 1's data: it queues up to the limit, then is closed.
    for _ in 0..MAX_QUEUED / cost {
        assert_eq!(conns.deliver(1, &chunk), Delivered::Queued);
        // Connection 2's pump keeps up.
        assert_eq!(conns.deliver(2, &chunk), Delivered::Queued);
        let taken = moving_inbox.try_recv().unwrap();
        conns.uncharge(&moving, taken.len() + OVERHEAD);
    }
    assert_eq!(stuck.queued.load(Ordering::Acquire), MAX_QUEUED / cost * cost);
    assert_eq!(conns.deliver(1, &chunk), Delivered::Closed);
    assert!(stuck.aborted(), "closed at the limit");
    assert!(shut(&mut stuck_end), "its socket is shut down, read or not");
    assert_eq!(stuck_inbox.len(), MAX_QUEUED / cost, "what it had stays for its pump to drop");
    // Late DATA for it is dropped without an answer; the other connection is untouched.
    assert_eq!(conns.deliver(1, &chunk), Delivered::Dropped);
    assert_eq!(conns.deliver(2, &chunk), Delivered::Queued);
    assert!(!moving.aborted());
    // Its charge was given back when it closed; its pump ends: out of the table; DATA for it
    // is now unknown.
    assert_eq!(conns.queued.load(Ordering::Acquire), chunk.len() + OVERHEAD, "connection 2's one chunk");
    conns.remove(1);
    assert_eq!(conns.deliver(1, &chunk), Delivered::Unknown(Packet::close_response(1, "unrecognized connectID")));
}

#[test]
fn tiny_and_empty_data_are_charged_and_the_link_as_a_whole_is_bounded() {
    let conns = Conns::default();
    let (_inbox, shared, _end) = opened(&conns, 1);
    // Empty DATA cost their bookkeeping: they cannot pile up without limit.
    let mut n = 0;
    while conns.deliver(1, &[]) == Delivered::Queued {
        n += 1;
    }
    assert_eq!(n, MAX_QUEUED / OVERHEAD);
    assert!(shared.aborted());
    // Connections that each stay under their own limit still meet the link's: the one
    // furthest behind gives way, and the others go on.
    let conns = Conns::default();
    let chunk = vec![0u8; (1 << 20) - OVERHEAD];
    let (stalled_inbox, stalled, _e) = opened(&conns, 1);
    for _ in 0..3 {
        assert_eq!(conns.deliver(1, &chunk), Delivered::Queued);
    }
    let mut kept = Vec::new();
    for id in 2..=7 {
        kept.push(opened(&conns, id));
        for _ in 0..2 {
            assert_eq!(conns.deliver(id, &chunk), Delivered::Queued, "connection {id}");
        }
    }
    // 3 + 12 MiB queued; one more MiB for connection 8 is over the link's 16 MiB.
    kept.push(opened(&conns, 8));
    assert_eq!(conns.deliver(8, &chunk), Delivered::Queued);
    assert_eq!(conns.deliver(8, &chunk), Delivered::Queued, "connection 1 gave way");
    assert!(stalled.aborted() && kept.iter().all(|(_, s, _)| !s.aborted()));
    assert_eq!(stalled.queued.load(Ordering::Acquire), 0, "its charge given back at once");
    assert_eq!(conns.queued.load(Ordering::Acquire), 14 << 20);
    assert_eq!(stalled_inbox.len(), 3, "what it had waits for its pump to drop");
    // A connection that is itself furthest behind is the one closed.
    let conns = Conns::default();
    let (_i, big, _e) = opened(&conns, 1);
    while conns.deliver(1, &chunk) == Delivered::Queued {}
    assert!(big.aborted());
}

#[test]
fn payloads_are_copied_out_of_the_receive_buffer() {
    let conns = Conns::default();
    let (inbox, _shared, _end) = opened(&conns, 1);
    let buffer = Bytes::from(vec![7u8; 16 << 10]);
    assert_eq!(conns.deliver(1, &buffer.slice(0..1)), Delivered::Queued);
    let queued = inbox.try_recv().unwrap();
    // A one-byte payload of its own, not a view that keeps the 16 KiB buffer alive.
    let whole = buffer.as_ptr_range();
    assert_eq!(queued.as_ref(), [7u8]);
    assert!(!whole.contains(&queued.as_ptr()));
}

#[test]
fn dials_beyond_the_budget_are_refused_and_failed_ones_give_their_place_back() {
    let conns = Conns::default();
    for _ in 0..MAX_CONNECTIONS {
        assert!(conns.reserve());
    }
    assert!(!conns.reserve(), "the 129th dial is refused");
    conns.dial_failed();
    assert!(conns.reserve(), "a failed dial's place is free again");
}

#[test]
fn every_link_together_is_bounded_in_connections_and_in_bytes() {
    let budget = Arc::new(Budget::default());
    let links: Vec<Conns> = (0..3).map(|_| Conns::new(budget.clone())).collect();
    for _ in 0..MAX_CONNECTIONS {
        assert!(links[0].reserve() && links[1].reserve());
    }
    assert!(!links[2].reserve(), "256 over all links: a third link's dial is refused");
    links[0].dial_failed();
    assert!(links[2].reserve(), "a place given back on one link is free on another");
    for (link, dialling) in links.iter().zip([MAX_CONNECTIONS - 1, MAX_CONNECTIONS, 1]) {
        for _ in 0..dialling {
            link.dial_failed();
        }
    }
    assert_eq!(budget.connections.load(Ordering::Acquire), 0);
    // Three links each under their own 16 MiB, 36 MiB together: the node's 32 MiB holds.
    let chunk = vec![0u8; (1 << 20) - OVERHEAD];
    let mut held = Vec::new();
    for (l, link) in links.iter().enumerate() {
        for id in 1..=3 {
            let (inbox, shared, end) = opened(link, id);
            for _ in 0..4 {
                if link.deliver(id, &chunk) != Delivered::Queued {
                    assert!(l == 2, "only the third link meets the node's limit");
                }
            }
            held.push((l, inbox, shared, end));
        }
    }
    assert!(budget.queued.load(Ordering::Acquire) <= MAX_TOTAL_QUEUED);
    let aborted: Vec<usize> = held.iter().filter(|h| h.2.aborted()).map(|h| h.0).collect();
    assert!(!aborted.is_empty() && aborted.iter().all(|l| *l == 2), "the link that went over gave way: {aborted:?}");
    drop(held);
    for link in &links {
        link.end();
    }
}

#[test]
fn when_other_links_hold_the_nodes_bytes_only_the_connection_written_to_gives_way() {
    let budget = Arc::new(Budget::default());
    let full: Vec<Conns> = (0..2).map(|_| Conns::new(budget.clone())).collect();
    let chunk = vec![0u8; (1 << 20) - OVERHEAD];
    let mut held = Vec::new();
    for link in &full {
        for id in 1..=4 {
            held.push(opened(link, id));
            for _ in 0..4 {
                assert_eq!(link.deliver(id, &chunk), Delivered::Queued);
            }
        }
    }
    assert_eq!(budget.queued.load(Ordering::Acquire), MAX_TOTAL_QUEUED);
    let third = Conns::new(budget.clone());
    let idle: Vec<Opened> = (1..=16).map(|id| opened(&third, id)).collect();
    let typing = opened(&third, 17);
    assert_eq!(third.deliver(17, b"ls\n"), Delivered::Closed, "no room anywhere, nothing of its link to give way");
    assert!(typing.1.aborted(), "the connection written to is closed");
    assert!(idle.iter().all(|i| !i.1.aborted()), "the idle ones beside it stay (closing them frees nothing)");
    assert!(held.iter().all(|h| !h.1.aborted()), "other links' connections are theirs to limit");
}

#[test]
fn the_servers_close_drains_then_ends_and_the_links_end_shuts_everything() {
    let conns = Conns::default();
    let (inbox, _shared, _end) = opened(&conns, 1);
    assert_eq!(conns.deliver(1, b"last bytes"), Delivered::Queued);
    assert!(conns.close(1));
    assert!(!conns.close(9), "an unknown connection");
    // What was queued is still there for the pump; the queue then ends; late DATA is dropped.
    assert_eq!(smol::block_on(inbox.recv()).unwrap(), Bytes::from_static(b"last bytes"));
    assert!(smol::block_on(inbox.recv()).is_err());
    assert_eq!(conns.deliver(1, b"late"), Delivered::Dropped);

    let (_inbox2, shared2, mut end2) = opened(&conns, 2);
    conns.end();
    assert!(shut(&mut end2), "every connection's socket shut down");
    assert!(!shared2.aborted(), "not counted as falling behind");
    assert!(!conns.reserve(), "nothing new once the link has ended");
    let (ours, mut theirs) = socket();
    assert!(conns.open(3, &ours).is_none());
    assert!(shut(&mut theirs), "a dial that lands after the end is shut down");
}
