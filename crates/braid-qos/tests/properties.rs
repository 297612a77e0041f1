//! Property tests for JoBS and the classifier, against a model of the queue:
//! - work conservation: `dequeue` returns a packet whenever one is queued; every byte offered
//!   is sent, dropped or still queued; while anything is queued the service rates add up to
//!   the capacity, and a class that was idle before an arrival holds none of it;
//! - no class holds more than its buffer (shared: all classes together); drops come from the
//!   tail and departures from the head of a class's buffer;
//! - loss bounds are never broken by a drop the algorithm chose: a drop is flagged exactly
//!   when it takes its class's busy-period loss above the bound; with loss-first relaxation
//!   only an overflow may do that, and an overflow only when every class that could have lost
//!   the packet would have broken its own bound; otherwise a class's busy-period loss stays
//!   within its bound;
//! - the classifier and the ALTQ import never panic, whatever the bytes.

use braid_proto::time::{Duration, Instant};
use braid_qos::altq;
use braid_qos::classifier::headers;
use braid_qos::{
    BufferMode, ClassConfig, ClassId, Classifier, DropReason, Feasibility, Jobs, JobsConfig,
    QosConfig, Relaxation,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// After `gap_us`, a packet of `len` bytes to `class`.
    Enqueue { gap_us: u32, class: u8, len: u32 },
    /// After `gap_us`, the link takes a packet.
    Dequeue { gap_us: u32 },
    /// The link rate changes.
    Capacity { mbit: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u32..300, 0u8..5, 1u32..1500).prop_map(|(gap_us, class, len)| Op::Enqueue { gap_us, class, len }),
        4 => (0u32..300).prop_map(|gap_us| Op::Dequeue { gap_us }),
        1 => (0u32..200).prop_map(|mbit| Op::Capacity { mbit }),
    ]
}

/// What the test expects one class to hold.
#[derive(Clone, Debug, Default)]
struct Model {
    /// Queued packets, `(id, len)`, head first.
    queue: std::collections::VecDeque<(u64, u32)>,
    /// `A_i` and `R_in_i` of the busy period, bytes.
    a: u64,
    r_in: u64,
}

impl Model {
    /// The busy period's loss rate if the packet at the tail were dropped.
    fn loss_after_tail_drop(&self) -> f64 {
        let tail = self.queue.back().map_or(0, |&(_, len)| u64::from(len));
        if self.a == 0 {
            0.0
        } else {
            (self.a - self.r_in + tail) as f64 / self.a as f64
        }
    }
}

fn class_config() -> impl Strategy<Value = ClassConfig> {
    (
        proptest::option::of(1u64..20),
        proptest::option::of(1u64..60),
        proptest::option::of(1u32..20),
        proptest::option::of(1u32..40),
        proptest::option::of(1u32..40),
        proptest::option::of(1u32..50),
    )
        .prop_map(|(adc_ms, arc_mbit, alc_pct, rdc, rlc, limit)| ClassConfig {
            adc: adc_ms.map(Duration::from_millis),
            arc_bps: arc_mbit.map(|m| m * 1_000_000),
            alc: alc_pct.map(|p| f64::from(p) / 100.0),
            rdc: rdc.map(|r| f64::from(r) / 10.0),
            rlc: rlc.map(|r| f64::from(r) / 10.0),
            limit_packets: limit,
        })
}

fn jobs_config() -> impl Strategy<Value = JobsConfig> {
    (
        proptest::collection::vec(class_config(), 1..5),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        1u32..60,
        1u32..8,
        1u64..200,
    )
        .prop_map(
            |(mut classes, separate, delay_first, drop, limit, sample, mbit)| {
                if let Some(last) = classes.last_mut() {
                    last.rdc = None;
                    last.rlc = None;
                }
                let mut c = JobsConfig::new(mbit * 1_000_000, classes);
                c.buffer = if separate {
                    BufferMode::Separate
                } else {
                    BufferMode::Shared
                };
                c.relaxation = if delay_first {
                    Relaxation::DelayFirst
                } else {
                    Relaxation::LossFirst
                };
                c.feasibility = if drop {
                    Feasibility::Drop
                } else {
                    Feasibility::Greedy
                };
                c.limit_packets = limit;
                c.sample_every = sample;
                c
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn jobs_invariants(config in jobs_config(), ops in proptest::collection::vec(op(), 1..400)) {
        let mut q: Jobs<u64> = Jobs::new(&config).unwrap();
        let n = config.classes.len();
        let mut now = 0u64;
        let mut next_id = 0u64;
        // A model of what JoBS holds: per class the queued (id, len) in order, and the busy
        // period's `A_i` and `R_in_i`.
        let mut model = vec![Model::default(); n];
        // Per class: whether a drop broke its loss bound in the current busy period.
        let mut broken = vec![false; n];
        for op in ops {
            match op {
                Op::Enqueue { gap_us, class, len } => {
                    now += u64::from(gap_us) * 1000;
                    let t = Instant::from_nanos(now);
                    let idle_before: Vec<bool> = model.iter().map(|m| m.queue.is_empty()).collect();
                    if q.is_empty() && usize::from(class) < n {
                        // A new busy period: every counter starts again.
                        model.iter_mut().for_each(|m| { m.a = 0; m.r_in = 0; });
                        broken.iter_mut().for_each(|b| *b = false);
                    }
                    let r = q.enqueue(t, ClassId(class), len, next_id);
                    prop_assert_eq!(r.is_err(), usize::from(class) >= n);
                    if let Some(m) = model.get_mut(usize::from(class)) {
                        m.queue.push_back((next_id, len));
                        m.a += u64::from(len);
                        m.r_in += u64::from(len);
                    }
                    next_id += 1;
                    while let Some(d) = q.poll_dropped() {
                        let i = d.class.index();
                        // Drops come from the tail of the class's buffer.
                        prop_assert_eq!(model[i].queue.back().copied(), Some((d.payload, d.len)));
                        let alc = config.classes[i].alc;
                        let after = model[i].loss_after_tail_drop();
                        // The flag is honest: set exactly when the drop takes the busy
                        // period's loss rate above the bound.
                        prop_assert_eq!(d.loss_bound_broken, alc.is_some_and(|l| after > l), "class {} loss {} bound {:?}", i, after, alc);
                        // Loss first: only an overflow may break a loss bound.
                        if d.loss_bound_broken && config.relaxation == Relaxation::LossFirst {
                            prop_assert_eq!(d.reason, DropReason::Overflow);
                        }
                        // An overflow breaks a loss bound only when every class that could
                        // have lost the packet (all backlogged classes with a shared buffer,
                        // the arriving one with separate buffers) would have broken its own.
                        if d.loss_bound_broken && d.reason == DropReason::Overflow {
                            for (j, m) in model.iter().enumerate() {
                                let candidate = match config.buffer {
                                    BufferMode::Shared => !m.queue.is_empty(),
                                    BufferMode::Separate => j == usize::from(class),
                                };
                                if candidate {
                                    let bound = config.classes[j].alc;
                                    prop_assert!(bound.is_some_and(|l| m.loss_after_tail_drop() > l),
                                        "class {} lost a packet beyond its bound while class {} could lose one within {:?}", i, j, bound);
                                }
                            }
                        }
                        broken[i] |= d.loss_bound_broken;
                        let m = &mut model[i];
                        m.queue.pop_back();
                        m.r_in -= u64::from(d.len);
                    }
                    // The buffer limits hold once enqueue returns.
                    match config.buffer {
                        BufferMode::Shared => prop_assert!(q.len() <= u64::from(config.limit_packets)),
                        BufferMode::Separate => for (i, c) in config.classes.iter().enumerate() {
                            let limit = c.limit_packets.unwrap_or(config.limit_packets);
                            prop_assert!(q.class_status(ClassId(i as u8), t).backlog <= limit);
                        },
                    }
                    // Loss bounds hold unless a drop was forced to break one.
                    if config.relaxation == Relaxation::LossFirst {
                        for (i, c) in config.classes.iter().enumerate() {
                            if let (Some(l), false) = (c.alc, broken[i]) {
                                let p = q.class_status(ClassId(i as u8), t).loss_rate;
                                prop_assert!(p <= l + 1e-12, "class {} loss {} > bound {}", i, p, l);
                            }
                        }
                    }
                    // Work conservation of the rates: while anything is queued, the rates add
                    // up to the capacity, and a class that was idle before this arrival (and
                    // is not the arriving one) has none of it. (An unknown class is turned
                    // away before any of Figure 4 runs.)
                    if r.is_ok() && !q.is_empty() {
                        let cap = q.capacity_bps() as f64;
                        let rates: Vec<f64> = (0..n).map(|i| q.class_status(ClassId(i as u8), t).service_rate_bps).collect();
                        let sum: f64 = rates.iter().sum();
                        prop_assert!((sum - cap).abs() <= 1e-6 * cap + 1e-3, "rates {:?} sum to {} of {}", rates, sum, cap);
                        for i in 0..n {
                            if idle_before[i] && i != usize::from(class) && model[i].queue.is_empty() {
                                prop_assert!(rates[i] == 0.0, "idle class {} has rate {} ({:?})", i, rates[i], rates);
                            }
                        }
                    }
                }
                Op::Dequeue { gap_us } => {
                    now += u64::from(gap_us) * 1000;
                    let had = q.len();
                    let peeked = q.peek(Instant::from_nanos(now));
                    let d = q.dequeue(Instant::from_nanos(now));
                    // Work conservation.
                    prop_assert_eq!(d.is_some(), had > 0);
                    prop_assert_eq!(peeked, d.as_ref().map(|d| (d.class, d.len)));
                    if let Some(d) = d {
                        // FIFO within a class.
                        let m = &mut model[d.class.index()];
                        prop_assert_eq!(m.queue.pop_front(), Some((d.payload, d.len)));
                    }
                }
                Op::Capacity { mbit } => {
                    q.set_capacity(Instant::from_nanos(now), u64::from(mbit) * 1_000_000);
                }
            }
            // Every byte offered is sent, dropped or queued, and the model agrees on the
            // queue and the busy period's counters.
            for (i, m) in model.iter().enumerate() {
                let s = q.class_stats(ClassId(i as u8));
                let st = q.class_status(ClassId(i as u8), Instant::from_nanos(now));
                prop_assert_eq!(s.arrival_bytes, s.xmit_bytes + s.drop_bytes + st.backlog_bytes);
                prop_assert_eq!(st.backlog as usize, m.queue.len());
                if !q.is_empty() {
                    prop_assert_eq!((st.arrival_bytes, st.admitted_bytes), (m.a, m.r_in));
                }
                prop_assert!(st.service_rate_bps >= -1e-6);
            }
        }
        // Draining empties the queue, one packet per call.
        let left = q.len();
        let mut sent = 0;
        while q.dequeue(Instant::from_nanos(now)).is_some() {
            sent += 1;
        }
        prop_assert_eq!(sent, left);
    }

    #[test]
    fn classifier_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80), version in prop_oneof![Just(4u8), Just(6u8), any::<u8>()]) {
        let mut bytes = bytes;
        if let Some(b) = bytes.first_mut() {
            *b = (version << 4) | (*b & 0x0f);
        }
        let mut c = Classifier::new(ClassId(3));
        c.map_dscp(46, ClassId(0));
        // Without filters only the DSCP counts, for exactly the packets `headers` accepts.
        let expected = match headers(&bytes) {
            Some(h) if h.dscp == 46 => ClassId(0),
            _ => ClassId(3),
        };
        prop_assert_eq!(c.classify(&bytes), expected);
        c.add_filter(braid_qos::Filter { proto: Some(17), ..Default::default() }, ClassId(1));
        let with_filter = c.classify(&bytes);
        match headers(&bytes) {
            Some(h) => prop_assert_eq!(with_filter, c.classify_headers(&h)),
            None => prop_assert_eq!(with_filter, ClassId(3)),
        }
    }

    #[test]
    fn imports_never_panic(text in "[a-z0-9 ./\\\\\n-]{0,200}") {
        let _ = altq::import(&text);
        let _ = toml::from_str::<QosConfig>(&text).map(|c| c.validate());
    }
}
