//! SCR's receiver-driven control (`rate-credit`) through the shared checks and end to end:
//! two engines, the sender's link a 25 Gbit/s switch port, rate credits riding the
//! receiver's ACKs on the credit CC extension header. For a READ the roles turn round: the
//! requester credits the READ responses it receives, and the responder's are gated and
//! paced.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use sluice_control::Params;
use sluice_control::rate_credit::{RateCredit, RateCreditParams};
use sluice_control::registry::{Mode, build};
use sluice_core::control::{Actions, Event, Gate, Law};
use sluice_core::*;
use sluice_testkit::*;
use sluice_wire::CcxLayout;

const LINE: u64 = 100_000_000_000;
const MTU: u32 = 4096;
const LEN: u32 = 8 << 20;

/// Rates between the least rate (0.1 Gbit/s) and the line; no window.
fn bounds() -> Bounds {
    Bounds {
        min_rate_bps: 100_000_000,
        max_rate_bps: LINE,
        min_window: 0,
        max_window: u64::MAX,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn rate_credit_stays_within_its_bounds(
        events in prop::collection::vec(arb_event(), 0..300),
        bp in prop::bool::ANY,
    ) {
        let mut law = RateCredit::new(RateCreditParams {
            bp_threshold: if bp { 0.5 } else { 0.0 },
            ..RateCreditParams::default()
        });
        run_random(&mut law, MTU, LINE, &events, &bounds()).map_err(TestCaseError::fail)?;
    }

    /// Whatever happens, a sender holds at most two grants' (or two first intervals')
    /// worth of credit: 2 x 125,000 bytes at 100 Gbit/s and 10 us, with grants no larger.
    #[test]
    fn a_sender_never_holds_more_than_two_intervals_of_credit(
        events in prop::collection::vec(arb_event(), 0..300),
    ) {
        let mut law = RateCredit::new(RateCreditParams::default());
        let mut ctx = Default::default();
        let mut now = Instant::from_nanos(1_000_000);
        let start = Event::Start { mtu: MTU, line_rate_bps: LINE };
        law.on_event(now, &mut ctx, &start, &mut Actions::default());
        for (gap, e) in &events {
            now = now + Duration::from_nanos(*gap);
            // Grants no larger than one interval at line rate.
            let e = match *e {
                Event::Credit { bytes } => Event::Credit { bytes: bytes.min(125_000) },
                e => e,
            };
            law.on_event(now, &mut ctx, &e, &mut Actions::default());
        }
        let mut sent = 0u64;
        while sent <= 400_000 && law.gate(now, &mut ctx, 1000) == Gate::Send {
            sent += 1000;
        }
        prop_assert!(sent <= 250_000, "{sent}");
    }
}

#[test]
fn rate_credit_parameters_parse_and_refuse_nonsense() {
    let mut p = RateCreditParams::default();
    p.set("interval_us", "20").unwrap();
    p.set("capacity_gbps", "25").unwrap();
    p.set("target", "0.9").unwrap();
    p.set("bp_threshold", "0.8").unwrap();
    p.set("md", "0.7").unwrap();
    p.set("ai_gbps", "0.5").unwrap();
    p.set("min_rate_gbps", "1").unwrap();
    p.set("stall_us", "300").unwrap();
    assert_eq!(
        p,
        RateCreditParams {
            interval_us: 20.0,
            capacity_gbps: 25.0,
            target: 0.9,
            min_rate_gbps: 1.0,
            bp_threshold: 0.8,
            md: 0.7,
            ai_gbps: 0.5,
            stall_us: 300.0,
        }
    );
    assert_refused(
        &mut p,
        &[
            ("interval_us", "0"),
            ("capacity_gbps", "-1"),
            ("target", "1.5"),
            ("bp_threshold", "3"),
            ("md", "0"),
            ("ai_gbps", "x"),
            ("stall_us", "0"),
        ],
        "speed",
    );
}

struct Outcome {
    took: Duration,
    late_queue: u64,
    peak_queue: u64,
    grants_sent: u64,
    grants_received: u64,
}

/// One 8 MiB WRITE from host 0 to host 1, `rate-credit` on both hosts, the receiver's port
/// 25 Gbit/s.
fn transfer(link: Impairments) -> Outcome {
    let mut world = World::new(2, 5, link);
    world.watched_ports[0] = true;
    let params = [("capacity_gbps".to_string(), "25".to_string())];
    for h in 0..2 {
        world.set_controller(h, build("rate-credit", &params, &Mode::Inline).unwrap());
    }
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M4096,
            mr_len: LEN as usize,
            ccx: [Some(CcxLayout::Credit); 2],
            ..PairOptions::default()
        },
    );
    // A pattern to write, so that what arrives can be checked byte for byte.
    let src = world.engines[0].mr_bytes_mut(p.mr[0].lkey).expect("bytes");
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1];
    }
    let took = p.write_and_wait(&mut world, LEN);
    assert!(
        world.engines[0].mr_bytes(p.mr[0].lkey) == world.engines[1].mr_bytes(p.mr[1].lkey),
        "the receiver's region differs from what was written"
    );
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert_eq!(a.drops_unnegotiated_ccx + b.drops_unnegotiated_ccx, 0);
    assert_eq!(b.grants_unsent, 0);
    Outcome {
        took,
        late_queue: world.max_queue_since(Instant::ZERO + took / 2),
        peak_queue: world.max_queue_since(Instant::ZERO),
        grants_sent: b.grants_sent,
        grants_received: a.grants_received,
    }
}

#[test]
fn rate_credits_hold_a_flow_to_the_receivers_port() {
    let o = transfer(Impairments::CLEAN);
    let goodput = f64::from(LEN) * 8.0 / o.took.as_secs_f64();
    eprintln!(
        "rate-credit: {:.2} Gbit/s, late queue {} B, {} grants sent, {} received",
        goodput / 1e9,
        o.late_queue,
        o.grants_sent,
        o.grants_received
    );
    // 95% of the 25 Gbit/s port in payload (4096 of every ~4170 bytes), less the first
    // interval's burst: at least 80% of the port.
    assert!(goodput > 0.8 * 25e9, "goodput {:.2} Gbit/s", goodput / 1e9);
    assert!(goodput < 25e9, "goodput {:.2} Gbit/s", goodput / 1e9);
    // Credits below the port's rate: no standing queue once the first burst has drained.
    assert!(o.late_queue < 40_000, "{} B queued", o.late_queue);
    assert!(o.grants_sent > 100, "{}", o.grants_sent);
}

#[test]
fn rate_credits_survive_loss_and_reordering() {
    let link = Impairments {
        loss: 0.02,
        reorder: 0.01,
        jitter: Duration::from_micros(5),
        ..Impairments::CLEAN
    };
    let o = transfer(link);
    // Grants went down with lost ACKs, later totals made them up, and the WRITE completed
    // with every byte in place (checked in `transfer`).
    assert!(o.grants_received < o.grants_sent);
    assert!(o.took < Duration::from_millis(100), "{:?}", o.took);
}

/// One 8 MiB READ by host 0 of host 1's memory, `rate-credit` on both hosts: the data's
/// sender is host 1, whose outgoing link (watched) is the 25 Gbit/s port.
fn read_transfer(link: Impairments, seed: u64, law: Option<&Mode>) -> Outcome {
    let mut world = World::new(2, seed, link);
    world.watched_ports[1] = true;
    let params = [("capacity_gbps".to_string(), "25".to_string())];
    if let Some(mode) = law {
        for h in 0..2 {
            world.set_controller(h, build("rate-credit", &params, mode).unwrap());
        }
    }
    let law = law.is_some();
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M4096,
            mr_len: LEN as usize,
            ccx: [law.then_some(CcxLayout::Credit); 2],
            timeout: 8, // 1 ms
            ..PairOptions::default()
        },
    );
    let src = world.engines[1].mr_bytes_mut(p.mr[1].lkey).expect("bytes");
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1];
    }
    let start = world.now;
    let op = SendOp::Read {
        remote_addr: p.mr[1].addr,
        rkey: p.mr[1].rkey,
    };
    let sgl = [Sge {
        lkey: p.mr[0].lkey,
        addr: p.mr[0].addr,
        len: LEN,
    }];
    world.engines[0]
        .post_send(p.qp[0], &SendWr::new(1, op, &sgl))
        .unwrap();
    let cq = p.send_cq[0];
    assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 1));
    assert_eq!(
        Pair::completions(&mut world, 0, cq)[0].status,
        WcStatus::Success
    );
    let took = world.now - start;
    assert!(
        world.engines[0].mr_bytes(p.mr[0].lkey) == world.engines[1].mr_bytes(p.mr[1].lkey),
        "the requester's region differs from what was read"
    );
    let (a, b) = (world.engines[0].counters(), world.engines[1].counters());
    assert_eq!(a.drops_unnegotiated_ccx + b.drops_unnegotiated_ccx, 0);
    assert_eq!(a.grants_unsent, 0);
    Outcome {
        took,
        late_queue: world.max_queue_since(Instant::ZERO + took / 2),
        peak_queue: world.max_queue_since(Instant::ZERO),
        grants_sent: a.grants_sent,
        grants_received: b.grants_received,
    }
}

#[test]
fn rate_credits_hold_a_read_to_the_requesters_port() {
    let o = read_transfer(Impairments::CLEAN, 5, Some(&Mode::Inline));
    let goodput = f64::from(LEN) * 8.0 / o.took.as_secs_f64();
    eprintln!(
        "rate-credit READ: {:.2} Gbit/s, late queue {} B, {} grants sent, {} received",
        goodput / 1e9,
        o.late_queue,
        o.grants_sent,
        o.grants_received
    );
    // As for the WRITE: at least 80% of the 25 Gbit/s port, never more than it, and no
    // standing queue once the first interval's burst has drained.
    assert!(goodput > 0.8 * 25e9, "goodput {:.2} Gbit/s", goodput / 1e9);
    assert!(goodput < 25e9, "goodput {:.2} Gbit/s", goodput / 1e9);
    assert!(o.late_queue < 40_000, "{} B queued", o.late_queue);
    assert!(o.grants_sent > 100, "{}", o.grants_sent);
    // Under the law the first interval's burst is the most ever queued (125 KB of credit
    // at line rate). Without a law the READ's data leaves at the 100 Gbit/s line rate into
    // the port, and queues there: most of the 8 MiB.
    assert!(o.peak_queue < 200_000, "{} B queued", o.peak_queue);
    let free = read_transfer(Impairments::CLEAN, 5, None);
    assert!(free.peak_queue > 4 << 20, "{} B queued", free.peak_queue);
}

#[test]
fn credited_reads_survive_loss_and_reordering() {
    let link = Impairments {
        loss: 0.02,
        reorder: 0.01,
        jitter: Duration::from_micros(5),
        ..Impairments::CLEAN
    };
    // Several seeds: each READ completes once with every byte in place (checked in
    // `read_transfer`), though grants went down with lost packets.
    for seed in 1..=4 {
        let o = read_transfer(link, seed, Some(&Mode::Inline));
        assert!(o.grants_received < o.grants_sent, "seed {seed}");
        assert!(
            o.took < Duration::from_millis(200),
            "seed {seed}: {:?}",
            o.took
        );
    }
}

#[test]
fn credited_reads_run_behind_scrs_decoupled_loop() {
    // Start, the grants and the arrivals reach the law after the loop's delay; the gate
    // reads the context as the processors left it: the READ holds until Start has run,
    // then is credited as inline (a little slower: grants come later).
    let mode = Mode::Decoupled(sluice_core::control::ScrConfig::default());
    let o = read_transfer(Impairments::CLEAN, 6, Some(&mode));
    let goodput = f64::from(LEN) * 8.0 / o.took.as_secs_f64();
    eprintln!(
        "rate-credit READ, decoupled: {:.2} Gbit/s, peak queue {} B",
        goodput / 1e9,
        o.peak_queue
    );
    assert!(goodput > 0.7 * 25e9, "goodput {:.2} Gbit/s", goodput / 1e9);
    assert!(o.peak_queue < 200_000, "{} B queued", o.peak_queue);
}
