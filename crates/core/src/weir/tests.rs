use super::*;

fn t(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

fn weir(cfg: WeirConfig) -> Weir {
    let mut w = Weir::new(cfg).unwrap();
    w.sync(t(0), t(0));
    w
}

fn ring(d: Decision) -> Doorbell {
    match d {
        Decision::Ring(d) => d,
        Decision::Hold { .. } => panic!("held: {d:?}"),
    }
}

#[test]
fn thresholds_scale_with_the_active_count() {
    // Eq. 3 and 4 with N = 128, init_alpha = 1, init_beta = 0.5.
    let mut w = weir(WeirConfig::default());
    assert_eq!(w.thresholds(), (0.0, 0.5));
    for (qps, alpha) in [(1, 1.0), (128, 1.0), (129, 2.0), (256, 2.0), (257, 3.0)] {
        while w.active_qps() < qps {
            let qp = QpNum(w.active_qps());
            w.post(qp, 0, 64, true, t(0)).unwrap();
        }
        assert_eq!(w.active_qps(), qps);
        assert_eq!(w.thresholds(), (alpha, alpha + 0.5), "{qps} active");
    }
    // Other init values: alpha = ceil(300 / 100) * 0.25 = 0.75, beta = 0.75 + 0.25 - 0.125.
    let mut w = weir(WeirConfig {
        qps_per_step: 100,
        init_alpha: 0.25,
        init_beta: 0.125,
        ..WeirConfig::default()
    });
    for qp in 0..300 {
        w.post(QpNum(qp), 0, 64, true, t(0)).unwrap();
    }
    assert_eq!(w.thresholds(), (0.75, 0.875));
}

#[test]
fn the_active_bitmap_follows_posts_and_completions() {
    let mut w = weir(WeirConfig::default());
    let a = ring(w.post(QpNum(5), 1, 64, true, t(0)).unwrap());
    assert!(w.is_active(QpNum(5)) && !w.is_active(QpNum(69)));
    let b = match w.post(QpNum(69), 2, 64, true, t(0)).unwrap() {
        Decision::Hold { until } => {
            assert_eq!(until, Some(t(5)));
            w.poll_doorbell(t(5)).unwrap()
        }
        d => panic!("{d:?}"),
    };
    assert_eq!(w.active_qps(), 2);
    assert_eq!(w.active[0], 1 << 5);
    assert_eq!(w.active[1], 1 << 5);
    w.on_completion(QpNum(5), a.tag, t(100), true).unwrap();
    assert_eq!((w.active_qps(), w.is_active(QpNum(5))), (1, false));
    w.on_completion(QpNum(69), b.tag, t(100), true).unwrap();
    assert_eq!(w.active_qps(), 0);
    assert_eq!(w.active, vec![0; w.active.len()]);
    assert_eq!(
        w.post(QpNum(1088), 0, 1, true, t(0)),
        Err(WeirError::QpOutOfRange(1088))
    );
}

#[test]
fn credits_fall_due_size_over_rate_after_each_doorbell() {
    let mut w = weir(WeirConfig::default());
    // 100 Gbit/s: 512 B take 40.96 ns; the deadline is truncated to 40 ns, owing 0.96.
    ring(w.post(QpNum(1), 0, 512, true, t(1000)).unwrap());
    assert_eq!(w.credit_at(), t(1040));
    assert_eq!(
        w.post(QpNum(2), 1, 512, true, t(1039)).unwrap(),
        Decision::Hold {
            until: Some(t(1040))
        }
    );
    assert_eq!(w.next_timeout(), Some(t(1040)));
    assert_eq!(w.poll_doorbell(t(1039)), None);
    let d = w.poll_doorbell(t(1040)).unwrap();
    assert_eq!((d.qp, d.wr_id), (QpNum(2), 1));
    // 40.96 + 0.96 = 41.92: 41 ns, owing 0.92.
    assert_eq!(w.credit_at(), t(1081));
    assert_eq!(w.next_timeout(), None);
    // A credit not spent does not accumulate: the next deadline runs from the doorbell.
    let d = ring(w.post(QpNum(3), 2, 4096, true, t(5000)).unwrap());
    assert_eq!(d.len, 4096);
    // 327.68 + 0.92 = 328.6.
    assert_eq!(w.credit_at(), t(5328));
}

#[test]
fn large_wqes_are_split_and_their_completions_merged() {
    let mut w = weir(WeirConfig::default());
    assert_eq!(w.pieces(4096), 1);
    assert_eq!(w.pieces(4097), 2);
    assert_eq!(w.pieces(10000), 3);
    let first = ring(w.post(QpNum(7), 42, 10000, true, t(0)).unwrap());
    let mut pieces = vec![first];
    let mut now = 0;
    while let Some(at) = w.next_timeout() {
        now = at.as_nanos();
        pieces.push(w.poll_doorbell(at).unwrap());
    }
    let shape: Vec<_> = pieces
        .iter()
        .map(|d| (d.piece, d.pieces, d.offset, d.len, d.tag, d.wr_id))
        .collect();
    assert_eq!(
        shape,
        [
            (0, 3, 0, 4096, 0, 42),
            (1, 3, 4096, 4096, 1, 42),
            (2, 3, 8192, 1808, 2, 42)
        ]
    );
    // 4096 B at 100 Gbit/s: 327.68 ns, so 327 then 328 (0.36 owed).
    assert_eq!(now, 655);
    assert_eq!(w.in_flight(QpNum(7)), 3);
    assert_eq!(w.on_completion(QpNum(7), 0, t(700), true), Ok(None));
    assert_eq!(w.on_completion(QpNum(7), 1, t(800), true), Ok(None));
    assert_eq!(
        w.on_completion(QpNum(7), 2, t(900), true),
        Ok(Some(AppCompletion {
            qp: QpNum(7),
            wr_id: 42,
            len: 10000,
            pieces: 3,
            ok: true
        }))
    );
    let s = w.stats();
    assert_eq!((s.splits, s.doorbells, s.cqes), (1, 3, 3));
    assert_eq!((s.app_completions, s.swallowed), (1, 2));
}

#[test]
fn unsignalled_completions_are_filtered_but_failures_reported() {
    let mut w = weir(WeirConfig::default());
    let a = ring(w.post(QpNum(1), 10, 64, false, t(0)).unwrap());
    let b = w.post(QpNum(1), 11, 64, false, t(0)).unwrap();
    let c = w.post(QpNum(1), 12, 64, true, t(0)).unwrap();
    assert!(matches!(b, Decision::Hold { until: Some(_) }));
    assert!(matches!(c, Decision::Hold { until: Some(_) }));
    let b = w.poll_doorbell(t(100)).unwrap();
    let c = w.poll_doorbell(t(200)).unwrap();
    assert_eq!((a.tag, b.tag, c.tag), (0, 1, 2));
    assert_eq!(w.on_completion(QpNum(1), 0, t(300), true), Ok(None));
    // Out of order, or for nothing in flight: refused.
    assert_eq!(
        w.on_completion(QpNum(1), 2, t(300), true),
        Err(WeirError::UnexpectedCompletion(1))
    );
    assert_eq!(
        w.on_completion(QpNum(2), 0, t(300), true),
        Err(WeirError::UnexpectedCompletion(2))
    );
    // An unsignalled WQE that fails is reported.
    let failed = w
        .on_completion(QpNum(1), 1, t(300), false)
        .unwrap()
        .unwrap();
    assert_eq!((failed.wr_id, failed.ok), (11, false));
    let done = w.on_completion(QpNum(1), 2, t(300), true).unwrap().unwrap();
    assert_eq!((done.wr_id, done.ok), (12, true));
    assert_eq!(w.stats().swallowed, 1);
}

#[test]
fn aiad_steps_against_the_thresholds() {
    // base_delay 10 us; one active queue pair kept busy by a WQE that never completes,
    // so alpha = 1, beta = 1.5: increase while ewma <= 20 us, decrease from 25 us.
    let mut w = weir(WeirConfig::default());
    ring(w.post(QpNum(0), 0, 64, true, t(0)).unwrap());
    let mut now = 1000;
    let mut sample = |w: &mut Weir, delay: u64| {
        let d = match w.post(QpNum(1), 0, 64, true, t(now)).unwrap() {
            Decision::Ring(d) => d,
            Decision::Hold { .. } => w.poll_doorbell(t(now)).unwrap(),
        };
        w.on_completion(QpNum(1), d.tag, t(now + delay), true)
            .unwrap();
        now += 100_000;
        (w.delay().unwrap(), w.rate())
    };
    // 30 us: ratio 2 >= 1.5, down one step of 10 Mbit/s.
    assert_eq!(sample(&mut w, 30_000), (30_000.0, 99_990_000_000));
    // W = 7/8: 0.875 * 30000 + 0.125 * 10000 = 27500, ratio 1.75: down.
    assert_eq!(sample(&mut w, 10_000), (27_500.0, 99_980_000_000));
    // 24062.5, ratio 1.40625; then 21054.6875, ratio 1.105...: hold.
    assert_eq!(sample(&mut w, 0), (24_062.5, 99_980_000_000));
    assert_eq!(sample(&mut w, 0), (21_054.687_5, 99_980_000_000));
    // 18422.85..., ratio 0.84 <= 1: up one step.
    assert_eq!(sample(&mut w, 0), (18_422.851_562_5, 99_990_000_000));
    // Up to the line rate and no further.
    assert_eq!(sample(&mut w, 0).1, 100_000_000_000);
    assert_eq!(sample(&mut w, 0).1, 100_000_000_000);
    let s = w.stats();
    assert_eq!((s.increases, s.decreases), (3, 2));
    // The gap follows the rate: at 99.8 Gbit/s, 4096 B take 328.336... ns.
    let mut w = weir(WeirConfig {
        line_rate: 99_800_000_000,
        ..WeirConfig::default()
    });
    ring(w.post(QpNum(0), 0, 4096, true, t(0)).unwrap());
    assert_eq!(w.credit_at(), t(328));
}

#[test]
fn the_rate_has_a_floor_and_resets_when_the_nic_goes_idle() {
    let mut w = weir(WeirConfig {
        min_rate: 99_985_000_000,
        ..WeirConfig::default()
    });
    let keep = ring(w.post(QpNum(0), 0, 64, true, t(0)).unwrap());
    for i in 1..4 {
        let d = ring(w.post(QpNum(1), i, 64, true, t(1000 * i)).unwrap());
        w.on_completion(QpNum(1), d.tag, t(1000 * i + 1_000_000), true)
            .unwrap();
    }
    assert_eq!(w.rate(), 99_985_000_000);
    assert!(w.delay().is_some());
    w.on_completion(QpNum(0), keep.tag, t(1_000_000), true)
        .unwrap();
    assert_eq!(w.active_qps(), 0);
    assert_eq!((w.rate(), w.delay()), (100_000_000_000, None));
}

#[test]
fn completion_times_are_moved_to_host_time() {
    let mut w = Weir::new(WeirConfig::default()).unwrap();
    assert!(w.sync_due());
    // The NIC clock is 4 us behind the host's.
    w.sync(t(1_000), t(5_000));
    assert!(!w.sync_due());
    ring(w.post(QpNum(0), 0, 64, true, t(0)).unwrap());
    let d = ring(w.post(QpNum(1), 0, 64, true, t(10_000)).unwrap());
    // Rung at host 10 us, completed at NIC 20 us = host 24 us: 14 us.
    w.on_completion(QpNum(1), d.tag, t(20_000), true).unwrap();
    assert_eq!(w.delay(), Some(14_000.0));
    // A NIC clock ahead of the host's, and a timestamp before the doorbell: 0.
    w.sync(t(50_000), t(10_000));
    let d = ring(w.post(QpNum(1), 0, 64, true, t(20_000)).unwrap());
    w.on_completion(QpNum(1), d.tag, t(55_000), true).unwrap();
    assert_eq!(w.delay(), Some(0.875 * 14_000.0));
    // Due again after sync_every doorbells.
    let mut w = weir(WeirConfig {
        sync_every: 3,
        ..WeirConfig::default()
    });
    for i in 0..3 {
        assert!(!w.sync_due());
        let d = ring(w.post(QpNum(0), i, 0, true, t(i)).unwrap());
        w.on_completion(QpNum(0), d.tag, t(i), true).unwrap();
    }
    assert!(w.sync_due());
}

#[test]
fn the_nic_send_queue_and_the_application_queue_are_bounded() {
    let mut w = weir(WeirConfig {
        max_wqes: 3,
        sq_depth: 2,
        ..WeirConfig::default()
    });
    let a = ring(w.post(QpNum(0), 0, 0, true, t(0)).unwrap());
    let b = ring(w.post(QpNum(0), 1, 0, true, t(0)).unwrap());
    // The NIC's send queue is full: held for a completion, not a time.
    assert_eq!(
        w.post(QpNum(0), 2, 0, true, t(0)),
        Ok(Decision::Hold { until: None })
    );
    assert_eq!(w.post(QpNum(0), 3, 0, true, t(0)), Err(WeirError::Full(0)));
    assert_eq!(w.next_timeout(), None);
    assert_eq!(w.poll_doorbell(t(10)), None);
    w.on_completion(QpNum(0), a.tag, t(10), true).unwrap();
    assert_eq!(w.next_timeout(), Some(t(0)));
    let c = w.poll_doorbell(t(10)).unwrap();
    assert_eq!((c.wr_id, c.tag, w.in_flight(QpNum(0))), (2, 2, 2));
    w.on_completion(QpNum(0), b.tag, t(10), true).unwrap();
    w.on_completion(QpNum(0), c.tag, t(10), true).unwrap();
    assert_eq!(w.held(QpNum(0)), 0);
}

#[test]
fn a_reset_queue_pair_forgets_its_work() {
    let mut w = weir(WeirConfig::default());
    let a = ring(w.post(QpNum(3), 0, 64, true, t(0)).unwrap());
    w.post(QpNum(3), 1, 64, true, t(0)).unwrap();
    w.reset_qp(QpNum(3)).unwrap();
    assert_eq!((w.active_qps(), w.held(QpNum(3))), (0, 0));
    assert_eq!(w.poll_doorbell(t(1000)), None);
    assert_eq!(
        w.on_completion(QpNum(3), a.tag, t(10), true),
        Err(WeirError::UnexpectedCompletion(3))
    );
    let b = ring(w.post(QpNum(3), 2, 64, true, t(2000)).unwrap());
    assert_eq!(b.tag, 1);
    assert_eq!(
        w.on_completion(QpNum(3), b.tag, t(2100), true)
            .unwrap()
            .map(|c| c.wr_id),
        Some(2)
    );
}

#[test]
fn bad_configurations_are_refused() {
    for cfg in [
        WeirConfig {
            init_beta: 2.0,
            ..WeirConfig::default()
        },
        WeirConfig {
            min_rate: 0,
            ..WeirConfig::default()
        },
        WeirConfig {
            ewma_weight: 1.0,
            ..WeirConfig::default()
        },
        WeirConfig {
            sq_depth: 0,
            ..WeirConfig::default()
        },
        WeirConfig {
            max_batch: 0,
            ..WeirConfig::default()
        },
    ] {
        assert!(matches!(Weir::new(cfg), Err(WeirError::Config(_))));
    }
}

/// What a run over a bottleneck NIC measured, over its second half.
#[derive(Debug)]
struct Bottleneck {
    /// When the rate first came down to 41 Gbit/s, ns.
    reached: Option<u64>,
    /// Mean rate at completions, Gbit/s.
    rate: f64,
    /// Bytes completed per second, Gbit/s.
    goodput: f64,
    /// Mean and largest wait in the NIC's queue, ns.
    queue: f64,
    max_queue: u64,
}

/// 64 queue pairs each keeping 16 WQEs of 4 KiB posted, over a NIC that sends at 40 Gbit/s
/// (a bottleneck below the 100 Gbit/s line rate Weir starts from) and completes each piece
/// 2 us (one RTT) after its last bit, for 40 ms.
fn bottleneck(base_delay: Duration) -> Bottleneck {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    const QPS: u32 = 64;
    const DEPTH: u32 = 16;
    const LEN: u32 = 4096;
    const RTT: u64 = 2_000;
    const END: u64 = 40_000_000;
    // 40 Gbit/s: 0.2 ns per byte.
    let serialise = |len: u32| u64::from(len) / 5;
    let mut w = weir(WeirConfig {
        max_qpn: QPS,
        max_wqes: DEPTH,
        sq_depth: DEPTH,
        base_delay,
        ..WeirConfig::default()
    });
    let mut nic_free = 0u64;
    let mut events = BinaryHeap::new();
    let mut submit = |d: Doorbell, now: u64, events: &mut BinaryHeap<_>| {
        nic_free = nic_free.max(now) + serialise(d.len);
        events.push(Reverse((nic_free + RTT, d.qp.0, d.tag, nic_free - now)));
    };
    let mut wr_id = 0;
    for qp in 0..QPS {
        for _ in 0..DEPTH {
            if let Decision::Ring(d) = w.post(QpNum(qp), wr_id, LEN, true, t(0)).unwrap() {
                submit(d, 0, &mut events);
            }
            wr_id += 1;
        }
    }
    let (mut rates, mut queue, mut bytes, mut samples) = (0u64, 0u64, 0u64, 0u64);
    let mut max_queue = 0;
    let mut reached = None;
    let mut now = 0;
    while now < END {
        let next_cqe = events.peek().map(|e| e.0.0);
        now = match (next_cqe, w.next_timeout()) {
            (Some(c), Some(x)) => c.min(x.as_nanos()),
            (Some(c), None) => c,
            (None, Some(x)) => x.as_nanos(),
            (None, None) => unreachable!("the queue pairs always have work"),
        }
        .max(now);
        if next_cqe == Some(now) {
            let Reverse((at, qp, tag, waited)) = events.pop().unwrap();
            let c = w.on_completion(QpNum(qp), tag, t(at), true).unwrap();
            if reached.is_none() && w.rate() <= 41_000_000_000 {
                reached = Some(now);
            }
            if let Some(c) = c {
                if now >= END / 2 {
                    rates += w.rate() / 1_000_000;
                    queue += waited;
                    bytes += u64::from(c.len);
                    samples += 1;
                    max_queue = max_queue.max(waited);
                }
                if let Decision::Ring(d) = w.post(QpNum(qp), wr_id, LEN, true, t(now)).unwrap() {
                    submit(d, now, &mut events);
                }
                wr_id += 1;
            }
        }
        while let Some(d) = w.poll_doorbell(t(now)) {
            submit(d, now, &mut events);
        }
    }
    let b = Bottleneck {
        reached,
        rate: rates as f64 / samples as f64 / 1000.0,
        goodput: bytes as f64 * 8.0 / (END / 2) as f64,
        queue: queue as f64 / samples as f64,
        max_queue,
    };
    println!("base_delay {base_delay:?}: {b:?}");
    b
}

/// The paper's Fig. 10b in miniature: Weir's rate comes down to the bottleneck and stays
/// near it, the NIC keeps sending, and its queue stays near what `base_delay` asks for
/// instead of growing with the 1,024 WQEs posted. Coming down from 100 Gbit/s takes about
/// 5 ms.
#[test]
fn the_rate_converges_to_a_bottleneck() {
    let b = bottleneck(Duration::from_micros(10));
    assert!(b.reached.unwrap() < 10_000_000, "{b:?}");
    assert!((39.0..=41.0).contains(&b.rate), "{b:?}");
    assert!(b.goodput >= 39.5, "{b:?}");
    // alpha = 1, beta = 1.5 with 64 active: the delay (queue + 0.8 us + 2 us) is held
    // between 2 and 2.5 times base_delay, 20 to 25 us, and the queue swings around it by
    // less than the 840 us the 1,024 WQEs posted would make.
    assert!((15_000.0..=25_000.0).contains(&b.queue), "{b:?}");
    assert!(b.max_queue < 60_000, "{b:?}");
}

/// The paper's Fig. 10a: a larger `base_delay` settles at a larger occupancy, here the
/// NIC's queue, about twice as large for twice the delay (the band is 2 to 2.5 times
/// `base_delay`, less the 2.8 us of serialisation and RTT).
#[test]
fn a_larger_base_delay_settles_at_a_larger_occupancy() {
    let queues: Vec<f64> = [5, 10, 20]
        .map(|us| bottleneck(Duration::from_micros(us)))
        .iter()
        .map(|b| {
            assert!(b.goodput >= 39.0, "{b:?}");
            b.queue
        })
        .collect();
    assert!(queues[0] < queues[1] && queues[1] < queues[2], "{queues:?}");
    for (queue, us) in queues.iter().zip([5.0, 10.0, 20.0]) {
        let (low, high) = (2000.0 * us - 2800.0, 2500.0 * us - 2800.0);
        assert!(
            (low * 0.8..=high * 1.2).contains(queue),
            "{queue} ns for {us} us"
        );
    }
}

mod property {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[derive(Debug, Clone)]
    enum Op {
        Post { qp: u32, len: u32, signaled: bool },
        Complete { qp: u32, ok: bool, delay: u64 },
        Advance(u64),
        Poll,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..6u32, prop_oneof![0..600u32, 0..20000u32], any::<bool>())
                .prop_map(|(qp, len, signaled)| Op::Post { qp, len, signaled }),
            4 => (0..6u32, proptest::bool::weighted(0.95), 0..100_000u64)
                .prop_map(|(qp, ok, delay)| Op::Complete { qp, ok, delay }),
            2 => (0..2_000u64).prop_map(Op::Advance),
            2 => Just(Op::Poll),
        ]
    }

    /// The driver and NIC around a Weir: what it posted, what the NIC holds, what the
    /// application heard.
    struct Rig {
        w: Weir,
        now: u64,
        /// Per queue pair, the application's WQEs not yet accounted for: (wr_id, len,
        /// signaled, pieces seen so far as offset covered).
        app: Vec<VecDeque<(u64, u32, bool, u32)>>,
        /// Per queue pair, the doorbells the NIC holds, oldest first.
        nic: Vec<VecDeque<Doorbell>>,
        failed: Vec<VecDeque<bool>>,
        next_wr: u64,
        heard: u64,
        posted: u64,
        /// The run being handed out: its queue pair and pieces so far.
        run: Option<(QpNum, u32)>,
        /// Doorbells rung (runs).
        runs: u64,
    }

    impl Rig {
        fn rung(&mut self, d: Doorbell, credit_before: Instant) {
            match self.run {
                // The rest of a run: the same queue pair, no more than max_batch.
                Some((qp, n)) => {
                    assert_eq!(qp, d.qp);
                    assert!(n < self.w.config().max_batch);
                }
                // A doorbell only on a credit that has fallen due.
                None => {
                    assert!(t(self.now) >= credit_before);
                    self.runs += 1;
                }
            }
            self.run = d.more.then(|| (d.qp, self.run.map_or(1, |(_, n)| n + 1)));
            let q = d.qp.0 as usize;
            // Pieces come in order, each WQE's covering its data exactly.
            let entry = self.app[q]
                .iter_mut()
                .find(|e| e.3 < e.1.max(1))
                .expect("a doorbell for a WQE that is waiting for one");
            assert_eq!(entry.0, d.wr_id);
            assert_eq!(d.offset, entry.3);
            entry.3 = if entry.1 == 0 { 1 } else { entry.3 + d.len };
            assert!(d.len <= 4096 || d.pieces == 1);
            self.nic[q].push_back(d);
            assert!(self.w.in_flight(d.qp) <= self.w.config().sq_depth);
            assert_eq!(self.w.in_flight(d.qp) as usize, self.nic[q].len());
        }

        fn poll(&mut self) {
            loop {
                let before = self.w.credit_at();
                match self.w.poll_doorbell(t(self.now)) {
                    Some(d) => self.rung(d, before),
                    None => break,
                }
            }
            assert_eq!(self.run, None, "a run handed out in full");
        }

        fn complete(&mut self, q: usize, ok: bool, delay: u64) {
            let Some(d) = self.nic[q].pop_front() else {
                assert!(
                    self.w
                        .on_completion(QpNum(q as u32), 0, t(self.now), ok)
                        .is_err()
                );
                return;
            };
            self.failed[q].push_back(ok);
            let c = self
                .w
                .on_completion(d.qp, d.tag, t(self.now + delay), ok)
                .unwrap();
            if d.piece + 1 < d.pieces {
                assert_eq!(c, None);
                return;
            }
            // The WQE's last piece: it is the application's oldest, and heard of once,
            // if it asked or failed.
            let (wr_id, len, signaled, _) = self.app[q].pop_front().unwrap();
            assert_eq!(wr_id, d.wr_id);
            let ok = self.failed[q].drain(..).all(|ok| ok);
            if signaled || !ok {
                let c = c.expect("a completion the application asked for");
                assert_eq!((c.wr_id, c.len, c.ok, c.pieces), (wr_id, len, ok, d.pieces));
                self.heard += 1;
            } else {
                assert_eq!(c, None);
            }
        }

        fn check(&self) {
            let cfg = self.w.config();
            assert!((cfg.min_rate..=cfg.line_rate).contains(&self.w.rate()));
            let busy = self.app.iter().filter(|a| !a.is_empty()).count() as u32;
            assert_eq!(self.w.active_qps(), busy);
            for (q, a) in self.app.iter().enumerate() {
                assert_eq!(self.w.is_active(QpNum(q as u32)), !a.is_empty());
                assert_eq!(self.w.held(QpNum(q as u32)) as usize, a.len());
            }
        }
    }

    proptest! {
        #[test]
        fn every_wqe_is_accounted_for_once_and_in_order(
            ops in proptest::collection::vec(op(), 0..300),
            max_batch in 1..4u32,
        ) {
            let cfg = WeirConfig {
                max_qpn: 6,
                max_wqes: 5,
                sq_depth: 3,
                base_delay: Duration::from_micros(20),
                inc: 5_000_000_000,
                dec: 5_000_000_000,
                min_rate: 10_000_000_000,
                max_batch,
                ..WeirConfig::default()
            };
            let mut rig = Rig {
                w: weir(cfg),
                now: 0,
                app: vec![VecDeque::new(); 6],
                nic: vec![VecDeque::new(); 6],
                failed: vec![VecDeque::new(); 6],
                next_wr: 0,
                heard: 0,
                posted: 0,
                run: None,
                runs: 0,
            };
            for op in ops {
                match op {
                    Op::Post { qp, len, signaled } => {
                        let wr = rig.next_wr;
                        let before = rig.w.credit_at();
                        match rig.w.post(QpNum(qp), wr, len, signaled, t(rig.now)) {
                            Err(WeirError::Full(_)) => {
                                assert_eq!(rig.app[qp as usize].len(), 5);
                                continue;
                            }
                            Err(e) => panic!("{e}"),
                            Ok(d) => {
                                rig.next_wr += 1;
                                rig.posted += 1;
                                rig.app[qp as usize].push_back((wr, len, signaled, 0));
                                if let Decision::Ring(d) = d {
                                    rig.rung(d, before);
                                    if d.more {
                                        rig.poll();
                                    }
                                }
                            }
                        }
                    }
                    Op::Complete { qp, ok, delay } => rig.complete(qp as usize, ok, delay),
                    Op::Advance(ns) => rig.now += ns,
                    Op::Poll => rig.poll(),
                }
                rig.check();
            }
            // Drain: time and completions release everything.
            let mut rounds = 0;
            while rig.app.iter().any(|a| !a.is_empty()) {
                if let Some(at) = rig.w.next_timeout() {
                    rig.now = rig.now.max(at.as_nanos());
                }
                rig.poll();
                for q in 0..6 {
                    while !rig.nic[q].is_empty() {
                        rig.complete(q, true, 1000);
                    }
                }
                rig.check();
                rounds += 1;
                prop_assert!(rounds < 10_000);
            }
            let s = rig.w.stats();
            prop_assert_eq!(s.posts, rig.posted);
            prop_assert_eq!(s.app_completions, rig.heard);
            prop_assert_eq!(s.cqes, s.doorbells);
            prop_assert_eq!(s.runs, rig.runs);
            if max_batch == 1 {
                prop_assert_eq!(s.runs, s.doorbells);
            }
            prop_assert_eq!(s.app_completions + s.swallowed, s.cqes);
            prop_assert_eq!(rig.w.active_qps(), 0);
            prop_assert_eq!(rig.w.rate(), cfg.line_rate);
        }
    }
}

#[test]
fn state_per_qpn_is_as_documented() {
    assert_eq!(core::mem::size_of::<Wqe>(), 32);
    assert!(core::mem::size_of::<Qp>() <= 48);
}

/// The pieces `poll_doorbell` hands out at `now` as runs: (QP, tags) per doorbell.
fn runs_at(w: &mut Weir, now: u64) -> Vec<(u32, Vec<u64>)> {
    let mut runs: Vec<(u32, Vec<u64>)> = Vec::new();
    let mut open = false;
    while let Some(d) = w.poll_doorbell(t(now)) {
        if open {
            let last = runs.last_mut().unwrap();
            assert_eq!(last.0, d.qp.0, "a run is one queue pair's");
            last.1.push(d.tag);
        } else {
            runs.push((d.qp.0, vec![d.tag]));
        }
        open = d.more;
    }
    assert!(!open, "a run handed out in full");
    runs
}

#[test]
fn a_doorbell_carries_a_run_of_one_queue_pairs_pieces() {
    // 8 Gbit/s: 80 B draw an 80 ns credit gap each, exactly. Runs of at most 4 pieces,
    // and at most 6 in flight per queue pair.
    let mut w = weir(WeirConfig {
        max_batch: 4,
        sq_depth: 6,
        line_rate: 8_000_000_000,
        ..WeirConfig::default()
    });
    // QP 1's first post finds a credit and nothing queued: a run of the one piece it has.
    let d = ring(w.post(QpNum(1), 0, 80, true, t(0)).unwrap());
    assert_eq!((d.tag, d.more), (0, false));
    for wr_id in 1..10 {
        assert_eq!(
            w.post(QpNum(1), wr_id, 80, true, t(0)).unwrap(),
            Decision::Hold { until: Some(t(80)) }
        );
    }
    for wr_id in 0..3 {
        w.post(QpNum(2), wr_id, 80, true, t(0)).unwrap();
    }
    assert_eq!(runs_at(&mut w, 79), []);
    // At the credit, QP 1 gets 4 of its 9 queued pieces (room for 5) under one doorbell;
    // their four gaps are drawn together: the next credit is 320 ns later.
    assert_eq!(runs_at(&mut w, 80), [(1, vec![1, 2, 3, 4])]);
    assert_eq!(w.credit_at(), t(400));
    assert_eq!(runs_at(&mut w, 399), []);
    // Then QP 2, all three of its pieces; then QP 1 with room for one more.
    assert_eq!(runs_at(&mut w, 400), [(2, vec![0, 1, 2])]);
    assert_eq!(w.credit_at(), t(640));
    assert_eq!(runs_at(&mut w, 640), [(1, vec![5])]);
    assert_eq!(w.in_flight(QpNum(1)), 6);
    assert_eq!(runs_at(&mut w, 720), []);
    assert_eq!(w.next_timeout(), None);
    // Each piece keeps its own doorbell time for the delay monitor: tag 0 rung at 0, tag
    // 1 at 80 (with the run), both completing 800 and 1,000 ns later.
    w.on_completion(QpNum(1), 0, t(800), true).unwrap();
    assert_eq!(w.delay(), Some(800.0));
    w.on_completion(QpNum(1), 1, t(1080), true).unwrap();
    assert_eq!(w.delay(), Some(0.875 * 800.0 + 0.125 * 1000.0));
    // Room for two again, four queued: a run of two.
    assert_eq!(runs_at(&mut w, 1080), [(1, vec![6, 7])]);
    let s = w.stats();
    assert_eq!((s.doorbells, s.runs), (11, 5));
}

#[test]
fn a_run_carries_no_more_bytes_than_one_split_piece() {
    // Runs of up to 4 pieces, but no more than split_bytes (4,096) in all after the
    // first: a 10,000 B WQE's pieces (4,096, 4,096, 1,808) each take a doorbell of their
    // own, and the last shares one with the next two 1,000 B WQEs (3,808 B; a third would
    // make 4,808). 8 Gbit/s: 1 ns per byte.
    let mut w = weir(WeirConfig {
        max_batch: 4,
        line_rate: 8_000_000_000,
        ..WeirConfig::default()
    });
    let d = ring(w.post(QpNum(3), 9, 10_000, true, t(0)).unwrap());
    assert_eq!((d.piece, d.len, d.more), (0, 4096, false));
    for wr_id in 10..13 {
        w.post(QpNum(3), wr_id, 1000, true, t(0)).unwrap();
    }
    assert_eq!(w.poll_doorbell(t(0)), None);
    assert_eq!(w.credit_at(), t(4096));
    assert_eq!(runs_at(&mut w, 4096), [(3, vec![1])]);
    assert_eq!(runs_at(&mut w, 8191), []);
    assert_eq!(runs_at(&mut w, 8192), [(3, vec![2, 3, 4])]);
    assert_eq!(w.credit_at(), t(8192 + 3808));
    assert_eq!(runs_at(&mut w, 12_000), [(3, vec![5])]);
    assert_eq!((w.stats().doorbells, w.stats().runs), (6, 4));
}

#[test]
fn runs_of_one_are_the_round_robin_of_single_doorbells() {
    // max_batch 1: QPs take turns, one piece each, every piece its own doorbell.
    let mut w = weir(WeirConfig::default());
    ring(w.post(QpNum(0), 0, 80, true, t(0)).unwrap());
    for wr_id in 1..3 {
        w.post(QpNum(0), wr_id, 80, true, t(0)).unwrap();
        w.post(QpNum(1), wr_id, 80, true, t(0)).unwrap();
    }
    assert_eq!(runs_at(&mut w, 80), [(0, vec![1])]);
    assert_eq!(runs_at(&mut w, 160), [(1, vec![0])]);
    assert_eq!(runs_at(&mut w, 240), [(0, vec![2])]);
    assert_eq!((w.stats().doorbells, w.stats().runs), (4, 4));
}
