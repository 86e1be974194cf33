//! Checks every law must pass: bounds under random event sequences, and recovery to line
//! rate on a path with no congestion signal. Each law's test file calls these with its own
//! bounds and warm-up.

#![allow(dead_code, unreachable_pub)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use proptest::prelude::*;
use sluice_core::Instant;
use sluice_core::control::{Actions, Event, Gate, IntHop, IntPath, Law, NakKind};
use sluice_wire::Psn;

/// What a law may set.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub min_rate_bps: u64,
    pub max_rate_bps: u64,
    pub min_window: u64,
    pub max_window: u64,
}

/// The knobs as the engine would hold them after applying a law's actions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Knobs {
    pub rate_bps: Option<u64>,
    pub window: Option<u64>,
    pub timer: Option<Instant>,
}

impl Knobs {
    /// Applies `act` decided at `now`, checking it against `bounds`.
    pub fn apply(&mut self, now: Instant, act: &Actions, bounds: &Bounds) -> Result<(), String> {
        if let Some(rate) = act.rate() {
            if let Some(r) = rate {
                if r < bounds.min_rate_bps || r > bounds.max_rate_bps {
                    return Err(format!("rate {r} outside {bounds:?}"));
                }
            }
            self.rate_bps = rate;
        }
        if let Some(window) = act.window() {
            if let Some(w) = window {
                if w < bounds.min_window || w > bounds.max_window {
                    return Err(format!("window {w} outside {bounds:?}"));
                }
            }
            self.window = window;
        }
        if let Some(timer) = act.timer() {
            if let Some(at) = timer {
                if at < now {
                    return Err(format!("timer armed in the past: {at:?} < {now:?}"));
                }
            }
            self.timer = timer;
        }
        Ok(())
    }
}

/// Any event a law could see, with the nanoseconds since the previous one.
pub fn arb_event() -> impl Strategy<Value = (u64, Event)> {
    let psn = any::<u32>().prop_map(Psn::new);
    let hop = (any::<u32>(), any::<u32>(), any::<u32>(), 0u16..=8000).prop_map(
        |(qlen_bytes, tx_bytes, ts_ns, rate_100mbps)| IntHop {
            qlen_bytes,
            tx_bytes,
            ts_ns,
            rate_100mbps,
        },
    );
    let event = prop_oneof![
        (psn.clone(), 0u32..=4096, any::<bool>()).prop_map(|(psn, bytes, retransmission)| {
            Event::Tx {
                psn,
                bytes,
                retransmission,
            }
        }),
        (psn.clone(), 0u32..=4096, any::<bool>()).prop_map(|(psn, bytes, ce)| Event::Rx {
            psn,
            bytes,
            ce
        }),
        (
            psn.clone(),
            0u32..=1024,
            prop::option::of(0u64..=100_000_000)
        )
            .prop_map(|(confirmed, packets, rtt)| Event::Ack {
                confirmed,
                packets,
                rtt: rtt.map(Duration::from_nanos),
            }),
        (
            psn.clone(),
            prop_oneof![
                Just(NakKind::Sequence),
                Just(NakKind::ReceiverNotReady),
                Just(NakKind::Fatal)
            ]
        )
            .prop_map(|(psn, kind)| Event::Nak { psn, kind }),
        Just(Event::Cnp),
        Just(Event::Timeout),
        (psn, prop::collection::vec(hop, 0..=5)).prop_map(|(confirmed, hops)| {
            let mut path = IntPath::default();
            for h in hops {
                path.push(h);
            }
            Event::Telemetry { confirmed, path }
        }),
        (0u64..=1 << 40).prop_map(|bytes| Event::Credit { bytes }),
        any::<u64>().prop_map(Event::Hint),
    ];
    (0u64..=200_000, event)
}

/// Runs `events` through `law` on one context (after a Start), firing its timer in time
/// order between them and asking its gate before every TX event; checks every action
/// against `bounds`.
pub fn run_random<L: Law>(
    law: &mut L,
    mtu: u32,
    line_rate_bps: u64,
    events: &[(u64, Event)],
    bounds: &Bounds,
) -> Result<(), String> {
    let mut ctx = L::Context::default();
    let mut knobs = Knobs::default();
    let mut now = Instant::from_nanos(1_000_000);
    let deliver = |law: &mut L, ctx: &mut L::Context, now, e: &Event, knobs: &mut Knobs| {
        if !law.interest().contains(e.kind()) {
            return Ok(());
        }
        let mut act = Actions::default();
        law.on_event(now, ctx, e, &mut act);
        knobs.apply(now, &act, bounds)
    };
    deliver(
        law,
        &mut ctx,
        now,
        &Event::Start { mtu, line_rate_bps },
        &mut knobs,
    )?;
    for (gap, e) in events {
        let next = now + Duration::from_nanos(*gap);
        while let Some(at) = knobs.timer.filter(|&at| at <= next) {
            knobs.timer = None;
            now = at;
            deliver(law, &mut ctx, now, &Event::Timer, &mut knobs)?;
        }
        now = next;
        if let Event::Tx { bytes, .. } = e {
            if law.interest().gates() {
                let _ = law.gate(now, &mut ctx, *bytes);
            }
        }
        deliver(law, &mut ctx, now, e, &mut knobs)?;
    }
    Ok(())
}

/// Every `(name, value)` of `invalid` is refused as an invalid value, and `unknown` as an
/// unknown name.
pub fn assert_refused<P: sluice_control::Params>(
    p: &mut P,
    invalid: &[(&str, &str)],
    unknown: &str,
) {
    use sluice_control::ParamError;
    for &(name, value) in invalid {
        let before = format!("{p:?}");
        assert!(
            matches!(p.set(name, value), Err(ParamError::Invalid { .. })),
            "{name}={value} not refused as invalid"
        );
        assert_eq!(
            format!("{p:?}"),
            before,
            "{name}={value} changed the parameters"
        );
    }
    assert!(
        matches!(p.set(unknown, "1"), Err(ParamError::Unknown { .. })),
        "{unknown} not refused as unknown"
    );
}

/// Bytes on the link for a WRITE MIDDLE packet of `payload` bytes (BTH, payload, ICRC),
/// as the engine's pacer counts them.
pub fn wire_bytes(payload: u32) -> u64 {
    sluice_wire::roce_link_len(false, 12 + payload as usize + 4) as u64
}

/// The benign flow's pending happenings, in time order (ties in insertion order), with at
/// most one pending send attempt.
#[derive(Debug, Default)]
struct Agenda {
    heap: BinaryHeap<Reverse<(u64, u64, Happening)>>,
    seq: u64,
    send_pending: bool,
}

impl Agenda {
    fn push(&mut self, at: u64, h: Happening) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, h)));
    }

    fn send_at(&mut self, at: u64) {
        if !self.send_pending {
            self.send_pending = true;
            self.push(at, Happening::Send);
        }
    }

    fn pop(&mut self) -> Option<(u64, Happening)> {
        self.heap.pop().map(|Reverse((at, _, h))| (at, h))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Happening {
    /// Time for the sender to try sending.
    Send,
    /// A data packet of this PSN reaches the receiver.
    Arrive(u32),
    /// Its acknowledgement reaches the sender (PSN, when it was sent).
    Ack(u32, u64),
    /// A grant of this many bytes reaches the sender.
    Grant(u64),
    SenderTimer,
    ReceiverTimer,
}

/// What a flow achieved on a congestion-free path.
#[derive(Debug, Clone, Copy)]
pub struct FlowResult {
    /// Wire bits per second over the last quarter of the run.
    pub tail_rate_bps: f64,
    pub knobs: Knobs,
}

/// One flow of MTU packets over an uncongested path with round-trip time `rtt` and a
/// bottleneck at `line_rate_bps` (INT shows an empty queue), after `warmup` (congestion
/// signals that push the law down) has been delivered to the sender. The sender respects
/// the law's rate, window and gate; the receiver runs the same law on its own context
/// (notifications, grants). Runs `duration` of simulated time.
pub fn benign_flow<L: Law>(
    law: &mut L,
    mtu: u32,
    line_rate_bps: u64,
    rtt: Duration,
    warmup: &[Event],
    duration: Duration,
    bounds: &Bounds,
) -> Result<FlowResult, String> {
    let interest = law.interest();
    let mut tx_ctx = L::Context::default();
    let mut rx_ctx = L::Context::default();
    let mut tx = Knobs::default();
    let mut rx = Knobs::default();
    let mut queue = Agenda::default();
    let start = 1_000_000u64;
    let end = start + duration.as_nanos() as u64;
    let tail_from = end - duration.as_nanos() as u64 / 4;
    let half = rtt.as_nanos() as u64 / 2;
    let line = line_rate_bps as f64;

    let run = |law: &mut L, ctx: &mut L::Context, k: &mut Knobs, now: u64, e: &Event| {
        let mut act = Actions::default();
        if interest.contains(e.kind()) {
            law.on_event(Instant::from_nanos(now), ctx, e, &mut act);
            k.apply(Instant::from_nanos(now), &act, bounds)?;
        }
        Ok::<Actions, String>(act)
    };
    run(
        law,
        &mut tx_ctx,
        &mut tx,
        start,
        &Event::Start { mtu, line_rate_bps },
    )?;
    for e in warmup {
        run(law, &mut tx_ctx, &mut tx, start, e)?;
    }
    let (mut next_psn, mut acked) = (0u32, 0u32);
    // Pacing as the engine does it: the next packet may go one packet time after the last
    // one's slot, at the rate in force now.
    let mut last_slot = start;
    let mut last_bits = 0u64;
    let mut tail_bytes = 0u64;
    let mut sent_bytes = 0u64; // cumulative, for INT
    let mut armed = (None::<Instant>, None::<Instant>);
    queue.send_at(start);
    while let Some((now, h)) = queue.pop() {
        if now > end {
            break;
        }
        match h {
            Happening::Send => {
                queue.send_pending = false;
                // Pacing at the law's rate, capped by the line; the window in bytes.
                let rate = tx.rate_bps.map_or(line, |r| (r as f64).min(line));
                let in_flight = u64::from(next_psn - acked) * u64::from(mtu);
                let window_ok = tx.window.is_none_or(|w| in_flight < w.max(1));
                // A packet of `bits` holds the line for this long at the paced rate.
                let slot_ns = |bits: u64| (bits as f64 * 1e9 / rate).ceil() as u64;
                let next_send_at = last_slot + slot_ns(last_bits);
                if now >= next_send_at && window_ok {
                    if interest.gates()
                        && law.gate(Instant::from_nanos(now), &mut tx_ctx, mtu) == Gate::Hold
                    {
                        // Wait for a grant (it schedules a send).
                    } else {
                        let psn = next_psn;
                        next_psn += 1;
                        let bits = wire_bytes(mtu) * 8;
                        (last_slot, last_bits) = (now, bits);
                        let next_send_at = now + slot_ns(bits);
                        sent_bytes += wire_bytes(mtu);
                        if now >= tail_from {
                            tail_bytes += wire_bytes(mtu);
                        }
                        run(
                            law,
                            &mut tx_ctx,
                            &mut tx,
                            now,
                            &Event::Tx {
                                psn: Psn::new(psn),
                                bytes: mtu,
                                retransmission: false,
                            },
                        )?;
                        queue.push(now + half, Happening::Arrive(psn));
                        queue.push(now + 2 * half, Happening::Ack(psn, sent_bytes));
                        queue.send_at(next_send_at);
                    }
                } else if now < next_send_at {
                    queue.send_at(next_send_at);
                }
                // Window-limited: the next ACK schedules a send.
            }
            Happening::Arrive(psn) => {
                let act = run(
                    law,
                    &mut rx_ctx,
                    &mut rx,
                    now,
                    &Event::Rx {
                        psn: Psn::new(psn),
                        bytes: mtu,
                        ce: false,
                    },
                )?;
                if act.granted() > 0 {
                    queue.push(now + half, Happening::Grant(act.granted()));
                }
            }
            Happening::Ack(psn, sent) => {
                acked = acked.max(psn + 1);
                run(
                    law,
                    &mut tx_ctx,
                    &mut tx,
                    now,
                    &Event::Ack {
                        confirmed: Psn::new(psn + 1),
                        packets: 1,
                        rtt: Some(rtt),
                    },
                )?;
                let mut path = IntPath::default();
                path.push(IntHop {
                    qlen_bytes: 0,
                    tx_bytes: sent as u32,
                    ts_ns: (now - half) as u32,
                    rate_100mbps: (line_rate_bps / 100_000_000) as u16,
                });
                run(
                    law,
                    &mut tx_ctx,
                    &mut tx,
                    now,
                    &Event::Telemetry {
                        confirmed: Psn::new(psn + 1),
                        path,
                    },
                )?;
                queue.send_at(now);
            }
            Happening::Grant(bytes) => {
                run(law, &mut tx_ctx, &mut tx, now, &Event::Credit { bytes })?;
                queue.send_at(now);
            }
            Happening::SenderTimer => {
                if tx.timer == Some(Instant::from_nanos(now)) {
                    tx.timer = None;
                    run(law, &mut tx_ctx, &mut tx, now, &Event::Timer)?;
                    queue.send_at(now);
                }
            }
            Happening::ReceiverTimer => {
                if rx.timer == Some(Instant::from_nanos(now)) {
                    rx.timer = None;
                    let act = run(law, &mut rx_ctx, &mut rx, now, &Event::Timer)?;
                    if act.granted() > 0 {
                        queue.push(now + half, Happening::Grant(act.granted()));
                    }
                }
            }
        }
        // Timers the law (re)armed.
        if tx.timer != armed.0 {
            armed.0 = tx.timer;
            if let Some(at) = tx.timer {
                queue.push(at.as_nanos(), Happening::SenderTimer);
            }
        }
        if rx.timer != armed.1 {
            armed.1 = rx.timer;
            if let Some(at) = rx.timer {
                queue.push(at.as_nanos(), Happening::ReceiverTimer);
            }
        }
    }
    let tail_s = (end - tail_from) as f64 / 1e9;
    Ok(FlowResult {
        tail_rate_bps: tail_bytes as f64 * 8.0 / tail_s,
        knobs: tx,
    })
}
