//! Scenario files: what `braid lab run SCENARIO.toml` reads. Every key is documented in
//! `docs/lab.md`.
//!
//! Parsing is strict: an unknown key, a value of the wrong type or out of range gives a
//! [`ScenarioError`] with the line and column, the key, and what to write instead.

use crate::emulator::model::{Change, DirectionConfig, ScheduleEntry};
use braid_proto::time::Duration as CoreDuration;
use braid_sim::link::LossModel;
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;
use toml::Spanned;

/// Most paths a scenario may have (the kernel's MPTCP takes at most 8 subflows).
pub const MAX_PATHS: usize = 8;
/// Longest run of one variant.
pub const MAX_DURATION_S: f64 = 3600.0;
/// Default drop-tail queue per direction, KiB.
pub const DEFAULT_QUEUE_KB: f64 = 64.0;

/// A traffic variant: how the bulk TCP transfer crosses the paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Through a braid tunnel between the client and server namespaces.
    Braid,
    /// The same tunnel with `[tcp] accelerate = true` at both ends: the TCP flow is carried
    /// over pTCP inside the session (the scenario's `[braid]` table otherwise as for `braid`).
    BraidAccel,
    /// Kernel MPTCP, one subflow per path.
    Mptcp,
    /// Plain TCP over each path alone, one after the other; the best is reported.
    BestSingle,
    /// One plain TCP per path at once, goodputs summed (the papers' "MTCP" ideal).
    Sum,
    /// pTCP (the pTCP paper) inside braid's secure session, one micro-flow per path: the
    /// code of `braid send`/`braid recv`, in the namespaces.
    Ptcp,
}

impl Variant {
    /// All variants, in report order.
    pub const ALL: [Variant; 6] = [
        Variant::Braid,
        Variant::BraidAccel,
        Variant::Ptcp,
        Variant::Mptcp,
        Variant::BestSingle,
        Variant::Sum,
    ];

    /// The name used in scenarios and results.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Braid => "braid",
            Variant::BraidAccel => "braid_accel",
            Variant::Mptcp => "mptcp",
            Variant::BestSingle => "best_single",
            Variant::Sum => "sum",
            Variant::Ptcp => "ptcp",
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Variant, String> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown variant {s:?}: choose from braid, braid_accel, ptcp, mptcp, best_single, sum"
                )
            })
    }
}

/// How the client and server namespaces are joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Each path goes through braid's link emulator in its own namespace.
    Emulated,
    /// Each path is a plain veth pair, unshaped (for throughput and CPU figures).
    Direct,
}

/// One direction's link settings (after defaults and overrides).
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSpec {
    /// Rate, Mbit/s of Ethernet frames.
    pub rate_mbit: f64,
    /// One-way delay, ms.
    pub delay_ms: f64,
    /// Jitter, ms (FIFO-keeping).
    pub jitter_ms: f64,
    /// Loss model.
    pub loss: LossModel,
    /// Drop-tail queue, KiB.
    pub queue_kb: f64,
    /// Token bucket, KiB (0: a serialiser; see `DirectionConfig::burst_bytes`).
    pub burst_kb: f64,
}

/// A scheduled change, as written in the scenario.
#[derive(Clone, Debug, PartialEq)]
pub enum ScheduleItem {
    /// `{ at_s, rate_mbit }`.
    Rate {
        /// Seconds from the start of the transfer.
        at_s: f64,
        /// New rate, Mbit/s.
        rate_mbit: f64,
    },
    /// `{ at_s, down_s }`.
    Down {
        /// Seconds from the start of the transfer.
        at_s: f64,
        /// How long the link is down, s.
        down_s: f64,
    },
    /// `{ at_s, down_s, direction = "forward" | "reverse" }`: one direction down, the other
    /// working (an upstream that died, a route that sends one end's datagrams elsewhere).
    DownOneWay {
        /// Seconds from the start of the transfer.
        at_s: f64,
        /// How long the direction is down, s.
        down_s: f64,
        /// `true`: client to server; `false`: server to client.
        forward: bool,
    },
}

/// One path of a scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct PathSpec {
    /// Client to server (`None` in direct mode).
    pub forward: Option<LinkSpec>,
    /// Server to client.
    pub reverse: Option<LinkSpec>,
    /// Changes applied to both directions (but [`ScheduleItem::DownOneWay`]).
    pub schedule: Vec<ScheduleItem>,
    /// A backup path: braid's `[[path]] backup = true`, MPTCP's endpoint flag `backup`; it
    /// carries traffic only while no other path works.
    pub backup: bool,
}

impl PathSpec {
    /// The emulator's settings for both directions, or `None` in direct mode.
    pub fn direction_configs(&self) -> Option<(DirectionConfig, DirectionConfig)> {
        let schedule = |forward: bool| -> Vec<ScheduleEntry> {
            self.schedule
                .iter()
                .filter_map(|s| match *s {
                    ScheduleItem::Rate { at_s, rate_mbit } => Some(ScheduleEntry {
                        at: secs(at_s),
                        change: Change::Rate {
                            rate_bps: mbit_to_bps(rate_mbit),
                        },
                    }),
                    ScheduleItem::Down { at_s, down_s } => Some(ScheduleEntry {
                        at: secs(at_s),
                        change: Change::Down {
                            duration: secs(down_s),
                        },
                    }),
                    ScheduleItem::DownOneWay {
                        at_s,
                        down_s,
                        forward: f,
                    } => (f == forward).then(|| ScheduleEntry {
                        at: secs(at_s),
                        change: Change::Down {
                            duration: secs(down_s),
                        },
                    }),
                })
                .collect()
        };
        let conv = |l: &LinkSpec, forward: bool| DirectionConfig {
            rate_bps: mbit_to_bps(l.rate_mbit),
            queue_bytes: (l.queue_kb * 1024.0).round().max(1.0) as u64,
            burst_bytes: (l.burst_kb * 1024.0).round() as u64,
            delay: secs(l.delay_ms / 1e3),
            jitter: secs(l.jitter_ms / 1e3),
            loss: l.loss.clone(),
            schedule: schedule(forward),
        };
        Some((
            conv(self.forward.as_ref()?, true),
            conv(self.reverse.as_ref()?, false),
        ))
    }
}

fn mbit_to_bps(mbit: f64) -> u64 {
    (mbit * 1e6).round().max(1.0) as u64
}

fn secs(s: f64) -> CoreDuration {
    CoreDuration::from_nanos((s * 1e9).round().max(0.0) as u64)
}

/// A parsed, validated scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Optional name, for titles.
    pub name: Option<String>,
    /// How long each transfer runs.
    pub duration: Duration,
    /// Variants to run, in order.
    pub variants: Vec<Variant>,
    /// Seed of the emulator's loss and jitter draws.
    pub seed: u64,
    /// Emulated or direct.
    pub mode: Mode,
    /// TCP congestion control of the client and server namespaces (`None`: the kernel's
    /// default).
    pub congestion_control: Option<String>,
    /// The `[braid]` table, handed to the braid variant as it is.
    pub braid: toml::Table,
    /// The `[qos]` table, handed to both daemons of the braid variant as their `[qos]`.
    pub qos: Option<toml::Table>,
    /// The `[[policy]]` tables, handed to the braid variant's client as its `[[policy]]`.
    pub policy: Vec<toml::Table>,
    /// A latency probe beside every transfer (`[probe]`).
    pub probe: Option<crate::probe::ProbeSpec>,
    /// The braid variant's flows: one bulk TCP flow per entry, its packets marked with that
    /// DSCP (0-63), all at once; empty: one unmarked flow.
    pub dscp: Vec<u8>,
    /// The paths.
    pub paths: Vec<PathSpec>,
}

impl Scenario {
    /// Sum of the paths' base rates (client to server), Mbit/s; `None` in direct mode.
    pub fn capacity_mbit(&self) -> Option<f64> {
        self.paths
            .iter()
            .map(|p| p.forward.as_ref().map(|f| f.rate_mbit))
            .sum()
    }

    /// Read and validate a scenario file.
    pub fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: Some(path.to_path_buf()),
            line: None,
            column: None,
            message: format!("cannot read the scenario: {e}"),
        })?;
        Scenario::parse(&text).map_err(|mut e| {
            e.file = Some(path.to_path_buf());
            e
        })
    }

    /// Parse and validate scenario text.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        let raw: RawScenario = toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
            ScenarioError {
                file: None,
                line: (line > 0).then_some(line),
                column: (column > 0).then_some(column),
                message: explain_toml_error(e.message()),
            }
        })?;
        let v = Validator { text };
        v.scenario(raw)
    }
}

/// A scenario that cannot be used, with where and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub struct ScenarioError {
    /// The file, when read from one.
    pub file: Option<PathBuf>,
    /// 1-based line.
    pub line: Option<usize>,
    /// 1-based column.
    pub column: Option<usize>,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line, self.column) {
            (Some(p), Some(l), Some(c)) => write!(f, "{}:{l}:{c}: ", p.display())?,
            (Some(p), Some(l), None) => write!(f, "{}:{l}: ", p.display())?,
            (Some(p), None, _) => write!(f, "{}: ", p.display())?,
            (None, Some(l), Some(c)) => write!(f, "line {l}, column {c}: ")?,
            (None, Some(l), None) => write!(f, "line {l}: ")?,
            (None, None, _) => {}
        }
        f.write_str(&self.message)
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn explain_toml_error(msg: &str) -> String {
    let msg = msg.trim();
    if msg.starts_with("unknown field") {
        format!("{msg} (see docs/lab.md for every key)")
    } else {
        msg.to_string()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    duration_s: Option<Spanned<f64>>,
    variants: Option<Spanned<Vec<Spanned<String>>>>,
    seed: Option<u64>,
    mode: Option<Spanned<String>>,
    congestion_control: Option<Spanned<String>>,
    braid: Option<toml::Table>,
    qos: Option<toml::Table>,
    policy: Option<Vec<toml::Table>>,
    probe: Option<Spanned<RawProbe>>,
    dscp: Option<Spanned<Vec<u8>>>,
    path: Option<Spanned<Vec<Spanned<RawPath>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProbe {
    dscp: Option<u8>,
    interval_ms: Option<f64>,
    bytes: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    rate_mbit: Option<Spanned<f64>>,
    delay_ms: Option<Spanned<f64>>,
    jitter_ms: Option<Spanned<f64>>,
    loss_pct: Option<Spanned<f64>>,
    queue_kb: Option<Spanned<f64>>,
    gilbert_elliott: Option<Spanned<RawGe>>,
    burst_kb: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPath {
    rate_mbit: Option<Spanned<f64>>,
    delay_ms: Option<Spanned<f64>>,
    jitter_ms: Option<Spanned<f64>>,
    loss_pct: Option<Spanned<f64>>,
    queue_kb: Option<Spanned<f64>>,
    gilbert_elliott: Option<Spanned<RawGe>>,
    burst_kb: Option<Spanned<f64>>,
    schedule: Option<Vec<Spanned<RawEvent>>>,
    reverse: Option<Spanned<RawLink>>,
    #[serde(default)]
    backup: bool,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
struct RawGe {
    p_good_to_bad_pct: f64,
    p_bad_to_good_pct: f64,
    #[serde(default)]
    loss_good_pct: f64,
    #[serde(default = "hundred")]
    loss_bad_pct: f64,
}

fn hundred() -> f64 {
    100.0
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    at_s: f64,
    rate_mbit: Option<f64>,
    down_s: Option<f64>,
    direction: Option<String>,
}

struct Validator<'a> {
    text: &'a str,
}

type VResult<T> = Result<T, ScenarioError>;

impl Validator<'_> {
    fn err_at(&self, span: Option<std::ops::Range<usize>>, message: String) -> ScenarioError {
        let (line, column) = span.map_or((None, None), |s| {
            let (l, c) = line_col(self.text, s.start);
            (Some(l), Some(c))
        });
        ScenarioError {
            file: None,
            line,
            column,
            message,
        }
    }

    fn number(
        &self,
        v: &Option<Spanned<f64>>,
        key: &str,
        ctx: &str,
        range: (f64, f64),
        fix: &str,
    ) -> VResult<Option<f64>> {
        let Some(s) = v else { return Ok(None) };
        let x = *s.get_ref();
        if !x.is_finite() || x < range.0 || x > range.1 {
            return Err(self.err_at(Some(s.span()), format!("{ctx}{key} = {x}: {fix}")));
        }
        Ok(Some(x))
    }

    fn scenario(&self, raw: RawScenario) -> VResult<Scenario> {
        let duration_s = self
            .number(
                &raw.duration_s,
                "duration_s",
                "",
                (0.5, MAX_DURATION_S),
                "give the length of each transfer in seconds, from 0.5 to 3600 (e.g. duration_s = 20)",
            )?
            .unwrap_or(20.0);
        let variants = match &raw.variants {
            None => vec![Variant::Mptcp, Variant::BestSingle, Variant::Sum],
            Some(list) => {
                let mut out = Vec::new();
                for v in list.get_ref() {
                    let parsed: Variant = v
                        .get_ref()
                        .parse()
                        .map_err(|e| self.err_at(Some(v.span()), format!("variants: {e}")))?;
                    if out.contains(&parsed) {
                        return Err(self.err_at(
                            Some(v.span()),
                            format!("variants: {parsed} is listed twice; list each variant once"),
                        ));
                    }
                    out.push(parsed);
                }
                if out.is_empty() {
                    return Err(self.err_at(
                        Some(list.span()),
                        "variants is empty: list at least one of braid, mptcp, best_single, sum"
                            .into(),
                    ));
                }
                out
            }
        };
        let mode = match &raw.mode {
            None => Mode::Emulated,
            Some(m) => match m.get_ref().as_str() {
                "emulated" => Mode::Emulated,
                "direct" => Mode::Direct,
                other => {
                    return Err(self.err_at(
                        Some(m.span()),
                        format!("mode = {other:?}: write mode = \"emulated\" (links shaped by braid's emulator, the default) or mode = \"direct\" (plain veth pairs, unshaped)"),
                    ))
                }
            },
        };
        let congestion_control = match &raw.congestion_control {
            None => None,
            Some(c) => {
                let name = c.get_ref();
                if name.is_empty()
                    || name.len() > 15
                    || !name
                        .chars()
                        .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
                {
                    return Err(self.err_at(
                        Some(c.span()),
                        format!("congestion_control = {name:?}: give a kernel congestion control module name, e.g. \"cubic\" or \"bbr\" (see /proc/sys/net/ipv4/tcp_available_congestion_control)"),
                    ));
                }
                Some(name.clone())
            }
        };
        let Some(paths_raw) = raw.path else {
            return Err(self.err_at(
                None,
                "no [[path]] table: add one per path, e.g.\n[[path]]\nrate_mbit = 20.0\ndelay_ms = 10.0"
                    .into(),
            ));
        };
        if paths_raw.get_ref().is_empty() || paths_raw.get_ref().len() > MAX_PATHS {
            return Err(self.err_at(
                Some(paths_raw.span()),
                format!(
                    "{} paths given: a scenario has 1 to {MAX_PATHS} [[path]] tables",
                    paths_raw.get_ref().len()
                ),
            ));
        }
        let paths_span = paths_raw.span();
        let mut paths = Vec::new();
        for (i, p) in paths_raw.into_inner().into_iter().enumerate() {
            paths.push(self.path(i, p, mode, duration_s)?);
        }
        if paths.first().is_some_and(|p: &PathSpec| p.backup) {
            return Err(self.err_at(
                Some(paths_span),
                "path 0 has backup = true: the first path carries MPTCP's first subflow and every single-path run; list the backup paths after it".into(),
            ));
        }
        let dscp = match raw.dscp {
            Some(d) if d.get_ref().iter().any(|&x| x > 63) || d.get_ref().len() > 8 => {
                return Err(self.err_at(
                    Some(d.span()),
                    "dscp: give up to 8 DSCP values from 0 to 63, one bulk flow each, e.g. dscp = [46, 0]"
                        .into(),
                ));
            }
            Some(d) => d.into_inner(),
            None => Vec::new(),
        };
        let probe = match raw.probe {
            None => None,
            Some(p) => {
                let span = p.span();
                let p = p.into_inner();
                let dscp = p.dscp.unwrap_or(46);
                let interval_ms = p.interval_ms.unwrap_or(20.0);
                let bytes = p.bytes.unwrap_or(160);
                if dscp > 63
                    || !(1.0..=1000.0).contains(&interval_ms)
                    || !(12..=1400).contains(&bytes)
                {
                    return Err(self.err_at(
                        Some(span),
                        "[probe]: dscp 0 to 63 (default 46), interval_ms 1 to 1000 (default 20), bytes 12 to 1400 (default 160)".into(),
                    ));
                }
                Some(crate::probe::ProbeSpec {
                    dscp,
                    interval: Duration::from_secs_f64(interval_ms / 1e3),
                    bytes,
                })
            }
        };
        Ok(Scenario {
            name: raw.name,
            duration: Duration::from_secs_f64(duration_s),
            variants,
            seed: raw.seed.unwrap_or(1),
            mode,
            congestion_control,
            braid: raw.braid.unwrap_or_default(),
            qos: raw.qos,
            policy: raw.policy.unwrap_or_default(),
            probe,
            dscp,
            paths,
        })
    }

    fn path(
        &self,
        i: usize,
        p: Spanned<RawPath>,
        mode: Mode,
        duration_s: f64,
    ) -> VResult<PathSpec> {
        let span = p.span();
        let p = p.into_inner();
        let ctx = format!("path {i}: ");
        let own = RawLink {
            rate_mbit: p.rate_mbit,
            delay_ms: p.delay_ms,
            jitter_ms: p.jitter_ms,
            loss_pct: p.loss_pct,
            queue_kb: p.queue_kb,
            gilbert_elliott: p.gilbert_elliott,
            burst_kb: p.burst_kb,
        };
        if mode == Mode::Direct {
            let shaped = own.rate_mbit.is_some()
                || own.delay_ms.is_some()
                || own.jitter_ms.is_some()
                || own.loss_pct.is_some()
                || own.queue_kb.is_some()
                || own.burst_kb.is_some()
                || own.gilbert_elliott.is_some()
                || p.schedule.is_some()
                || p.reverse.is_some();
            if shaped {
                return Err(self.err_at(
                    Some(span),
                    format!("{ctx}mode = \"direct\" joins the namespaces with plain veths and has no emulator: remove the link keys of this path, or remove mode = \"direct\" to shape it"),
                ));
            }
            return Ok(PathSpec {
                forward: None,
                reverse: None,
                schedule: Vec::new(),
                backup: p.backup,
            });
        }
        let forward = self.link(&own, None, &ctx, Some(span.clone()))?;
        let reverse = match &p.reverse {
            None => forward.clone(),
            Some(r) => self.link(
                r.get_ref(),
                Some(&forward),
                &format!("{ctx}reverse: "),
                Some(r.span()),
            )?,
        };
        let mut schedule = Vec::new();
        for (k, e) in p.schedule.unwrap_or_default().into_iter().enumerate() {
            let es = e.span();
            let e = e.into_inner();
            let ectx = format!("{ctx}schedule entry {k}: ");
            if !(e.at_s.is_finite() && e.at_s >= 0.0) {
                return Err(self.err_at(
                    Some(es),
                    format!(
                        "{ectx}at_s = {}: give seconds from the start of the transfer (>= 0)",
                        e.at_s
                    ),
                ));
            }
            if e.at_s >= duration_s {
                return Err(self.err_at(
                    Some(es),
                    format!("{ectx}at_s = {} is not before the end of the transfer (duration_s = {duration_s}): the change would never happen; move it earlier or lengthen duration_s", e.at_s),
                ));
            }
            let item = match (e.rate_mbit, e.down_s) {
                (Some(_), None) if e.direction.is_some() => {
                    return Err(self.err_at(
                        Some(es),
                        format!("{ectx}direction goes with down_s only: a rate change applies to both directions (give the reverse link its own rate in `reverse`)"),
                    ))
                }
                (Some(r), None) => {
                    if !(r.is_finite() && r > 0.0 && r <= 100_000.0) {
                        return Err(self.err_at(
                            Some(es),
                            format!("{ectx}rate_mbit = {r}: give a positive rate in Mbit/s; to cut the link use {{ at_s = {}, down_s = SECONDS }}", e.at_s),
                        ));
                    }
                    ScheduleItem::Rate {
                        at_s: e.at_s,
                        rate_mbit: r,
                    }
                }
                (None, Some(d)) => {
                    if !(d.is_finite() && d > 0.0) {
                        return Err(self.err_at(
                            Some(es),
                            format!("{ectx}down_s = {d}: give how long the link is down, in seconds (> 0)"),
                        ));
                    }
                    match e.direction.as_deref() {
                        None | Some("both") => ScheduleItem::Down {
                            at_s: e.at_s,
                            down_s: d,
                        },
                        Some(dir @ ("forward" | "reverse")) => ScheduleItem::DownOneWay {
                            at_s: e.at_s,
                            down_s: d,
                            forward: dir == "forward",
                        },
                        Some(other) => {
                            return Err(self.err_at(
                                Some(es),
                                format!("{ectx}direction = \"{other}\": give \"forward\" (client to server), \"reverse\" (server to client) or \"both\" (the default)"),
                            ))
                        }
                    }
                }
                (Some(_), Some(_)) => {
                    return Err(self.err_at(
                        Some(es),
                        format!("{ectx}has both rate_mbit and down_s: give one change per entry, e.g. {{ at_s = 5.0, rate_mbit = 2.0 }} or {{ at_s = 8.0, down_s = 3.0 }}"),
                    ))
                }
                (None, None) => {
                    return Err(self.err_at(
                        Some(es),
                        format!("{ectx}says neither rate_mbit nor down_s: add one, e.g. {{ at_s = {}, rate_mbit = 2.0 }}", e.at_s),
                    ))
                }
            };
            schedule.push(item);
        }
        Ok(PathSpec {
            forward: Some(forward),
            reverse: Some(reverse),
            schedule,
            backup: p.backup,
        })
    }

    fn link(
        &self,
        raw: &RawLink,
        base: Option<&LinkSpec>,
        ctx: &str,
        span: Option<std::ops::Range<usize>>,
    ) -> VResult<LinkSpec> {
        let rate = self.number(
            &raw.rate_mbit,
            "rate_mbit",
            ctx,
            (0.001, 100_000.0),
            "give the link rate in Mbit/s, more than 0 (e.g. rate_mbit = 10.0)",
        )?;
        let rate_mbit = match (rate, base) {
            (Some(r), _) => r,
            (None, Some(b)) => b.rate_mbit,
            (None, None) => {
                return Err(self.err_at(
                    span,
                    format!("{ctx}rate_mbit is missing: every emulated path needs a rate (e.g. rate_mbit = 10.0), or set mode = \"direct\" at the top for unshaped veths"),
                ))
            }
        };
        let delay_ms = self
            .number(
                &raw.delay_ms,
                "delay_ms",
                ctx,
                (0.0, 10_000.0),
                "give the one-way delay in ms, from 0 to 10000",
            )?
            .or(base.map(|b| b.delay_ms))
            .unwrap_or(0.0);
        let jitter_ms = self
            .number(
                &raw.jitter_ms,
                "jitter_ms",
                ctx,
                (0.0, 10_000.0),
                "give the jitter in ms, from 0 to 10000",
            )?
            .or(base.map(|b| b.jitter_ms))
            .unwrap_or(0.0);
        let queue_kb = self
            .number(
                &raw.queue_kb,
                "queue_kb",
                ctx,
                (1.0, 1_048_576.0),
                "give the drop-tail queue in KiB, from 1 to 1048576 (e.g. queue_kb = 64)",
            )?
            .or(base.map(|b| b.queue_kb))
            .unwrap_or(DEFAULT_QUEUE_KB);
        let burst_kb = self
            .number(
                &raw.burst_kb,
                "burst_kb",
                ctx,
                (2.0, 1_048_576.0),
                "give the token bucket in KiB, from 2 (a full frame) to 1048576, as tbf's burst (e.g. burst_kb = 16); leave it out for a link that serialises every frame at its rate",
            )?
            .or(base.map(|b| b.burst_kb))
            .unwrap_or(0.0);
        let loss_pct = self.number(
            &raw.loss_pct,
            "loss_pct",
            ctx,
            (0.0, 100.0),
            "give the loss rate as a percentage from 0 to 100 (e.g. loss_pct = 1.0)",
        )?;
        let loss = match (loss_pct, &raw.gilbert_elliott) {
            (Some(_), Some(g)) => {
                return Err(self.err_at(
                    Some(g.span()),
                    format!(
                        "{ctx}loss_pct and gilbert_elliott are both set: choose one loss model"
                    ),
                ))
            }
            (Some(0.0), None) => LossModel::None,
            (Some(p), None) => LossModel::Bernoulli(p / 100.0),
            (None, Some(g)) => {
                let ge = *g.get_ref();
                for (k, x) in [
                    ("p_good_to_bad_pct", ge.p_good_to_bad_pct),
                    ("p_bad_to_good_pct", ge.p_bad_to_good_pct),
                    ("loss_good_pct", ge.loss_good_pct),
                    ("loss_bad_pct", ge.loss_bad_pct),
                ] {
                    if !(x.is_finite() && (0.0..=100.0).contains(&x)) {
                        return Err(self.err_at(
                            Some(g.span()),
                            format!(
                                "{ctx}gilbert_elliott.{k} = {x}: give a percentage from 0 to 100"
                            ),
                        ));
                    }
                }
                LossModel::GilbertElliott {
                    p_good_to_bad: ge.p_good_to_bad_pct / 100.0,
                    p_bad_to_good: ge.p_bad_to_good_pct / 100.0,
                    loss_good: ge.loss_good_pct / 100.0,
                    loss_bad: ge.loss_bad_pct / 100.0,
                }
            }
            (None, None) => base.map_or(LossModel::None, |b| b.loss.clone()),
        };
        Ok(LinkSpec {
            rate_mbit,
            delay_ms,
            jitter_ms,
            loss,
            queue_kb,
            burst_kb,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUE_EXAMPLE: &str = r#"
duration_s = 20
variants = ["braid", "mptcp", "best_single", "sum"]
[braid]                # keys of braid.toml's bond settings
scheduler = "srr"
resequence = "sequence"
[[path]]
rate_mbit = 20.0
delay_ms = 10.0        # one way
jitter_ms = 0.0
loss_pct = 0.0
queue_kb = 64
schedule = [{ at_s = 5.0, rate_mbit = 2.0 }, { at_s = 8.0, down_s = 3.0 }]
"#;

    #[test]
    fn the_issue_example_parses() {
        let s = Scenario::parse(ISSUE_EXAMPLE).unwrap();
        assert_eq!(s.duration, Duration::from_secs(20));
        assert_eq!(
            s.variants,
            [
                Variant::Braid,
                Variant::Mptcp,
                Variant::BestSingle,
                Variant::Sum
            ]
        );
        assert_eq!(
            s.braid.get("scheduler").and_then(|v| v.as_str()),
            Some("srr")
        );
        assert_eq!(s.paths.len(), 1);
        assert_eq!(s.capacity_mbit(), Some(20.0));
        let p = &s.paths[0];
        assert_eq!(p.forward, p.reverse);
        assert_eq!(
            p.schedule,
            vec![
                ScheduleItem::Rate {
                    at_s: 5.0,
                    rate_mbit: 2.0
                },
                ScheduleItem::Down {
                    at_s: 8.0,
                    down_s: 3.0
                }
            ]
        );
        let (f, _) = p.direction_configs().unwrap();
        assert_eq!(f.rate_bps, 20_000_000);
        assert_eq!(f.queue_bytes, 65_536);
        assert_eq!(f.delay, CoreDuration::from_millis(10));
        assert_eq!(f.loss, LossModel::None);
        assert_eq!(f.schedule.len(), 2);
    }

    #[test]
    fn defaults_reverse_overrides_and_bursty_loss() {
        let s = Scenario::parse(
            r#"
[[path]]
rate_mbit = 10
[path.reverse]
rate_mbit = 1
delay_ms = 30
[[path]]
rate_mbit = 4
gilbert_elliott = { p_good_to_bad_pct = 1, p_bad_to_good_pct = 30 }
"#,
        )
        .unwrap();
        assert_eq!(s.duration, Duration::from_secs(20));
        assert_eq!(
            s.variants,
            vec![Variant::Mptcp, Variant::BestSingle, Variant::Sum]
        );
        assert_eq!(s.mode, Mode::Emulated);
        assert_eq!(s.congestion_control, None);
        let f = s.paths[0].forward.as_ref().unwrap();
        let r = s.paths[0].reverse.as_ref().unwrap();
        assert_eq!((f.rate_mbit, f.delay_ms, f.queue_kb), (10.0, 0.0, 64.0));
        assert_eq!((r.rate_mbit, r.delay_ms, r.queue_kb), (1.0, 30.0, 64.0));
        assert_eq!(
            s.paths[1].forward.as_ref().unwrap().loss,
            LossModel::GilbertElliott {
                p_good_to_bad: 0.01,
                p_bad_to_good: 0.3,
                loss_good: 0.0,
                loss_bad: 1.0
            }
        );
    }

    #[test]
    fn dscp_flows_and_a_qos_table() {
        let s = Scenario::parse(
            "dscp = [46, 0]\n[qos]\nbuffer_packets = 100\n[[qos.class]]\nname = \"a\"\ndefault = true\n[[path]]\nrate_mbit = 5.0\n",
        )
        .unwrap();
        assert_eq!(s.dscp, vec![46, 0]);
        assert!(s.qos.unwrap().contains_key("class"));
        let e = Scenario::parse("dscp = [64]\n[[path]]\nrate_mbit = 5.0\n").unwrap_err();
        assert!(e.message.contains("0 to 63") && e.line == Some(1), "{e}");
    }

    #[test]
    fn direct_mode() {
        let s = Scenario::parse("mode = \"direct\"\nduration_s = 2\n[[path]]\n").unwrap();
        assert_eq!(s.mode, Mode::Direct);
        assert_eq!(s.capacity_mbit(), None);
        assert!(s.paths[0].direction_configs().is_none());
    }

    fn error(text: &str) -> ScenarioError {
        Scenario::parse(text).expect_err("should be refused")
    }

    #[test]
    fn one_direction_of_a_path_can_go_down() {
        let s = Scenario::parse(
            "duration_s = 20\n[[path]]\nrate_mbit = 10\nschedule = [{ at_s = 7.5, down_s = 5, direction = \"forward\" }]\n",
        )
        .unwrap();
        let p = &s.paths[0];
        assert_eq!(
            p.schedule,
            vec![ScheduleItem::DownOneWay {
                at_s: 7.5,
                down_s: 5.0,
                forward: true
            }]
        );
        let (f, r) = p.direction_configs().unwrap();
        assert_eq!(f.schedule.len(), 1);
        assert!(r.schedule.is_empty());
        let e = error(
            "[[path]]\nrate_mbit = 1\nschedule = [{ at_s = 1, down_s = 1, direction = \"up\" }]\n",
        );
        assert!(e.message.contains("direction = \"up\""), "{e}");
        let e = error("[[path]]\nrate_mbit = 1\nschedule = [{ at_s = 1, rate_mbit = 2, direction = \"forward\" }]\n");
        assert!(e.message.contains("direction goes with down_s only"), "{e}");
    }

    #[test]
    fn a_token_bucket_goes_to_both_directions_unless_the_reverse_says_otherwise() {
        let s = Scenario::parse(
            "[[path]]\nrate_mbit = 1\nburst_kb = 16\n[[path]]\nrate_mbit = 1\nburst_kb = 16\n[path.reverse]\nburst_kb = 4\n",
        )
        .unwrap();
        let (f0, r0) = s.paths[0].direction_configs().unwrap();
        assert_eq!((f0.burst_bytes, r0.burst_bytes), (16_384, 16_384));
        let (f1, r1) = s.paths[1].direction_configs().unwrap();
        assert_eq!((f1.burst_bytes, r1.burst_bytes), (16_384, 4_096));
        let e = error("[[path]]\nrate_mbit = 1\nburst_kb = 1\n");
        assert!(e.message.contains("burst_kb"), "{e}");
        let plain = Scenario::parse("[[path]]\nrate_mbit = 1\n").unwrap();
        assert_eq!(plain.paths[0].direction_configs().unwrap().0.burst_bytes, 0);
    }

    #[test]
    fn errors_name_the_line_the_key_and_the_fix() {
        let e = error("duration_s = 5\n[[path]]\nrate_mbit = 0\n");
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("path 0: rate_mbit = 0"), "{e}");
        assert!(e.message.contains("e.g. rate_mbit = 10.0"), "{e}");

        let e = error("[[path]]\nrat_mbit = 10\n");
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("rat_mbit"), "{e}");

        let e = error("[[path]]\ndelay_ms = 10\n");
        assert!(e.message.contains("rate_mbit is missing"), "{e}");
        assert_eq!(e.line, Some(1), "{e}");

        let e = error("variants = [\"mptcp\", \"mptpc\"]\n[[path]]\nrate_mbit = 1\n");
        assert!(e.message.contains("unknown variant \"mptpc\""), "{e}");
        assert_eq!((e.line, e.column), (Some(1), Some(22)), "{e}");

        let e = error("[[path]]\nrate_mbit = 1\nloss_pct = 120\n");
        assert!(e.message.contains("loss_pct = 120"), "{e}");
        assert_eq!(e.line, Some(3));

        let e = error(
            "[[path]]\nrate_mbit = 1\nschedule = [{ at_s = 1, rate_mbit = 2, down_s = 1 }]\n",
        );
        assert!(e.message.contains("both rate_mbit and down_s"), "{e}");

        let e = error(
            "duration_s = 10\n[[path]]\nrate_mbit = 1\nschedule = [{ at_s = 12, down_s = 1 }]\n",
        );
        assert!(e.message.contains("never happen"), "{e}");

        let e = error("mode = \"direct\"\n[[path]]\nrate_mbit = 1\n");
        assert!(e.message.contains("no emulator"), "{e}");

        let e = error("duration_s = \"20\"\n[[path]]\nrate_mbit = 1\n");
        assert_eq!(e.line, Some(1), "{e}");

        let e = error("congestion_control = \"Cubic!\"\n[[path]]\nrate_mbit = 1\n");
        assert!(e.message.contains("congestion_control = \"Cubic!\""), "{e}");

        let e = error("duration_s = 20\n");
        assert!(e.message.contains("no [[path]]"), "{e}");

        let e = error("[[path]]\nrate_mbit = 1\nloss_pct = 1\ngilbert_elliott = { p_good_to_bad_pct = 1, p_bad_to_good_pct = 10 }\n");
        assert!(e.message.contains("choose one loss model"), "{e}");

        let e = error("[[path]]\nrate_mbit = 1\n[path.reverse]\nrate_mbit = -3\n");
        assert!(e.message.contains("path 0: reverse: rate_mbit = -3"), "{e}");
        assert_eq!(e.line, Some(4));

        let e = error("duration_s = 20\n[[path]\n");
        assert_eq!(e.line, Some(2), "{e}");
    }

    #[test]
    fn error_display_with_file() {
        let mut e = error("[[path]]\nrate_mbit = 0\n");
        e.file = Some(PathBuf::from("s.toml"));
        assert!(
            e.to_string()
                .starts_with("s.toml:2:13: path 0: rate_mbit = 0"),
            "{e}"
        );
    }
}
