//! Property tests of the path selectors, driven directly (no engine):
//!
//! - Every multipath selector keeps each queue pair's ports among its `paths` ports (those
//!   round-robin spraying cycles through), in the dynamic range.
//! - Random spraying is a function of its seed: the same seed and packets, the same ports.
//! - Flowlets: a queue pair's port changes exactly when the time since its previous packet
//!   is above the gap (with more than one path), and never otherwise.
//! - PLB: a queue pair's port changes exactly on its `rounds`th congested round in a row
//!   (ECN, or an RTT above the threshold; a round without either an ECN mark or a sample
//!   skipped when there is a threshold), as a counter model says.
//! - RTT probing: a queue pair's probed ports differ mod `paths` (each its own source
//!   socket over sluice-net's `port mod n` when `paths` divides n); with probes answered
//!   late or lost at random, a queue pair's packets always take the live probed port of
//!   lowest smoothed RTT (its own before any is measured), and a port is probed again only
//!   once its last probe is answered or given up on.
//!
//! Each case is generated from its number alone: `SLUICE_SEEDS=N` runs cases 1 to N
//! (default 64), `SLUICE_SEED=S` replays case S alone; a failure is shrunk to the smallest
//! sequence that still fails.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use proptest::prelude::*;

use sluice_core::policy::QpnHash;
use sluice_core::policy::{
    Flowlet, PathPacket, PathProbe, PathSelector, PathSignal, Plb, RandomSpray, RttProbe, Spray,
};
use sluice_core::{Instant, QpNum};
use sluice_wire::{Opcode, Psn};

fn packet(qpn: u32, psn: u32) -> PathPacket {
    PathPacket {
        qpn: QpNum(qpn),
        psn: Psn::new(psn & 0xFF_FFFF),
        opcode: Opcode::RC_RDMA_WRITE_MIDDLE,
    }
}

/// The ports round-robin spraying gives queue pair `qpn` over `paths`.
fn spray_ports(qpn: u32, paths: u16) -> BTreeSet<u16> {
    let mut rr = Spray { paths };
    (0..u32::from(paths))
        .map(|psn| rr.source_port(0, &packet(qpn, psn)))
        .collect()
}

#[derive(Debug, Clone)]
struct Case {
    paths: u16,
    seed: u64,
    /// (queue pair, QPN low bits, ns since its previous packet or round, congested by ECN,
    /// RTT µs)
    events: Vec<(u32, u32, u64, bool, u64)>,
    gap: u64,
    rounds: u32,
    delay: Option<u64>,
}

fn any_case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(1u16), 2u16..6, Just(64u16)],
        any::<u64>(),
        proptest::collection::vec(
            (0u32..3, 0u32..4, 0u64..4000, any::<bool>(), 1u64..60),
            0..200,
        ),
        0u64..2000,
        1u32..5,
        proptest::option::of(5u64..40),
    )
        .prop_map(|(paths, seed, events, gap, rounds, delay)| Case {
            paths,
            seed,
            events,
            gap,
            rounds,
            delay,
        })
}

/// Queue pair `qp`'s QPN: fixed per queue pair, so that its ports are one set.
fn qpn(qp: u32) -> u32 {
    0x100 + qp * 7
}

fn check(case: Case) -> Result<(), TestCaseError> {
    let ports: Vec<BTreeSet<u16>> = (0..3).map(|qp| spray_ports(qpn(qp), case.paths)).collect();
    let own = |qp: u32| Spray { paths: 1 }.source_port(0, &packet(qpn(qp), 0));

    // Random spraying: within the set, and the same again from the same seed.
    let draw = |seed| {
        let mut s = RandomSpray::new(case.paths, seed);
        case.events
            .iter()
            .map(|&(qp, psn, ..)| s.source_port(qp, &packet(qpn(qp), psn)))
            .collect::<Vec<u16>>()
    };
    let drawn = draw(case.seed);
    prop_assert_eq!(&drawn, &draw(case.seed));
    for (&port, &(qp, ..)) in drawn.iter().zip(&case.events) {
        prop_assert!(ports[qp as usize].contains(&port) && port >= 0xC000);
    }

    // Flowlets against a model: the last send time per queue pair.
    let gap = Duration::from_nanos(case.gap);
    let mut f = Flowlet::new(case.paths, gap, case.seed);
    let mut now = [0u64; 3];
    let mut last: [Option<(u64, u16)>; 3] = [None; 3];
    for (i, &(qp, psn, dt, ..)) in case.events.iter().enumerate() {
        let q = qp as usize;
        now[q] += dt;
        let port = f.source_port_at(qp, Instant::from_nanos(now[q]), &packet(qpn(qp), psn));
        prop_assert!(ports[q].contains(&port), "event {}", i);
        match last[q] {
            None => prop_assert_eq!(port, own(qp), "event {}: the first flowlet", i),
            Some((t, previous)) => {
                let new_flowlet = now[q] - t > case.gap && case.paths > 1;
                prop_assert_eq!(port != previous, new_flowlet, "event {}", i);
            }
        }
        last[q] = Some((now[q], port));
    }

    // PLB against a counter of congested rounds in a row.
    let delay = case.delay.map(Duration::from_micros);
    let mut p = Plb::new(case.paths, case.rounds, delay, case.seed);
    let mut run = [0u32; 3];
    for (i, &(qp, _, _, ecn, rtt)) in case.events.iter().enumerate() {
        let q = qp as usize;
        let before = p.source_port(qp, &packet(qpn(qp), 0));
        // One round in seven has no RTT sample.
        let sample = (rtt % 7 != 0).then_some(rtt);
        let signal = PathSignal {
            ecn,
            rtt: sample.map(Duration::from_micros),
        };
        p.on_signal(qp, Instant::ZERO, &signal);
        let after = p.source_port(qp, &packet(qpn(qp), 0));
        let congested = ecn
            || case
                .delay
                .is_some_and(|d| sample.is_some_and(|rtt| rtt > d));
        let unknown = !ecn && sample.is_none() && case.delay.is_some();
        if !unknown {
            run[q] = if congested { run[q] + 1 } else { 0 };
        }
        let moves = run[q] == case.rounds;
        if moves {
            run[q] = 0;
        }
        prop_assert!(ports[q].contains(&after), "event {}", i);
        prop_assert_eq!(after != before, moves && case.paths > 1, "event {}", i);
    }

    // RTT probing: each event is a µs of time; its fields pick the probes' fates.
    let paths = case.paths.min(8);
    let mut r = RttProbe::new(
        paths,
        Duration::from_micros(3),
        Duration::from_micros(20),
        case.seed,
    );
    for qp in 0..3 {
        prop_assert_eq!(r.source_port(qp, &packet(qpn(qp), 0)), own(qp));
        // No two probed ports alike mod `paths`: over source sockets chosen by `port mod
        // n` (sluice-net), each probed path has a socket of its own when `paths` divides n.
        let residues: BTreeSet<u16> = r.ports(qp).iter().map(|p| p % paths).collect();
        prop_assert_eq!(residues.len(), usize::from(paths), "{:?}", r.ports(qp));
    }
    let mut flight: Vec<(u64, PathProbe)> = Vec::new();
    let mut sent = std::collections::BTreeMap::new();
    let mut answered = BTreeSet::new();
    // When a reply (in time or late) last came back on each (queue pair, port).
    let mut heard = std::collections::BTreeMap::new();
    for (i, &(_, psn, dt, lost, rtt)) in case.events.iter().enumerate() {
        let us = i as u64;
        let now = Instant::from_nanos(us * 1000);
        let mut arrived = Vec::new();
        flight.retain(|&(at, probe)| {
            if at <= us {
                arrived.push(probe);
            }
            at > us
        });
        for probe in arrived {
            r.on_probe_reply(probe, now);
            answered.insert((probe.qp, probe.port, probe.seq));
            heard.insert((probe.qp, probe.port), us);
        }
        let mut k = 0;
        while let Some(probe) = r.next_probe(now) {
            // A port is probed again only once its last probe is answered or given up on.
            if let Some(&(sent_at, _)) = sent.get(&(probe.qp, probe.port)) {
                prop_assert!(
                    answered.contains(&(probe.qp, probe.port, probe.seq - 1)) || us >= sent_at + 20,
                    "event {}: {:?} probed again too soon",
                    i,
                    probe
                );
            }
            sent.insert((probe.qp, probe.port), (us, probe.seq));
            // Some lost, the rest back after 1..60 µs, varied per probe.
            if !(lost && (dt + k) % 3 == 0) {
                flight.push((us + 1 + (rtt + u64::from(psn) * k) % 60, probe));
            }
            k += 1;
        }
        for qp in 0..3 {
            let probed = r.ports(qp);
            let port = r.source_port(qp, &packet(qpn(qp), psn));
            prop_assert!(probed.contains(&port), "event {}", i);
            let best = probed.iter().filter_map(|&q| r.rtt(qp, q)).min();
            // With no live path: the one heard from last (the later in the list on a tie),
            // its own port when none was.
            let last_heard = probed
                .iter()
                .enumerate()
                .filter_map(|(k, &q)| heard.get(&(qp, q)).map(|&at| (at, k)))
                .max()
                .map_or(own(qp), |(_, k)| probed[k]);
            match best {
                None => prop_assert_eq!(port, last_heard, "event {}", i),
                Some(best) => prop_assert_eq!(r.rtt(qp, port), Some(best), "event {}", i),
            }
        }
    }
    Ok(())
}

#[test]
fn every_selector_stays_on_its_paths_and_moves_exactly_when_its_rule_says() {
    common::check_cases(64, &any_case(), 500, check);
}

/// Through an engine: `flowlet` is given each packet's send time, so a queue pair keeps its
/// port while it sends back to back and moves after an idle gap.
#[test]
fn flowlet_moves_a_queue_pair_after_an_idle_gap_through_an_engine() {
    use sluice_core::{Engine, Policies, SendOp, SendWr, Sge};
    use sluice_testkit::{Impairments, Pair, PairOptions, World};

    let mut world = World::new(2, 1, Impairments::CLEAN);
    let policies = Policies {
        path: Box::new(Flowlet::new(4, Duration::from_micros(50), 7)),
        ..Policies::default()
    };
    world.engines[0] = Engine::with_policies(World::engine_config(1, 0), policies);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let (a, b) = (p.mr[0], p.mr[1]);
    let mut payload = vec![0; 4096];
    // One 100-byte WRITE posted and sent at `at_us`; the port its packet left from.
    let mut send = |wr_id: u64, at_us: u64| {
        let e = &mut world.engines[0];
        let sge = [Sge {
            lkey: a.lkey,
            addr: a.addr,
            len: 100,
        }];
        let write = SendOp::Write {
            remote_addr: b.addr,
            rkey: b.rkey,
        };
        e.post_send(p.qp[0], &SendWr::new(wr_id, write, &sge))
            .unwrap();
        let t = e
            .poll_transmit(Instant::from_nanos(at_us * 1000), &mut payload)
            .expect("the WRITE leaves");
        t.src_port
    };
    let first = send(1, 100);
    assert_eq!(send(2, 110), first, "10 us later: the same flowlet");
    let moved = send(3, 1000);
    assert_ne!(moved, first, "after 890 us idle: a new flowlet");
    assert_eq!(send(4, 1020), moved, "back to back again");
}

/// A path selector that logs the port it gives each packet (and passes everything else on),
/// so a test sees the paths an engine's packets took.
#[derive(Debug)]
struct Logged<S> {
    inner: S,
    ports: std::rc::Rc<std::cell::RefCell<Vec<u16>>>,
}

impl<S: PathSelector> PathSelector for Logged<S> {
    fn reset(&mut self, qp: u32) {
        self.inner.reset(qp);
    }
    fn source_port(&mut self, qp: u32, packet: &PathPacket) -> u16 {
        let port = self.inner.source_port(qp, packet);
        self.ports.borrow_mut().push(port);
        port
    }
    fn source_port_at(&mut self, qp: u32, now: Instant, packet: &PathPacket) -> u16 {
        let port = self.inner.source_port_at(qp, now, packet);
        self.ports.borrow_mut().push(port);
        port
    }
    fn on_signal(&mut self, qp: u32, now: Instant, signal: &PathSignal) {
        self.inner.on_signal(qp, now, signal);
    }
    fn next_probe(&mut self, now: Instant) -> Option<PathProbe> {
        self.inner.next_probe(now)
    }
    fn next_probe_at(&self) -> Option<Instant> {
        self.inner.next_probe_at()
    }
    fn on_probe_reply(&mut self, probe: PathProbe, now: Instant) {
        self.inner.on_probe_reply(probe, now);
    }
}

/// Through an engine, PLB with a delay threshold: host 1 acknowledges every packet and
/// host 0 sends eight-packet WRITEs one at a time, so each WRITE is one round of eight
/// acknowledgements. `threshold_us` against the link's round trip (2 x 5 µs and the
/// packets' serialisation) decides whether every round is congested. The port each WRITE's
/// packets took, one per WRITE (they must agree within a WRITE).
fn plb_ports_per_write(threshold_us: u64, writes: u64, cnps: bool) -> Vec<u16> {
    use sluice_core::Engine;
    use sluice_testkit::{Impairments, Pair, PairOptions, World};

    let mut world = World::new(2, 1, Impairments::CLEAN);
    let ports = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let plb = Plb::new(4, 3, Some(Duration::from_micros(threshold_us)), 11);
    let policies = sluice_core::Policies {
        path: Box::new(Logged {
            inner: plb,
            ports: ports.clone(),
        }),
        ..sluice_core::Policies::default()
    };
    world.engines[0] = Engine::with_policies(World::engine_config(1, 0), policies);
    world.configure(1, |c| c.ack_every_packets = 1);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let mut per_write = Vec::new();
    for _ in 0..writes {
        ports.borrow_mut().clear();
        if cnps {
            // A CNP while the WRITE is in flight: its round is ECN-marked.
            p.post_write(&mut world, 1, 0, 8 * 1024);
            let cq = p.send_cq[0];
            world.run_until(Duration::from_micros(2), |_| false);
            let from = world.addrs[1];
            let now = world.now;
            world.engines[0].handle_packet(
                now,
                from,
                false,
                &p.cnp(),
                sluice_core::Payload::Bytes(&[]),
            );
            assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 1));
            Pair::completions(&mut world, 0, cq);
        } else {
            p.write_and_wait(&mut world, 8 * 1024);
        }
        let log = ports.borrow();
        assert_eq!(log.len(), 8, "eight packets, none resent");
        assert!(log.iter().all(|&q| q == log[0]), "one port within a WRITE");
        per_write.push(log[0]);
    }
    per_write
}

/// The WRITEs (by number from 0) whose port differs from the one before.
fn moves(ports: &[u16]) -> Vec<usize> {
    (1..ports.len())
        .filter(|&i| ports[i] != ports[i - 1])
        .collect()
}

#[test]
fn plb_repaths_after_three_congested_rounds_through_an_engine_and_stays_when_calm() {
    let own = QpnHash::port(QpNum(0x11));
    // Every round above a 2 µs threshold: a new port after every third round, never
    // within a round however many acknowledgements it has.
    let congested = plb_ports_per_write(2, 10, false);
    assert_eq!(congested[0], own);
    assert_eq!(moves(&congested), vec![3, 6, 9], "{congested:x?}");
    // Under a 1 ms threshold: no round is congested, and the queue pair keeps its port.
    let calm = plb_ports_per_write(1000, 10, false);
    assert_eq!(calm, vec![own; 10]);
    // A CNP in every round, under the 1 ms threshold: ECN alone re-paths it.
    let marked = plb_ports_per_write(1000, 7, true);
    assert_eq!(moves(&marked), vec![3, 6], "{marked:x?}");
}

/// A selector the test shares with the engine it is given to, to read its state.
#[derive(Debug)]
struct Shared<S>(std::rc::Rc<std::cell::RefCell<S>>);

impl<S: PathSelector> PathSelector for Shared<S> {
    fn reset(&mut self, qp: u32) {
        self.0.borrow_mut().reset(qp);
    }
    fn source_port(&mut self, qp: u32, packet: &PathPacket) -> u16 {
        self.0.borrow_mut().source_port(qp, packet)
    }
    fn source_port_at(&mut self, qp: u32, now: Instant, packet: &PathPacket) -> u16 {
        self.0.borrow_mut().source_port_at(qp, now, packet)
    }
    fn on_signal(&mut self, qp: u32, now: Instant, signal: &PathSignal) {
        self.0.borrow_mut().on_signal(qp, now, signal);
    }
    fn next_probe(&mut self, now: Instant) -> Option<PathProbe> {
        self.0.borrow_mut().next_probe(now)
    }
    fn next_probe_at(&self) -> Option<Instant> {
        self.0.borrow().next_probe_at()
    }
    fn on_probe_reply(&mut self, probe: PathProbe, now: Instant) {
        self.0.borrow_mut().on_probe_reply(probe, now);
    }
}

/// Two engines over the test kit's link, host 0 probing three paths with `rtt-probe` (every
/// 10 µs, dead after 100 µs unanswered); `agree[h]`: whether host `h` agreed to probes.
fn probing_world(
    agree: [bool; 2],
) -> (
    sluice_testkit::World,
    sluice_testkit::Pair,
    std::rc::Rc<std::cell::RefCell<RttProbe>>,
) {
    use sluice_core::Engine;
    use sluice_testkit::{Impairments, Pair, PairOptions, World};

    let mut world = World::new(2, 3, Impairments::CLEAN);
    let probe = RttProbe::new(3, Duration::from_micros(10), Duration::from_micros(100), 21);
    let shared = std::rc::Rc::new(std::cell::RefCell::new(probe));
    let policies = sluice_core::Policies {
        path: Box::new(Shared(shared.clone())),
        ..sluice_core::Policies::default()
    };
    world.engines[0] = Engine::with_policies(World::engine_config(3, 0), policies);
    let p = Pair::connect(&mut world, &PairOptions::default());
    for (h, agreed) in agree.into_iter().enumerate() {
        world.engines[h].set_path_probes(p.qp[h], agreed).unwrap();
    }
    (world, p, shared)
}

/// The source port of the next WRITE host 0 sends (run to its completion).
fn next_write_port(world: &mut sluice_testkit::World, p: &sluice_testkit::Pair) -> u16 {
    let before = world.engines[0].counters().tx_packets;
    let mut port = None;
    p.post_write(world, 9, 0, 512);
    let mut payload = vec![0u8; 4096];
    // The WRITE is the first request packet out (probes aside).
    while let Some(t) = world.engines[0].poll_transmit(world.now, &mut payload) {
        if t.headers.bth.opcode != sluice_wire::Opcode::RC_CC_CONTROL {
            port = Some(t.src_port);
            break;
        }
    }
    assert!(world.engines[0].counters().tx_packets > before);
    port.expect("the WRITE left")
}

#[test]
fn rtt_probe_takes_the_fastest_path_and_leaves_a_failed_one_through_an_engine() {
    let (mut world, p, probe) = probing_world([true, true]);
    // The first packet makes the queue pair's probed paths: its own and two others.
    let own = next_write_port(&mut world, &p);
    assert_eq!(own, QpnHash::port(p.qp[0]));
    let ports = probe.borrow().ports(0);
    assert_eq!((ports.len(), ports[0]), (3, own));
    let (slow, middle, fast) = (ports[0], ports[1], ports[2]);
    world.port_paths = vec![
        (slow, Some(Duration::from_micros(30))),
        (middle, Some(Duration::from_micros(10))),
    ];
    world.run_until(Duration::from_micros(300), |_| false);
    let rtt = |port| probe.borrow().rtt(0, port).expect("measured");
    // Each way: 5 µs of link and the path's extra delay.
    assert!(rtt(fast) < rtt(middle) && rtt(middle) < rtt(slow));
    assert!(rtt(slow) >= Duration::from_micros(70), "{:?}", rtt(slow));
    assert!(rtt(fast) < Duration::from_micros(20), "{:?}", rtt(fast));
    assert_eq!(next_write_port(&mut world, &p), fast);
    // The fast path fails: its probes go unanswered, and after the timeout traffic moves to
    // the fastest live one.
    world.port_paths.push((fast, None));
    world.run_until(Duration::from_micros(50), |_| false);
    assert_eq!(next_write_port(&mut world, &p), fast, "not yet timed out");
    world.run_until(Duration::from_micros(200), |_| false);
    assert_eq!(probe.borrow().rtt(0, fast), None, "dead");
    assert_eq!(next_write_port(&mut world, &p), middle);
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert!(a.probes_sent > 30 && a.probe_replies_received > 20, "{a:?}");
    // Replies on the failed path are lost, and the last few are on their way.
    assert!(b.probe_replies_sent >= a.probe_replies_received);
    assert_eq!((a.probes_unsent, b.drops_unexpected_opcode), (0, 0));
    // Every WRITE completed, whichever path it took.
    world.run_until(Duration::from_millis(1), |w| {
        w.engines[0].cq_len(p.send_cq[0]) == 4
    });
    let done = sluice_testkit::Pair::completions(&mut world, 0, p.send_cq[0]);
    assert!(
        done.iter()
            .all(|c| c.status == sluice_core::WcStatus::Success)
    );
}

#[test]
fn no_probe_goes_to_a_peer_that_did_not_agree() {
    // Host 0 did not agree: its selector's probes never leave, and its packets keep their
    // own port.
    let (mut world, p, _) = probing_world([false, true]);
    let own = next_write_port(&mut world, &p);
    world.run_until(Duration::from_micros(500), |_| false);
    assert_eq!(next_write_port(&mut world, &p), own);
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert_eq!((a.probes_sent, b.probe_replies_sent), (0, 0));
    assert!(a.probes_unsent > 0);
    assert_eq!(
        b.drops_unexpected_opcode, 0,
        "no 0x18 packet reached the peer"
    );
    // The peer did not agree: it drops the probes (counted) and answers none.
    let (mut world, p, probe) = probing_world([true, false]);
    next_write_port(&mut world, &p);
    world.run_until(Duration::from_micros(500), |_| false);
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert!(a.probes_sent > 0);
    assert_eq!(b.probe_replies_sent, 0);
    // Every probe that arrived was dropped (the last few are on their way).
    assert!(b.drops_unexpected_opcode > 0 && b.drops_unexpected_opcode <= a.probes_sent);
    assert_eq!(probe.borrow().rtt(0, own), None);
}
