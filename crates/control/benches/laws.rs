//! Nanoseconds per event for every law, run inline with its context in cache (1 QP) and
//! spread over 16,384 QPs (contexts out of L1/L2), and behind SCR's decoupled queues
//! (coalescing, 4 processors). Prints one table; every ratio is against a figure measured
//! in the same run. Beside the registry's laws, `swcc_credit` (a library law on its declared
//! header). Laws that read a declared header get one per packet (Homa's message, length and
//! end; SwCC's returned credit), Homa a GRANT per packet too, and a gating law is asked with
//! each packet's place in a 64 KiB message.
//!
//! `cargo bench -p sluice-control --bench laws` (`SLUICE_BENCH_EVENTS` events per run;
//! `SLUICE_BENCH_LAWS=homa,rate-credit` runs only the laws named; `SLUICE_BENCH_QPS=16384`
//! only one inline run over that many queue pairs: for a profiler or callgrind).

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

fn stream(c: &dyn Controller, len: usize) -> Vec<Step> {
    let interest = c.interest();
    let layout = c.ccx();
    let mut out = Vec::with_capacity(len);
    let mut i = 0u32;
    let mut tx_bytes = 0u32;
    while out.len() < len {
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
        // Packet i is packet i mod 16 of a 64 KiB message.
        let pos = MessagePos {
            id: (i / 16 * 16) & 0xFF_FFFF,
            len: 65_536,
            offset: i % 16 * 4096,
            bytes: 4096,
        };
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
    }
    out
}

/// Runs `events` steps over `qps` queue pairs (QP of step k: a fixed pseudo-random
/// sequence), time moving 100 ns per step (10 M events/s); returns ns per step and the
/// actions the law's timers produced per step (Homa's RESENDs, a credit law's grants: work
/// the law's timers do between a queue pair's events, counted in its ns per event).
fn run(c: &mut dyn Controller, steps: &[Step], qps: u32, events: usize) -> (f64, f64) {
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
    let mut timer_actions = 0usize;
    let start = Clock::now();
    let mut now = 1_000u64;
    for k in 0..events {
        now += 100;
        let t = Instant::from_nanos(now);
        qp = qp.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let q = (qp >> 8) % qps;
        match steps[k % steps.len()] {
            Step::Event(e) => {
                let mut act = Actions::default();
                c.on_event(t, q, &e, &mut act);
                black_box(act);
            }
            Step::Gate(pos) => {
                black_box(c.gate_message(t, q, &pos) == Gate::Send);
            }
        }
        if k % 8 == 0 && c.next_timeout().is_some_and(|at| at <= t) {
            c.on_timeout(t, &mut deferred);
            timer_actions += black_box(&deferred).len();
            deferred.clear();
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / events as f64;
    (ns, timer_actions as f64 / events as f64)
}

/// The fastest of `repeats` runs, and its timer actions per step (the same in every run).
fn best_of(repeats: usize, mut f: impl FnMut() -> (f64, f64)) -> (f64, f64) {
    (0..repeats)
        .map(|_| f())
        .fold((f64::INFINITY, 0.0), |a, b| if b.0 < a.0 { b } else { a })
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
        "{:11} {:>10} {:>12} {:>8} {:>15} {:>9} {:>14}",
        "law",
        "inline 1QP",
        "inline 16kQP",
        "16k/1",
        "decoupled 16kQP",
        "dec/inl",
        "16k tmr act/ev"
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
    for (name, make) in &laws {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let probe = make(&Mode::Inline);
        let steps = stream(probe.as_ref(), 4096);
        if steps.is_empty() {
            println!("{name:11} asks for no per-packet event: costs nothing per packet");
            continue;
        }
        let inline = |qps| {
            best_of(5, || {
                let mut c = make(&Mode::Inline);
                run(c.as_mut(), &steps, qps, events)
            })
        };
        if let Some(qps) = profile_qps {
            let mut c = make(&Mode::Inline);
            let (ns, timed) = run(c.as_mut(), &steps, qps, events);
            println!(
                "{name:11} inline over {qps} QPs, one run: {ns:.1} ns per event, {timed:.2} \
                 timer actions per event"
            );
            continue;
        }
        let (one, _) = inline(1);
        let (many, timed) = inline(16_384);
        let (dec, _) = best_of(5, || {
            let mut c = make(&Mode::Decoupled(scr));
            run(c.as_mut(), &steps, 16_384, events)
        });
        println!(
            "{:11} {:>10.1} {:>12.1} {:>8.2} {:>15.1} {:>9.2} {:>14.2}",
            name,
            one,
            many,
            many / one,
            dec,
            dec / many,
            timed
        );
    }
}
