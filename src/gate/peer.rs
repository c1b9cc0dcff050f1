//! Who is at the other end of a TCP connection, for the gate's per-source share: the local
//! user (uid) when the peer is on this host, else the peer's address. A local user may connect
//! from every address of 127/8 but has one uid, so on this host the uid is what one attacker
//! cannot multiply, and the monitors of another user (root's health checks) keep their share
//! however many idle sockets it holds.
//!
//! The uid comes from the kernel's socket table (`NETLINK_SOCK_DIAG`, one exact lookup of the
//! peer's socket by its four-tuple), never from anything the peer sent. The kernel answers the
//! request while it is sent, so the lookup never waits: a socket that is not there (the peer
//! is remote, or already gone), or any other answer, leaves the address as the source.

use std::net::{IpAddr, SocketAddr};

/// Where a connection comes from, as far as the listener can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// A process of this local user holds the other end.
    User(u32),
    /// A peer at this address (on another host, or not found in this one's socket table).
    Addr(IpAddr),
}

/// The source of a connection accepted at `local` from `peer`.
pub fn source(local: Option<SocketAddr>, peer: SocketAddr) -> Source {
    let here = peer.ip().to_canonical().is_loopback() || local.is_some_and(|l| l.ip() == peer.ip());
    match local.filter(|_| here).and_then(|local| peer_uid(local, peer)) {
        Some(uid) => Source::User(uid),
        None => Source::Addr(peer.ip()),
    }
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const HEADER: usize = 16;
/// `struct inet_diag_req_v2`.
const REQUEST: usize = 56;
/// `struct inet_diag_msg` up to and with `idiag_uid`.
const ANSWER_TO_UID: usize = 68;
/// Matches any socket's cookie (`INET_DIAG_NOCOOKIE`).
const NO_COOKIE: [u8; 8] = [0xff; 8];

/// The request for the socket whose own end is `peer` and whose other end is `local`: the
/// client's socket of a connection this host accepted. `None` for mixed families.
pub fn request(local: SocketAddr, peer: SocketAddr, seq: u32) -> Option<Vec<u8>> {
    let (family, src, dst) = match (peer.ip().to_canonical(), local.ip().to_canonical()) {
        (IpAddr::V4(p), IpAddr::V4(l)) => (2u8, padded(&p.octets()), padded(&l.octets())),
        (IpAddr::V6(p), IpAddr::V6(l)) => (10u8, p.octets(), l.octets()),
        _ => return None,
    };
    let len = (HEADER + REQUEST) as u32;
    let mut m = Vec::with_capacity(HEADER + REQUEST);
    m.extend_from_slice(&len.to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // to the kernel
    m.extend_from_slice(&[family, 6 /* TCP */, 0, 0]);
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    m.extend_from_slice(&peer.port().to_be_bytes());
    m.extend_from_slice(&local.port().to_be_bytes());
    m.extend_from_slice(&src);
    m.extend_from_slice(&dst);
    m.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    m.extend_from_slice(&NO_COOKIE);
    Some(m)
}

fn padded(v4: &[u8; 4]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(v4);
    a
}

/// The uid in the kernel's answer to request `seq` for the socket whose own port is `sport`
/// and whose peer's is `dport`; `None` for an error, a short or foreign message.
pub fn uid_in(answer: &[u8], seq: u32, sport: u16, dport: u16) -> Option<u32> {
    let u16_at = |at: usize| Some(u16::from_ne_bytes(answer.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_ne_bytes(answer.get(at..at + 4)?.try_into().ok()?));
    let be16_at = |at: usize| Some(u16::from_be_bytes(answer.get(at..at + 2)?.try_into().ok()?));
    let len = usize::try_from(u32_at(0)?).ok()?;
    if len < HEADER + ANSWER_TO_UID || len > answer.len() || u32_at(8)? != seq {
        return None;
    }
    if u16_at(4)? != SOCK_DIAG_BY_FAMILY {
        return None;
    }
    // The message's socket id starts 4 bytes in: its own port, then its peer's.
    (be16_at(HEADER + 4)? == sport && be16_at(HEADER + 6)? == dport).then_some(())?;
    u32_at(HEADER + 64)
}

/// The uid of the local process's socket at the other end of `local` ← `peer`.
fn peer_uid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    use rustix::net::{netlink, recv, sendto, socket_with, AddressFamily, RecvFlags, SendFlags};
    use rustix::net::{SocketFlags, SocketType};
    let seq = 1;
    let ask = request(local, peer, seq)?;
    let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
    let fd = socket_with(AddressFamily::NETLINK, SocketType::DGRAM, flags, Some(netlink::SOCK_DIAG)).ok()?;
    sendto(&fd, &ask, SendFlags::empty(), &netlink::SocketAddrNetlink::new(0, 0)).ok()?;
    let mut answer = [0u8; 256];
    let (got, _) = recv(&fd, &mut answer[..], RecvFlags::DONTWAIT).ok()?;
    uid_in(answer.get(..got)?, seq, peer.port(), local.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NLMSG_ERROR: u16 = 2;

    fn answer(seq: u32, kind: u16, sport: u16, dport: u16, uid: u32) -> Vec<u8> {
        let mut m = vec![0u8; HEADER + 72];
        m[..4].copy_from_slice(&((HEADER + 72) as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        m[8..12].copy_from_slice(&seq.to_ne_bytes());
        m[HEADER + 4..HEADER + 6].copy_from_slice(&sport.to_be_bytes());
        m[HEADER + 6..HEADER + 8].copy_from_slice(&dport.to_be_bytes());
        m[HEADER + 64..HEADER + 68].copy_from_slice(&uid.to_ne_bytes());
        m
    }

    #[test]
    fn only_the_answer_to_this_request_for_this_socket_gives_a_uid() {
        let good = answer(7, SOCK_DIAG_BY_FAMILY, 40000, 10250, 65534);
        let mut lying_length = good.clone();
        lying_length[..4].copy_from_slice(&1000u32.to_ne_bytes());
        let cases: &[(&str, &[u8], Option<u32>)] = &[
            ("the answer", &good, Some(65534)),
            ("another request's", &answer(8, SOCK_DIAG_BY_FAMILY, 40000, 10250, 1), None),
            ("an error", &answer(7, NLMSG_ERROR, 40000, 10250, 1), None),
            ("another socket's", &answer(7, SOCK_DIAG_BY_FAMILY, 40001, 10250, 1), None),
            ("cut short", &good[..HEADER + 60], None),
            ("a length past the end", &lying_length, None),
            ("nothing", &[], None),
        ];
        for (what, bytes, want) in cases {
            assert_eq!(uid_in(bytes, 7, 40000, 10250), *want, "{what}");
        }
    }

    #[test]
    fn the_request_names_the_clients_socket_by_its_own_end_first() {
        let (local, peer) = ("127.0.0.1:10250".parse().unwrap(), "127.0.0.9:40000".parse().unwrap());
        let m = request(local, peer, 3).unwrap();
        assert_eq!(m.len(), HEADER + REQUEST);
        assert_eq!(m[HEADER], 2, "AF_INET");
        assert_eq!(&m[HEADER + 8..HEADER + 10], &40000u16.to_be_bytes(), "its own port: the peer's");
        assert_eq!(&m[HEADER + 10..HEADER + 12], &10250u16.to_be_bytes());
        assert_eq!(&m[HEADER + 12..HEADER + 16], &[127, 0, 0, 9]);
        assert_eq!(&m[HEADER + 28..HEADER + 32], &[127, 0, 0, 1]);
        let mixed = request("[::1]:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap(), 1);
        assert_eq!(mixed, None, "families that cannot be one connection");
    }

    #[test]
    fn a_connection_from_this_process_is_its_users_and_a_remote_one_its_address() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        let me = rustix::process::geteuid().as_raw();
        assert_eq!(source(accepted.local_addr().ok(), peer), Source::User(me));
        // A loopback peer this host holds no socket for (gone, or never there): its address.
        let gone: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(source(accepted.local_addr().ok(), gone), Source::Addr(gone.ip()));
        // A peer on another host: its address, without a lookup.
        let far: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        assert_eq!(source(Some("192.0.2.1:10250".parse().unwrap()), far), Source::Addr(far.ip()));
    }
}
