//! The CC extension header between two engines: send timestamps echoed back give an RTT
//! sample with every ACK; INT records a switch port writes in flight reach the sender's law
//! as telemetry; a header a queue pair did not agree on is dropped, and one that did not
//! agree never sends one. Packets cross the test link as bytes, ICRC checked.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use sluice_core::control::{Event, Inline};
use sluice_core::*;
use sluice_testkit::*;
use sluice_wire::{CcxLayout, IntPath};

/// Two hosts, a recorder on host 0, the pair connected with `ccx` on each side.
fn connected(
    ccx: [Option<CcxLayout>; 2],
    link: Impairments,
) -> (World, Pair, Rc<RefCell<Vec<Event>>>) {
    let mut world = World::new(2, 7, link);
    let law = Recorder::default();
    let events = law.events.clone();
    world.set_controller(0, Box::new(Inline::new(law)));
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            ccx,
            retry_cnt: 2,
            ..PairOptions::default()
        },
    );
    (world, p, events)
}

/// Posts `count` WRITEs of `len` bytes at once and runs until all complete (or 50 ms pass);
/// returns their statuses.
fn writes(world: &mut World, p: &Pair, count: u64, len: u32) -> Vec<WcStatus> {
    for i in 0..count {
        p.post_write(world, i, i * u64::from(len), len);
    }
    let cq = p.send_cq[0];
    world.run_until(Duration::from_millis(50), |w| {
        w.engines[0].cq_len(cq) == count as usize
    });
    Pair::completions(world, 0, cq)
        .iter()
        .map(|c| c.status)
        .collect()
}

#[test]
fn echoed_timestamps_time_every_ack() {
    let both = Some(CcxLayout::Timestamps);
    let (mut world, p, events) = connected([both, both], Impairments::CLEAN);
    assert_eq!(writes(&mut world, &p, 8, 1024), vec![WcStatus::Success; 8]);
    let (acks, rtts) = rtt_samples(&events.borrow());
    assert_eq!(
        acks, 8,
        "one ACK per single-packet WRITE (each asks for one)"
    );
    assert_eq!(rtts.len(), 8, "every ACK timed: {rtts:?}");
    // Two 5 us hops, a 1 KiB packet and an ACK serialised at 25 Gbit/s, plus the queue of
    // the WRITEs sent before it (up to 7 x 0.35 us).
    for rtt in &rtts {
        assert!(
            *rtt >= Duration::from_micros(10) && *rtt < Duration::from_micros(14),
            "{rtts:?}"
        );
    }
    assert_eq!(world.rejected_by_wire, 0);

    // Without the header only the probe times a round trip: one sample for the same burst.
    let (mut world, p, events) = connected([None, None], Impairments::CLEAN);
    assert_eq!(writes(&mut world, &p, 8, 1024), vec![WcStatus::Success; 8]);
    let (acks, rtts) = rtt_samples(&events.borrow());
    assert_eq!((acks, rtts.len()), (8, 1));
}

#[test]
fn echoed_timestamps_leave_out_the_time_the_peer_held_the_request() {
    // Host 1 answers 40 us after each packet arrives (a software stack waking up).
    let both = Some(CcxLayout::Timestamps);
    let (mut world, p, events) = connected([both, both], Impairments::CLEAN);
    world.answer_delay[1] = Duration::from_micros(40);
    assert_eq!(writes(&mut world, &p, 8, 1024), vec![WcStatus::Success; 8]);
    let (acks, rtts) = rtt_samples(&events.borrow());
    assert!(acks > 0 && rtts.len() == acks, "{acks} ACKs: {rtts:?}");
    // The echo is advanced by the hold, so the samples are the network's round trip, as
    // with a host that answers at once (10-14 us above).
    for rtt in &rtts {
        assert!(
            *rtt >= Duration::from_micros(10) && *rtt < Duration::from_micros(14),
            "{rtts:?}"
        );
    }

    // Without the header the probe's sample is all of it: the network and the 40 us.
    let (mut world, p, events) = connected([None, None], Impairments::CLEAN);
    world.answer_delay[1] = Duration::from_micros(40);
    assert_eq!(writes(&mut world, &p, 8, 1024), vec![WcStatus::Success; 8]);
    let (_, rtts) = rtt_samples(&events.borrow());
    assert!(!rtts.is_empty());
    assert!(
        rtts.iter().all(|r| *r >= Duration::from_micros(50)),
        "{rtts:?}"
    );
}

#[test]
fn echoed_timestamps_time_resent_packets_too() {
    let both = Some(CcxLayout::Timestamps);
    let link = Impairments {
        loss: 0.2,
        ..Impairments::CLEAN
    };
    let (mut world, p, events) = connected([both, both], link);
    let mut sent = 0;
    for _ in 0..10 {
        assert_eq!(writes(&mut world, &p, 4, 1024), vec![WcStatus::Success; 4]);
        sent += 4;
    }
    assert!(world.engines[0].counters().retransmitted_packets > 0);
    let (acks, rtts) = rtt_samples(&events.borrow());
    assert!(
        acks > 0 && rtts.len() == acks,
        "{acks} ACKs, {} timed",
        rtts.len()
    );
    // A sample measures one transmission and its answer, never the wait for a retransmit
    // timer (1 ms here): Karn's ambiguity is gone.
    assert!(
        rtts.iter().all(|r| *r < Duration::from_micros(20)),
        "{sent} writes: {rtts:?}"
    );
}

#[test]
fn int_records_written_in_flight_reach_the_law() {
    let both = Some(CcxLayout::Int);
    let (mut world, p, events) = connected([both, both], Impairments::CLEAN);
    world.int_ports[0] = true; // host 0's link writes INT into what it sends
    assert_eq!(
        writes(&mut world, &p, 1, 64 * 1024),
        vec![WcStatus::Success]
    );
    assert_eq!(world.rejected_by_wire, 0, "the ICRC masks the records");
    let paths: Vec<IntPath> = events
        .borrow()
        .iter()
        .filter_map(|e| match e {
            Event::Telemetry { path, .. } => Some(*path),
            _ => None,
        })
        .collect();
    assert!(!paths.is_empty());
    for path in &paths {
        // One hop each: the responder echoed the request's record, and the ACK's own way
        // back (host 1's link) writes nothing.
        assert_eq!(path.len, 1);
        assert_eq!(path.hops[0].rate_bps(), 25_000_000_000);
    }
    // 64 packets queue behind each other at the port: the record of the last shows it.
    let last = paths.last().unwrap().hops[0];
    assert!(last.qlen_bytes > 0 && last.tx_bytes > 64 * 1024, "{last:?}");
}

#[test]
fn a_header_the_queue_pair_did_not_agree_on_is_dropped() {
    // Host 0 sends timestamps; host 1 agreed on nothing, so it drops every request.
    let (mut world, p, _) = connected([Some(CcxLayout::Timestamps), None], Impairments::CLEAN);
    assert_eq!(
        writes(&mut world, &p, 1, 100),
        vec![WcStatus::RetryExceeded]
    );
    assert!(world.engines[1].counters().drops_unnegotiated_ccx >= 3);
    assert_eq!(world.engines[1].counters().tx_packets, 0);

    // The other way round: host 1 takes the plain requests, but its answers carry a header
    // host 0 did not agree on, so host 0 drops them.
    let (mut world, p, _) = connected([None, Some(CcxLayout::Int)], Impairments::CLEAN);
    assert_eq!(
        writes(&mut world, &p, 1, 100),
        vec![WcStatus::RetryExceeded]
    );
    assert_eq!(world.engines[1].counters().drops_unnegotiated_ccx, 0);
    assert!(world.engines[0].counters().drops_unnegotiated_ccx >= 3);
}

#[test]
fn without_the_header_a_stream_is_timed_about_once_a_round_trip() {
    // The probe is one packet at a time, timed until the ACK that covers it. ACKs for
    // earlier packets arrive meanwhile and retire requests; re-placing the cursor after
    // them is not a resend and must leave the probe in flight (it was cleared there: a
    // stream got one sample in all, whatever its length).
    let mut world = World::new(2, 7, Impairments::CLEAN);
    let law = Recorder::default();
    let events = law.events.clone();
    let window = |c: &mut sluice_core::EngineConfig| c.max_outstanding_packets = 32;
    world.set_controller_configured(0, Box::new(Inline::new(law)), window);
    let p = Pair::connect(&mut world, &PairOptions::default());
    let statuses = writes(&mut world, &p, 64, 16384);
    assert_eq!(statuses, vec![WcStatus::Success; 64]);
    let (acks, rtts) = rtt_samples(&events.borrow());
    // 1 MiB behind a window of 32 1 KiB packets: a round trip of about 15-30 us, the
    // whole run several hundred.
    let elapsed = world.now.as_nanos() as f64 / 1e3;
    assert!(acks > 64, "{acks} ACKs");
    assert!(
        rtts.len() >= 8,
        "{} samples in {elapsed:.0} us: {rtts:?}",
        rtts.len()
    );
    for rtt in &rtts {
        assert!(*rtt < Duration::from_micros(60), "{rtts:?}");
    }
}
