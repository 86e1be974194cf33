//! Nanoseconds per event for every law, run inline with its context in cache (1 QP) and
//! spread over 16,384 QPs (contexts out of L1/L2), and behind SCR's decoupled queues
//! (coalescing, 4 processors). Prints one table; every ratio is against a figure measured
//! in the same run. Beside the registry's laws, `swcc_credit` (a library law on its declared
//! header). Laws that read a declared header get one per packet (Homa's message, length and
//! end; SwCC's returned credit), Homa a GRANT per packet too, and a gating law is asked with
//! each packet's place in a 64 KiB message.
//!
//! Receiver-driven and gating laws run on two streams (see [`Shape`]): `flowing`, where each
//! queue pair's messages progress and complete as a receiver sees them, and `stalled`, the
//! earlier stream, where every message looks stalled and Homa's RESEND timer fires between
//! a queue pair's packets. Both rows are printed, with timer actions and RESENDs per event.
//!
//! `cargo bench -p sluice-control --bench laws` (`SLUICE_BENCH_EVENTS` events per run;
//! `SLUICE_BENCH_LAWS=homa,rate-credit` runs only the laws named; `SLUICE_BENCH_QPS=16384`
//! only one inline run over that many queue pairs: for a profiler or callgrind;
//! `SLUICE_BENCH_STREAM=flowing` or `stalled` only that stream).

use std::hint::black_box;
use std::time::{Duration, Instant as Clock};

use sluice_control::registry::{LAWS, Mode, build};
use sluice_control::{homa, swcc_credit};
use sluice_core::Instant;
use sluice_core::control::{
    Actions, Controller, Decoupled, Event, EventKind, Gate, Inline, IntHop, IntPath, MessagePos,
    ScrConfig,
};
use sluice_wire::{CcxLayout, HomaControl, Psn};

/// What a transport would hand a law per packet, in proportion: one TX and one RX per
/// data packet, an ACK (with an RTT sample) and telemetry per packet, a credit per
/// packet, and a CNP now and then. Kinds a law did not ask for are left out, as the
/// engine leaves them out.
#[derive(Debug, Clone, Copy)]
enum Step {
    Event(Event),
    Gate(MessagePos),
}

/// Which stream a law is run on. `Stalled`: packet `i` is packet `i mod 16` of a 64 KiB
/// message, and every step goes to a pseudo-random queue pair, so over 16,384 queue pairs
/// each sees a packet every ~5 ms of a message with bytes missing: every message looks
/// stalled to a receiver-driven law (its RESEND timer fires between a queue pair's
/// packets). `Flowing`: what a receiver sees, `LANES` messages in flight at once (Homa's
/// default overcommitment), their packets interleaved and arriving in order, each message
/// completing before its lane moves on to a new pseudo-random queue pair; the sender side
/// of the same queue pair is granted ahead of what it sends. Messages are 256 KiB, more
/// than Homa's default RTTbytes (162.5 KB), so each has a scheduled part and grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Stalled,
    Flowing,
}

/// Messages in flight at once in the flowing stream (Homa's default overcommitment: each
/// gets a place in its grant table, so the data it grants is the data that arrives).
const LANES: u32 = 4;
/// Packets (4 KiB) per message in the flowing stream.
const FLOW_PACKETS: u32 = 64;

/// One step and, in the flowing stream, its lane and whether it starts a message there (the
/// lane then takes a new queue pair).
#[derive(Debug, Clone, Copy)]
struct Tagged {
    step: Step,
    lane: u8,
    first: bool,
}

/// The declared header packet `i` carries for a law that declared `layout`: Homa's (the
/// packet's message, its length and end) or SwCC's credit (a growing total); `None` for
/// any other.
fn declared_header(layout: Option<CcxLayout>, i: u32, pos: &MessagePos) -> Option<Event> {
    let homa = homa::declaration();
    let swcc = swcc_credit::declaration();
    if layout == Some(homa.layout()) {
        let mut h = homa.empty();
        let end = pos.offset + pos.bytes;
        for (name, v) in [("message", pos.id), ("length", pos.len), ("end", end)] {
            h.set(homa.field(name).expect("declared"), u64::from(v));
        }
        Some(Event::Header(h))
    } else if layout == Some(swcc.layout()) {
        let mut h = swcc.empty();
        let f = swcc.field("returned_credit").expect("declared");
        h.set(f, u64::from(i.wrapping_mul(4096)));
        Some(Event::Header(h))
    } else {
        None
    }
}

/// The first `len` steps (or more, to end on a whole round) of `shape`'s stream for `c`,
/// with `lanes` messages in flight in the flowing stream (one per queue pair at most: a
/// queue pair receives its messages one after another).
fn stream(c: &dyn Controller, len: usize, shape: Shape, lanes: u32) -> Vec<Tagged> {
    let interest = c.interest();
    let layout = c.ccx();
    let mut out: Vec<Step> = Vec::with_capacity(len);
    let mut tagged = Vec::with_capacity(len);
    let mut i = 0u32;
    let mut tx_bytes = 0u32;
    // The flowing stream ends on a whole round of messages in every lane, so it repeats
    // without cutting one short.
    let round = lanes * FLOW_PACKETS;
    while out.len() < len || (shape == Shape::Flowing && i % round != 0) {
        i = i.wrapping_add(1);
        let psn = Psn::new(i);
        let rtt = Duration::from_nanos(10_000 + u64::from(i * 7919 % 5_000));
        tx_bytes = tx_bytes.wrapping_add(4201);
        let mut path = IntPath::default();
        path.push(IntHop {
            qlen_bytes: i * 131 % 20_000,
            tx_bytes,
            ts_ns: i.wrapping_mul(336),
            rate_100mbps: 1000,
        });
        let candidates = [
            Event::Tx {
                psn,
                bytes: 4096,
                retransmission: false,
            },
            Event::Rx {
                psn,
                bytes: 4096,
                ce: i % 16 == 0,
            },
            Event::Ack {
                confirmed: psn,
                packets: 1,
                rtt: Some(rtt),
            },
            Event::Telemetry {
                confirmed: psn,
                path,
            },
            Event::Credit { bytes: 4096 },
        ];
        let (pos, lane) = match shape {
            // Packet i is packet i mod 16 of a 64 KiB message.
            Shape::Stalled => (
                MessagePos {
                    id: (i / 16 * 16) & 0xFF_FFFF,
                    len: 65_536,
                    offset: i % 16 * 4096,
                    bytes: 4096,
                },
                0,
            ),
            // Packet i is the lane's packet i / LANES: its message (i / LANES / FLOW_PACKETS,
            // numbered across lanes) and its place in it.
            Shape::Flowing => {
                let (lane, p) = ((i - 1) % lanes, (i - 1) / lanes);
                let message = p / FLOW_PACKETS * lanes + lane;
                let pos = MessagePos {
                    id: (message * FLOW_PACKETS) & 0xFF_FFFF,
                    len: FLOW_PACKETS * 4096,
                    offset: p % FLOW_PACKETS * 4096,
                    bytes: 4096,
                };
                (pos, lane as u8)
            }
        };
        let first_step = out.len();
        if interest.gates() {
            out.push(Step::Gate(pos));
        }
        if interest.contains(EventKind::Header)
            && let Some(h) = declared_header(layout, i, &pos)
        {
            out.push(Step::Event(h));
        }
        if interest.contains(EventKind::Homa) {
            out.push(Step::Event(Event::Homa(HomaControl::Grant {
                message: pos.id,
                offset: pos.offset + 16_384,
                priority: 1,
            })));
        }
        for e in candidates {
            if interest.contains(e.kind()) {
                out.push(Step::Event(e));
            }
        }
        if i % 256 == 0 && interest.contains(EventKind::Cnp) {
            out.push(Step::Event(Event::Cnp));
        }
        if out.is_empty() {
            break; // the law asks for none of the per-packet events
        }
        let first = pos.offset == 0;
        for (n, &step) in out[first_step..].iter().enumerate() {
            tagged.push(Tagged {
                step,
                lane,
                first: first && n == 0,
            });
        }
    }
    tagged
}

/// What one run measured, per step.
#[derive(Debug, Clone, Copy)]
struct Measured {
    ns: f64,
    /// Actions the law's timers produced (Homa's RESENDs and polls, a credit law's
    /// grants: work its timers do between a queue pair's events, counted in `ns`).
    timer_actions: f64,
    /// Homa RESENDs the law sent, from its timers or its events.
    resends: f64,
    /// Homa GRANTs the law sent from its events (the flowing stream's scheduled bytes).
    grants: f64,
}

fn is_resend(a: &Actions) -> bool {
    matches!(a.homa(), Some(HomaControl::Resend { .. }))
}

/// Runs `events` steps over `qps` queue pairs, time moving 100 ns per step (10 M
/// events/s). The queue pair of a step: in the stalled stream a fixed pseudo-random
/// sequence per step; in the flowing stream its lane's, which takes a new pseudo-random
/// queue pair at each message (one lane when there is one queue pair).
fn run(
    c: &mut dyn Controller,
    steps: &[Tagged],
    qps: u32,
    events: usize,
    shape: Shape,
) -> Measured {
    let mut deferred = Vec::new();
    for qp in 0..qps {
        c.reset(qp);
        let mut act = Actions::default();
        c.on_event(
            Instant::ZERO,
            qp,
            &Event::Start {
                mtu: 4096,
                line_rate_bps: 100_000_000_000,
            },
            &mut act,
        );
    }
    let mut qp = 1u32;
    let mut lane_qp = [0u32; LANES as usize];
    let mut timer_actions = 0usize;
    let mut resends = 0usize;
    let mut grants = 0usize;
    let start = Clock::now();
    let mut now = 1_000u64;
    for k in 0..events {
        now += 100;
        let t = Instant::from_nanos(now);
        let tagged = steps[k % steps.len()];
        let q = match shape {
            Shape::Stalled => {
                qp = qp.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                (qp >> 8) % qps
            }
            Shape::Flowing => {
                let lane = &mut lane_qp[usize::from(tagged.lane)];
                if tagged.first {
                    qp = qp.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    *lane = (qp >> 8) % qps;
                }
                *lane
            }
        };
        match tagged.step {
            Step::Event(e) => {
                let mut act = Actions::default();
                c.on_event(t, q, &e, &mut act);
                resends += usize::from(is_resend(&act));
                grants += usize::from(matches!(act.homa(), Some(HomaControl::Grant { .. })));
                black_box(act);
            }
            Step::Gate(pos) => {
                black_box(c.gate_message(t, q, &pos) == Gate::Send);
            }
        }
        if k % 8 == 0 && c.next_timeout().is_some_and(|at| at <= t) {
            c.on_timeout(t, &mut deferred);
            timer_actions += black_box(&deferred).len();
            resends += deferred.iter().filter(|(_, a)| is_resend(a)).count();
            deferred.clear();
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / events as f64;
    Measured {
        ns,
        timer_actions: timer_actions as f64 / events as f64,
        resends: resends as f64 / events as f64,
        grants: grants as f64 / events as f64,
    }
}

/// The fastest of `repeats` runs (its counts are the same in every run).
fn best_of(repeats: usize, mut f: impl FnMut() -> Measured) -> Measured {
    (0..repeats)
        .map(|_| f())
        .reduce(|a, b| if b.ns < a.ns { b } else { a })
        .expect("at least one run")
}

fn main() {
    let events: usize = std::env::var("SLUICE_BENCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let scr = ScrConfig {
        processors: 4,
        loop_delay: Duration::from_micros(2),
        service_time: Duration::from_nanos(200),
        ..ScrConfig::default()
    };
    println!(
        "ns per event ({events} events per run, best of 5; decoupled: 4 processors, 2 us \
         loop delay, 200 ns service time, events 100 ns apart)"
    );
    println!(
        "{:20} {:>10} {:>12} {:>8} {:>15} {:>9} {:>9} {:>9}",
        "law (stream)",
        "inline 1QP",
        "inline 16kQP",
        "16k/1",
        "decoupled 16kQP",
        "dec/inl",
        "tmr act/ev",
        "RESEND/ev"
    );
    println!(
        "(tmr act/ev, RESEND/ev: actions of the law's timers and Homa RESENDs per event, inline \
         over 16,384 QPs; receiver-driven laws run on two streams, `flowing` and `stalled`)"
    );
    // The registry's laws, and SwCC's credit law (a library law, built here).
    type Builder = Box<dyn Fn(&Mode) -> Box<dyn Controller>>;
    let mut laws: Vec<(&str, Builder)> = LAWS
        .iter()
        .map(|l| {
            let b: Builder = Box::new(|m| build(l.name, &[], m).expect("defaults build"));
            (l.name, b)
        })
        .collect();
    laws.push((
        "swcc_credit",
        Box::new(|m| match m {
            Mode::Inline => Box::new(Inline::new(swcc_credit::SwccCredit::new(65_536))),
            Mode::Decoupled(c) => {
                Box::new(Decoupled::new(swcc_credit::SwccCredit::new(65_536), *c))
            }
        }),
    ));
    let only: Option<Vec<String>> = std::env::var("SLUICE_BENCH_LAWS")
        .ok()
        .map(|s| s.split(',').map(|n| n.trim().to_string()).collect());
    let profile_qps: Option<u32> = std::env::var("SLUICE_BENCH_QPS")
        .ok()
        .and_then(|s| s.parse().ok());
    let only_stream = match std::env::var("SLUICE_BENCH_STREAM").ok().as_deref() {
        None => None,
        Some("flowing") => Some(Shape::Flowing),
        Some("stalled") => Some(Shape::Stalled),
        Some(other) => {
            eprintln!("SLUICE_BENCH_STREAM: `{other}` is neither `flowing` nor `stalled`");
            std::process::exit(2);
        }
    };
    for (name, make) in &laws {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let probe = make(&Mode::Inline);
        let interest = probe.interest();
        // Receiver-driven and gating laws see messages: they get both streams; the others
        // only look at packets, where the two streams differ only in which QP gets a step.
        let shapes: &[Shape] = if interest.gates()
            || interest.contains(EventKind::Header)
            || interest.contains(EventKind::Homa)
        {
            &[Shape::Flowing, Shape::Stalled]
        } else {
            &[Shape::Stalled]
        };
        for &shape in shapes {
            if only_stream.is_some_and(|only| only != shape) {
                continue;
            }
            let label = match (shapes.len(), shape) {
                (1, _) => name.to_string(),
                (_, Shape::Flowing) => format!("{name} flowing"),
                (_, Shape::Stalled) => format!("{name} stalled"),
            };
            let steps = |qps: u32| stream(probe.as_ref(), 4096, shape, LANES.min(qps));
            let (steps_1, steps_16k) = (steps(1), steps(16_384));
            if steps_1.is_empty() {
                println!("{name:20} asks for no per-packet event: costs nothing per packet");
                break;
            }
            let inline = |qps| {
                let steps = if qps == 1 { &steps_1 } else { &steps_16k };
                best_of(5, || {
                    let mut c = make(&Mode::Inline);
                    run(c.as_mut(), steps, qps, events, shape)
                })
            };
            if let Some(qps) = profile_qps {
                let mut c = make(&Mode::Inline);
                let m = run(c.as_mut(), &steps(qps), qps, events, shape);
                println!(
                    "{label:20} inline over {qps} QPs, one run: {:.1} ns per event, {:.3} \
                     timer actions, {:.3} RESENDs and {:.3} GRANTs per event",
                    m.ns, m.timer_actions, m.resends, m.grants
                );
                continue;
            }
            let one = inline(1);
            let many = inline(16_384);
            let dec = best_of(5, || {
                let mut c = make(&Mode::Decoupled(scr));
                run(c.as_mut(), &steps_16k, 16_384, events, shape)
            });
            println!(
                "{:20} {:>10.1} {:>12.1} {:>8.2} {:>15.1} {:>9.2} {:>9.3} {:>9.3}",
                label,
                one.ns,
                many.ns,
                many.ns / one.ns,
                dec.ns,
                dec.ns / many.ns,
                many.timer_actions,
                many.resends
            );
        }
    }
}
