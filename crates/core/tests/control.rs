//! The control-plane hooks: the events a control law sees, and the rate and window it sets.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use sluice_core::control::{
    Actions, Decoupled, Event, EventKind, EventMask, Gate, Inline, Law, ScrConfig,
};
use sluice_core::*;
use sluice_testkit::*;
use sluice_wire::{Bth, ExtHeaders, Opcode, Psn, RoceHeaders};

fn world_with(controllers: [Recorder; 2], link: Impairments) -> World {
    let mut world = World::new(2, 1, link);
    for (h, c) in controllers.into_iter().enumerate() {
        world.set_controller(h, Box::new(Inline::new(c)));
    }
    world
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
    p.write_and_wait(&mut world, 10 * 1024);
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
    let (_, rtts) = rtt_samples(&a_events);
    assert_eq!(rtts.len(), 1, "{a_events:?}");
    assert!(
        rtts[0] > Duration::from_micros(10) && rtts[0] < Duration::from_micros(20),
        "{rtts:?}"
    );
    assert!(!a_events.iter().any(|e| matches!(e, Event::Timeout)));

    // A CNP for the queue pair reaches its control law.
    let cnp = p.cnp();
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
    p.post_write(&mut world, 1, 0, 8);
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
    let line_rate = p.write_and_wait(&mut world, len);

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
    let paced = p.write_and_wait(&mut world, len);
    // 256 packets at 1 Gbit/s, each counted as a link counts it (the FIRST with its RETH,
    // then 255 MIDDLE and LAST): 8.6 ms, against about 0.35 ms at the link's 25 Gbit/s.
    let first = sluice_wire::roce_link_len(false, 12 + 16 + 4096 + 4) as u64;
    let rest = sluice_wire::roce_link_len(false, 12 + 4096 + 4) as u64;
    let expected = Duration::from_nanos((first + 255 * rest) * 8);
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
    let elapsed = p.write_and_wait(&mut world, 20 * 1024);
    // Each packet asks for an ACK (it fills the window) and the next waits for it: 20 round
    // trips of two 5 us hops each, and no timeout.
    assert!(
        elapsed >= Duration::from_micros(200) && elapsed < Duration::from_micros(300),
        "{elapsed:?}"
    );
    assert!(!events.borrow().iter().any(|e| matches!(e, Event::Timeout)));
}

/// A law that records only the kinds it asks for.
#[derive(Debug, Clone)]
struct Picky {
    mask: EventMask,
    seen: Rc<RefCell<Vec<EventKind>>>,
}

impl Law for Picky {
    type Context = ();

    fn name(&self) -> &'static str {
        "picky"
    }

    fn interest(&self) -> EventMask {
        self.mask
    }

    fn on_event(&mut self, _: Instant, _: &mut (), event: &Event, _: &mut Actions) {
        self.seen.borrow_mut().push(event.kind());
    }
}

#[test]
fn a_law_hears_only_the_kinds_it_asked_for() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let law = Picky {
        mask: EventMask::of(&[EventKind::Ack]),
        seen: seen.clone(),
    };
    let mut world = World::new(2, 1, Impairments::CLEAN);
    world.set_controller(0, Box::new(Inline::new(law)));
    let p = Pair::connect(&mut world, &PairOptions::default());
    p.write_and_wait(&mut world, 8 * 1024);
    let seen = seen.borrow();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|k| *k == EventKind::Ack), "{seen:?}");
}

#[test]
fn an_application_hint_reaches_the_law() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let law = Picky {
        mask: EventMask::of(&[EventKind::Hint]),
        seen: seen.clone(),
    };
    let mut world = World::new(2, 1, Impairments::CLEAN);
    world.set_controller(0, Box::new(Inline::new(law)));
    let p = Pair::connect(&mut world, &PairOptions::default());
    world.engines[0].post_hint(world.now, p.qp[0], 7).unwrap();
    assert!(
        world.engines[0]
            .post_hint(world.now, QpNum(9999), 7)
            .is_err()
    );
    p.write_and_wait(&mut world, 1024);
    assert_eq!(*seen.borrow(), vec![EventKind::Hint]);
}

/// DCQCN's notification point in miniature: a CNP for every marked packet, and a sender
/// that counts the CNPs it gets and arms a timer on the first.
#[derive(Debug, Clone, Default)]
struct Notifier {
    cnps: Rc<RefCell<u32>>,
    timers: Rc<RefCell<Vec<Instant>>>,
}

impl Law for Notifier {
    type Context = bool;

    fn name(&self) -> &'static str {
        "notifier"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[EventKind::Rx, EventKind::Cnp, EventKind::Timer])
    }

    fn on_event(&mut self, now: Instant, armed: &mut bool, event: &Event, act: &mut Actions) {
        match event {
            Event::Rx { ce: true, .. } => act.send_cnp(),
            Event::Cnp => {
                *self.cnps.borrow_mut() += 1;
                if !*armed {
                    *armed = true;
                    act.arm_timer(now + Duration::from_micros(55));
                    act.set_path(0xC0DE);
                }
            }
            Event::Timer => self.timers.borrow_mut().push(now),
            _ => {}
        }
    }
}

#[test]
fn marked_packets_bring_cnps_back_and_law_timers_fire_on_time() {
    let law = Notifier::default();
    let (cnps, timers) = (law.cnps.clone(), law.timers.clone());
    let mut world = World::new(
        2,
        1,
        Impairments {
            ce_mark: 1.0,
            ..Impairments::CLEAN
        },
    );
    for h in 0..2 {
        world.set_controller(h, Box::new(Inline::new(law.clone())));
    }
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M1024,
            ..PairOptions::default()
        },
    );
    p.write_and_wait(&mut world, 10 * 1024);
    world.run_until(Duration::from_micros(200), |_| false);
    // Every one of the 10 data packets was marked and answered with a CNP (the CNPs and
    // ACKs were marked too, but only requests count at a notification point).
    assert_eq!(world.engines[1].counters().cnps_sent, 10);
    assert_eq!(world.engines[0].counters().cnps_received, 10);
    assert_eq!(*cnps.borrow(), 10);
    let timers = timers.borrow();
    assert_eq!(timers.len(), 1, "{timers:?}");
}

#[test]
fn a_law_can_move_a_queue_pair_to_another_path() {
    let law = Notifier::default();
    let mut world = World::new(2, 1, Impairments::CLEAN);
    world.set_controller(0, Box::new(Inline::new(law)));
    let p = Pair::connect(&mut world, &PairOptions::default());
    let mut payload = [0u8; 4096];
    // Before any CNP: Soft-RoCE's port for the QPN. After one: the law's.
    p.post_write(&mut world, 1, 0, 8);
    let t = world.engines[0]
        .poll_transmit(world.now, &mut payload)
        .unwrap();
    assert!(t.src_port >= 0xC000 && t.src_port != 0xC0DE);
    let cnp = p.cnp();
    world.engines[0].handle_packet(world.now, world.addrs[1], false, &cnp, Payload::Len(0));
    p.post_write(&mut world, 2, 0, 8);
    let t = world.engines[0]
        .poll_transmit(world.now, &mut payload)
        .unwrap();
    assert_eq!(t.src_port, 0xC0DE);
}

/// A receiver-driven credit scheme in miniature: the sender may send `initial` bytes, then
/// only what the receiver grants (one grant per packet received).
#[derive(Debug, Clone, Copy)]
struct Credits {
    initial: u64,
}

impl Law for Credits {
    type Context = (bool, u64);

    fn name(&self) -> &'static str {
        "credits"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[EventKind::Start, EventKind::Rx, EventKind::Credit]).union(EventMask::GATE)
    }

    fn on_event(&mut self, _: Instant, ctx: &mut (bool, u64), event: &Event, act: &mut Actions) {
        match *event {
            Event::Start { .. } => *ctx = (true, self.initial),
            Event::Rx { bytes, .. } => act.grant(u64::from(bytes)),
            Event::Credit { bytes } => {
                ctx.1 += bytes;
                act.wake();
            }
            _ => {}
        }
    }

    fn gate(&mut self, _: Instant, ctx: &mut (bool, u64), bytes: u32) -> Gate {
        if ctx.1 >= u64::from(bytes) {
            ctx.1 -= u64::from(bytes);
            Gate::Send
        } else {
            Gate::Hold
        }
    }
}

/// How the test's two ends agreed to carry grants, if at all.
#[derive(Debug, Clone, Copy, PartialEq)]
enum GrantsBy {
    ControlPackets,
    CreditCcx,
    Nothing,
}

fn credit_world(by: GrantsBy, link: Impairments) -> (World, Pair) {
    let mut world = World::new(2, 7, link);
    for h in 0..2 {
        world.set_controller(h, Box::new(Inline::new(Credits { initial: 4096 })));
    }
    let ccx = (by == GrantsBy::CreditCcx).then_some(sluice_wire::CcxLayout::Credit);
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M1024,
            ccx: [ccx; 2],
            ..PairOptions::default()
        },
    );
    for h in 0..2 {
        world.engines[h]
            .set_cc_control(p.qp[h], by == GrantsBy::ControlPackets)
            .unwrap();
    }
    (world, p)
}

#[test]
fn grants_travel_as_control_packets_and_release_held_packets() {
    let (mut world, p) = credit_world(GrantsBy::ControlPackets, Impairments::CLEAN);
    p.write_and_wait(&mut world, 64 * 1024);
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    // 4 packets went on the initial credit; the other 60 were each released by a grant.
    assert!(b.grants_sent >= 60, "{b:?}");
    assert_eq!(a.grants_received, b.grants_sent);
    assert_eq!(a.drops_unexpected_opcode, 0);
}

#[test]
fn grants_ride_the_credit_header_of_acks_without_control_packets() {
    // Control packets are off: only the CCX can carry a grant.
    let (mut world, p) = credit_world(GrantsBy::CreditCcx, Impairments::CLEAN);
    p.write_and_wait(&mut world, 64 * 1024);
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert!(b.grants_sent >= 60, "{b:?}");
    assert_eq!(b.grants_unsent, 0);
    // Each grant was news when it arrived (totals only grow on a clean link).
    assert_eq!(a.grants_received, b.grants_sent);
    assert_eq!(a.drops_unexpected_opcode + a.drops_unnegotiated_ccx, 0);
}

#[test]
fn grants_are_totals_so_lost_ones_are_made_up() {
    let link = Impairments {
        loss: 0.05,
        ..Impairments::CLEAN
    };
    for by in [GrantsBy::ControlPackets, GrantsBy::CreditCcx] {
        let (mut world, p) = credit_world(by, link);
        p.write_and_wait(&mut world, 256 * 1024);
        // Some grants were lost on the way, and the WRITE still completed.
        let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
        assert!(a.grants_received < b.grants_sent, "{by:?}: {a:?} {b:?}");
    }
}

#[test]
fn without_agreement_no_grant_leaves_and_the_sender_holds() {
    let (mut world, p) = credit_world(GrantsBy::Nothing, Impairments::CLEAN);
    p.post_write(&mut world, 1, 0, 64 * 1024);
    let cq = p.send_cq[0];
    assert!(!world.run_until(Duration::from_millis(1), |w| w.engines[0].cq_len(cq) == 1));
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert_eq!(b.grants_sent, 0);
    assert_eq!(b.grants_unsent, 4);
    assert_eq!(a.tx_packets, 4, "only the initial credit went");
}

#[test]
fn decoupled_processing_acts_after_the_modelled_loop_delay() {
    // A law that halves the rate on a CNP; behind SCR's queues with 10 us of loop delay
    // and 2 us of service time, the cut takes effect 12 us after the CNP.
    #[derive(Debug, Clone, Default)]
    struct Halver;
    impl Law for Halver {
        type Context = ();
        fn name(&self) -> &'static str {
            "halver"
        }
        fn interest(&self) -> EventMask {
            EventMask::of(&[EventKind::Cnp])
        }
        fn on_event(&mut self, _: Instant, _: &mut (), _: &Event, act: &mut Actions) {
            act.set_rate(1_000_000_000);
        }
    }
    let config = ScrConfig {
        processors: 1,
        loop_delay: Duration::from_micros(10),
        service_time: Duration::from_micros(2),
        ..ScrConfig::default()
    };
    let mut world = World::new(2, 1, Impairments::CLEAN);
    world.set_controller(0, Box::new(Decoupled::new(Halver, config)));
    let p = Pair::connect(&mut world, &PairOptions::default());
    let cnp = p.cnp();
    let t0 = world.now;
    for _ in 0..3 {
        world.engines[0].handle_packet(t0, world.addrs[1], false, &cnp, Payload::Len(0));
    }
    assert_eq!(
        world.engines[0].next_timeout(),
        Some(t0 + Duration::from_micros(10))
    );
    world.engines[0].handle_timeout(t0 + Duration::from_micros(10));
    assert_eq!(
        world.engines[0].next_timeout(),
        Some(t0 + Duration::from_micros(12))
    );
}

/// A law that cuts the rate on every ACK, after the engine armed its pacing timer for the
/// next packet at the old rate: the packet is then due later, and must still go (this
/// stalled a real TIMELY flow once).
#[test]
fn a_rate_cut_while_a_packet_waits_for_its_slot_does_not_stall() {
    #[derive(Debug, Clone)]
    struct Cutter;
    impl Law for Cutter {
        type Context = ();
        fn name(&self) -> &'static str {
            "cutter"
        }
        fn interest(&self) -> EventMask {
            EventMask::of(&[EventKind::Start, EventKind::Ack])
        }
        fn on_event(&mut self, _: Instant, _: &mut (), e: &Event, act: &mut Actions) {
            match e {
                Event::Start { .. } => act.set_rate(500_000_000),
                _ => act.set_rate(100_000_000),
            }
        }
    }
    let mut world = World::new(2, 1, Impairments::CLEAN);
    world.set_controller(0, Box::new(Inline::new(Cutter)));
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M1024,
            ..PairOptions::default()
        },
    );
    // Three one-packet WRITEs: each asks for an ACK, which arrives (after ~10 us) while the
    // next packet waits for its 18 us slot at 500 Mbit/s.
    for i in 0..3 {
        p.post_write(&mut world, i, 0, 1024);
    }
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_millis(10), |w| w.engines[0].cq_len(cq) == 3));
}

/// Hands `packets` from host 1 to host 0's engine; returns the credit (`Event::Credit`)
/// host 0's law heard, in order.
fn credit_from(
    world: &mut World,
    packets: &[RoceHeaders],
    events: &Rc<RefCell<Vec<Event>>>,
) -> Vec<u64> {
    for packet in packets {
        world.engines[0].handle_packet(world.now, world.addrs[1], false, packet, Payload::Len(0));
    }
    events
        .borrow()
        .iter()
        .filter_map(|e| match e {
            Event::Credit { bytes } => Some(*bytes),
            _ => None,
        })
        .collect()
}

#[test]
fn a_grant_total_counts_once_whatever_the_order() {
    let a = Recorder::default();
    let events = a.events.clone();
    let mut world = world_with([a, Recorder::default()], Impairments::CLEAN);
    let p = Pair::connect(&mut world, &PairOptions::default());
    world.engines[0].set_cc_control(p.qp[0], true).unwrap();
    let grant = |total| RoceHeaders {
        bth: Bth::new(Opcode::RC_CC_CONTROL, p.qp[0].0, Psn::new(0)),
        ccx: None,
        ext: ExtHeaders {
            cc_control: Some(sluice_wire::CcControl {
                detail: 0,
                kind: sluice_wire::CcControlKind::CreditTotal,
                value: total,
            }),
            ..ExtHeaders::default()
        },
    };
    // 8 KiB, then a late 4 KiB, a duplicate 8 KiB, and 16 KiB (the 12 KiB one was lost).
    let packets = [8192, 4096, 8192, 16384].map(grant);
    assert_eq!(credit_from(&mut world, &packets, &events), vec![8192, 8192]);
    assert_eq!(
        world.engines[0].counters().grants_received,
        2,
        "only totals that were news"
    );
    // A queue pair that no longer receives takes no credit.
    world.engines[0]
        .modify_qp(p.qp[0], Transition::Error)
        .unwrap();
    assert_eq!(
        credit_from(&mut world, &[grant(32768)], &events),
        vec![8192, 8192]
    );
}

#[test]
fn a_credit_total_in_any_packet_counts_once_whatever_the_order() {
    let a = Recorder::default();
    let events = a.events.clone();
    let mut world = world_with([a, Recorder::default()], Impairments::CLEAN);
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            ccx: [Some(sluice_wire::CcxLayout::Credit); 2],
            ..PairOptions::default()
        },
    );
    // ACKs of nothing this QP sent (stale to the requester): the credit still counts.
    let ack = |total| RoceHeaders {
        bth: Bth::new(Opcode::RC_ACKNOWLEDGE, p.qp[0].0, Psn::new(0x7F_FFFF)),
        ccx: Some(sluice_wire::Ccx::Credit {
            granted_total: total,
        }),
        ext: ExtHeaders {
            aeth: Some(sluice_wire::Aeth {
                syndrome: sluice_wire::Syndrome::Ack(sluice_wire::Credits::UNLIMITED),
                msn: 0,
            }),
            ..ExtHeaders::default()
        },
    };
    let packets = [8192, 4096, 8192, 16384, 0].map(ack);
    assert_eq!(credit_from(&mut world, &packets, &events), vec![8192, 8192]);
    let c = world.engines[0].counters();
    assert_eq!(c.grants_received, 2, "only totals that were news");
    assert_eq!(c.stale_responses, 5);
}

/// A law that gives request packets priority 5 from the start and, on a CNP, sends one back
/// at priority 7 (Homa's grants and ACKs overtake data the same way).
#[derive(Debug, Clone, Default)]
struct Prioritiser;

impl Law for Prioritiser {
    type Context = ();

    fn name(&self) -> &'static str {
        "prioritiser"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[EventKind::Start, EventKind::Cnp])
    }

    fn on_event(&mut self, _: Instant, _: &mut (), event: &Event, act: &mut Actions) {
        match event {
            Event::Start { .. } => act.set_priority(5),
            Event::Cnp => {
                act.set_response_priority(9); // clamped to 7
                act.send_cnp();
            }
            _ => {}
        }
    }
}

#[test]
fn a_law_sets_the_priority_of_requests_and_of_responses_apart() {
    let mut world = World::new(2, 1, Impairments::CLEAN);
    world.set_controller(0, Box::new(Inline::new(Prioritiser)));
    let p = Pair::connect(&mut world, &PairOptions::default());
    let mut payload = [0u8; 4096];
    // The peer's engine has no law: its packets carry no priority.
    p.post_write(&mut world, 1, 0, 8);
    let t = world.engines[0]
        .poll_transmit(world.now, &mut payload)
        .unwrap();
    assert_eq!(t.priority.get(), Some(5));
    assert!(
        world.engines[1]
            .poll_transmit(world.now, &mut payload)
            .is_none()
    );
    let cnp = p.cnp();
    world.engines[0].handle_packet(world.now, world.addrs[1], false, &cnp, Payload::Len(0));
    let t = world.engines[0]
        .poll_transmit(world.now, &mut payload)
        .unwrap();
    assert_eq!(t.headers.bth.opcode, Opcode::CNP);
    assert_eq!(t.priority.get(), Some(7));
    // The TOS a driver writes: DSCP = base + priority, the ECN bits kept.
    let tos = sluice_wire::priority_tos(0x02, sluice_wire::DEFAULT_DSCP_BASE, 7);
    assert_eq!((tos >> 2, tos & 3), (15, 0x02));
    assert_eq!(sluice_wire::tos_priority(tos, 8), Some(7));
}

/// A gating law that records where each packet it is asked about lies in its message.
#[derive(Debug, Clone, Default)]
struct Positions(Rc<RefCell<Vec<sluice_core::control::MessagePos>>>);

impl Law for Positions {
    type Context = ();

    fn name(&self) -> &'static str {
        "positions"
    }

    fn interest(&self) -> EventMask {
        EventMask::GATE
    }

    fn on_event(&mut self, _: Instant, _: &mut (), _: &Event, _: &mut Actions) {}

    fn gate_message(
        &mut self,
        _: Instant,
        _: &mut (),
        pos: &sluice_core::control::MessagePos,
    ) -> Gate {
        self.0.borrow_mut().push(*pos);
        Gate::Send
    }
}

#[test]
fn the_gate_hears_each_packets_place_in_its_message() {
    let law = Positions::default();
    let seen = law.0.clone();
    let mut world = World::new(2, 1, Impairments::CLEAN);
    world.set_controller(0, Box::new(Inline::new(law)));
    let p = Pair::connect(&mut world, &PairOptions::default());
    let mtu = PairOptions::default().mtu.bytes();
    let len = 2 * mtu + 100;
    p.post_write(&mut world, 1, 0, len);
    p.post_write(&mut world, 2, 0, 10);
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_millis(10), |w| w.engines[0].cq_len(cq) == 2));
    let seen = seen.borrow();
    let first = seen[0].id;
    let want: Vec<(u32, u32, u32, u32)> = vec![
        (first, len, 0, mtu),
        (first, len, mtu, mtu),
        (first, len, 2 * mtu, 100),
        ((first + 3) & 0xFF_FFFF, 10, 0, 10),
    ];
    let got: Vec<_> = seen
        .iter()
        .map(|p| (p.id, p.len, p.offset, p.bytes))
        .collect();
    assert_eq!(got, want);
}

/// Homa's control messages in miniature: the receiver grants on every arrival, the sender
/// answers every GRANT with a BUSY; each end records what it heard.
#[derive(Debug, Clone, Default)]
struct HomaTalk(Rc<RefCell<Vec<sluice_wire::HomaControl>>>);

impl Law for HomaTalk {
    type Context = u32;

    fn name(&self) -> &'static str {
        "homa-talk"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[EventKind::Rx, EventKind::Homa])
    }

    fn on_event(&mut self, _: Instant, got: &mut u32, event: &Event, act: &mut Actions) {
        use sluice_wire::HomaControl;
        match *event {
            Event::Rx { bytes, .. } => {
                *got += bytes;
                act.send_homa(HomaControl::Grant {
                    message: 1,
                    offset: *got,
                    priority: 3,
                });
            }
            Event::Homa(m) => {
                self.0.borrow_mut().push(m);
                if let HomaControl::Grant { message, .. } = m {
                    act.send_homa(HomaControl::Busy { message });
                }
            }
            _ => {}
        }
    }
}

fn homa_talk(agreed: [bool; 2]) -> (World, [HomaTalk; 2]) {
    let laws = [HomaTalk::default(), HomaTalk::default()];
    let mut world = World::new(2, 3, Impairments::CLEAN);
    for (h, law) in laws.iter().enumerate() {
        world.set_controller(h, Box::new(Inline::new(law.clone())));
    }
    let p = Pair::connect(&mut world, &PairOptions::default());
    for (h, &on) in agreed.iter().enumerate() {
        world.engines[h].set_cc_control(p.qp[h], on).unwrap();
    }
    p.write_and_wait(&mut world, 3 * PairOptions::default().mtu.bytes());
    world.run_until(Duration::from_millis(1), |_| false);
    (world, laws)
}

#[test]
fn homa_messages_flow_only_between_ends_that_agreed() {
    use sluice_wire::HomaControl;
    let (world, laws) = homa_talk([true, true]);
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert_eq!((b.homa_sent, a.homa_received), (3, 3), "{a:?} {b:?}");
    assert_eq!((a.homa_sent, b.homa_received), (3, 3));
    let grants = laws[0].0.borrow().clone();
    let offsets: Vec<u32> = grants
        .iter()
        .map(|g| match *g {
            HomaControl::Grant {
                offset, priority, ..
            } => {
                assert_eq!(priority, 3);
                offset
            }
            other => panic!("{other:?}"),
        })
        .collect();
    let mtu = PairOptions::default().mtu.bytes();
    assert_eq!(offsets, [mtu, 2 * mtu, 3 * mtu]);
    assert_eq!(*laws[1].0.borrow(), [HomaControl::Busy { message: 1 }; 3]);
    // The receiver agreed, the sender did not: the grants leave and are dropped on
    // arrival, counted; the sender's law hears nothing and so sends no BUSY.
    let (world, laws) = homa_talk([false, true]);
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert_eq!(
        (b.homa_sent, a.drops_homa_unagreed, a.homa_received),
        (3, 3, 0)
    );
    assert!(laws[0].0.borrow().is_empty() && laws[1].0.borrow().is_empty());
    // The other way round: the receiver's grants are never sent.
    let (world, _) = homa_talk([true, false]);
    let b = world.engines[1].counters();
    assert_eq!((b.homa_sent, b.homa_unsent), (0, 3));
}
