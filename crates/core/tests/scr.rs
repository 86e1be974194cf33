//! SCR's decoupled control loop: the coalescing strategies, the processor pool, and the
//! granularity invariance principle (with more flows than processors, the bytes one run of
//! the law covers stay the same as flows grow).

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use sluice_core::Instant;
use sluice_core::control::{
    Actions, Coalesce, Controller, Decoupled, Event, EventKind, EventMask, Law, ScrConfig,
};
use sluice_wire::Psn;

/// Records each event it runs on, with the queue pair's context (a run counter).
#[derive(Debug, Clone, Default)]
struct Log {
    runs: Rc<RefCell<Vec<(Instant, Event)>>>,
}

impl Law for Log {
    type Context = u32;

    fn name(&self) -> &'static str {
        "log"
    }

    fn interest(&self) -> EventMask {
        EventMask::ALL
    }

    fn on_event(&mut self, now: Instant, n: &mut u32, event: &Event, act: &mut Actions) {
        *n += 1;
        self.runs.borrow_mut().push((now, *event));
        act.set_rate(u64::from(*n) * 1_000_000);
    }
}

fn us(n: u64) -> Instant {
    Instant::from_nanos(n * 1000)
}

fn tx(psn: u32, bytes: u32) -> Event {
    Event::Tx {
        psn: Psn::new(psn),
        bytes,
        retransmission: psn == 2,
    }
}

/// Three TX events for one queue pair while its processor is busy, with `rule` for TX.
fn coalesced_tx(rule: Coalesce) -> (Event, Vec<(u32, Actions)>) {
    let log = Log::default();
    let runs = log.runs.clone();
    let mut config = ScrConfig {
        processors: 1,
        loop_delay: Duration::ZERO,
        service_time: Duration::from_micros(10),
        ..ScrConfig::default()
    };
    config.coalesce[EventKind::Tx as usize] = rule;
    let mut c = Decoupled::new(log, config);
    let mut act = Actions::default();
    // QP 0's hint keeps the only processor busy for 10 us.
    c.on_event(us(0), 0, &Event::Hint(7), &mut act);
    for (i, t) in [1, 2, 3].into_iter().enumerate() {
        c.on_event(us(t), 1, &tx(i as u32 + 1, 100 * (i as u32 + 1)), &mut act);
    }
    assert!(
        act.is_empty(),
        "decoupled: nothing happens on the event's path"
    );
    let mut out = Vec::new();
    while let Some(at) = c.next_timeout() {
        c.on_timeout(at, &mut out);
    }
    let runs = runs.borrow();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        runs[1].0,
        us(10),
        "the TX queue is served when the processor frees"
    );
    assert_eq!(c.stats().coalesced, 2);
    (runs[1].1, out)
}

#[test]
fn accumulate_sums_bytes_keeps_the_latest_psn_and_ors_flags() {
    let (e, out) = coalesced_tx(Coalesce::Accumulate);
    assert_eq!(
        e,
        Event::Tx {
            psn: Psn::new(3),
            bytes: 600,
            retransmission: true
        }
    );
    // Each run's actions take effect when it ends: QP 0 at 10 us, QP 1 at 20 us.
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].0, 0);
    assert_eq!(out[1].0, 1);
    assert_eq!(out[1].1.rate(), Some(Some(1_000_000)));
}

#[test]
fn keep_latest_and_keep_oldest_keep_one_event() {
    assert_eq!(coalesced_tx(Coalesce::KeepLatest).0, tx(3, 300));
    assert_eq!(coalesced_tx(Coalesce::KeepOldest).0, tx(1, 100));
}

#[test]
fn a_custom_rule_is_the_laws_own() {
    fn keep_biggest(waiting: &mut Event, new: &Event) {
        if let (Event::Tx { bytes: a, .. }, Event::Tx { bytes: b, .. }) = (&waiting, new) {
            if b > a {
                *waiting = *new;
            }
        }
    }
    assert_eq!(coalesced_tx(Coalesce::Custom(keep_biggest)).0, tx(3, 300));
}

#[test]
fn queue_pairs_go_to_processor_q_mod_p_and_run_in_parallel() {
    let log = Log::default();
    let runs = log.runs.clone();
    let config = ScrConfig {
        processors: 2,
        loop_delay: Duration::from_micros(1),
        service_time: Duration::from_micros(5),
        ..ScrConfig::default()
    };
    let mut c = Decoupled::new(log, config);
    let mut act = Actions::default();
    for qp in 0..4 {
        c.on_event(us(0), qp, &Event::Cnp, &mut act);
    }
    let mut out = Vec::new();
    while let Some(at) = c.next_timeout() {
        c.on_timeout(at, &mut out);
    }
    // QPs 0 and 2 share processor 0, QPs 1 and 3 processor 1: two rounds of two, QPs 0
    // and 1 first (a mapping by q / 2 would finish 0 and 2 first).
    let starts: Vec<u64> = runs.borrow().iter().map(|r| r.0.as_nanos()).collect();
    assert_eq!(starts, vec![1_000, 1_000, 6_000, 6_000]);
    let ends: Vec<u32> = out.iter().map(|o| o.0).collect();
    assert_eq!(ends, vec![0, 1, 2, 3]);
}

#[test]
fn law_timers_pass_through_the_queues_too() {
    #[derive(Debug, Default)]
    struct Ticker {
        fired: Vec<Instant>,
    }
    impl Law for Ticker {
        type Context = ();
        fn name(&self) -> &'static str {
            "ticker"
        }
        fn interest(&self) -> EventMask {
            EventMask::of(&[EventKind::Cnp, EventKind::Timer])
        }
        fn on_event(&mut self, now: Instant, _: &mut (), e: &Event, act: &mut Actions) {
            match e {
                Event::Cnp => act.arm_timer(now + Duration::from_micros(50)),
                _ => self.fired.push(now),
            }
        }
    }
    let config = ScrConfig {
        processors: 1,
        loop_delay: Duration::from_micros(2),
        service_time: Duration::from_micros(1),
        ..ScrConfig::default()
    };
    let mut c = Decoupled::new(Ticker::default(), config);
    c.on_event(us(0), 5, &Event::Cnp, &mut Actions::default());
    let mut out = Vec::new();
    while let Some(at) = c.next_timeout() {
        c.on_timeout(at, &mut out);
    }
    // The CNP runs at 2 us and arms 52 us; the timer event reaches its queue 2 us later.
    assert_eq!(c.law().fired, vec![us(54)]);
}

/// Mean payload bytes per run of the law on TX events, for `flows` flows sharing a line
/// of `gbps` with 1 KiB packets round-robin, `processors` processors of `service` each.
fn bytes_per_run(flows: u32, processors: u32, service: Duration, gbps: u64) -> f64 {
    #[derive(Debug)]
    struct Nothing;
    impl Law for Nothing {
        type Context = ();
        fn name(&self) -> &'static str {
            "nothing"
        }
        fn interest(&self) -> EventMask {
            EventMask::of(&[EventKind::Tx])
        }
        fn on_event(&mut self, _: Instant, _: &mut (), _: &Event, _: &mut Actions) {}
    }
    let config = ScrConfig {
        processors,
        loop_delay: Duration::ZERO,
        service_time: service,
        ..ScrConfig::default()
    };
    let mut c = Decoupled::new(Nothing, config);
    let packet_ns = 1024 * 8 / gbps; // 1 KiB at the line rate
    let mut out = Vec::new();
    let mut act = Actions::default();
    for i in 0..400_000u64 {
        let now = Instant::from_nanos(i * packet_ns);
        while let Some(at) = c.next_timeout().filter(|&at| at <= now) {
            c.on_timeout(at, &mut out);
        }
        c.on_event(
            now,
            (i % u64::from(flows)) as u32,
            &tx(i as u32, 1024),
            &mut act,
        );
    }
    let s = c.stats();
    s.tx_bytes as f64 / s.tx_runs as f64
}

#[test]
fn granularity_is_invariant_once_flows_outnumber_processors() {
    let service = Duration::from_micros(1);
    let (p, gbps) = (4, 64);
    // Capacity: 4 runs per us; the line: 8 GB/s = 8,000 B per us -> 2,000 B per run.
    let expected = (gbps as f64 / 8.0 * 1e9) * service.as_secs_f64() / f64::from(p);
    let sizes = [8, 64, 512, 4096];
    let measured: Vec<f64> = sizes
        .iter()
        .map(|&n| bytes_per_run(n, p, service, gbps))
        .collect();
    for (n, b) in sizes.iter().zip(&measured) {
        assert!(
            (b / expected - 1.0).abs() < 0.15,
            "{n} flows: {b:.0} B per run, expected about {expected:.0} ({measured:?})"
        );
    }
    // Fewer flows than processors: idle processors, coarser runs (SCR's Fig. 10b).
    let one = bytes_per_run(1, p, service, gbps);
    assert!(one > 3.0 * expected, "{one:.0}");
}

/// Drives `c` with TX events of `bytes` every `gap_ns` on `flows` queue pairs (round
/// robin) for `n` events, then lets it finish.
fn drive_tx(c: &mut dyn Controller, flows: u32, gap_ns: u64, bytes: u32, n: u64) {
    let mut out = Vec::new();
    let mut act = Actions::default();
    for i in 0..n {
        let now = Instant::from_nanos(i * gap_ns);
        while let Some(at) = c.next_timeout().filter(|&at| at <= now) {
            c.on_timeout(at, &mut out);
        }
        c.on_event(
            now,
            (i % u64::from(flows)) as u32,
            &tx(i as u32 + 3, bytes),
            &mut act,
        );
    }
    while let Some(at) = c.next_timeout() {
        c.on_timeout(at, &mut out);
    }
}

#[test]
fn the_statistics_add_up_and_say_each_processors_load() {
    let config = ScrConfig {
        processors: 3,
        loop_delay: Duration::ZERO,
        service_time: Duration::from_micros(2),
        ..ScrConfig::default()
    };
    let mut c = Decoupled::new(Log::default(), config);
    // Five flows on three processors (0: QPs 0 and 3, 1: QPs 1 and 4, 2: QP 2), an event
    // every 100 ns: every processor saturated, most events merged.
    drive_tx(&mut c, 5, 100, 1000, 10_000);
    let d = c
        .decoupled_stats()
        .expect("a decoupled loop has statistics");
    let t = d.totals;
    assert_eq!(t.events, 10_000);
    assert_eq!(t.queued() + t.coalesced, t.events);
    // Every queued event was processed in the end (nothing was reset).
    assert_eq!(t.processed(), t.queued());
    assert_eq!(t.runs, t.tx_runs);
    assert_eq!(t.tx_bytes, 10_000 * 1000, "accumulation loses no bytes");
    assert_eq!(t.early_exits, 0);
    assert_eq!(d.processors.len(), 3);
    let runs: u64 = d.processors.iter().map(|p| p.runs).sum();
    assert_eq!(runs, t.runs);
    for p in &d.processors {
        assert_eq!(p.busy, Duration::from_micros(2) * p.runs as u32);
    }
    // Saturated: each ran about once per 2 us over the 1 ms of events.
    let util = d.utilisation(Duration::from_millis(1));
    for u in &util {
        assert!((0.95..=1.05).contains(u), "{util:?}");
    }
    // `since` takes differences; `add` sums processor by processor.
    assert_eq!(d.since(&d).totals, Default::default());
    let mut twice = d.clone();
    twice.add(&d);
    assert_eq!(twice.totals.events, 20_000);
    assert_eq!(twice.loops, 2);
    assert_eq!(
        twice.utilisation(Duration::from_millis(1)),
        util,
        "the mean of two equal loops"
    );
    assert_eq!(twice.processors[2].runs, 2 * d.processors[2].runs);
}

#[test]
fn an_inline_law_has_no_decoupled_statistics() {
    let c = sluice_core::control::Inline::new(Log::default());
    assert!(c.decoupled_stats().is_none());
}

#[test]
fn early_exits_carry_tx_bytes_to_the_next_run_and_handle_more_events() {
    let config = |early_exit| ScrConfig {
        processors: 4,
        loop_delay: Duration::ZERO,
        service_time: Duration::from_micros(1),
        early_exit,
        ..ScrConfig::default()
    };
    let run = |early_exit| {
        let mut c = Decoupled::new(Log::default(), config(early_exit));
        // 64 flows, a 1 KiB TX event every 20 ns: far more than 4 processors can run.
        drive_tx(&mut c, 64, 20, 1024, 200_000);
        c.decoupled_stats().unwrap()
    };
    let hw = run(None);
    // Hardware-only, a processor comes back to a flow every 16 us, when some 12.8 KB have
    // accumulated: a threshold above that makes most visits early exits.
    let sw = run(Some(sluice_core::control::EarlyExit {
        bytes: 32 * 1024,
        time: Duration::from_nanos(100),
    }));
    // Every full run covers at least the threshold (what was carried is added).
    assert!(sw.totals.early_exits > 0);
    let per_run = sw.totals.bytes_per_tx_run().unwrap();
    assert!(per_run >= 32768.0, "{per_run}");
    // Cheap exits: the processors take more events in the same time.
    assert!(
        sw.totals.processed() > hw.totals.processed() * 3 / 2,
        "hw {} sw {}",
        hw.totals.processed(),
        sw.totals.processed()
    );
    // Bytes only carried when the flows stopped never reached the law; the rest did.
    assert!(sw.totals.tx_bytes <= 200_000 * 1024);
    assert!(sw.totals.tx_bytes >= 200_000 * 1024 - 64 * 32 * 1024);
}

#[test]
fn a_retransmission_is_never_only_carried() {
    let config = ScrConfig {
        processors: 1,
        loop_delay: Duration::ZERO,
        service_time: Duration::from_micros(1),
        early_exit: Some(sluice_core::control::EarlyExit {
            bytes: 1 << 20,
            time: Duration::ZERO,
        }),
        ..ScrConfig::default()
    };
    let log = Log::default();
    let runs = log.runs.clone();
    let mut c = Decoupled::new(log, config);
    let mut out = Vec::new();
    // tx(2, ..) is a retransmission (see `tx`): it runs the law with what was carried.
    for (t, e) in [(0, tx(1, 100)), (10, tx(2, 50)), (20, tx(3, 10))] {
        c.on_event(us(t), 0, &e, &mut Actions::default());
        while let Some(at) = c.next_timeout() {
            c.on_timeout(at, &mut out);
        }
    }
    let runs = runs.borrow();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(
        matches!(runs[0].1, Event::Tx { bytes: 150, .. }),
        "{runs:?}"
    );
    assert_eq!(c.stats().early_exits, 2);
}

/// One step of a random drive: after `gap_ns`, an event of `kind` (0: TX of `bytes`, 1: TX
/// retransmission, 2: RX, 3: CNP, 4: ACK) on `qp`, or a reset of `qp` (kind 5).
#[derive(Debug, Clone, Copy)]
struct Step {
    gap_ns: u64,
    qp: u32,
    kind: u8,
    bytes: u32,
}

#[derive(Debug, Clone)]
struct LoopCase {
    processors: u32,
    delay_ns: u64,
    service_ns: u64,
    early_exit: Option<(u32, u64)>,
    steps: Vec<Step>,
}

fn loop_case() -> impl proptest::strategy::Strategy<Value = LoopCase> {
    use proptest::prelude::*;
    let step =
        (0u64..3_000, 0u32..6, 0u8..6, 1u32..9_000).prop_map(|(gap_ns, qp, kind, bytes)| Step {
            gap_ns,
            qp,
            kind,
            bytes,
        });
    (
        1u32..5,
        0u64..5_000,
        0u64..4_000,
        proptest::option::of((1u32..40_000, 0u64..1_000)),
        proptest::collection::vec(step, 0..300),
    )
        .prop_map(
            |(processors, delay_ns, service_ns, early_exit, steps)| LoopCase {
                processors,
                delay_ns,
                service_ns,
                early_exit,
                steps,
            },
        )
}

/// Whatever arrives, resets included: every event is queued or coalesced, every queued one
/// processed or dropped once the loop has drained, the processors' shares add up to the
/// totals, their busy time is what they did, and no run covers TX bytes that never came.
#[test]
fn the_statistics_account_for_every_event_under_any_drive() {
    use proptest::prelude::*;
    common::check_cases(64, &loop_case(), 500, |c| {
        let config = ScrConfig {
            processors: c.processors,
            loop_delay: Duration::from_nanos(c.delay_ns),
            service_time: Duration::from_nanos(c.service_ns),
            early_exit: c
                .early_exit
                .map(|(bytes, ns)| sluice_core::control::EarlyExit {
                    bytes,
                    time: Duration::from_nanos(ns),
                }),
            ..ScrConfig::default()
        };
        let mut l = Decoupled::new(Log::default(), config);
        let mut now = 0;
        let mut out = Vec::new();
        let (mut events, mut tx_in) = (0u64, 0u64);
        for s in &c.steps {
            now += s.gap_ns;
            let t = Instant::from_nanos(now);
            while let Some(at) = l.next_timeout().filter(|&at| at <= t) {
                l.on_timeout(at, &mut out);
            }
            let e = match s.kind {
                0 | 1 => tx(if s.kind == 1 { 2 } else { 3 }, s.bytes),
                2 => Event::Rx {
                    psn: Psn::new(1),
                    bytes: s.bytes,
                    ce: false,
                },
                3 => Event::Cnp,
                4 => Event::Ack {
                    confirmed: Psn::new(1),
                    packets: 1,
                    rtt: None,
                },
                _ => {
                    l.reset(s.qp);
                    continue;
                }
            };
            if let Event::Tx { bytes, .. } = e {
                tx_in += u64::from(bytes);
            }
            events += 1;
            l.on_event(t, s.qp, &e, &mut Actions::default());
        }
        while let Some(at) = l.next_timeout() {
            l.on_timeout(at, &mut out);
        }
        let d = l.decoupled_stats().unwrap();
        let t = d.totals;
        prop_assert_eq!(t.events, events);
        prop_assert_eq!(t.queued() + t.coalesced, t.events);
        prop_assert_eq!(t.processed() + t.dropped, t.queued(), "{:?}", t);
        prop_assert_eq!(d.processors.len(), c.processors as usize);
        let sum = |f: fn(&sluice_core::control::ProcessorLoad) -> u64| {
            d.processors.iter().map(f).sum::<u64>()
        };
        prop_assert_eq!(sum(|p| p.runs), t.runs);
        prop_assert_eq!(sum(|p| p.processed), t.processed());
        let exit_ns = c.early_exit.map_or(0, |e| e.1);
        let busy: Duration = d.processors.iter().map(|p| p.busy).sum();
        prop_assert_eq!(
            busy,
            Duration::from_nanos(t.runs * c.service_ns + t.early_exits * exit_ns)
        );
        prop_assert!(t.tx_bytes <= tx_in, "{} of {tx_in}", t.tx_bytes);
        if c.early_exit.is_none() {
            prop_assert_eq!(t.early_exits, 0);
        }
        // Without resets and early exits, accumulation loses no TX byte.
        if c.early_exit.is_none() && c.steps.iter().all(|s| s.kind != 5) {
            prop_assert_eq!(t.tx_bytes, tx_in);
        }
        Ok(())
    });
}
