//! Import of a QoSbox/ALTQ configuration (`altq.conf`), as in the QoSbox paper's Figure 1.
//!
//! ```text
//! interface fxp0 bandwidth 100M qlimit 200 jobs
//! class jobs fxp0 high_class NULL priority 0 adc 2000 rdc -1 alc 0.01 rlc -1 arc 10M
//! filter fxp0 high_class 0 0 0 0 0 tos 1
//! ```
//!
//! Units as in ALTQ: `bandwidth` and `arc` in bit/s with an optional `K`, `M` or `G` suffix,
//! `adc` in microseconds, `alc` a fraction, `rdc` and `rlc` plain ratios, `-1` for "no
//! constraint"; `priority` is the class index (not a priority order, section 2.1), `default`
//! marks the default class, `qlimit` the buffer in packets and `separate` per-class buffers.
//!
//! `filter IF CLASS DST [netmask M] DPORT SRC [netmask M] SPORT PROTO [tos V]` and
//! `filter6 IF CLASS DST[/LEN] DPORT SRC[/LEN] SPORT PROTO [tclass V]`: `0` is a wildcard.
//! Following the paper ("a value of 0x03 in the DSCP field ... indicates ... med1_class"), a
//! `tos` or `tclass` value up to 63 is read as the DSCP; a larger one as the whole octet, whose
//! upper six bits are the DSCP. A filter with nothing but a DSCP becomes the class's `dscp`
//! list. Lines may be continued with a trailing `\`; `#` starts a comment.

use crate::config::{BufferKind, ClassTable, FilterTable, Ports, Proto, QosConfig, QosConfigError};
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr};

/// Why a configuration text cannot be imported.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AltqError {
    /// A statement that cannot be read.
    #[error("line {line}: {message}")]
    Syntax {
        /// 1-based line where the statement starts.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The statements read, but the configuration they make is not valid.
    #[error("the imported configuration is not valid: {0}")]
    Invalid(#[from] QosConfigError),
}

/// The result of an import.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    /// The interface the configuration was written for.
    pub interface: String,
    /// The `[qos]` table.
    pub config: QosConfig,
}

/// A rate with an optional K/M/G suffix, bit/s.
fn rate_bps(s: &str) -> Option<f64> {
    let (num, mult) = match s.char_indices().last()? {
        (i, 'K' | 'k') => (&s[..i], 1e3),
        (i, 'M' | 'm') => (&s[..i], 1e6),
        (i, 'G' | 'g') => (&s[..i], 1e9),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v * mult)
}

/// A number, or `None` for `-1` ("no constraint").
fn constraint(s: &str) -> Option<Result<f64, ()>> {
    match s.parse::<f64>() {
        Ok(-1.0) => None,
        Ok(v) => Some(Ok(v)),
        Err(_) => Some(Err(())),
    }
}

/// Logical statements with the line each starts on.
fn statements(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        let (body, continued) = match line.trim_end().strip_suffix('\\') {
            Some(b) => (b, true),
            None => (line, false),
        };
        let entry = current.get_or_insert_with(|| (n + 1, String::new()));
        entry.1.push(' ');
        entry.1.push_str(body);
        if !continued {
            if let Some(s) = current.take() {
                if !s.1.trim().is_empty() {
                    out.push(s);
                }
            }
        }
    }
    out.extend(current.filter(|s| !s.1.trim().is_empty()));
    out
}

struct PendingClass {
    priority: u32,
    table: ClassTable,
}

/// Read a QoSbox/ALTQ configuration with one `jobs` interface.
pub fn import(text: &str) -> Result<Imported, AltqError> {
    let mut interface: Option<String> = None;
    let mut config = QosConfig::default();
    let mut classes: Vec<PendingClass> = Vec::new();
    let mut filters: Vec<(usize, String, FilterTable)> = Vec::new();
    for (line, stmt) in statements(text) {
        let syntax = |message: String| AltqError::Syntax { line, message };
        let words: Vec<&str> = stmt.split_whitespace().collect();
        match words.first().copied() {
            Some("interface") => {
                let name = words
                    .get(1)
                    .ok_or_else(|| syntax("interface without a name".into()))?;
                if interface.is_some() {
                    return Err(syntax(
                        "a second interface: import one interface at a time".into(),
                    ));
                }
                interface = Some((*name).to_owned());
                let mut jobs = false;
                let mut it = words[2..].iter();
                while let Some(&w) = it.next() {
                    match w {
                        "bandwidth" => {
                            let v = it.next().and_then(|v| rate_bps(v));
                            let v = v.ok_or_else(|| syntax("bandwidth needs a rate, e.g. 100M".into()))?;
                            config.rate_mbit = Some(v / 1e6);
                        }
                        "qlimit" => {
                            let v = it.next().and_then(|v| v.parse().ok());
                            config.buffer_packets = v.ok_or_else(|| syntax("qlimit needs a number of packets".into()))?;
                        }
                        "jobs" => jobs = true,
                        "separate" => config.buffer = BufferKind::Separate,
                        other => return Err(syntax(format!("`{other}` is not an interface option braid knows (bandwidth, qlimit, jobs, separate)"))),
                    }
                }
                if !jobs {
                    return Err(syntax(
                        "the interface does not use jobs: only JoBS configurations can be imported"
                            .into(),
                    ));
                }
            }
            Some("class") => classes.push(class(&words, line)?),
            Some("filter") | Some("filter6") => {
                let (class, f) = filter(&words, line)?;
                filters.push((line, class, f));
            }
            Some(other) => {
                return Err(syntax(format!(
                    "`{other}` is not a statement braid knows (interface, class, filter, filter6)"
                )))
            }
            None => {}
        }
    }
    let interface = interface.ok_or(AltqError::Syntax {
        line: 1,
        message: "no `interface ... jobs` line".into(),
    })?;
    classes.sort_by_key(|c| c.priority);
    for (line, name, f) in filters {
        let Some(c) = classes.iter_mut().find(|c| c.table.name == name) else {
            return Err(AltqError::Syntax {
                line,
                message: format!("filter for class `{name}`, which no class line defines"),
            });
        };
        let only_dscp = FilterTable {
            dscp: f.dscp,
            ..FilterTable::default()
        };
        match f.dscp {
            Some(d) if f == only_dscp => {
                if !c.table.dscp.contains(&d) {
                    c.table.dscp.push(d);
                }
            }
            _ => c.table.filters.push(f),
        }
    }
    config.classes = classes.into_iter().map(|c| c.table).collect();
    config.validate()?;
    Ok(Imported { interface, config })
}

fn class(words: &[&str], line: usize) -> Result<PendingClass, AltqError> {
    let syntax = |message: String| AltqError::Syntax { line, message };
    if words.get(1) != Some(&"jobs") || words.len() < 5 {
        return Err(syntax(
            "expected `class jobs IFNAME CLASSNAME PARENT ...`".into(),
        ));
    }
    let mut pending = PendingClass {
        priority: 0,
        table: ClassTable {
            name: words[3].to_owned(),
            ..ClassTable::default()
        },
    };
    let t = &mut pending.table;
    let mut it = words[5..].iter();
    while let Some(&key) = it.next() {
        if key == "default" {
            t.default = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| syntax(format!("`{key}` needs a value")))?;
        let bad = || {
            syntax(format!(
                "`{key} {value}` is not a number (use -1 for no constraint)"
            ))
        };
        match key {
            "priority" => pending.priority = value.parse().map_err(|_| bad())?,
            "adc" => {
                t.delay_bound_ms = constraint(value)
                    .transpose()
                    .map_err(|_| bad())?
                    .map(|us| us / 1000.0)
            }
            "alc" => {
                t.loss_bound_pct = constraint(value)
                    .transpose()
                    .map_err(|_| bad())?
                    .map(|f| f * 100.0)
            }
            "rdc" => t.delay_ratio = constraint(value).transpose().map_err(|_| bad())?,
            "rlc" => t.loss_ratio = constraint(value).transpose().map_err(|_| bad())?,
            "arc" => {
                t.min_rate_mbit = if *value == "-1" {
                    None
                } else {
                    Some(
                        rate_bps(value).ok_or_else(|| {
                            syntax(format!("`arc {value}` is not a rate, e.g. 10M, or -1"))
                        })? / 1e6,
                    )
                }
            }
            other => {
                return Err(syntax(format!(
                "`{other}` is not a JoBS class option (priority, default, adc, rdc, alc, rlc, arc)"
            )))
            }
        }
    }
    Ok(pending)
}

/// An address (with `netmask M` or `/LEN`) or `0` for any.
fn prefix(addr: &str, netmask: Option<&str>) -> Result<Option<IpNet>, String> {
    if addr == "0" {
        return Ok(None);
    }
    let bad = || format!("`{addr}` is not an address");
    let net = match (addr.split_once('/'), netmask) {
        (Some(_), _) => addr.parse::<IpNet>().map_err(|_| bad())?,
        (None, Some(m)) => {
            let a: IpAddr = addr.parse().map_err(|_| bad())?;
            let m: Ipv4Addr = m.parse().map_err(|_| format!("`{m}` is not a netmask"))?;
            let len = u32::from(m).leading_ones();
            if u32::from(m).count_ones() != len {
                return Err(format!("netmask {m} is not contiguous"));
            }
            IpNet::new(a, len as u8).map_err(|_| bad())?
        }
        (None, None) => {
            let a: IpAddr = addr.parse().map_err(|_| bad())?;
            IpNet::from(a)
        }
    };
    Ok(Some(net.trunc()))
}

fn filter(words: &[&str], line: usize) -> Result<(String, FilterTable), AltqError> {
    let syntax = |message: String| AltqError::Syntax { line, message };
    let usage = || {
        syntax("expected `filter IFNAME CLASS DST [netmask M] DPORT SRC [netmask M] SPORT PROTO [tos V]`".into())
    };
    let class = words.get(2).ok_or_else(usage)?.to_string();
    let mut rest = words[3..].iter().copied().peekable();
    let address = |rest: &mut std::iter::Peekable<
        std::iter::Copied<std::slice::Iter<'_, &str>>,
    >|
     -> Result<Option<IpNet>, AltqError> {
        let a = rest.next().ok_or_else(usage)?;
        let mask = if rest.peek() == Some(&"netmask") {
            rest.next();
            Some(rest.next().ok_or_else(usage)?)
        } else {
            None
        };
        prefix(a, mask).map_err(syntax)
    };
    let port = |p: Option<&str>| -> Result<Option<Ports>, AltqError> {
        match p.ok_or_else(usage)?.parse::<u16>() {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(Ports::One(n))),
            Err(_) => Err(syntax("a port must be a number, 0 for any".into())),
        }
    };
    let dst = address(&mut rest)?;
    let dst_port = port(rest.next())?;
    let src = address(&mut rest)?;
    let src_port = port(rest.next())?;
    let proto = match rest.next().ok_or_else(usage)?.parse::<u8>() {
        Ok(0) => None,
        Ok(n) => Some(Proto::Number(n)),
        Err(_) => return Err(syntax("the protocol must be a number, 0 for any".into())),
    };
    let mut dscp = None;
    while let Some(key) = rest.next() {
        match key {
            "tos" | "tclass" => {
                let v = rest
                    .next()
                    .ok_or_else(|| syntax(format!("`{key}` needs a value")))?;
                let v = parse_int(v)
                    .ok_or_else(|| syntax(format!("`{key} {v}` is not a number 0-255")))?;
                dscp = Some(if v <= 63 { v } else { v >> 2 });
            }
            other => {
                return Err(syntax(format!(
                    "`{other}` is not a filter option braid knows (tos, tclass)"
                )))
            }
        }
    }
    Ok((
        class,
        FilterTable {
            proto,
            src,
            dst,
            src_port,
            dst_port,
            dscp,
        },
    ))
}

fn parse_int(s: &str) -> Option<u8> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClassId;

    /// The QoSbox paper's Figure 1, as printed (without the line numbers).
    pub(crate) const FIGURE1: &str = r"
interface fxp0\
    bandwidth 100M qlimit 200 jobs
class jobs fxp0 high_class NULL\
    priority 0\
    adc 2000 rdc -1 alc 0.01 rlc -1 arc 10M
class jobs fxp0 med2_class NULL\
    priority 1\
    adc -1 rdc 2 alc -1 rlc 2 arc -1
class jobs fxp0 med1_class NULL\
    priority 2\
    adc -1 rdc 2 alc -1 rlc 2 arc -1
class jobs fxp0 low_class NULL\
    priority 3 default\
    adc -1 rdc -1 alc -1 rlc -1 arc -1
filter fxp0 high_class 0 0 0 0 0 tos 1
filter fxp0 med2_class 0 0 0 0 0 tos 2
filter fxp0 med1_class 0 0 0 0 0 tos 3
filter fxp0 low_class 0 0 0 0 0 tos 4
";

    #[test]
    fn figure1() {
        let imp = import(FIGURE1).unwrap();
        assert_eq!(imp.interface, "fxp0");
        let c = &imp.config;
        assert_eq!((c.rate_mbit, c.buffer_packets), (Some(100.0), 200));
        assert_eq!(
            c.class_names(),
            ["high_class", "med2_class", "med1_class", "low_class"]
        );
        let high = &c.classes[0];
        assert_eq!(high.delay_bound_ms, Some(2.0));
        assert_eq!(high.loss_bound_pct, Some(1.0));
        assert_eq!(high.min_rate_mbit, Some(10.0));
        assert_eq!((high.delay_ratio, high.dscp.as_slice()), (None, &[1u8][..]));
        assert_eq!(c.classes[1].delay_ratio, Some(2.0));
        assert_eq!(c.classes[2].loss_ratio, Some(2.0));
        assert!(c.classes[3].default && c.classes[3].filters.is_empty());
        let jobs = c.jobs_config(0).unwrap();
        assert_eq!(jobs.capacity_bps, 100_000_000);
        assert_eq!(
            jobs.classes[0].adc,
            Some(braid_proto::time::Duration::from_millis(2))
        );
        assert_eq!(jobs.classes[0].arc_bps, Some(10_000_000));
        let mut p = [0u8; 20];
        p[0] = 0x45;
        p[1] = 3 << 2;
        assert_eq!(c.classifier().unwrap().classify(&p), ClassId(2));
    }

    #[test]
    fn the_example_file_is_figure1() {
        // `braid qos import examples/qos/figure1.altq` reads the same configuration.
        let file = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/qos/figure1.altq"
        ));
        assert_eq!(import(file).unwrap(), import(FIGURE1).unwrap());
    }

    #[test]
    fn filters_with_addresses_and_errors() {
        let text = FIGURE1.replace(
            "filter fxp0 low_class 0 0 0 0 0 tos 4",
            "filter fxp0 low_class 10.1.0.0 netmask 255.255.0.0 80 0 0 6\n\
             filter6 fxp0 med1_class fd00::/16 0 0 0 17 tclass 0xb8",
        );
        let c = import(&text).unwrap().config;
        let f = &c.classes[3].filters[0];
        assert_eq!(f.dst, Some("10.1.0.0/16".parse().unwrap()));
        assert_eq!(
            (f.dst_port.clone(), f.proto.clone()),
            (Some(Ports::One(80)), Some(Proto::Number(6)))
        );
        assert_eq!(c.classes[2].filters[0].dscp, Some(46));
        for (bad, what) in [
            ("adc 2000", "adc two"),
            ("bandwidth 100M", "bandwidth fast"),
            ("tos 1", "tos 1 tosmask 0xfc"),
            ("priority 3 default", "priority 3"),
        ] {
            let e = import(&FIGURE1.replacen(bad, what, 1))
                .unwrap_err()
                .to_string();
            assert!(!e.is_empty());
        }
        let e = import("interface em0 bandwidth 1G cbq").unwrap_err();
        assert!(e.to_string().contains("jobs"), "{e}");
        let e = import(&FIGURE1.replace("adc 2000", "adc two")).unwrap_err();
        assert!(matches!(e, AltqError::Syntax { line: 4, .. }), "{e}");
    }
}
