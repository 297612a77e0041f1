//! TCP/IP header compression inside the tunnel (braid's own; `[bond] compress_headers`).
//!
//! Every full-size TCP segment through the bond carries 52 bytes of IPv4 and TCP header (72
//! with IPv6), and braid adds 72 of its own. Most of those 52 bytes never change within a
//! flow: addresses, ports, the TTL, the header layout. Like RFC 1144 and ROHC (RFC 5795), the
//! sender keeps a *context* per flow that the receiver holds too, and sends only what changes.
//! Unlike them it sends no deltas: every compressed header carries its changing fields whole
//! (ECN bits, IP ID, sequence and acknowledgement numbers, flags, window, checksum and
//! timestamps), so a lost, reordered or duplicated packet never breaks the next one, which
//! matters on a bond whose paths reorder by design. An IPv4 header with timestamps goes from
//! 52 bytes to 26 and an IPv6 one from 72 to 24: 1.7% and 3.2% of a 1,500-byte packet.
//!
//! - **Contexts.** The sender numbers each flow's *template* (the packet's headers with every
//!   changing field, the IP lengths and the IPv4 checksum zeroed) with a context id (0-255)
//!   and a 4-bit generation, and sends it to the receiver in a `ContextInstall` message
//!   (`braid_wire::Repr::ContextInstall`), again after [`INSTALL_EVERY`] and then at
//!   doubling intervals while its flow sends and no `ContextAck` has come back. Until then the
//!   flow's packets go whole. A context passes to a new flow, in its next generation, only
//!   once its own flow has been idle for [`REUSE_AFTER`]; with every context busy, a new flow
//!   goes whole. The receiver ignores a late install of an earlier generation, and answers a
//!   packet it cannot rebuild (a generation it does not hold) with an acknowledgement of what it
//!   holds, which makes the sender install the context again.
//! - **What is compressed.** IPv4 without options and not fragmented, or IPv6 without
//!   extension headers, carrying TCP whose options are none or exactly the timestamps
//!   (`NOP, NOP, TS`), without SYN, RST or URG. Anything else goes whole: handshakes, SACK
//!   blocks, UDP. A packet whose lengths disagree with its bytes goes whole too.
//! - **Exact by construction, and checked.** The sender rebuilds every header it compresses
//!   from the template and the compressed fields, as the receiver will, and sends the packet
//!   whole if that is not byte for byte the original (an IPv4 checksum left to offload, say).
//!   The receiver recomputes only the IP lengths and the IPv4 header checksum; the TCP checksum
//!   travels as it was, so end-to-end integrity is TCP's, as without compression.
//! - **On the wire.** A compressed packet is a data packet whose payload begins with a byte
//!   whose high nibble is 1 (an IP packet's is 4 or 6) and whose low nibble is the generation,
//!   then the context id, then the changing fields in a fixed order, then the TCP payload.
//!
//! Sans-IO, like the rest of the session: [`Compressor::compress`] and
//! [`Decompressor::decompress`] take bytes and `now`; the endpoint sends what
//! [`Compressor::poll_install`] and [`Decompressor::poll_ack`] hand it.

use braid_proto::time::{Duration, Instant};
use braid_wire::MAX_TEMPLATE_LEN;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};

/// Contexts each direction of a session holds at most.
pub const CONTEXTS: usize = 256;

/// Context generations: a context's generation goes up by one (mod 16) each time it is
/// given to another flow.
pub const GENERATIONS: u8 = braid_wire::CONTEXT_GENERATIONS;

/// The high nibble of a compressed payload's first byte.
const TAG: u8 = 0x10;

/// Bytes in front of a compressed packet's changing fields: tag and generation, context id.
pub const PREFIX_LEN: usize = 2;

/// A context's install goes again after this long without an acknowledgement (if its flow
/// sends), the wait doubling each time up to [`INSTALL_EVERY`] x 32, for at most
/// [`MAX_INSTALLS`] installs; after that the flow goes whole.
pub const INSTALL_EVERY: Duration = Duration::from_millis(50);

/// Installs of one context at the doubling intervals; after these, one every
/// [`INSTALL_RETRY`] (a flow that started during an outage gets compressed once it is over).
pub const MAX_INSTALLS: u8 = 8;

/// The wait between installs after [`MAX_INSTALLS`] went unacknowledged.
pub const INSTALL_RETRY: Duration = Duration::from_secs(10);

/// A context is given to another flow only once its flow has sent nothing for this long, so
/// that more than 256 busy flows do not take contexts from each other (the newest go whole
/// instead) and a context changes hands at most once per 2 s: a packet of the old flow would
/// have to wait in flight through 16 changes of hands (32 s) before its generation came round
/// again, and even then the TCP checksum stands between it and the wrong flow.
pub const REUSE_AFTER: Duration = Duration::from_secs(2);

const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const URG: u8 = 0x20;

/// The timestamps option as Linux sends it: two NOPs, kind 8, length 10.
const TS_OPTION: [u8; 4] = [1, 1, 8, 10];

/// The header layouts that compress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    V4,
    V4Ts,
    V6,
    V6Ts,
}

impl Layout {
    fn ip_len(self) -> usize {
        match self {
            Layout::V4 | Layout::V4Ts => 20,
            Layout::V6 | Layout::V6Ts => 40,
        }
    }

    fn has_ts(self) -> bool {
        matches!(self, Layout::V4Ts | Layout::V6Ts)
    }

    /// IP and TCP header bytes.
    fn header_len(self) -> usize {
        self.ip_len() + if self.has_ts() { 32 } else { 20 }
    }

    fn is_v6(self) -> bool {
        matches!(self, Layout::V6 | Layout::V6Ts)
    }

    /// The changing fields every compressed header carries, `(offset, length)` in the
    /// uncompressed header, in their order on the wire: IPv4's TOS byte and ID, then TCP's
    /// sequence and acknowledgement numbers, flags, window and checksum, then the two
    /// timestamps. IPv6's traffic class straddles bytes 0 and 1 and travels first, as one
    /// byte, outside this list. Spelled out per layout: the per-packet loops run over a
    /// static slice (built from the parts as an iterator they cost 17-19% more, criterion).
    fn fields(self) -> &'static [(usize, usize)] {
        const V4: [(usize, usize); 7] =
            [(1, 1), (4, 2), (24, 4), (28, 4), (33, 1), (34, 2), (36, 2)];
        const V4_TS: [(usize, usize); 9] = [
            (1, 1),
            (4, 2),
            (24, 4),
            (28, 4),
            (33, 1),
            (34, 2),
            (36, 2),
            (44, 4),
            (48, 4),
        ];
        const V6: [(usize, usize); 5] = [(44, 4), (48, 4), (53, 1), (54, 2), (56, 2)];
        const V6_TS: [(usize, usize); 7] = [
            (44, 4),
            (48, 4),
            (53, 1),
            (54, 2),
            (56, 2),
            (64, 4),
            (68, 4),
        ];
        match self {
            Layout::V4 => &V4,
            Layout::V4Ts => &V4_TS,
            Layout::V6 => &V6,
            Layout::V6Ts => &V6_TS,
        }
    }

    /// Bytes of changing fields in a compressed header.
    fn fields_len(self) -> usize {
        usize::from(self.is_v6()) + self.fields().iter().map(|&(_, n)| n).sum::<usize>()
    }

    /// The whole compressed header: prefix and changing fields.
    fn compressed_len(self) -> usize {
        PREFIX_LEN + self.fields_len()
    }
}

/// The layout of `header` (the first bytes of an IP packet, or a template), if it is one that
/// compresses. Lengths are not checked here.
fn layout_of(h: &[u8]) -> Option<Layout> {
    let (ip, v6) = match h.first()? >> 4 {
        4 => {
            // No IP options, TCP, and not a fragment (DF may be set).
            let b = h.get(..20)?;
            if b[0] != 0x45 || b[9] != 6 || u16::from_be_bytes([b[6], b[7]]) & 0x3fff != 0 {
                return None;
            }
            (20, false)
        }
        6 => {
            // TCP right after the fixed header: no extension headers.
            if *h.get(6)? != 6 {
                return None;
            }
            (40, true)
        }
        _ => return None,
    };
    let tcp = h.get(ip..ip + 20)?;
    // Reserved bits and the accurate-ECN bit zero; no SYN, RST or URG; no urgent pointer.
    if tcp[12] & 0x0f != 0 || tcp[13] & (SYN | RST | URG) != 0 || tcp[18..20] != [0, 0] {
        return None;
    }
    let ts = match tcp[12] >> 4 {
        5 => false,
        8 => {
            if h.get(ip + 20..ip + 24)? != TS_OPTION {
                return None;
            }
            true
        }
        _ => return None,
    };
    let layout = match (v6, ts) {
        (false, false) => Layout::V4,
        (false, true) => Layout::V4Ts,
        (true, false) => Layout::V6,
        (true, true) => Layout::V6Ts,
    };
    (h.len() >= layout.header_len()).then_some(layout)
}

/// The layout of `packet`, a whole IP packet whose lengths agree with its bytes, if it
/// compresses.
fn packet_layout(packet: &[u8]) -> Option<Layout> {
    let layout = layout_of(packet)?;
    let len_ok = match layout {
        Layout::V4 | Layout::V4Ts => {
            usize::from(u16::from_be_bytes([packet[2], packet[3]])) == packet.len()
        }
        Layout::V6 | Layout::V6Ts => {
            usize::from(u16::from_be_bytes([packet[4], packet[5]])) + 40 == packet.len()
        }
    };
    len_ok.then_some(layout)
}

/// A flow's template: its headers with the changing fields, the lengths and the IPv4
/// checksum zeroed.
#[derive(Clone, Copy)]
struct Template {
    bytes: [u8; MAX_TEMPLATE_LEN],
    len: usize,
}

impl Template {
    fn of(header: &[u8], layout: Layout) -> Template {
        let len = layout.header_len();
        let mut bytes = [0u8; MAX_TEMPLATE_LEN];
        bytes[..len].copy_from_slice(&header[..len]);
        for &(at, n) in layout.fields() {
            bytes[at..at + n].fill(0);
        }
        match layout {
            Layout::V4 | Layout::V4Ts => {
                bytes[2..4].fill(0);
                bytes[10..12].fill(0);
            }
            Layout::V6 | Layout::V6Ts => {
                bytes[0] &= 0xf0;
                bytes[1] &= 0x0f;
                bytes[4..6].fill(0);
            }
        }
        Template { bytes, len }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The full header for `template` and the changing `fields` of a compressed header, with
/// `payload_len` bytes of TCP payload after it; `None` if the lengths do not fit the IP
/// length fields.
fn rebuild(
    template: &[u8],
    layout: Layout,
    fields: &[u8],
    payload_len: usize,
) -> Option<[u8; MAX_TEMPLATE_LEN]> {
    let len = layout.header_len();
    let mut h = [0u8; MAX_TEMPLATE_LEN];
    h[..len].copy_from_slice(template.get(..len)?);
    let mut at = 0;
    if layout.is_v6() {
        let tc = *fields.first()?;
        h[0] |= tc >> 4;
        h[1] |= tc << 4;
        at = 1;
    }
    for &(off, n) in layout.fields() {
        h[off..off + n].copy_from_slice(fields.get(at..at + n)?);
        at += n;
    }
    match layout {
        Layout::V4 | Layout::V4Ts => {
            let total = u16::try_from(len + payload_len).ok()?;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            let sum = crate::pmtu::checksum(&h[..20]);
            h[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        Layout::V6 | Layout::V6Ts => {
            let plen = u16::try_from(len - 40 + payload_len).ok()?;
            h[4..6].copy_from_slice(&plen.to_be_bytes());
        }
    }
    Some(h)
}

/// Compression counters, for `braid status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CompressStats {
    /// Packets sent compressed.
    pub compressed: u64,
    /// Header bytes those packets did not carry.
    pub bytes_saved: u64,
    /// Packets sent whole: not TCP, or TCP of a form that does not compress.
    pub whole: u64,
    /// Packets of a compressible flow sent whole because its context was not acknowledged yet.
    pub awaiting_ack: u64,
    /// Packets sent whole because their header did not rebuild exactly from the template.
    pub not_exact: u64,
    /// Context installs sent.
    pub installs_sent: u64,
    /// Contexts given to another flow.
    pub evictions: u64,
    /// Packets of a new flow sent whole because every context was busy ([`REUSE_AFTER`]).
    pub no_context: u64,
    /// Acknowledged contexts the peer said it could not use, installed again.
    pub reinstalls: u64,
    /// Context installs received for an older generation than the one held: ignored.
    pub stale_installs: u64,
    /// Compressed packets received and rebuilt.
    pub decompressed: u64,
    /// Compressed packets received that did not rebuild (unknown context, another
    /// generation, truncated): dropped.
    pub undecodable: u64,
    /// Context installs received that were not valid templates: ignored.
    pub bad_installs: u64,
}

/// One sender context.
struct Slot {
    template: Template,
    generation: u8,
    acked: bool,
    last_install: Option<Instant>,
    /// Installs sent since the context was (re)assigned or lost its acknowledgement.
    installs: u8,
    last_use: Instant,
}

impl Slot {
    /// Whether the context's install is due again at `now`.
    fn install_due(&self, now: Instant) -> bool {
        self.last_install.is_none_or(|t| {
            let wait = if self.installs >= MAX_INSTALLS {
                INSTALL_RETRY
            } else {
                INSTALL_EVERY * (1u32 << self.installs.saturating_sub(1).min(5))
            };
            now.saturating_duration_since(t) >= wait
        })
    }
}

/// What one end compresses before it stripes.
#[derive(Default)]
pub struct Compressor {
    by_template: HashMap<Vec<u8>, u8>,
    slots: Vec<Slot>,
    /// Context ids whose install is due.
    installs: VecDeque<u8>,
    /// With every context busy: no context can pass to a new flow before this (a context's
    /// last use only moves later), so new flows go whole without a scan.
    busy_until: Option<Instant>,
    stats: CompressStats,
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor")
            .field("contexts", &self.slots.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Compressor {
    /// A compressor with no contexts.
    pub fn new() -> Self {
        Compressor::default()
    }

    /// Compress `packet`, an IP packet, in place if its flow's context is acknowledged; returns
    /// whether it did. A new flow gets a context, whose install [`Compressor::poll_install`]
    /// then hands out.
    pub fn compress(&mut self, now: Instant, packet: &mut Vec<u8>) -> bool {
        let Some(layout) = packet_layout(packet) else {
            self.stats.whole += 1;
            return false;
        };
        let template = Template::of(packet, layout);
        let cid = match self.by_template.get(template.as_slice()) {
            Some(&c) => c,
            None => match self.allocate(now, template) {
                Some(c) => c,
                None => {
                    self.stats.no_context += 1;
                    return false;
                }
            },
        };
        let slot = &mut self.slots[usize::from(cid)];
        slot.last_use = now;
        if !slot.acked {
            if slot.install_due(now) {
                slot.last_install = Some(now);
                slot.installs = slot.installs.saturating_add(1);
                if !self.installs.contains(&cid) {
                    self.installs.push_back(cid);
                }
            }
            self.stats.awaiting_ack += 1;
            return false;
        }
        let h = layout.header_len();
        let n = layout.compressed_len();
        let mut c = [0u8; MAX_TEMPLATE_LEN];
        c[0] = TAG | slot.generation;
        c[1] = cid;
        let mut at = PREFIX_LEN;
        if layout.is_v6() {
            c[at] = (packet[0] << 4) | (packet[1] >> 4);
            at += 1;
        }
        for &(off, len) in layout.fields() {
            c[at..at + len].copy_from_slice(&packet[off..off + len]);
            at += len;
        }
        let exact = rebuild(
            slot.template.as_slice(),
            layout,
            &c[PREFIX_LEN..n],
            packet.len() - h,
        )
        .is_some_and(|r| r[..h] == packet[..h]);
        if !exact {
            self.stats.not_exact += 1;
            return false;
        }
        packet[h - n..h].copy_from_slice(&c[..n]);
        packet.drain(..h - n);
        self.stats.compressed += 1;
        self.stats.bytes_saved += (h - n) as u64;
        true
    }

    /// A context for a new flow: a free one, else the least recently used one, in its next
    /// generation, if its flow has been idle for [`REUSE_AFTER`]; `None` if every context is
    /// busy.
    fn allocate(&mut self, now: Instant, template: Template) -> Option<u8> {
        let slot = Slot {
            template,
            generation: 0,
            acked: false,
            last_install: None,
            installs: 0,
            last_use: now,
        };
        let cid = if self.slots.len() < CONTEXTS {
            self.slots.push(slot);
            self.slots.len() - 1
        } else {
            if self.busy_until.is_some_and(|t| now < t) {
                return None;
            }
            let (i, old) = self
                .slots
                .iter_mut()
                .enumerate()
                .min_by_key(|(_, s)| s.last_use)
                .expect("CONTEXTS > 0");
            if now.saturating_duration_since(old.last_use) < REUSE_AFTER {
                self.busy_until = Some(old.last_use + REUSE_AFTER);
                return None;
            }
            self.by_template.remove(old.template.as_slice());
            let generation = (old.generation + 1) % GENERATIONS;
            *old = Slot { generation, ..slot };
            self.stats.evictions += 1;
            i
        };
        let cid = cid as u8;
        self.by_template.insert(template.as_slice().to_vec(), cid);
        Some(cid)
    }

    /// The next context install to send: context id, generation and template.
    pub fn poll_install(&mut self) -> Option<(u8, u8, &[u8])> {
        let cid = loop {
            let cid = self.installs.pop_front()?;
            if self.slots.get(usize::from(cid)).is_some_and(|s| !s.acked) {
                break cid;
            }
        };
        self.stats.installs_sent += 1;
        let slot = &self.slots[usize::from(cid)];
        Some((cid, slot.generation, slot.template.as_slice()))
    }

    /// Whether an install is waiting for [`Compressor::poll_install`].
    pub fn has_install(&self) -> bool {
        !self.installs.is_empty()
    }

    /// The peer holds context `cid` in `generation`. In the context's own generation, its
    /// flow's packets compress from now on. In another, while the context is acknowledged, the
    /// peer could not rebuild a packet of it (it answers so, [`Decompressor::decompress`]):
    /// the flow goes whole again and the install is sent afresh.
    pub fn handle_ack(&mut self, cid: u8, generation: u8) {
        let Some(s) = self.slots.get_mut(usize::from(cid)) else {
            return;
        };
        if s.generation == generation {
            if !s.acked {
                s.acked = true;
                self.installs.retain(|&c| c != cid);
            }
        } else if s.acked {
            s.acked = false;
            s.installs = 0;
            s.last_install = None;
            self.stats.reinstalls += 1;
        }
    }

    /// Counters.
    pub fn stats(&self) -> CompressStats {
        self.stats
    }

    /// Contexts in use.
    pub fn contexts(&self) -> usize {
        self.slots.len()
    }
}

/// One receiver context.
#[derive(Clone, Copy)]
struct RxSlot {
    generation: u8,
    layout: Layout,
    template: Template,
}

/// What one end decompresses as it receives.
pub struct Decompressor {
    slots: Vec<Option<RxSlot>>,
    /// Acknowledgements due: context id and generation.
    acks: VecDeque<(u8, u8)>,
    stats: CompressStats,
}

impl std::fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor")
            .field("contexts", &self.slots.iter().flatten().count())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Default for Decompressor {
    fn default() -> Self {
        Decompressor {
            slots: vec![None; CONTEXTS],
            acks: VecDeque::new(),
            stats: CompressStats::default(),
        }
    }
}

/// Hand every install `c` has due to `d`, and every acknowledgement `d` has due back to `c`:
/// what the two ends' messages do over a link that loses nothing (for tests, benchmarks and
/// fuzzing).
pub fn exchange_contexts(c: &mut Compressor, d: &mut Decompressor) {
    while let Some((cid, generation, template)) = c.poll_install() {
        d.handle_install(cid, generation, template);
    }
    while let Some((cid, generation)) = d.poll_ack() {
        c.handle_ack(cid, generation);
    }
}

/// Whether a data payload is a compressed packet (rather than an IP packet).
pub fn is_compressed(payload: &[u8]) -> bool {
    payload.first().is_some_and(|b| b & 0xf0 == TAG)
}

impl Decompressor {
    /// A decompressor with no contexts.
    pub fn new() -> Self {
        Decompressor::default()
    }

    /// The peer installs context `cid` in `generation` with `template`. A valid template
    /// replaces what the context held, and an acknowledgement is due
    /// ([`Decompressor::poll_ack`]); anything else is ignored and counted.
    pub fn handle_install(&mut self, cid: u8, generation: u8, template: &[u8]) {
        let valid = generation < GENERATIONS
            && layout_of(template).is_some_and(|l| {
                template.len() == l.header_len() && Template::of(template, l).as_slice() == template
            });
        let Some(layout) = layout_of(template).filter(|_| valid) else {
            self.stats.bad_installs += 1;
            return;
        };
        // A late copy of an earlier install (installs repeat, and paths differ in delay) must
        // not take the context back from the flow the sender gave it to since.
        if let Some(held) = &self.slots[usize::from(cid)] {
            let ahead = generation.wrapping_sub(held.generation) % GENERATIONS;
            if ahead > GENERATIONS / 2 {
                self.stats.stale_installs += 1;
                return;
            }
        }
        self.slots[usize::from(cid)] = Some(RxSlot {
            generation,
            layout,
            template: Template::of(template, layout),
        });
        self.queue_ack(cid, generation);
    }

    fn queue_ack(&mut self, cid: u8, generation: u8) {
        if !self.acks.contains(&(cid, generation)) {
            if self.acks.len() >= CONTEXTS {
                self.acks.pop_front();
            }
            self.acks.push_back((cid, generation));
        }
    }

    /// The next acknowledgement to send: context id and generation.
    pub fn poll_ack(&mut self) -> Option<(u8, u8)> {
        self.acks.pop_front()
    }

    /// Whether an acknowledgement is waiting for [`Decompressor::poll_ack`].
    pub fn has_ack(&self) -> bool {
        !self.acks.is_empty()
    }

    /// Rebuild the IP packet of a compressed payload ([`is_compressed`]) into `out` (cleared
    /// first); `false` (counted) if it does not rebuild: unknown context, another generation,
    /// too short, too long. A packet of a context this end does not hold in that generation
    /// is answered with an acknowledgement of what it does hold, so a sender that believes
    /// otherwise installs the context again ([`Compressor::handle_ack`]).
    pub fn decompress(&mut self, payload: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        let ok = self.rebuild_into(payload, out);
        if ok {
            self.stats.decompressed += 1;
        } else {
            self.stats.undecodable += 1;
            out.clear();
            if let (Some(&tag), Some(&cid)) = (payload.first(), payload.get(1)) {
                let sent = tag & 0x0f;
                let held = self.slots[usize::from(cid)]
                    .map_or((sent + GENERATIONS / 2) % GENERATIONS, |s| s.generation);
                if held != sent {
                    self.queue_ack(cid, held);
                }
            }
        }
        ok
    }

    fn rebuild_into(&self, payload: &[u8], out: &mut Vec<u8>) -> bool {
        let (Some(&tag), Some(&cid)) = (payload.first(), payload.get(1)) else {
            return false;
        };
        let Some(slot) = self.slots[usize::from(cid)].as_ref() else {
            return false;
        };
        let n = slot.layout.compressed_len();
        if tag & 0xf0 != TAG || tag & 0x0f != slot.generation || payload.len() < n {
            return false;
        }
        let body = &payload[n..];
        let Some(h) = rebuild(
            slot.template.as_slice(),
            slot.layout,
            &payload[PREFIX_LEN..n],
            body.len(),
        ) else {
            return false;
        };
        out.extend_from_slice(&h[..slot.layout.header_len()]);
        out.extend_from_slice(body);
        true
    }

    /// Counters (the receiving ones).
    pub fn stats(&self) -> CompressStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An IPv4 TCP packet: `ts` adds the timestamps option; `payload` bytes of data.
    fn v4(ts: bool, seq: u32, payload: usize) -> Vec<u8> {
        let opt = if ts { 12 } else { 0 };
        let len = 40 + opt + payload;
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[1] = 0x02;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 99, 0, 1]);
        p[16..20].copy_from_slice(&[10, 99, 0, 2]);
        let sum = crate::pmtu::checksum(&p[..20]);
        p[10..12].copy_from_slice(&sum.to_be_bytes());
        p[20..22].copy_from_slice(&5201u16.to_be_bytes());
        p[22..24].copy_from_slice(&40000u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..32].copy_from_slice(&7u32.to_be_bytes());
        p[32] = if ts { 8 << 4 } else { 5 << 4 };
        p[33] = 0x18;
        p[34..36].copy_from_slice(&501u16.to_be_bytes());
        p[36..38].copy_from_slice(&0xbeefu16.to_be_bytes());
        if ts {
            p[40..44].copy_from_slice(&TS_OPTION);
            p[44..48].copy_from_slice(&1000u32.to_be_bytes());
            p[48..52].copy_from_slice(&2000u32.to_be_bytes());
        }
        for (i, b) in p[40 + opt..].iter_mut().enumerate() {
            *b = i as u8;
        }
        p
    }

    /// Send `packet` through a compressor whose contexts the decompressor acknowledged.
    fn through(c: &mut Compressor, d: &mut Decompressor, packet: &[u8]) -> (bool, Vec<u8>) {
        through_at(Instant::ZERO, c, d, packet)
    }

    /// [`through`] at `now`.
    fn through_at(
        now: Instant,
        c: &mut Compressor,
        d: &mut Decompressor,
        packet: &[u8],
    ) -> (bool, Vec<u8>) {
        let mut p = packet.to_vec();
        let mut squeezed = c.compress(now, &mut p);
        if !squeezed && packet_layout(packet).is_some() {
            // Install the context and try again.
            exchange_contexts(c, d);
            p = packet.to_vec();
            squeezed = c.compress(now, &mut p);
        }
        if !squeezed {
            return (false, p);
        }
        assert!(is_compressed(&p));
        let mut out = Vec::new();
        assert!(d.decompress(&p, &mut out), "did not rebuild");
        (true, out)
    }

    #[test]
    fn a_flow_compresses_once_its_context_is_acknowledged() {
        let mut c = Compressor::new();
        let mut d = Decompressor::new();
        let mut p = v4(true, 1, 1388);
        assert!(!c.compress(Instant::ZERO, &mut p));
        assert_eq!(p, v4(true, 1, 1388), "a packet sent whole is unchanged");
        let (cid, g, t) = c.poll_install().expect("an install");
        assert_eq!((cid, g, t.len()), (0, 0, 52));
        assert!(c.poll_install().is_none());
        // Not acknowledged within INSTALL_EVERY: the install goes again.
        let later = Instant::ZERO + INSTALL_EVERY;
        assert!(!c.compress(later, &mut v4(true, 2, 10)));
        let (cid, g, t) = c.poll_install().expect("again");
        d.handle_install(cid, g, t);
        let (cid, g) = d.poll_ack().expect("an ack");
        c.handle_ack(cid, g);
        let original = v4(true, 3, 1388);
        let mut p = original.clone();
        assert!(c.compress(later, &mut p));
        assert_eq!(p.len(), original.len() - 26);
        let mut out = Vec::new();
        assert!(d.decompress(&p, &mut out));
        assert_eq!(out, original);
        assert_eq!(c.stats().bytes_saved, 26);
        assert_eq!(d.stats().decompressed, 1);
    }

    #[test]
    fn what_does_not_compress_goes_whole() {
        let mut c = Compressor::new();
        let mut d = Decompressor::new();
        let mut cases = Vec::new();
        let mut syn = v4(true, 1, 0);
        syn[33] = 0x02;
        cases.push(syn);
        let mut sack = v4(true, 1, 0);
        sack[40..44].copy_from_slice(&[1, 1, 5, 10]);
        cases.push(sack);
        let mut udp = v4(false, 1, 100);
        udp[9] = 17;
        cases.push(udp);
        let mut frag = v4(false, 1, 100);
        frag[6] = 0x20;
        cases.push(frag);
        let mut short = v4(false, 1, 100);
        short.truncate(120);
        cases.push(short);
        let mut bad_sum = v4(false, 1, 100);
        bad_sum[10] ^= 1;
        cases.push(bad_sum);
        cases.push(vec![0x45]);
        cases.push(Vec::new());
        for p in cases {
            let (squeezed, out) = through(&mut c, &mut d, &p);
            assert!(!squeezed, "{p:?}");
            assert_eq!(out, p);
        }
        // The one with a wrong IPv4 checksum had a context but did not rebuild exactly.
        assert_eq!(c.stats().not_exact, 1);
    }

    #[test]
    fn ipv6_compresses_too() {
        let mut p = vec![0u8; 40 + 32 + 100];
        p[0] = 0x6b;
        p[1] = 0x81;
        p[2] = 0x23;
        p[3] = 0x45;
        p[4..6].copy_from_slice(&132u16.to_be_bytes());
        p[6] = 6;
        p[7] = 64;
        p[8] = 0x20;
        p[24] = 0x20;
        p[39] = 1;
        p[52] = 8 << 4;
        p[53] = 0x10;
        p[60..64].copy_from_slice(&TS_OPTION);
        p[64] = 9;
        let (squeezed, out) = through(&mut Compressor::new(), &mut Decompressor::new(), &p);
        assert!(squeezed);
        assert_eq!(out, p);
        assert_eq!(Layout::V6Ts.compressed_len(), 24);
    }

    /// Flow `i`'s packet: source port `i`.
    fn flow(i: u16) -> Vec<u8> {
        let mut p = v4(true, 1, 100);
        p[20..22].copy_from_slice(&i.to_be_bytes());
        let sum = crate::pmtu::checksum(&p[..20]);
        assert_eq!(sum, 0, "the IPv4 checksum does not cover the ports");
        p
    }

    /// A compressor and a decompressor whose 256 contexts flows 0-255 hold, acknowledged at
    /// time zero; flow 1's compressed packet of then.
    fn all_contexts_taken() -> (Compressor, Decompressor, Vec<u8>) {
        let (mut c, mut d) = (Compressor::new(), Decompressor::new());
        let mut old = flow(1);
        for i in 0..CONTEXTS as u16 {
            assert!(through(&mut c, &mut d, &flow(i)).0);
            if i == 1 {
                assert!(c.compress(Instant::ZERO, &mut old));
            }
        }
        (c, d, old)
    }

    #[test]
    fn the_257th_flow_takes_the_oldest_idle_context_in_a_new_generation() {
        let (mut c, mut d, old) = all_contexts_taken();
        let now = Instant::ZERO + REUSE_AFTER;
        // Keep flow 0 in use: flow 1's context is the oldest.
        assert!(through_at(now, &mut c, &mut d, &flow(0)).0);
        let (squeezed, out) = through_at(now, &mut c, &mut d, &flow(9999));
        assert!(squeezed);
        assert_eq!(out, flow(9999));
        assert_eq!(c.stats().evictions, 1);
        // Flow 1's packet of the old generation, still in flight, is dropped, not misread.
        let mut out = Vec::new();
        assert!(!d.decompress(&old, &mut out));
        assert!(out.is_empty());
        assert_eq!(d.stats().undecodable, 1);
    }

    #[test]
    fn busy_contexts_are_not_taken_and_the_new_flow_goes_whole() {
        let (mut c, mut d, _) = all_contexts_taken();
        let now = Instant::ZERO + REUSE_AFTER / 2;
        let (squeezed, out) = through_at(now, &mut c, &mut d, &flow(9999));
        assert!(!squeezed);
        assert_eq!(out, flow(9999));
        assert_eq!((c.stats().evictions, c.stats().no_context), (0, 2));
        assert!(c.poll_install().is_none(), "no install for it either");
        // The 256 flows still compress.
        assert!(through_at(now, &mut c, &mut d, &flow(7)).0);
    }

    #[test]
    fn a_late_install_does_not_take_a_context_back() {
        // Context 0 goes to flow 9999 (a new generation) while an install of it for flow 0 is
        // still in flight; the late install arrives after the new one was acknowledged.
        let (mut c, mut d, _) = all_contexts_taken();
        let stale = Template::of(&flow(0), Layout::V4Ts);
        let now = Instant::ZERO + REUSE_AFTER;
        assert!(through_at(now, &mut c, &mut d, &flow(9999)).0);
        assert_eq!(c.stats().evictions, 1);
        d.handle_install(0, 0, stale.as_slice());
        assert_eq!(d.stats().stale_installs, 1);
        // Flow 9999 still rebuilds, as itself.
        let (squeezed, out) = through_at(now, &mut c, &mut d, &flow(9999));
        assert!(squeezed);
        assert_eq!(out, flow(9999));
    }

    #[test]
    fn a_receiver_without_the_context_gets_it_installed_again() {
        let (mut c, _, _) = all_contexts_taken();
        // A receiver that lost its contexts (or never had them).
        let mut d = Decompressor::new();
        let mut p = flow(3);
        assert!(c.compress(Instant::ZERO, &mut p));
        assert!(!d.decompress(&p, &mut Vec::new()));
        let (cid, g) = d.poll_ack().expect("an answer");
        c.handle_ack(cid, g);
        assert_eq!(c.stats().reinstalls, 1);
        // The flow goes whole until the context is installed again, then compresses.
        let (squeezed, out) = through(&mut c, &mut d, &flow(3));
        assert!(squeezed);
        assert_eq!(out, flow(3));
    }

    #[test]
    fn installs_back_off() {
        let mut c = Compressor::new();
        let mut sent = Vec::new();
        // A packet every 10 ms for 20 s, and no acknowledgement ever.
        for ms in (0..20_000u64).step_by(10) {
            let now = Instant::ZERO + Duration::from_millis(ms);
            assert!(!c.compress(now, &mut flow(5)));
            if c.poll_install().is_some() {
                sent.push(ms);
            }
        }
        assert_eq!(sent, [0, 50, 150, 350, 750, 1550, 3150, 4750, 14750]);
        assert_eq!(usize::from(MAX_INSTALLS) + 1, sent.len());
    }

    #[test]
    fn the_receiver_refuses_what_is_not_a_template() {
        let mut d = Decompressor::new();
        let p = v4(true, 1, 0);
        d.handle_install(0, 0, &p); // not zeroed: a packet, not a template
        d.handle_install(0, 16, Template::of(&p, Layout::V4Ts).as_slice());
        d.handle_install(0, 0, &[0x45; 10]);
        assert_eq!(d.stats().bad_installs, 3);
        assert!(d.poll_ack().is_none());
        let mut out = Vec::new();
        for junk in [&[0x10u8][..], &[0x10, 0], &[0x1f, 0xff, 1, 2, 3]] {
            assert!(!d.decompress(junk, &mut out));
        }
    }

    fn arb_packet() -> impl Strategy<Value = Vec<u8>> {
        (
            any::<bool>(),
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 72),
            0usize..300,
        )
            .prop_map(|(v6, ts, mut h, payload)| {
                let ip = if v6 { 40 } else { 20 };
                let hl = ip + if ts { 32 } else { 20 };
                h.truncate(hl);
                if v6 {
                    h[0] = 0x60 | (h[0] & 0x0f);
                    h[4..6].copy_from_slice(&((hl - 40 + payload) as u16).to_be_bytes());
                    h[6] = 6;
                } else {
                    h[0] = 0x45;
                    h[2..4].copy_from_slice(&((hl + payload) as u16).to_be_bytes());
                    h[6] &= 0x40;
                    h[7] = 0;
                    h[9] = 6;
                    h[10..12].fill(0);
                    let sum = crate::pmtu::checksum(&h[..20]);
                    h[10..12].copy_from_slice(&sum.to_be_bytes());
                }
                h[ip + 12] = if ts { 8 << 4 } else { 5 << 4 };
                h[ip + 13] &= !(SYN | RST | URG);
                h[ip + 18..ip + 20].fill(0);
                if ts {
                    h[ip + 20..ip + 24].copy_from_slice(&TS_OPTION);
                }
                h.extend((0..payload).map(|i| i as u8));
                h
            })
    }

    proptest! {
        /// Every packet of a compressible form comes out exactly as it went in, through
        /// contexts shared by many flows; and any bytes at all, sent as packets or as
        /// compressed payloads, rebuild exactly or not at all, and never panic.
        #[test]
        fn compression_is_exact(
            packets in prop::collection::vec(arb_packet(), 1..40),
            junk in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..120), 0..20),
        ) {
            let mut c = Compressor::new();
            let mut d = Decompressor::new();
            for p in &packets {
                let (squeezed, out) = through(&mut c, &mut d, p);
                prop_assert!(squeezed);
                prop_assert_eq!(&out, p);
            }
            for j in &junk {
                let (_, out) = through(&mut c, &mut d, j);
                prop_assert_eq!(&out, j);
                let mut o = Vec::new();
                let _ = d.decompress(j, &mut o);
                d.handle_install(j.first().copied().unwrap_or(0), 0, j);
            }
        }
    }
}
