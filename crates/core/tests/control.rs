//! The control-plane hooks: the events a control law sees, and the rate and window it sets.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use common::*;
use sluice_core::control::{Actions, EventMask, Inline, Law};
use sluice_core::*;
use sluice_wire::{Bth, ExtHeaders, Opcode, Psn, RoceHeaders};

/// Records every event, and sets a fixed rate and window on every queue pair.
#[derive(Debug, Clone, Default)]
struct Recorder {
    events: Rc<RefCell<Vec<Event>>>,
    rate_bps: Option<u64>,
    window_bytes: Option<u64>,
}

impl Law for Recorder {
    type Context = ();

    fn name(&self) -> &'static str {
        "recorder"
    }

    fn interest(&self) -> EventMask {
        EventMask::ALL
    }

    fn on_event(&mut self, _: Instant, _: &mut (), event: &Event, act: &mut Actions) {
        self.events.borrow_mut().push(*event);
        if let Some(r) = self.rate_bps {
            act.set_rate(r);
        }
        if let Some(w) = self.window_bytes {
            act.set_window(w);
        }
    }
}

fn world_with(controllers: [Recorder; 2], link: Impairments) -> World {
    let mut world = World::new(2, 1, link);
    for (h, c) in controllers.into_iter().enumerate() {
        world.engines[h] = Engine::with_controller(EngineConfig::default(), Box::new(Inline::new(c)));
    }
    world
}

fn write(world: &mut World, p: &Pair, len: u32) -> Duration {
    let start = world.now;
    let op = SendOp::Write {
        remote_addr: p.mr[1].addr,
        rkey: p.mr[1].rkey,
    };
    let sgl = [Sge {
        lkey: p.mr[0].lkey,
        addr: p.mr[0].addr,
        len,
    }];
    world.engines[0]
        .post_send(p.qp[0], &SendWr::new(1, op, &sgl))
        .unwrap();
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 1));
    assert_eq!(Pair::completions(world, 0, cq)[0].status, WcStatus::Success);
    world.now - start
}

#[test]
fn the_control_law_sees_tx_rx_acks_with_rtt_and_cnps() {
    let (a, b) = (Recorder::default(), Recorder::default());
    let (a_log, b_events) = (a.events.clone(), b.events.clone());
    let mut world = world_with([a, b], Impairments::CLEAN);
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M1024,
            ..PairOptions::default()
        },
    );
    write(&mut world, &p, 10 * 1024);
    let a_events = a_log.borrow().clone();
    let tx: Vec<_> = a_events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Tx {
                    retransmission: false,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(tx.len(), 10);
    let rx = b_events
        .borrow()
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Rx {
                    ce: false,
                    bytes: 1024,
                    ..
                }
            )
        })
        .count();
    assert_eq!(rx, 10);
    // One RTT sample: the first packet is timed; its ACK comes back after two 5 us hops
    // plus serialisation at 25 Gbit/s (the ACK is sent when the last packet of the message
    // arrives, so the sample covers the whole message).
    let rtts: Vec<Duration> = a_events
        .iter()
        .filter_map(|e| match e {
            Event::Ack { rtt, .. } => *rtt,
            _ => None,
        })
        .collect();
    assert_eq!(rtts.len(), 1, "{a_events:?}");
    assert!(
        rtts[0] > Duration::from_micros(10) && rtts[0] < Duration::from_micros(20),
        "{rtts:?}"
    );
    assert!(!a_events.iter().any(|e| matches!(e, Event::Timeout)));

    // A CNP for the queue pair reaches its control law.
    let cnp = RoceHeaders {
        bth: Bth::new(Opcode::CNP, p.qp[0].0, Psn::new(0)),
        ext: ExtHeaders::default(),
    };
    world.engines[0].handle_packet(world.now, world.addrs[1], false, &cnp, Payload::Len(0));
    assert_eq!(world.engines[0].counters().cnps_received, 1);
    assert_eq!(a_log.borrow().last(), Some(&Event::Cnp));
}

#[test]
fn a_dead_link_shows_timeouts() {
    let a = Recorder::default();
    let events = a.events.clone();
    let mut world = world_with(
        [a, Recorder::default()],
        Impairments {
            loss: 1.0,
            ..Impairments::CLEAN
        },
    );
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            retry_cnt: 2,
            ..PairOptions::default()
        },
    );
    let op = SendOp::Write {
        remote_addr: p.mr[1].addr,
        rkey: p.mr[1].rkey,
    };
    world.engines[0]
        .post_send(
            p.qp[0],
            &SendWr::new(
                1,
                op,
                &[Sge {
                    lkey: p.mr[0].lkey,
                    addr: p.mr[0].addr,
                    len: 8,
                }],
            ),
        )
        .unwrap();
    world.run_until(Duration::from_millis(50), |_| false);
    let timeouts = events
        .borrow()
        .iter()
        .filter(|e| matches!(e, Event::Timeout))
        .count();
    assert_eq!(timeouts, 3);
    let retransmissions = events
        .borrow()
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Tx {
                    retransmission: true,
                    ..
                }
            )
        })
        .count();
    assert_eq!(retransmissions, 2);
}

#[test]
fn a_rate_limit_paces_the_queue_pair() {
    let len = 1 << 20;
    let mut world = world_with(
        [Recorder::default(), Recorder::default()],
        Impairments::CLEAN,
    );
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M4096,
            ..PairOptions::default()
        },
    );
    let line_rate = write(&mut world, &p, len);

    let limited = Recorder {
        rate_bps: Some(1_000_000_000),
        ..Recorder::default()
    };
    let mut world = world_with([limited, Recorder::default()], Impairments::CLEAN);
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M4096,
            ..PairOptions::default()
        },
    );
    let paced = write(&mut world, &p, len);
    // 256 packets of 4096 + 105 bytes of headers at 1 Gbit/s: 8.6 ms, against about
    // 0.35 ms at the link's 25 Gbit/s.
    let expected = Duration::from_nanos(256 * (4096 + 105) * 8);
    assert!(line_rate < Duration::from_millis(1), "{line_rate:?}");
    assert!(
        paced > expected - Duration::from_micros(100)
            && paced < expected + Duration::from_micros(200),
        "{paced:?} vs {expected:?}"
    );
}

#[test]
fn a_window_of_one_waits_an_rtt_per_packet() {
    let one = Recorder {
        window_bytes: Some(1024),
        ..Recorder::default()
    };
    let events = one.events.clone();
    let mut world = world_with([one, Recorder::default()], Impairments::CLEAN);
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M1024,
            ..PairOptions::default()
        },
    );
    let elapsed = write(&mut world, &p, 20 * 1024);
    // Each packet asks for an ACK (it fills the window) and the next waits for it: 20 round
    // trips of two 5 us hops each, and no timeout.
    assert!(
        elapsed >= Duration::from_micros(200) && elapsed < Duration::from_micros(300),
        "{elapsed:?}"
    );
    assert!(!events.borrow().iter().any(|e| matches!(e, Event::Timeout)));
}
