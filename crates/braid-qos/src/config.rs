//! The `[qos]` table of `braid.toml`: JoBS classes in readable units. Every key is documented in
//! `docs/qos.md`.
//!
//! ```toml
//! [qos]
//! rate_mbit = 100                  # C; default: the bond's rate, from the daemon
//! buffer_packets = 200             # shared by all classes
//!
//! [[qos.class]]
//! name = "voice"
//! dscp = [46]
//! delay_bound_ms = 8
//! loss_bound_pct = 1
//!
//! [[qos.class]]
//! name = "bulk"
//! default = true
//! ```
//!
//! Deserialising checks types and rejects unknown keys; [`QosConfig::validate`] checks values
//! and keys together and names the key and the fix in its error. [`QosConfig::jobs_config`] and
//! [`QosConfig::classifier`] build what the daemon runs.

use crate::classifier::{Classifier, Filter, PortRange};
use crate::jobs::{BufferMode, ClassConfig, Feasibility, JobsConfig, Relaxation};
use crate::{ClassId, MAX_CLASSES};
use braid_proto::time::Duration;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// A configuration value that cannot be used: which key, and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{key}`: {message}")]
pub struct QosConfigError {
    /// The key, e.g. `qos.class[1].delay_ratio`.
    pub key: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

fn err<T>(key: impl Into<String>, message: impl Into<String>) -> Result<T, QosConfigError> {
    Err(QosConfigError {
        key: key.into(),
        message: message.into(),
    })
}

/// Shared or separate buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BufferKind {
    /// One limit for all classes together.
    #[default]
    Shared,
    /// One limit per class.
    Separate,
}

/// Which bound gives way, as written in the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RelaxationKind {
    /// Loss bounds win (the paper's order).
    #[default]
    LossFirst,
    /// Delay bounds win.
    DelayFirst,
}

/// What JoBS does while the minimum rates exceed the link rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FeasibilityKind {
    /// `greedy_alloc` (section 3.2).
    #[default]
    Greedy,
    /// Figure 4 lines 14-17.
    Drop,
}

/// A protocol: a name or a number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Proto {
    /// An IP protocol number.
    Number(u8),
    /// `tcp`, `udp`, `icmp`, `icmpv6`, `sctp` or `udplite`.
    Name(String),
}

impl Proto {
    fn number(&self) -> Option<u8> {
        match self {
            Proto::Number(n) => Some(*n),
            Proto::Name(s) => match s.as_str() {
                "icmp" => Some(1),
                "tcp" => Some(6),
                "udp" => Some(17),
                "icmpv6" => Some(58),
                "sctp" => Some(132),
                "udplite" => Some(136),
                _ => None,
            },
        }
    }
}

/// A port or an inclusive range, `443` or `"5060-5070"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Ports {
    /// One port.
    One(u16),
    /// `"FIRST-LAST"`.
    Range(String),
}

impl Ports {
    fn range(&self) -> Option<PortRange> {
        match self {
            Ports::One(p) => Some(PortRange {
                first: *p,
                last: *p,
            }),
            Ports::Range(s) => {
                let (a, b) = s.split_once('-')?;
                let (first, last) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                (first <= last).then_some(PortRange { first, last })
            }
        }
    }
}

/// One `[[qos.class.filter]]`: every key given must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterTable {
    /// Protocol name or number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<Proto>,
    /// Source prefix, `"10.0.0.0/8"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<IpNet>,
    /// Destination prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<IpNet>,
    /// Source port or range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_port: Option<Ports>,
    /// Destination port or range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_port: Option<Ports>,
    /// DSCP, 0-63.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp: Option<u8>,
}

/// One `[[qos.class]]`: the paper's parameters for one class (Table 1, Figure 1).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassTable {
    /// A name for status output and metrics.
    pub name: String,
    /// Packets no filter or DSCP claims go here; exactly one class has it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// DSCPs (0-63) of this class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dscp: Vec<u8>,
    /// `d_i`: queueing delay bound, ms (ALTQ `adc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_bound_ms: Option<f64>,
    /// `L_i`: loss-rate bound, percent (ALTQ `alc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_bound_pct: Option<f64>,
    /// `f_i`: minimum rate while backlogged, Mbit/s (ALTQ `arc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rate_mbit: Option<f64>,
    /// `k_i`: the next class's delay over this one's (ALTQ `rdc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ratio: Option<f64>,
    /// `k'_i`: the next class's loss rate over this one's (ALTQ `rlc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_ratio: Option<f64>,
    /// This class's buffer in packets, with `buffer = "separate"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_packets: Option<u32>,
    /// 5-tuple filters, tried before DSCPs.
    #[serde(default, rename = "filter", skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<FilterTable>,
}

fn default_buffer_packets() -> u32 {
    200
}

fn default_sample_every() -> u32 {
    1
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// The `[qos]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    /// `C` in Mbit/s; default: the rate the daemon passes (the bond's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_mbit: Option<f64>,
    /// `shared` or `separate`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub buffer: BufferKind,
    /// Packets: in all classes (shared) or per class by default (separate).
    #[serde(default = "default_buffer_packets")]
    pub buffer_packets: u32,
    /// `loss-first` or `delay-first`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub relaxation: RelaxationKind,
    /// `greedy` or `drop`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub feasibility: FeasibilityKind,
    /// `T`: adjust rates every this many arrivals.
    #[serde(default = "default_sample_every")]
    pub sample_every: u32,
    /// Gain of `adjust_rates`, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adjust_gain: Option<f64>,
    /// The classes, highest first; ratios relate each to the next.
    #[serde(rename = "class")]
    pub classes: Vec<ClassTable>,
}

fn positive(key: &str, v: Option<f64>, what: &str) -> Result<(), QosConfigError> {
    match v {
        Some(x) if !(x.is_finite() && x > 0.0) => err(key, format!("{x} is not {what}")),
        _ => Ok(()),
    }
}

impl QosConfig {
    /// One best-effort class, `name`, taking every packet, in a shared buffer of
    /// `buffer_packets`: a plain FIFO behind the shaper. `braid up` shapes a PET bond's egress
    /// with it when no `[qos]` table is given.
    pub fn one_class(name: &str, buffer_packets: u32) -> Self {
        QosConfig {
            rate_mbit: None,
            buffer: BufferKind::Shared,
            buffer_packets,
            relaxation: RelaxationKind::default(),
            feasibility: FeasibilityKind::default(),
            sample_every: default_sample_every(),
            adjust_gain: None,
            classes: vec![ClassTable {
                name: name.into(),
                default: true,
                ..ClassTable::default()
            }],
        }
    }

    /// Check every value; the error names the key and the fix.
    pub fn validate(&self) -> Result<(), QosConfigError> {
        let n = self.classes.len();
        if n == 0 {
            return err(
                "qos.class",
                "no classes: add at least one [[qos.class]] table, one of them with default = true",
            );
        }
        if n > MAX_CLASSES {
            return err("qos.class", format!("{n} classes: at most {MAX_CLASSES}"));
        }
        positive(
            "qos.rate_mbit",
            self.rate_mbit,
            "a rate: give the link rate in Mbit/s, or leave it out to use the bond's",
        )?;
        if self.buffer_packets == 0 {
            return err(
                "qos.buffer_packets",
                "0 packets: give at least 1 (ALTQ's default is 200)",
            );
        }
        if self.sample_every == 0 {
            return err(
                "qos.sample_every",
                "0: use 1 to adjust rates on every arrival, or 10-100 to sample",
            );
        }
        if let Some(g) = self.adjust_gain {
            if !(g.is_finite() && g > 0.0 && g <= 1.0) {
                return err(
                    "qos.adjust_gain",
                    format!("{g} is outside (0, 1]: leave it out for the default"),
                );
            }
        }
        let defaults: Vec<&str> = self
            .classes
            .iter()
            .filter(|c| c.default)
            .map(|c| c.name.as_str())
            .collect();
        match defaults.len() {
            1 => {}
            0 => {
                return err(
                    "qos.class",
                    "no class has default = true: mark the class that unclassified packets go to",
                )
            }
            _ => {
                return err(
                    "qos.class",
                    format!(
                        "classes {} all have default = true: keep it on one",
                        defaults.join(", ")
                    ),
                )
            }
        }
        let mut dscp_owner: [Option<usize>; 64] = [None; 64];
        for (i, c) in self.classes.iter().enumerate() {
            let key = |k: &str| format!("qos.class[{i}].{k}");
            if c.name.trim().is_empty() {
                return err(key("name"), "empty: give the class a name");
            }
            if let Some(j) = self.classes[..i].iter().position(|o| o.name == c.name) {
                return err(
                    key("name"),
                    format!(
                        "`{}` is also the name of qos.class[{j}]: names must differ",
                        c.name
                    ),
                );
            }
            positive(
                &key("delay_bound_ms"),
                c.delay_bound_ms,
                "a delay: give milliseconds, e.g. 8",
            )?;
            positive(
                &key("min_rate_mbit"),
                c.min_rate_mbit,
                "a rate: give Mbit/s, e.g. 35",
            )?;
            positive(
                &key("delay_ratio"),
                c.delay_ratio,
                "a ratio: give a positive number, e.g. 2",
            )?;
            positive(
                &key("loss_ratio"),
                c.loss_ratio,
                "a ratio: give a positive number, e.g. 2",
            )?;
            if let Some(l) = c.loss_bound_pct {
                if !(l.is_finite() && l > 0.0 && l <= 100.0) {
                    return err(
                        key("loss_bound_pct"),
                        format!("{l} is not a percentage in (0, 100]: e.g. 1 for 1%"),
                    );
                }
            }
            if i + 1 == n {
                for (k, v) in [("delay_ratio", c.delay_ratio), ("loss_ratio", c.loss_ratio)] {
                    if v.is_some() {
                        return err(key(k), "the last class has no next class to be compared with: remove it, or put it on the class above");
                    }
                }
            }
            match (c.buffer_packets, self.buffer) {
                (Some(0), _) => return err(key("buffer_packets"), "0 packets: give at least 1"),
                (Some(_), BufferKind::Shared) => return err(
                    key("buffer_packets"),
                    "per-class buffers need qos.buffer = \"separate\": set it, or remove this key",
                ),
                _ => {}
            }
            for &d in &c.dscp {
                if d > 63 {
                    return err(
                        key("dscp"),
                        format!(
                            "{d} is not a DSCP: they are 0-63 (the ToS byte shifted right by 2)"
                        ),
                    );
                }
                if let Some(j) = dscp_owner[usize::from(d)] {
                    return err(
                        key("dscp"),
                        format!(
                            "DSCP {d} is also in qos.class[{j}].dscp: give each DSCP to one class"
                        ),
                    );
                }
                dscp_owner[usize::from(d)] = Some(i);
            }
            for (f_i, f) in c.filters.iter().enumerate() {
                let key = |k: &str| format!("qos.class[{i}].filter[{f_i}].{k}");
                if *f == FilterTable::default() {
                    return err(format!("qos.class[{i}].filter[{f_i}]"), "matches every packet: give at least one key, or use default = true on the class");
                }
                let proto = match &f.proto {
                    None => None,
                    Some(p) => match p.number() {
                        Some(n) => Some(n),
                        None => return err(key("proto"), format!("{p:?} is unknown: use tcp, udp, icmp, icmpv6, sctp, udplite or a protocol number")),
                    },
                };
                for (k, ports) in [("src_port", &f.src_port), ("dst_port", &f.dst_port)] {
                    if let Some(p) = ports {
                        if p.range().is_none() {
                            return err(key(k), format!("{p:?} is not a port or a range FIRST-LAST with FIRST <= LAST, e.g. \"5060-5070\""));
                        }
                        if proto.is_some_and(|n| !matches!(n, 6 | 17 | 132 | 136)) {
                            return err(key(k), "this protocol has no ports: remove the port, or set proto to tcp, udp, sctp or udplite");
                        }
                    }
                }
                if f.dscp.is_some_and(|d| d > 63) {
                    return err(key("dscp"), "not a DSCP: they are 0-63");
                }
                if let (Some(s), Some(d)) = (f.src, f.dst) {
                    if s.addr().is_ipv4() != d.addr().is_ipv4() {
                        return err(
                            key("dst"),
                            "src and dst are of different IP versions: no packet can match both",
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// The JoBS settings, on a link of `rate_mbit` if set, else `bond_rate_bps` (the rate the
    /// daemon knows for the bond).
    pub fn jobs_config(&self, bond_rate_bps: u64) -> Result<JobsConfig, QosConfigError> {
        self.validate()?;
        let capacity_bps = self
            .rate_mbit
            .map_or(bond_rate_bps, |m| (m * 1e6).round() as u64);
        let classes = self
            .classes
            .iter()
            .map(|c| ClassConfig {
                adc: c
                    .delay_bound_ms
                    .map(|ms| Duration::from_nanos((ms * 1e6).round() as u64)),
                arc_bps: c.min_rate_mbit.map(|m| ((m * 1e6).round() as u64).max(1)),
                alc: c.loss_bound_pct.map(|p| p / 100.0),
                rdc: c.delay_ratio,
                rlc: c.loss_ratio,
                limit_packets: c.buffer_packets,
            })
            .collect();
        let mut jobs = JobsConfig::new(capacity_bps, classes);
        jobs.buffer = match self.buffer {
            BufferKind::Shared => BufferMode::Shared,
            BufferKind::Separate => BufferMode::Separate,
        };
        jobs.limit_packets = self.buffer_packets;
        jobs.relaxation = match self.relaxation {
            RelaxationKind::LossFirst => Relaxation::LossFirst,
            RelaxationKind::DelayFirst => Relaxation::DelayFirst,
        };
        jobs.feasibility = match self.feasibility {
            FeasibilityKind::Greedy => Feasibility::Greedy,
            FeasibilityKind::Drop => Feasibility::Drop,
        };
        jobs.sample_every = self.sample_every;
        if let Some(g) = self.adjust_gain {
            jobs.adjust_gain = g;
        }
        jobs.validate().map_err(|e| QosConfigError {
            key: "qos".into(),
            message: e.to_string(),
        })?;
        Ok(jobs)
    }

    /// The classifier: filters in class order, then DSCPs, then the default class.
    pub fn classifier(&self) -> Result<Classifier, QosConfigError> {
        self.validate()?;
        let default = self.classes.iter().position(|c| c.default).unwrap_or(0);
        let mut classifier = Classifier::new(ClassId(default as u8));
        for (i, c) in self.classes.iter().enumerate() {
            let class = ClassId(i as u8);
            for &d in &c.dscp {
                classifier.map_dscp(d, class);
            }
            for f in &c.filters {
                classifier.add_filter(
                    Filter {
                        proto: f.proto.as_ref().and_then(Proto::number),
                        src: f.src,
                        dst: f.dst,
                        src_port: f.src_port.as_ref().and_then(Ports::range),
                        dst_port: f.dst_port.as_ref().and_then(Ports::range),
                        dscp: f.dscp,
                    },
                    class,
                );
            }
        }
        Ok(classifier)
    }

    /// The class names, in order (index = [`ClassId`]).
    pub fn class_names(&self) -> Vec<&str> {
        self.classes.iter().map(|c| c.name.as_str()).collect()
    }

    /// The QoSbox paper's Table 1 with Figure 1's classifier (DSCP 1-4), on a 100 Mbit/s link.
    pub fn table1() -> Self {
        let class = |name: &str, dscp: u8| ClassTable {
            name: name.into(),
            dscp: vec![dscp],
            ..ClassTable::default()
        };
        let mut classes = vec![
            class("high", 1),
            class("med2", 2),
            class("med1", 3),
            class("low", 4),
        ];
        classes[0].delay_bound_ms = Some(8.0);
        classes[0].loss_bound_pct = Some(1.0);
        classes[1].min_rate_mbit = Some(35.0);
        for c in &mut classes[1..3] {
            c.delay_ratio = Some(2.0);
            c.loss_ratio = Some(2.0);
        }
        classes[3].default = true;
        QosConfig {
            rate_mbit: Some(100.0),
            classes,
            ..QosConfig::default()
        }
    }
}

impl Default for QosConfig {
    fn default() -> Self {
        QosConfig {
            rate_mbit: None,
            buffer: BufferKind::Shared,
            buffer_packets: default_buffer_packets(),
            relaxation: RelaxationKind::LossFirst,
            feasibility: FeasibilityKind::Greedy,
            sample_every: default_sample_every(),
            adjust_gain: None,
            classes: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE1: &str = r#"
rate_mbit = 100
buffer_packets = 200

[[class]]
name = "high"
dscp = [1]
delay_bound_ms = 8
loss_bound_pct = 1

[[class]]
name = "med2"
dscp = [2]
min_rate_mbit = 35
delay_ratio = 2
loss_ratio = 2

[[class]]
name = "med1"
dscp = [3]
delay_ratio = 2
loss_ratio = 2

[[class]]
name = "low"
dscp = [4]
default = true
"#;

    #[test]
    fn table1_from_toml() {
        let c: QosConfig = toml::from_str(TABLE1).unwrap();
        assert_eq!(c, QosConfig::table1());
        let jobs = c.jobs_config(1).unwrap();
        assert_eq!(jobs, JobsConfig::table1(100_000_000));
        let back: QosConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn settings_reach_the_queue() {
        let text = TABLE1.replace(
            "buffer_packets = 200\n",
            "buffer_packets = 50\nbuffer = \"separate\"\nrelaxation = \"delay-first\"\n\
             feasibility = \"drop\"\nsample_every = 10\nadjust_gain = 0.5\n",
        ) + "buffer_packets = 20\n";
        let c: QosConfig = toml::from_str(&text).unwrap();
        let jobs = c.jobs_config(1).unwrap();
        assert_eq!(jobs.buffer, BufferMode::Separate);
        assert_eq!(jobs.limit_packets, 50);
        assert_eq!(jobs.classes[3].limit_packets, Some(20));
        assert_eq!(jobs.classes[0].limit_packets, None);
        assert_eq!(jobs.relaxation, Relaxation::DelayFirst);
        assert_eq!(jobs.feasibility, Feasibility::Drop);
        assert_eq!((jobs.sample_every, jobs.adjust_gain), (10, 0.5));
        // Without the keys: ALTQ's and the paper's choices, and C from the bond when
        // rate_mbit is left out.
        let mut c: QosConfig = toml::from_str(TABLE1).unwrap();
        c.rate_mbit = None;
        let jobs = c.jobs_config(42_000_000).unwrap();
        assert_eq!(jobs.capacity_bps, 42_000_000);
        assert_eq!(
            (
                jobs.buffer,
                jobs.relaxation,
                jobs.feasibility,
                jobs.sample_every
            ),
            (
                BufferMode::Shared,
                Relaxation::LossFirst,
                Feasibility::Greedy,
                1
            )
        );
    }

    fn error_of(text: &str) -> String {
        match toml::from_str::<QosConfig>(text) {
            Err(e) => e.to_string(),
            Ok(c) => c.validate().unwrap_err().to_string(),
        }
    }

    #[test]
    fn errors_name_the_key_and_the_fix() {
        let e = error_of(&TABLE1.replace("delay_bound_ms = 8", "delay_bound = 8"));
        assert!(e.contains("unknown field `delay_bound`"), "{e}");
        let e = error_of(&format!("{TABLE1}delay_ratio = 2\n"));
        assert!(
            e.contains("qos.class[3].delay_ratio") && e.contains("last class"),
            "{e}"
        );
        let e = error_of(&TABLE1.replace("default = true", ""));
        assert!(e.contains("default = true"), "{e}");
        let e = error_of(&TABLE1.replace("dscp = [3]", "dscp = [2]"));
        assert!(
            e.contains("qos.class[2].dscp") && e.contains("qos.class[1]"),
            "{e}"
        );
        let e = error_of(&TABLE1.replace("loss_bound_pct = 1", "loss_bound_pct = 150"));
        assert!(e.contains("loss_bound_pct"), "{e}");
        let e = error_of(&TABLE1.replace("dscp = [4]", "dscp = [64]"));
        assert!(e.contains("0-63"), "{e}");
        let e = error_of(&TABLE1.replace(
            "buffer_packets = 200",
            "buffer_packets = 200\nbuffer = \"separate\"\nbuffer_packets_x = 1",
        ));
        assert!(e.contains("buffer_packets_x"), "{e}");
        let e = error_of(&format!("{TABLE1}buffer_packets = 5\n"));
        assert!(e.contains("separate"), "{e}");
    }

    #[test]
    fn filters_build_a_classifier() {
        let text = format!(
            "{TABLE1}\n[[class.filter]]\nproto = \"udp\"\ndst = \"10.0.0.0/8\"\ndst_port = \"50-60\"\n"
        );
        let c: QosConfig = toml::from_str(&text).unwrap();
        let cl = c.classifier().unwrap();
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[1] = 1 << 2; // DSCP 1: class high, unless the filter matches
        p[9] = 17;
        p[16] = 10;
        p[22..24].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(cl.classify(&p), ClassId(3));
        p[16] = 11;
        assert_eq!(cl.classify(&p), ClassId(0));
        let bad = text.replace("proto = \"udp\"", "proto = \"icmp\"");
        assert!(error_of(&bad).contains("no ports"));
        let bad = text.replace("\"50-60\"", "\"60-50\"");
        assert!(error_of(&bad).contains("FIRST <= LAST"));
    }
}
