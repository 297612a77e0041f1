//! Copying between a TCP socket and the pTCP connection it rides: `braid forward`'s and the
//! daemon's TCP acceleration's one piece of byte shovelling.

use braid_ptcp::{State, StripedConnection};
use mio::net::TcpStream;
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;

/// Bytes copied per read.
const CHUNK: usize = 64 * 1024;

/// TCP keepalive on every forwarded socket, after this long without a segment from its peer.
/// Splitting a connection means braid's own kernel answers each endpoint's keepalives, so
/// neither endpoint learns that the one behind the tunnel vanished (a laptop that slept and left
/// the Wi-Fi, an idle SSH session kept by the server's keepalives). Without its own, the pair
/// held its socket, its pTCP connection and their buffers for good, and a session's table of
/// 256 connections filled over weeks, after which every new connection was refused.
pub const KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(120);

/// Between keepalive probes.
pub const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// Unanswered keepalive probes after which the socket fails: the peer is gone after
/// `KEEPALIVE_IDLE + KEEPALIVE_PROBES * KEEPALIVE_INTERVAL`, 4 minutes.
pub const KEEPALIVE_PROBES: u32 = 4;

/// `TCP_USER_TIMEOUT`: data the peer leaves unacknowledged this long fails the socket too (a
/// half-closed connection whose peer vanished while braid still had data for it).
pub const USER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Turn on the keepalive and user timeout above. Best effort: a socket that refuses them
/// still works, as before.
fn keep_alive(tcp: &TcpStream) {
    let s = socket2::SockRef::from(tcp);
    let ka = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    let _ = s.set_tcp_keepalive(&ka);
    let _ = s.set_tcp_user_timeout(Some(USER_TIMEOUT));
}

/// One forwarded connection: a TCP socket and the pTCP connection it rides.
pub struct Pair {
    tcp: TcpStream,
    id: u16,
    /// Read from TCP, not yet taken by the pTCP connection.
    up: Vec<u8>,
    /// Read from pTCP, not yet written to TCP.
    down: Vec<u8>,
    tcp_eof: bool,
    ptcp_closed: bool,
    tcp_shut: bool,
    /// The TCP socket failed (reset, refused): stop using it.
    tcp_dead: bool,
}

impl Pair {
    /// A pair whose first bytes towards TCP are `down` (read from pTCP before the pair was
    /// made, e.g. behind an acceleration header).
    pub fn with_down(tcp: TcpStream, id: u16, down: Vec<u8>) -> Pair {
        Pair {
            down,
            ..Pair::new(tcp, id)
        }
    }

    /// The pTCP connection's id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The TCP socket (to register or deregister it).
    pub fn tcp_mut(&mut self) -> &mut TcpStream {
        &mut self.tcp
    }

    /// A pair of a TCP socket and pTCP connection `id`; the socket gets TCP keepalive
    /// ([`KEEPALIVE_IDLE`]) and a user timeout ([`USER_TIMEOUT`]), so a peer that vanished
    /// fails it and the pair ends.
    pub fn new(tcp: TcpStream, id: u16) -> Pair {
        keep_alive(&tcp);
        Pair {
            tcp,
            id,
            up: Vec::new(),
            down: Vec::new(),
            tcp_eof: false,
            ptcp_closed: false,
            tcp_shut: false,
            tcp_dead: false,
        }
    }

    /// Dropping the pair from now on resets its TCP connection (`SO_LINGER` 0) instead of
    /// closing it: the application is told its stream broke. A FIN would read as a clean end
    /// of a truncated stream.
    pub fn abort(&self) {
        let _ = socket2::SockRef::from(&self.tcp).set_linger(Some(std::time::Duration::ZERO));
    }

    /// Copies what it can both ways. Returns `true` once the pair is done.
    pub fn pump(&mut self, c: &mut StripedConnection, now: braid_proto::time::Instant) -> bool {
        if c.was_aborted() && !c.peer_stream_whole() {
            // The peer holds no such connection (it restarted, stopped), or never answered
            // for the user timeout: the application gets a reset when the socket is dropped,
            // as from a TCP peer that forgot it, and nothing else first.
            self.abort();
            return true;
        }
        if c.was_aborted() {
            return self.finish_whole(c);
        }
        let mut buf = [0u8; CHUNK];
        // TCP -> pTCP.
        while !self.tcp_dead {
            if !self.up.is_empty() {
                let n = c.write(&self.up);
                self.up.drain(..n);
                if !self.up.is_empty() {
                    break;
                }
            }
            if self.tcp_eof {
                break;
            }
            match self.tcp.read(&mut buf) {
                Ok(0) => self.tcp_eof = true,
                Ok(n) => self.up.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::NotConnected => break,
                Err(_) => self.tcp_dead = true,
            }
        }
        if (self.tcp_eof && self.up.is_empty() || self.tcp_dead) && !self.ptcp_closed {
            c.close(now);
            self.ptcp_closed = true;
        }
        self.copy_down(c, &mut buf);
        let peer_done = c.is_finished() || c.state() == State::Closed;
        if peer_done && self.down.is_empty() && !self.tcp_shut && !self.tcp_dead {
            let _ = self.tcp.shutdown(Shutdown::Write);
            self.tcp_shut = true;
        }
        let tcp_done = self.tcp_dead || (self.tcp_eof && self.tcp_shut);
        if c.state() == State::Closed && !tcp_done {
            // The peer gave up: end the TCP side too.
            let _ = self.tcp.shutdown(Shutdown::Both);
            return true;
        }
        tcp_done && c.state() == State::Closed
    }

    /// Copies pTCP -> TCP what the connection has to read and the socket takes; whether the
    /// socket refused more for now (it is pumped again when it drains).
    fn copy_down(&mut self, c: &mut StripedConnection, buf: &mut [u8; CHUNK]) -> bool {
        while !self.tcp_dead {
            if !self.down.is_empty() {
                match self.tcp.write(&self.down) {
                    Ok(n) => {
                        self.down.drain(..n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::NotConnected => break,
                    Err(_) => self.tcp_dead = true,
                }
                continue;
            }
            let n = c.read(buf);
            if n == 0 {
                break;
            }
            self.down.extend_from_slice(&buf[..n]);
        }
        false
    }

    /// The peer went away after its whole stream was here (it wrote everything, closed, then
    /// stopped): the application gets all of it and a FIN, as from a TCP peer that closed;
    /// what it still sends has nowhere to go and is dropped, and once the pair is dropped the
    /// kernel answers more with a reset. `true` once done; until then a full socket holds the
    /// rest and the pair is pumped again when it drains.
    fn finish_whole(&mut self, c: &mut StripedConnection) -> bool {
        let mut buf = [0u8; CHUNK];
        if self.copy_down(c, &mut buf) {
            return false;
        }
        if !self.tcp_dead && !self.tcp_shut {
            let _ = self.tcp.shutdown(Shutdown::Write);
            self.tcp_shut = true;
        }
        // Read what the application sent, so that closing the socket does not find unread
        // data and reset it, which would drop what is still queued towards the application.
        while !self.tcp_dead && !self.tcp_eof {
            match self.tcp.read(&mut buf) {
                Ok(0) => self.tcp_eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pairs_socket_finds_a_vanished_peer_by_keepalive_and_user_timeout() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_accepted, _) = l.accept().unwrap();
        let pair = Pair::new(TcpStream::from_std(c), 1);
        let s = socket2::SockRef::from(&pair.tcp);
        assert!(s.keepalive().unwrap());
        assert_eq!(s.keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(s.keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(s.keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        assert_eq!(s.tcp_user_timeout().unwrap(), Some(USER_TIMEOUT));
    }
}
