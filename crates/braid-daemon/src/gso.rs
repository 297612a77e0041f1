//! UDP segmentation offload (GSO) for the datagrams braid sends: many datagrams of one path in
//! one `sendmsg` (`UDP_SEGMENT`, through `quinn-udp`), the kernel cutting them apart. The
//! striped tunnel's batches, the daemon's pTCP datagrams and `braid send`/`recv`/`forward`
//! ([`crate::ptcp_node`]) all go out this way.

use braid_session::Role;
use mio::net::UdpSocket;
use std::io;
use std::net::SocketAddr;

/// Datagrams per GSO send at most (the kernel's UDP_MAX_SEGMENTS).
pub const MAX_BATCH: usize = 64;
/// Bytes per GSO send at most: the segments together must fit one IP packet's length field.
pub const MAX_BATCH_BYTES: usize = 65_000;

/// The GSO state of each socket, `None` where there is no socket.
pub fn states(sockets: &[Option<UdpSocket>]) -> io::Result<Vec<Option<quinn_udp::UdpSocketState>>> {
    sockets
        .iter()
        .map(|s| {
            s.as_ref()
                .map(|s| quinn_udp::UdpSocketState::new(quinn_udp::UdpSockRef::from(s)))
                .transpose()
        })
        .collect()
}

/// Turns the kernel's receive coalescing (`UDP_GRO`, which [`states`] switches on) off again
/// on `socket`, for a reader that takes one datagram per `recv_from`: coalesced, back-to-back
/// datagrams would reach it as one blob that parses as nothing (found when `braid send` over
/// a plain veth never saw the server's handshake response, which arrived glued to a probe).
pub fn disable_gro(socket: &UdpSocket) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    crate::net::set_int_option(socket.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 0)
}

/// How many datagrams socket `i` takes in one GSO send (1 where it has no GSO).
pub fn segments(gso: &[Option<quinn_udp::UdpSocketState>], i: usize) -> usize {
    gso.get(i)
        .and_then(Option::as_ref)
        .map_or(1, |g| g.max_gso_segments())
        .clamp(1, MAX_BATCH)
}

/// Sends `contents`, `count` datagrams of `segment` bytes (the last may be shorter), to `to`
/// on socket `i` in one GSO send. `Err(None)`: no such socket or no address to send to;
/// `Err(Some(e))`: the kernel refused.
pub fn send(
    sockets: &[Option<UdpSocket>],
    gso: &[Option<quinn_udp::UdpSocketState>],
    i: usize,
    to: Option<SocketAddr>,
    contents: &[u8],
    segment: usize,
    count: usize,
) -> Result<(), Option<io::Error>> {
    let (Some(Some(sock)), Some(Some(state)), Some(to)) = (sockets.get(i), gso.get(i), to) else {
        return Err(None);
    };
    let transmit = quinn_udp::Transmit {
        destination: to,
        ecn: None,
        contents,
        segment_size: (count > 1).then_some(segment),
        src_ip: None,
    };
    state
        .try_send(quinn_udp::UdpSockRef::from(sock), &transmit)
        .map_err(Some)
}

/// Datagrams of one path gathered back to back for one GSO send: all the size of the first
/// but a shorter last one (the kernel's rule for `UDP_SEGMENT`).
#[derive(Debug, Default)]
pub struct Batch {
    buf: Vec<u8>,
    segment: usize,
    count: usize,
}

impl Batch {
    /// Adds datagram `d` to the batch, which takes at most `max` datagrams; `flush` sends the
    /// batch (then [`Batch::clear`] it) when `d` cannot join it, and after `d` when `d` must
    /// be the last.
    pub fn push(&mut self, d: &[u8], max: usize, mut flush: impl FnMut(&mut Batch)) {
        let max = max.min(MAX_BATCH_BYTES / d.len().max(1)).max(1);
        if self.count > 0 && (d.len() > self.segment || self.count >= max) {
            flush(self);
        }
        if self.count == 0 {
            self.segment = d.len();
        }
        self.buf.extend_from_slice(d);
        self.count += 1;
        if d.len() < self.segment {
            flush(self);
        }
    }

    /// The datagrams, back to back.
    pub fn contents(&self) -> &[u8] {
        &self.buf
    }

    /// The size of every datagram but a shorter last one.
    pub fn segment(&self) -> usize {
        self.segment
    }

    /// Datagrams in the batch.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Empties the batch (after it was sent).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.count = 0;
    }
}

/// How one GSO send of a batch went: `Err(None)`, no socket or no peer address for the path;
/// `Err(Some(e))`, the kernel refused.
pub type Sent = Result<(), Option<io::Error>>;

/// Where a path's datagrams go: the sockets and their GSO states, which socket a path uses
/// (a client's own per path, a server's one: [`crate::sock_index`]), and each path's peer.
pub struct Route<'a> {
    /// The UDP sockets.
    pub sockets: &'a [Option<UdpSocket>],
    /// Their GSO states.
    pub gso: &'a [Option<quinn_udp::UdpSocketState>],
    /// This end's role.
    pub role: Role,
    /// Each path's peer address, if known.
    pub peers: &'a [Option<SocketAddr>],
}

impl Route<'_> {
    /// Sends batch `b` of `path`, if it holds anything, and empties it: how many datagrams it
    /// held, and how the send went.
    fn send(&self, path: usize, b: &mut Batch) -> Option<(usize, Sent)> {
        if b.count() == 0 {
            return None;
        }
        let to = self.peers.get(path).copied().flatten();
        let i = crate::sock_index(self.role, path);
        let sent = send(
            self.sockets,
            self.gso,
            i,
            to,
            b.contents(),
            b.segment(),
            b.count(),
        );
        let n = b.count();
        b.clear();
        Some((n, sent))
    }
}

/// One [`Batch`] per path: datagrams handed over one at a time go out in GSO sends of as many
/// as each path's socket takes.
#[derive(Debug, Default)]
pub struct PathBatches(Vec<Batch>);

impl PathBatches {
    /// Adds datagram `d` of `path`, sending the path's batch by `route` when it is full;
    /// `outcome` hears of every send (datagrams, result).
    pub fn push(
        &mut self,
        route: &Route,
        path: usize,
        d: &[u8],
        mut outcome: impl FnMut(usize, Sent),
    ) {
        if self.0.len() <= path {
            self.0.resize_with(path + 1, Batch::default);
        }
        let max = segments(route.gso, crate::sock_index(route.role, path));
        self.0[path].push(d, max, |b| {
            if let Some((n, sent)) = route.send(path, b) {
                outcome(n, sent);
            }
        });
    }

    /// Sends what every path's batch holds.
    pub fn flush(&mut self, route: &Route, mut outcome: impl FnMut(usize, Sent)) {
        for (path, b) in self.0.iter_mut().enumerate() {
            if let Some((n, sent)) = route.send(path, b) {
                outcome(n, sent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batches `push` hands to `flush` for these datagram sizes (and the one left at the
    /// end), as (segment, count, bytes).
    fn batches(sizes: &[usize], max: usize) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        let mut b = Batch::default();
        for &n in sizes {
            b.push(&vec![0u8; n], max, |b| {
                out.push((b.segment(), b.count(), b.contents().len()));
                b.clear();
            });
        }
        if b.count() > 0 {
            out.push((b.segment(), b.count(), b.contents().len()));
        }
        out
    }

    #[test]
    fn a_batch_holds_equal_datagrams_and_one_shorter_last() {
        // Equal ones batch; a shorter one ends the batch; a longer one starts a new one.
        assert_eq!(
            batches(&[100, 100, 100, 60, 100, 120], 64),
            vec![(100, 4, 360), (100, 1, 100), (120, 1, 120)]
        );
        // At most `max` datagrams, and never more than MAX_BATCH_BYTES.
        assert_eq!(
            batches(&[10; 5], 2),
            vec![(10, 2, 20), (10, 2, 20), (10, 1, 10)]
        );
        let big = batches(&[1500; 50], 64);
        assert!(
            big.iter().all(|&(_, _, bytes)| bytes <= MAX_BATCH_BYTES),
            "{big:?}"
        );
        assert_eq!(big.iter().map(|&(_, n, _)| n).sum::<usize>(), 50);
    }
}
