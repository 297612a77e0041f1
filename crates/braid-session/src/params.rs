//! The bond's striping parameters, chosen by the initiator (client) and carried, encrypted, in
//! the handshake so both ends run identical schedulers (logical reception needs the receiver to
//! simulate the sender exactly).

use braid_proto::credit::CreditConfig;
use braid_proto::resequence::{BackupTimer, ResequenceMode, ResequencerConfig};
use braid_proto::scheduler::{ConfigError, QuantumRule, SchedulerConfig, SchedulerKind};
use braid_proto::striper::{MarkerConfig, MarkerPosition, StriperConfig};
use braid_proto::time::Duration;
use braid_proto::MAX_PATHS;

/// Everything both ends must agree on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BondParams {
    /// Scheduler.
    pub scheduler: SchedulerKind,
    /// Rate of each path in bit/s (sets SRR quanta and RFQ/GRR weights).
    pub rates_bps: Vec<u64>,
    /// Largest packet (the TUN MTU).
    pub max_packet: u32,
    /// RFQ's shared seed.
    pub seed: u64,
    /// Resequencing mode.
    pub resequence: ResequenceMode,
    /// Marker interval in rounds (0: none).
    pub marker_interval_rounds: u32,
    /// Marker position.
    pub marker_position: MarkerPosition,
    /// Receiver hold time in ms (0: wait for markers / all paths).
    pub hold_ms: u32,
    /// Credit flow control: receive buffer in bytes (0: off).
    pub credit_buffer_bytes: u64,
    /// Per-path transmit queue limit in bytes.
    pub queue_limit_bytes: u32,
    /// `sequence`: the receivers hold fast-path arrivals so every packet sees the slowest
    /// path's delay (`braid_proto::resequence::equalize`).
    pub equalize_delay: bool,
    /// `sequence`: resend data a path lost, named by the receiver's NACKs, on the fastest path
    /// (`crate::retransmit`).
    pub retransmit: bool,
    /// `sequence`: BMP's backup timer (BAG paper section V-B): a gap that no path's later
    /// arrivals reveal as lost is declared lost after this multiple of the largest path RTT
    /// (from the probes) instead of after `hold_ms` plus the delay skew; 0: off.
    pub backup_rtt_multiple: u8,
    /// Adaptive SRR (beyond the papers; scheduler `srr`, mode `sequence`): SRR's quanta follow
    /// PET's packet-pair estimates instead of the configured rates.
    pub adaptive: bool,
    /// TCP/IP header compression ([`crate::compress`]): both ends compress the TCP they send
    /// and rebuild what they receive.
    pub compress_headers: bool,
    /// Per-class path policies (the BAG paper's per-class services, section IV), first match
    /// wins; both ends apply them to what they send. Mode `sequence` only.
    pub policies: Vec<PathPolicy>,
    /// Backup paths (beyond the papers; `[[path]] backup = true`), bit `i` for path `i`: a
    /// backup path carries nothing while another path is up, only its probes, at a slower
    /// pace (`crate::session`, "Backup paths"). Mode `sequence` only; never every path.
    pub backup_paths: u64,
    /// The client's names of its paths (`[[path]] name`), for the server's status, metrics
    /// and logs; empty: none (the server says `path0`, `path1`...). [`path_name_ok`] each.
    pub path_names: Vec<String>,
}

/// The most bytes the bond's parameters take with the path names: the initiation has room
/// for about 900 (its 1024-byte message holds the keys, the tags, the timestamp and the
/// instance too); a client whose names would not fit sends none.
pub const NAMES_BUDGET: usize = 880;

/// The longest path name the handshake carries.
pub const MAX_PATH_NAME_LEN: usize = 32;

/// Whether `name` may travel as a path name: 1 to [`MAX_PATH_NAME_LEN`] bytes of ASCII
/// letters, digits, `.`, `_`, `:` and `-` (it ends up in the server's logs and in Prometheus
/// label values, which a quote or a backslash would break).
pub fn path_name_ok(name: &str) -> bool {
    (1..=MAX_PATH_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Which paths a class of packets may use, and how it is striped (`[[policy]]` in the
/// config). A class is a set of DSCP values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathPolicy {
    /// The DSCP values it applies to: bit `d` for DSCP `d`.
    pub dscp: u64,
    /// The paths it may use: bit `i` for path `i`. Never empty.
    pub paths: u64,
    /// How the class's packets are spread over its paths.
    pub striping: PolicyStriping,
    /// Each packet also goes on a second of the class's paths (the reliability service).
    pub duplicate: bool,
}

/// How a policy's class is spread over its paths ([`crate::policy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyStriping {
    /// Per packet, over the class's paths, resequenced with everything else.
    Packet,
    /// Every packet of a flow (addresses, protocol, ports) on one of the class's paths,
    /// chosen in proportion to the rates, delivered without resequencing.
    Flow,
    /// Every packet on the class's path with the least delay now, delivered without
    /// resequencing (voice, games).
    Fastest,
}

/// The largest per-path queue a bond may ask for, bytes (`queue_kb` 65,536): the server keeps
/// one of this size per path for each client.
pub const MAX_QUEUE_LIMIT_BYTES: u32 = 64 << 20;

/// The most all of a bond's path queues may hold together, bytes (`queue_kb` times the
/// paths): without it a client of 64 paths could make the server keep 4 GiB of queue.
pub const MAX_QUEUES_BYTES: u64 = 256 << 20;

/// The largest credit buffer a bond may ask for, bytes (`credit_buffer_kb` 1,048,576).
pub const MAX_CREDIT_BUFFER_BYTES: u64 = 1 << 30;

/// The largest `backup_rtt_multiple`.
pub const MAX_BACKUP_RTT_MULTIPLE: u8 = 16;

/// The most policies a bond has.
pub const MAX_POLICIES: usize = 16;
const POLICY_LEN: usize = 8 + 8 + 1;
const POLICY_PER_FLOW: u8 = 0x01;
const POLICY_DUPLICATE: u8 = 0x02;
const POLICY_FASTEST: u8 = 0x04;

/// Handshake payload that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// Too short or inconsistent.
    #[error("malformed bond parameters")]
    Malformed,
    /// Decoded, but not a valid configuration.
    #[error("invalid bond parameters: {0}")]
    Invalid(#[from] ConfigError),
}

/// What a packet costs on a path beyond its payload, for EDPF's `L`: Ethernet 14 + IPv4 20 +
/// UDP 8 + transport header 16 + tag 16 + data header with sequence number 12.
pub const WIRE_OVERHEAD_BYTES: u32 = 86;

const FIXED_LEN: usize = 1 + 1 + 1 + 1 + 4 + 8 + 4 + 4 + 8 + 4 + 1 + 1;

/// Flag bit: `equalize_delay`.
const FLAG_EQUALIZE: u8 = 0x01;
/// Flag bit: `retransmit`.
const FLAG_RETRANSMIT: u8 = 0x02;
/// Flag bit: `adaptive`.
const FLAG_ADAPTIVE: u8 = 0x04;
/// Flag bit: `compress_headers`.
const FLAG_COMPRESS: u8 = 0x08;
/// Flag bit: `backup_paths` follows the rates (8 bytes).
const FLAG_BACKUP: u8 = 0x10;
/// Flag bit: `path_names` follow (after the backup mask, if any): a length byte and the name
/// for each path.
const FLAG_NAMES: u8 = 0x20;

impl BondParams {
    /// The scheduler config.
    pub fn scheduler_config(&self) -> SchedulerConfig {
        let mut s = SchedulerConfig::new(self.scheduler, self.rates_bps.clone());
        s.quantum = QuantumRule::FromRate;
        s.max_packet = self.max_packet;
        s.seed = self.seed;
        s.overhead_bytes = WIRE_OVERHEAD_BYTES;
        s
    }

    /// Credit shares per path, if credits are on.
    pub fn credits(&self) -> Option<CreditConfig> {
        (self.credit_buffer_bytes > 0).then(|| {
            CreditConfig::proportional(
                self.credit_buffer_bytes,
                &self.rates_bps,
                Duration::from_millis(20),
            )
        })
    }

    /// The sender's config.
    pub fn striper_config(&self) -> StriperConfig {
        let mut c = StriperConfig::new(self.scheduler_config());
        c.markers = MarkerConfig {
            interval_rounds: u64::from(self.marker_interval_rounds),
            position: self.marker_position,
        };
        c.sequence_numbers = self.resequence == ResequenceMode::Sequence;
        c.queue_limit_bytes = u64::from(self.queue_limit_bytes).max(u64::from(self.max_packet));
        c.initial_credit_bytes = self.credits().map(|c| c.share_bytes);
        c.receiver_equalizes = self.equalize_delay;
        c.adaptive = self.adaptive;
        // PET measures with padding pairs of its own (`PetConfig::padding`): from the first
        // packet, and on idle paths without putting data there to measure them.
        c.pet_padding = true;
        c
    }

    /// The receiver's config.
    pub fn resequencer_config(&self) -> ResequencerConfig {
        let mut c = ResequencerConfig::new(self.resequence, self.scheduler_config());
        c.hold = (self.hold_ms > 0).then(|| Duration::from_millis(u64::from(self.hold_ms)));
        c.equalize_delay = self.equalize_delay;
        c.backup = (self.backup_rtt_multiple > 0).then(|| BackupTimer {
            rtt_multiple: u32::from(self.backup_rtt_multiple),
            ..BackupTimer::default()
        });
        c
    }

    /// Check the parameters make a valid bond.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // The server's TUN MTU follows the client's: nothing below IPv4's minimum datagram a
        // host must take (576), nor above what one datagram carries.
        if !(576..=65_535).contains(&self.max_packet) {
            return Err(ConfigError::Invalid(
                "the largest packet (the TUN MTU) must be 576 to 65535 bytes",
            ));
        }
        // The server keeps a queue of this size per path for the client: a client must not
        // be able to make it hold gigabytes (a proxy serves many).
        if self.queue_limit_bytes > MAX_QUEUE_LIMIT_BYTES {
            return Err(ConfigError::Invalid(
                "each path's queue is at most 64 MiB (queue_kb = 65536)",
            ));
        }
        if u64::from(self.queue_limit_bytes) * self.rates_bps.len() as u64 > MAX_QUEUES_BYTES {
            return Err(ConfigError::Invalid(
                "the paths' queues together are at most 256 MiB (queue_kb times the paths at most 262144)",
            ));
        }
        // Credits are the server's receive buffer for the client: bounded like its queues.
        if self.credit_buffer_bytes > MAX_CREDIT_BUFFER_BYTES {
            return Err(ConfigError::Invalid(
                "the credit buffer is at most 1 GiB (credit_buffer_kb = 1048576)",
            ));
        }
        if self.backup_rtt_multiple > MAX_BACKUP_RTT_MULTIPLE {
            return Err(ConfigError::Invalid(
                "the backup timer is at most 16 times the largest RTT",
            ));
        }
        if self.scheduler == SchedulerKind::Edpf && self.resequence == ResequenceMode::Logical {
            return Err(ConfigError::NotCausal("edpf"));
        }
        if self.scheduler == SchedulerKind::Pet && self.resequence != ResequenceMode::Sequence {
            // PET's SIG-ACKs name packets by their sequence numbers.
            return Err(ConfigError::NotCausal("pet"));
        }
        if self.adaptive
            && (self.scheduler != SchedulerKind::Srr || self.resequence != ResequenceMode::Sequence)
        {
            return Err(ConfigError::Invalid(
                "adaptive quanta need scheduler = \"srr\" and resequence = \"sequence\"",
            ));
        }
        if self.backup_paths != 0 && self.resequence != ResequenceMode::Sequence {
            return Err(ConfigError::Invalid(
                "backup paths need resequence = \"sequence\" (paths leave the bond and come back at each end on its own, and only sequence numbers keep the order across that)",
            ));
        }
        if !self.policies.is_empty() && self.resequence != ResequenceMode::Sequence {
            return Err(ConfigError::Invalid(
                "path policies need resequence = \"sequence\" (the receiver tells the classes' packets apart by their sequence numbers)",
            ));
        }
        let all = if self.rates_bps.len() >= 64 {
            u64::MAX
        } else {
            (1u64 << self.rates_bps.len()) - 1
        };
        if !self.path_names.is_empty()
            && (self.path_names.len() != self.rates_bps.len()
                || !self.path_names.iter().all(|n| path_name_ok(n)))
        {
            return Err(ConfigError::Invalid(
                "path names: one per path, 1 to 32 ASCII letters, digits, '.', '_', ':' or '-'",
            ));
        }
        if self.backup_paths & !all != 0 || (self.backup_paths != 0 && self.backup_paths == all) {
            return Err(ConfigError::Invalid(
                "backup paths: a path the bond does not have, or every path a backup (one path at least must carry the traffic)",
            ));
        }
        if self.policies.len() > MAX_POLICIES
            || self.policies.iter().any(|p| {
                p.paths == 0
                    || p.paths & !all != 0
                    || p.dscp == 0
                    || (p.striping != PolicyStriping::Packet && p.duplicate)
            })
        {
            return Err(ConfigError::Invalid(
                "path policy: a policy names no DSCP value, no path, or a path the bond does not have, or duplicates a per-flow class (copies are told apart by sequence numbers)",
            ));
        }
        self.scheduler_config().build().map(|_| ())
    }

    /// Encode for the handshake payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(FIXED_LEN + 8 * self.rates_bps.len());
        v.push(match self.scheduler {
            SchedulerKind::Srr => 0,
            SchedulerKind::Rfq => 1,
            SchedulerKind::Grr => 2,
            SchedulerKind::Rr => 3,
            SchedulerKind::Edpf => 4,
            SchedulerKind::Pet => 5,
        });
        v.push(match self.resequence {
            ResequenceMode::Logical => 0,
            ResequenceMode::Sequence => 1,
            ResequenceMode::None => 2,
        });
        v.push(match self.marker_position {
            MarkerPosition::Start => 0,
            MarkerPosition::Middle => 1,
            MarkerPosition::End => 2,
        });
        v.push(self.rates_bps.len() as u8);
        v.extend(self.max_packet.to_be_bytes());
        v.extend(self.seed.to_be_bytes());
        v.extend(self.marker_interval_rounds.to_be_bytes());
        v.extend(self.hold_ms.to_be_bytes());
        v.extend(self.credit_buffer_bytes.to_be_bytes());
        v.extend(self.queue_limit_bytes.to_be_bytes());
        let mut flags = 0;
        if self.equalize_delay {
            flags |= FLAG_EQUALIZE;
        }
        if self.retransmit {
            flags |= FLAG_RETRANSMIT;
        }
        if self.adaptive {
            flags |= FLAG_ADAPTIVE;
        }
        if self.compress_headers {
            flags |= FLAG_COMPRESS;
        }
        if self.backup_paths != 0 {
            flags |= FLAG_BACKUP;
        }
        if !self.path_names.is_empty() {
            flags |= FLAG_NAMES;
        }
        v.push(flags);
        v.push(self.backup_rtt_multiple);
        for r in &self.rates_bps {
            v.extend(r.to_be_bytes());
        }
        if self.backup_paths != 0 {
            v.extend(self.backup_paths.to_be_bytes());
        }
        for n in &self.path_names {
            v.push(n.len().min(usize::from(u8::MAX)) as u8);
            v.extend(n.bytes().take(usize::from(u8::MAX)));
        }
        // Policies after the rates; none: nothing at all.
        if !self.policies.is_empty() {
            v.push(self.policies.len() as u8);
            for p in &self.policies {
                v.extend(p.dscp.to_be_bytes());
                v.extend(p.paths.to_be_bytes());
                let mut f = match p.striping {
                    PolicyStriping::Packet => 0,
                    PolicyStriping::Flow => POLICY_PER_FLOW,
                    PolicyStriping::Fastest => POLICY_FASTEST,
                };
                if p.duplicate {
                    f |= POLICY_DUPLICATE;
                }
                v.push(f);
            }
        }
        v
    }

    /// Decode from a handshake payload. Never panics.
    pub fn decode(b: &[u8]) -> Result<Self, ParamsError> {
        let m = || ParamsError::Malformed;
        let fixed = b.get(..FIXED_LEN).ok_or_else(m)?;
        let u32_at = |at: usize| -> Result<u32, ParamsError> {
            Ok(u32::from_be_bytes(
                fixed
                    .get(at..at + 4)
                    .ok_or_else(m)?
                    .try_into()
                    .map_err(|_| m())?,
            ))
        };
        let u64_at = |at: usize| -> Result<u64, ParamsError> {
            Ok(u64::from_be_bytes(
                fixed
                    .get(at..at + 8)
                    .ok_or_else(m)?
                    .try_into()
                    .map_err(|_| m())?,
            ))
        };
        let scheduler = match fixed[0] {
            0 => SchedulerKind::Srr,
            1 => SchedulerKind::Rfq,
            2 => SchedulerKind::Grr,
            3 => SchedulerKind::Rr,
            4 => SchedulerKind::Edpf,
            5 => SchedulerKind::Pet,
            _ => return Err(m()),
        };
        let resequence = match fixed[1] {
            0 => ResequenceMode::Logical,
            1 => ResequenceMode::Sequence,
            2 => ResequenceMode::None,
            _ => return Err(m()),
        };
        let marker_position = match fixed[2] {
            0 => MarkerPosition::Start,
            1 => MarkerPosition::Middle,
            2 => MarkerPosition::End,
            _ => return Err(m()),
        };
        let flags = fixed[36];
        if flags
            & !(FLAG_EQUALIZE
                | FLAG_RETRANSMIT
                | FLAG_ADAPTIVE
                | FLAG_COMPRESS
                | FLAG_BACKUP
                | FLAG_NAMES)
            != 0
        {
            return Err(m());
        }
        let n = usize::from(fixed[3]);
        let mut rates_end = FIXED_LEN + 8 * n;
        if n == 0 || n > MAX_PATHS || b.len() < rates_end {
            return Err(m());
        }
        let rates_bps = b[FIXED_LEN..rates_end]
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().expect("chunks of 8")))
            .collect();
        let mut backup_paths = 0;
        if flags & FLAG_BACKUP != 0 {
            let word = b.get(rates_end..rates_end + 8).ok_or_else(m)?;
            backup_paths = u64::from_be_bytes(word.try_into().map_err(|_| m())?);
            // The flag says there are some.
            if backup_paths == 0 {
                return Err(m());
            }
            rates_end += 8;
        }
        let mut path_names = Vec::new();
        if flags & FLAG_NAMES != 0 {
            for _ in 0..n {
                let len = usize::from(*b.get(rates_end).ok_or_else(m)?);
                let name = b.get(rates_end + 1..rates_end + 1 + len).ok_or_else(m)?;
                let name = std::str::from_utf8(name).map_err(|_| m())?;
                if !path_name_ok(name) {
                    return Err(m());
                }
                path_names.push(name.to_owned());
                rates_end += 1 + len;
            }
        }
        let mut policies = Vec::new();
        if let Some((&k, rest)) = b[rates_end..].split_first() {
            if k == 0 || rest.len() != usize::from(k) * POLICY_LEN {
                return Err(m());
            }
            for c in rest.chunks_exact(POLICY_LEN) {
                let word = |at: usize| u64::from_be_bytes(c[at..at + 8].try_into().expect("8"));
                let f = c[16];
                let striping = match f & (POLICY_PER_FLOW | POLICY_FASTEST) {
                    0 => PolicyStriping::Packet,
                    POLICY_PER_FLOW => PolicyStriping::Flow,
                    POLICY_FASTEST => PolicyStriping::Fastest,
                    _ => return Err(m()),
                };
                if f & !(POLICY_PER_FLOW | POLICY_DUPLICATE | POLICY_FASTEST) != 0 {
                    return Err(m());
                }
                policies.push(PathPolicy {
                    dscp: word(0),
                    paths: word(8),
                    striping,
                    duplicate: f & POLICY_DUPLICATE != 0,
                });
            }
        }
        let p = BondParams {
            scheduler,
            rates_bps,
            max_packet: u32_at(4)?,
            seed: u64_at(8)?,
            resequence,
            marker_interval_rounds: u32_at(16)?,
            marker_position,
            hold_ms: u32_at(20)?,
            credit_buffer_bytes: u64_at(24)?,
            queue_limit_bytes: u32_at(32)?,
            equalize_delay: flags & FLAG_EQUALIZE != 0,
            retransmit: flags & FLAG_RETRANSMIT != 0,
            backup_rtt_multiple: fixed[37],
            adaptive: flags & FLAG_ADAPTIVE != 0,
            compress_headers: flags & FLAG_COMPRESS != 0,
            policies,
            backup_paths,
            path_names,
        };
        p.validate()?;
        Ok(p)
    }
}

#[cfg(test)]
pub(crate) fn example(paths: usize) -> BondParams {
    BondParams {
        scheduler: SchedulerKind::Srr,
        rates_bps: (0..paths as u64).map(|i| (i + 1) * 10_000_000).collect(),
        max_packet: 1400,
        seed: 7,
        resequence: ResequenceMode::Sequence,
        marker_interval_rounds: 1,
        marker_position: MarkerPosition::End,
        hold_ms: 100,
        credit_buffer_bytes: 0,
        queue_limit_bytes: 64 * 1024,
        equalize_delay: true,
        retransmit: true,
        backup_rtt_multiple: 0,
        adaptive: false,
        compress_headers: false,
        policies: Vec::new(),
        backup_paths: 0,
        path_names: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let p = example(3);
        assert_eq!(BondParams::decode(&p.encode()), Ok(p));
    }

    #[test]
    fn backup_paths_and_path_names_round_trip_and_are_checked() {
        let mut p = example(3);
        p.resequence = ResequenceMode::Sequence;
        p.backup_paths = 0b100;
        p.path_names = vec!["dsl".into(), "cable".into(), "lte-1".into()];
        assert_eq!(BondParams::decode(&p.encode()), Ok(p.clone()));
        // Names without a backup mask, and the other way round.
        let mut q = p.clone();
        q.backup_paths = 0;
        assert_eq!(BondParams::decode(&q.encode()), Ok(q.clone()));
        q.path_names.clear();
        q.backup_paths = 0b011;
        assert_eq!(BondParams::decode(&q.encode()), Ok(q.clone()));
        // Names a server would print are checked: no spaces, no control bytes, no more than
        // 32 bytes, one per path.
        for bad in [
            "a b",
            "a\nb",
            "",
            &"x".repeat(33),
            "x\",peer=\"bob",
            "x\\",
            "a`b",
        ] {
            let mut q = p.clone();
            q.path_names[1] = bad.to_owned();
            assert!(q.validate().is_err(), "{bad:?}");
            assert!(BondParams::decode(&q.encode()).is_err(), "{bad:?}");
        }
        let mut q = p.clone();
        q.path_names.pop();
        assert!(q.validate().is_err());
        // Every path a backup, or one the bond does not have.
        let mut q = p.clone();
        q.backup_paths = 0b111;
        assert!(q.validate().is_err());
        q.backup_paths = 0b1000;
        assert!(q.validate().is_err());
        // Cut short anywhere: malformed, never a panic.
        let bytes = p.encode();
        for end in 0..bytes.len() {
            assert!(BondParams::decode(&bytes[..end]).is_err(), "{end}");
        }
    }

    #[test]
    fn pet_round_trips_and_needs_sequence_numbers() {
        let mut p = example(3);
        p.scheduler = SchedulerKind::Pet;
        assert_eq!(BondParams::decode(&p.encode()), Ok(p.clone()));
        assert!(p.striper_config().receiver_equalizes);
        p.resequence = ResequenceMode::Logical;
        assert_eq!(p.validate(), Err(ConfigError::NotCausal("pet")));
        p.resequence = ResequenceMode::None;
        assert_eq!(p.validate(), Err(ConfigError::NotCausal("pet")));
    }

    #[test]
    fn the_backup_timer_round_trips_into_the_receiver() {
        let mut p = example(2);
        p.backup_rtt_multiple = 3;
        assert_eq!(BondParams::decode(&p.encode()), Ok(p.clone()));
        assert_eq!(
            p.resequencer_config().backup.map(|b| b.rtt_multiple),
            Some(3)
        );
        assert_eq!(example(2).resequencer_config().backup, None);
    }

    /// The server keeps a queue of this size per path for the client, and grants credits
    /// from a buffer of this size: both bounded.
    #[test]
    fn a_bond_asks_for_at_most_64_mib_of_queue_per_path_and_1_gib_of_credit() {
        let mut p = example(2);
        p.queue_limit_bytes = MAX_QUEUE_LIMIT_BYTES;
        assert!(p.validate().is_ok());
        p.queue_limit_bytes = MAX_QUEUE_LIMIT_BYTES + 1;
        assert!(p.validate().is_err());
        assert!(
            BondParams::decode(&p.encode()).is_err(),
            "refused in a handshake too"
        );
        // Four paths of 64 MiB fill the 256 MiB all queues may hold; a fifth does not fit,
        // nor do 64 paths of 4 MiB and a packet.
        let mut p = example(4);
        p.queue_limit_bytes = MAX_QUEUE_LIMIT_BYTES;
        assert!(p.validate().is_ok());
        let mut p = example(5);
        p.queue_limit_bytes = MAX_QUEUE_LIMIT_BYTES;
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("256 MiB"), "{e}");
        assert!(BondParams::decode(&p.encode()).is_err());
        let mut p = example(64);
        p.queue_limit_bytes = 4 << 20;
        assert!(p.validate().is_ok());
        p.queue_limit_bytes += 1500;
        assert!(p.validate().is_err());
        let mut p = example(2);
        p.credit_buffer_bytes = MAX_CREDIT_BUFFER_BYTES;
        assert!(p.validate().is_ok());
        p.credit_buffer_bytes = u64::MAX - 1;
        assert!(BondParams::decode(&p.encode()).is_err());
    }

    #[test]
    fn adaptive_srr_round_trips_and_needs_srr_with_sequence_numbers() {
        let mut p = example(2);
        p.adaptive = true;
        assert_eq!(BondParams::decode(&p.encode()), Ok(p.clone()));
        assert!(p.striper_config().adaptive);
        p.scheduler = SchedulerKind::Grr;
        assert!(p.validate().is_err());
        p.scheduler = SchedulerKind::Srr;
        p.resequence = ResequenceMode::Logical;
        assert!(p.validate().is_err());
    }

    #[test]
    fn policies_round_trip_and_are_checked() {
        let mut p = example(3);
        p.policies = vec![
            PathPolicy {
                dscp: 1 << 46,
                paths: 0b001,
                striping: PolicyStriping::Flow,
                duplicate: false,
            },
            PathPolicy {
                dscp: 1 << 10 | 1 << 12,
                paths: 0b110,
                striping: PolicyStriping::Fastest,
                duplicate: false,
            },
            PathPolicy {
                dscp: 1 << 8,
                paths: 0b011,
                striping: PolicyStriping::Packet,
                duplicate: true,
            },
        ];
        assert_eq!(BondParams::decode(&p.encode()), Ok(p.clone()));
        let mut bad = p.clone();
        bad.policies[0].paths = 0b1000;
        assert!(bad.validate().is_err(), "path 3 of 3");
        bad.policies[0].paths = 0;
        assert!(bad.validate().is_err(), "no path");
        p.resequence = ResequenceMode::Logical;
        assert!(p.validate().is_err(), "needs sequence numbers");
        let mut enc = example(2).encode();
        enc.push(1);
        assert_eq!(BondParams::decode(&enc), Err(ParamsError::Malformed));
    }

    #[test]
    fn rejects_bad_payloads() {
        let p = example(2).encode();
        assert_eq!(BondParams::decode(&p[..10]), Err(ParamsError::Malformed));
        let mut bad = p.clone();
        bad[0] = 9;
        assert_eq!(BondParams::decode(&bad), Err(ParamsError::Malformed));
        let mut zero_rate = p.clone();
        let n = zero_rate.len();
        zero_rate[n - 8..].fill(0);
        assert!(matches!(
            BondParams::decode(&zero_rate),
            Err(ParamsError::Invalid(_))
        ));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = BondParams::decode(&bytes);
        }
    }
}
