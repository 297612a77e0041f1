//! Parsing of the `braid sim run` scenario flags: link specs, size distributions, rates and
//! durations. Every error names the offending text and the expected form.

use anyhow::{bail, Context, Result};
use braid_proto::time::{Duration, Instant};
use braid_sim::link::{LinkConfig, LossModel, Window};
use braid_sim::source::SizeDist;
use std::path::Path;

/// A rate such as `10mbit`, `500kbit`, `1gbit`, `64000bit` or a bare number of bit/s.
pub fn rate_bps(s: &str) -> Result<u64> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = if let Some(n) = t.strip_suffix("gbit") {
        (n, 1e9)
    } else if let Some(n) = t.strip_suffix("mbit") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix("kbit") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("bit") {
        (n, 1.0)
    } else {
        (t.as_str(), 1.0)
    };
    let v: f64 = num
        .parse()
        .ok()
        .filter(|v: &f64| !v.is_nan())
        .with_context(|| format!("`{s}` is not a rate: write e.g. 10mbit, 500kbit or 1gbit"))?;
    if v <= 0.0 {
        bail!("rate `{s}`: a link's rate must be positive, e.g. 10mbit, 500kbit or 1gbit");
    }
    let bps = (v * mult).round();
    if !(1.0..=1e12).contains(&bps) {
        bail!("rate `{s}` is out of range (1 bit/s to 1000 gbit)");
    }
    Ok(bps as u64)
}

/// A duration such as `5ms`, `1.5s`, `250us` or `100ns`.
pub fn duration(s: &str) -> Result<Duration> {
    let t = s.trim().to_ascii_lowercase();
    let (num, ns) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        bail!("`{s}` is not a duration: give a unit, e.g. 5ms, 1.5s or 250us");
    };
    let v: f64 = num
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0 && *v * ns < 1e18)
        .with_context(|| format!("`{s}` is not a duration: write e.g. 5ms, 1.5s or 250us"))?;
    Ok(Duration::from_nanos((v * ns).round() as u64))
}

/// A percentage such as `1%` or `0.5%` (or a bare number of percent), as a probability.
fn percent(s: &str) -> Result<f64> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .ok()
        .filter(|v: &f64| (0.0..=100.0).contains(v))
        .with_context(|| format!("`{s}` is not a percentage between 0% and 100%"))?;
    Ok(v / 100.0)
}

/// A link: `RATE[,delay=D][,jitter=D][,loss=P%][,ge=PGB:PBG:LG:LB][,outage=START-END]...`.
pub fn link(s: &str) -> Result<LinkConfig> {
    let mut parts = s.split(',');
    let rate = rate_bps(parts.next().unwrap_or("")).with_context(|| format!("in --link `{s}`"))?;
    let mut l = LinkConfig::new(rate, Duration::ZERO);
    for part in parts {
        let (key, value) = part
            .split_once('=')
            .with_context(|| format!("in --link `{s}`: `{part}` is not KEY=VALUE"))?;
        let ctx = || format!("in --link `{s}`");
        match key.trim() {
            "delay" => l.delay = duration(value).with_context(ctx)?,
            "jitter" => l.jitter = duration(value).with_context(ctx)?,
            "loss" => l.loss = LossModel::Bernoulli(percent(value).with_context(ctx)?),
            "ge" => {
                let v: Vec<f64> = value
                    .split(':')
                    .map(percent)
                    .collect::<Result<_>>()
                    .with_context(ctx)?;
                let [pgb, pbg, lg, lb] = v[..] else {
                    bail!("in --link `{s}`: ge takes four percentages, ge=P_GOOD_TO_BAD:P_BAD_TO_GOOD:LOSS_GOOD:LOSS_BAD");
                };
                l.loss = LossModel::GilbertElliott {
                    p_good_to_bad: pgb,
                    p_bad_to_good: pbg,
                    loss_good: lg,
                    loss_bad: lb,
                };
            }
            "loss-window" | "outage" => {
                let (a, b) = value.split_once('-').with_context(|| {
                    format!("in --link `{s}`: {key} takes START-END, e.g. {key}=1s-2.5s")
                })?;
                let w = Window {
                    start: Instant::ZERO + duration(a).with_context(ctx)?,
                    end: Instant::ZERO + duration(b).with_context(ctx)?,
                };
                if w.end <= w.start {
                    bail!("in --link `{s}`: {key} ends before it starts");
                }
                if key == "outage" {
                    l.outages.push(w);
                } else {
                    l.loss_windows.get_or_insert_with(Vec::new).push(w);
                }
            }
            other => bail!(
                "in --link `{s}`: unknown key `{other}`: use delay, jitter, loss, ge, loss-window or outage"
            ),
        }
    }
    Ok(l)
}

/// Sizes: `fixed:N`, `uniform:MIN-MAX`, `bimodal:SMALL,LARGE,P_LARGE`, `alternating` or
/// `trace:FILE`.
pub fn sizes(s: &str) -> Result<SizeDist> {
    let bad = || {
        format!(
            "`{s}` is not a size distribution: use fixed:N, uniform:MIN-MAX, \
             bimodal:SMALL,LARGE,P_LARGE, alternating or trace:FILE"
        )
    };
    let num = |t: &str| -> Result<u32> {
        t.trim()
            .parse::<u32>()
            .ok()
            .filter(|&v| v > 0)
            .with_context(bad)
    };
    let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
    Ok(match kind {
        "fixed" => SizeDist::Fixed(num(arg)?),
        "uniform" => {
            let (a, b) = arg.split_once('-').with_context(bad)?;
            let (min, max) = (num(a)?, num(b)?);
            if min > max {
                bail!("in `{s}`: MIN is larger than MAX");
            }
            SizeDist::Uniform { min, max }
        }
        "bimodal" => {
            let v: Vec<&str> = arg.split(',').collect();
            let [small, large, p] = v[..] else {
                bail!(bad());
            };
            let p_large: f64 = p
                .trim()
                .parse()
                .ok()
                .filter(|p| (0.0..=1.0).contains(p))
                .with_context(bad)?;
            SizeDist::Bimodal {
                small: num(small)?,
                large: num(large)?,
                p_large,
            }
        }
        "alternating" => SizeDist::alternating(),
        "trace" => SizeDist::from_trace(Path::new(arg))?,
        _ => bail!(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_durations() {
        assert_eq!(rate_bps("10mbit").unwrap(), 10_000_000);
        assert_eq!(rate_bps("1.5Gbit").unwrap(), 1_500_000_000);
        assert_eq!(rate_bps("64000").unwrap(), 64_000);
        assert!(rate_bps("fast").is_err());
        assert!(rate_bps("0mbit")
            .unwrap_err()
            .to_string()
            .contains("must be positive"));
        assert!(rate_bps("-3mbit")
            .unwrap_err()
            .to_string()
            .contains("must be positive"));
        assert!(rate_bps("infmbit")
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert_eq!(duration("5ms").unwrap(), Duration::from_millis(5));
        assert_eq!(duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(duration("5")
            .unwrap_err()
            .to_string()
            .contains("give a unit"));
    }

    #[test]
    fn links() {
        let l = link("20mbit,delay=30ms,jitter=2ms,loss=1%,outage=1s-2s").unwrap();
        assert_eq!(l.rate_bps, 20_000_000);
        assert_eq!(l.delay, Duration::from_millis(30));
        assert_eq!(l.loss, LossModel::Bernoulli(0.01));
        assert_eq!(l.outages.len(), 1);
        let e = link("20mbit,speed=3").unwrap_err();
        assert!(format!("{e:#}").contains("unknown key `speed`"));
        assert!(link("20mbit,outage=2s-1s").is_err());
        assert!(link("20mbit,ge=1%:30%").is_err());
    }

    #[test]
    fn size_specs() {
        assert_eq!(sizes("fixed:1400").unwrap(), SizeDist::Fixed(1400));
        assert_eq!(
            sizes("uniform:64-1500").unwrap(),
            SizeDist::Uniform { min: 64, max: 1500 }
        );
        assert!(matches!(
            sizes("bimodal:200,1400,0.3").unwrap(),
            SizeDist::Bimodal { .. }
        ));
        assert!(sizes("uniform:10-5").is_err());
        assert!(sizes("gaussian").is_err());
        assert!(sizes("trace:/nonexistent/file").is_err());
    }
}
