//! The outer framing: what travels in a UDP datagram.
//!
//! Every datagram is a Noise handshake message, a cookie reply, or a transport message whose
//! ciphertext, once decrypted, is one inner packet ([`crate::Repr`]: data, marker, feedback,
//! probe). Inner packets never travel in the clear. Like the inner format, byte 0 is the version
//! and byte 1 the kind; outer kinds are 0x10 and up so the two can never be confused.
//!
//! ```text
//!  offset size  HandshakeInit (0x10)   HandshakeResponse (0x11)  Transport (0x12)
//!  ------ ----  ---------------------  ------------------------  -------------------------
//!    0     1    version = 1            version = 1               version = 1
//!    1     1    kind = 0x10            kind = 0x11               kind = 0x12
//!    2     1    path (< 64)            path (< 64)               path (< 64)
//!    3     1    flags = 0              flags = 0                 flags = 0
//!    4     4    sender_index u32       sender_index u32          receiver_index u32
//!    8     ..   Noise message 1        receiver_index u32        counter u64
//!   12     ..                          Noise message 2
//!   16     ..                                                    ciphertext + 16-byte tag
//!  end-32  16   mac1
//!  end-16  16   mac2
//!
//!  offset size  CookieReply (0x13): 64 bytes
//!  ------ ----  ----------------------------------------------
//!    0     4    version = 1, kind = 0x13, path, flags = 0
//!    4     4    receiver_index u32 (the initiation's sender_index)
//!    8    24    nonce
//!   32    32    encrypted cookie (16 bytes) + 16-byte tag
//! ```
//!
//! A transport message's AEAD nonce is `path << 56 | counter`, so the path and the counter are
//! authenticated through the nonce: change either and the tag fails. Counters are per path and
//! below 2^56.
//!
//! An initiation ends in WireGuard's two cookie MACs (the WireGuard paper, section 5.4.4):
//! `mac1` over everything before it, keyed by the responder's public key, and `mac2` over
//! everything before it (`mac1` included), keyed by a cookie the responder sent in a cookie
//! reply, or zero. This crate only frames them; `braid_session::cookie` computes and checks them.

use crate::{check_path, read, write, Error, VERSION};
use braid_proto::PathId;

/// Bytes before the ciphertext of a transport message.
pub const TRANSPORT_HEADER_LEN: usize = 16;
/// Bytes before the Noise message of a handshake initiation.
pub const INIT_HEADER_LEN: usize = 8;
/// Bytes before the Noise message of a handshake response.
pub const RESPONSE_HEADER_LEN: usize = 12;
/// The AEAD tag at the end of every transport ciphertext.
pub const TAG_LEN: usize = 16;
/// Length of each of an initiation's two cookie MACs.
pub const MAC_LEN: usize = 16;
/// Bytes of an initiation after its Noise message: `mac1` and `mac2`.
pub const INIT_MACS_LEN: usize = 2 * MAC_LEN;
/// Length of a cookie reply.
pub const COOKIE_REPLY_LEN: usize = 64;
/// Length of a cookie reply's nonce (XChaCha20-Poly1305).
pub const COOKIE_NONCE_LEN: usize = 24;
/// Length of a cookie reply's encrypted cookie: the 16-byte cookie and its 16-byte tag.
pub const ENCRYPTED_COOKIE_LEN: usize = 32;
/// Counters are below this (the top byte of the nonce is the path).
pub const MAX_COUNTER: u64 = 1 << 56;

/// Outer kind bytes.
pub mod kind {
    /// Noise handshake message 1.
    pub const HANDSHAKE_INIT: u8 = 0x10;
    /// Noise handshake message 2.
    pub const HANDSHAKE_RESPONSE: u8 = 0x11;
    /// Encrypted inner packet.
    pub const TRANSPORT: u8 = 0x12;
    /// A responder under load answers an initiation with a cookie instead of a handshake.
    pub const COOKIE_REPLY: u8 = 0x13;
}

/// A parsed outer datagram; the byte slices borrow from the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outer<'a> {
    /// Noise handshake message 1.
    HandshakeInit {
        /// The path it travels on.
        path: PathId,
        /// The initiator's index for this handshake (echoed in the response).
        sender_index: u32,
        /// The Noise message.
        noise: &'a [u8],
        /// MAC of everything before it, keyed by the responder's public key.
        mac1: [u8; MAC_LEN],
        /// MAC of everything before it, keyed by a cookie from the responder; or zero.
        mac2: [u8; MAC_LEN],
    },
    /// Noise handshake message 2.
    HandshakeResponse {
        /// The path it travels on.
        path: PathId,
        /// The responder's index (the initiator puts it in transport messages to the responder).
        sender_index: u32,
        /// The initiator's index from the initiation.
        receiver_index: u32,
        /// The Noise message.
        noise: &'a [u8],
    },
    /// An encrypted inner packet.
    Transport {
        /// The path it travels on.
        path: PathId,
        /// The receiver's session index.
        receiver_index: u32,
        /// The per-path counter (the nonce's low 56 bits).
        counter: u64,
        /// Ciphertext including the tag.
        ciphertext: &'a [u8],
    },
    /// A responder's cookie for the initiator's source address, sent instead of a handshake
    /// response while the responder is under load.
    CookieReply {
        /// The path of the initiation it answers.
        path: PathId,
        /// The initiation's sender index.
        receiver_index: u32,
        /// XChaCha20-Poly1305 nonce.
        nonce: [u8; COOKIE_NONCE_LEN],
        /// The cookie, encrypted with the initiation's `mac1` as associated data.
        cookie: [u8; ENCRYPTED_COOKIE_LEN],
    },
}

impl<'a> Outer<'a> {
    /// Parses a datagram. Never panics.
    pub fn parse(bytes: &'a [u8]) -> Result<Outer<'a>, Error> {
        let [version, kind, path, flags] = read::<4>(bytes, 0)?;
        if version != VERSION {
            return Err(Error::UnknownVersion(version));
        }
        let path = PathId(path);
        check_path(path)?;
        if flags != 0 {
            return Err(Error::Reserved);
        }
        let u32_at = |at| read::<4>(bytes, at).map(u32::from_be_bytes);
        match kind {
            kind::HANDSHAKE_INIT => {
                let macs_at = bytes
                    .len()
                    .checked_sub(INIT_MACS_LEN)
                    .filter(|&at| at >= INIT_HEADER_LEN)
                    .ok_or(Error::Truncated)?;
                Ok(Outer::HandshakeInit {
                    path,
                    sender_index: u32_at(4)?,
                    noise: &bytes[INIT_HEADER_LEN..macs_at],
                    mac1: read(bytes, macs_at)?,
                    mac2: read(bytes, macs_at + MAC_LEN)?,
                })
            }
            kind::HANDSHAKE_RESPONSE => Ok(Outer::HandshakeResponse {
                path,
                sender_index: u32_at(4)?,
                receiver_index: u32_at(8)?,
                noise: bytes.get(RESPONSE_HEADER_LEN..).ok_or(Error::Truncated)?,
            }),
            kind::TRANSPORT => {
                let counter = u64::from_be_bytes(read::<8>(bytes, 8)?);
                if counter >= MAX_COUNTER {
                    return Err(Error::BadLength);
                }
                let ciphertext = bytes.get(TRANSPORT_HEADER_LEN..).ok_or(Error::Truncated)?;
                if ciphertext.len() < TAG_LEN {
                    return Err(Error::Truncated);
                }
                Ok(Outer::Transport {
                    path,
                    receiver_index: u32_at(4)?,
                    counter,
                    ciphertext,
                })
            }
            kind::COOKIE_REPLY => {
                if bytes.len() != COOKIE_REPLY_LEN {
                    return Err(Error::BadLength);
                }
                Ok(Outer::CookieReply {
                    path,
                    receiver_index: u32_at(4)?,
                    nonce: read(bytes, 8)?,
                    cookie: read(bytes, 8 + COOKIE_NONCE_LEN)?,
                })
            }
            other => Err(Error::UnknownKind(other)),
        }
    }

    /// Length of the emitted datagram.
    pub fn buffer_len(&self) -> usize {
        match self {
            Outer::HandshakeInit { noise, .. } => INIT_HEADER_LEN + noise.len() + INIT_MACS_LEN,
            Outer::HandshakeResponse { noise, .. } => RESPONSE_HEADER_LEN + noise.len(),
            Outer::Transport { ciphertext, .. } => TRANSPORT_HEADER_LEN + ciphertext.len(),
            Outer::CookieReply { .. } => COOKIE_REPLY_LEN,
        }
    }

    /// Writes the datagram at the start of `buf`; returns its length.
    pub fn emit_into(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall);
        }
        match *self {
            Outer::HandshakeInit {
                path,
                sender_index,
                noise,
                mac1,
                mac2,
            } => {
                emit_prefix(buf, kind::HANDSHAKE_INIT, path)?;
                write(buf, 4, sender_index.to_be_bytes())?;
                copy(buf, INIT_HEADER_LEN, noise)?;
                write(buf, len - INIT_MACS_LEN, mac1)?;
                write(buf, len - MAC_LEN, mac2)?;
            }
            Outer::HandshakeResponse {
                path,
                sender_index,
                receiver_index,
                noise,
            } => {
                emit_prefix(buf, kind::HANDSHAKE_RESPONSE, path)?;
                write(buf, 4, sender_index.to_be_bytes())?;
                write(buf, 8, receiver_index.to_be_bytes())?;
                copy(buf, RESPONSE_HEADER_LEN, noise)?;
            }
            Outer::Transport {
                path,
                receiver_index,
                counter,
                ciphertext,
            } => {
                emit_transport_header(buf, path, receiver_index, counter)?;
                copy(buf, TRANSPORT_HEADER_LEN, ciphertext)?;
            }
            Outer::CookieReply {
                path,
                receiver_index,
                nonce,
                cookie,
            } => {
                emit_prefix(buf, kind::COOKIE_REPLY, path)?;
                write(buf, 4, receiver_index.to_be_bytes())?;
                write(buf, 8, nonce)?;
                write(buf, 8 + COOKIE_NONCE_LEN, cookie)?;
            }
        }
        Ok(len)
    }
}

/// Writes a transport header into the first [`TRANSPORT_HEADER_LEN`] bytes of `buf`, for a
/// caller that encrypts straight into the rest of the buffer.
pub fn emit_transport_header(
    buf: &mut [u8],
    path: PathId,
    receiver_index: u32,
    counter: u64,
) -> Result<(), Error> {
    if counter >= MAX_COUNTER {
        return Err(Error::BadLength);
    }
    emit_prefix(buf, kind::TRANSPORT, path)?;
    write(buf, 4, receiver_index.to_be_bytes())?;
    write(buf, 8, counter.to_be_bytes())
}

/// The AEAD nonce of a transport message.
pub fn nonce(path: PathId, counter: u64) -> u64 {
    (u64::from(path.0) << 56) | (counter & (MAX_COUNTER - 1))
}

fn emit_prefix(buf: &mut [u8], kind: u8, path: PathId) -> Result<(), Error> {
    check_path(path)?;
    write(buf, 0, [VERSION, kind, path.0, 0])
}

fn copy(buf: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), Error> {
    buf.get_mut(at..at + bytes.len())
        .ok_or(Error::BufferTooSmall)?
        .copy_from_slice(bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn vectors() {
        let t = Outer::Transport {
            path: PathId(3),
            receiver_index: 0xAABB_CCDD,
            counter: 5,
            ciphertext: &[9; 16],
        };
        let mut buf = [0u8; 64];
        let n = t.emit_into(&mut buf).unwrap();
        assert_eq!(
            &buf[..16],
            &[1, 0x12, 3, 0, 0xAA, 0xBB, 0xCC, 0xDD, 0, 0, 0, 0, 0, 0, 0, 5]
        );
        assert_eq!(Outer::parse(&buf[..n]), Ok(t));
        assert_eq!(Outer::parse(&buf[..n - 1]), Err(Error::Truncated));
        assert_eq!(nonce(PathId(3), 5), 0x0300_0000_0000_0005);
        let mut bad = buf;
        bad[8] = 1; // counter >= 2^56
        assert_eq!(Outer::parse(&bad[..n]), Err(Error::BadLength));
        assert_eq!(Outer::parse(&[1, 1, 0, 0]), Err(Error::UnknownKind(1)));
        // An initiation's last 32 bytes are its MACs; shorter than the header and both MACs
        // is truncated.
        let mut init = vec![1, 0x10, 2, 0, 0, 0, 0, 7];
        init.extend([5u8; 3]);
        init.extend([0xAA; 16]);
        init.extend([0xBB; 16]);
        assert_eq!(
            Outer::parse(&init),
            Ok(Outer::HandshakeInit {
                path: PathId(2),
                sender_index: 7,
                noise: &[5; 3],
                mac1: [0xAA; 16],
                mac2: [0xBB; 16],
            })
        );
        assert_eq!(Outer::parse(&init[..39]), Err(Error::Truncated));
        let mut reply = vec![1, 0x13, 1, 0, 0, 0, 0, 7];
        reply.extend([3u8; 24]);
        reply.extend([4u8; 32]);
        assert_eq!(
            Outer::parse(&reply),
            Ok(Outer::CookieReply {
                path: PathId(1),
                receiver_index: 7,
                nonce: [3; 24],
                cookie: [4; 32],
            })
        );
        assert_eq!(Outer::parse(&reply[..63]), Err(Error::BadLength));
        assert_eq!(Outer::parse(&[1, 0x10, 64, 0]), Err(Error::BadPath(64)));
    }

    proptest! {
        #[test]
        fn round_trip_and_never_panics(
            kind in 0x10u8..=0x13,
            path in 0u8..64,
            a in any::<u32>(),
            b in any::<u32>(),
            counter in 0u64..MAX_COUNTER,
            body in proptest::collection::vec(any::<u8>(), 16..200),
            junk in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mac1: [u8; 16] = body[..16].try_into().unwrap();
            let mac2 = mac1.map(|x| x ^ 0x5A);
            let outer = match kind {
                0x10 => Outer::HandshakeInit { path: PathId(path), sender_index: a, noise: &body, mac1, mac2 },
                0x13 => Outer::CookieReply {
                    path: PathId(path),
                    receiver_index: a,
                    nonce: std::array::from_fn(|i| body[i % body.len()]),
                    cookie: std::array::from_fn(|i| body[(i + 3) % body.len()]),
                },
                0x11 => Outer::HandshakeResponse { path: PathId(path), sender_index: a, receiver_index: b, noise: &body },
                _ => Outer::Transport { path: PathId(path), receiver_index: a, counter, ciphertext: &body },
            };
            let mut buf = vec![0u8; outer.buffer_len()];
            outer.emit_into(&mut buf).unwrap();
            prop_assert_eq!(Outer::parse(&buf), Ok(outer));
            let _ = Outer::parse(&junk);
        }
    }
}
