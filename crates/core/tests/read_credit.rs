//! A law that controls READ data (`EventMask::GATE_READ_RESPONSES`): the requester, the
//! data's receiver, hears each READ response arrive (`Event::RxResponse`) and grants credit
//! for it; the responder, the data's sender, sends a new READ response packet only on
//! credit (`Law::gate`) and paces READ responses at the rate the law set. A test law (here,
//! not `sluice-control`, which depends on this crate) makes each part visible alone: a READ
//! held to a rate, a READ held to its credit, and, over a lossy link with several seeds,
//! READs that complete exactly once with every byte in place. Without the opt-in READ
//! responses go as they always did.

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use proptest::prelude::*;
use sluice_core::control::{Actions, Event, EventKind, EventMask, Gate, Inline, Law};
use sluice_core::*;
use sluice_testkit::*;
use sluice_wire::CcxLayout;

/// What the test law does.
#[derive(Debug, Clone, Copy)]
struct Setting {
    /// Gate and pace READ responses (the opt-in under test).
    reads: bool,
    /// The rate it paces at from `Start` on, bit/s; `None`: line rate.
    rate_bps: Option<u64>,
    /// The credit a sender starts with, bytes.
    initial: u64,
    /// Whether the data's receiver grants back what arrives (a credit window).
    grant_back: bool,
    /// A sender regains its initial credit this often (as `rate-credit` does after a
    /// stall): when the packets in flight, or the grants for them, were all lost, nothing
    /// arrives to be granted for.
    regain: Option<Duration>,
}

/// The test law: see the module documentation. Counts, for the test, the READ response
/// bytes the requester heard of and the bytes the responder's gate let through.
#[derive(Debug)]
struct ReadCredit {
    s: Setting,
    heard: Rc<Cell<u64>>,
    passed: Rc<Cell<u64>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Ctx {
    credit: u64,
}

impl Law for ReadCredit {
    type Context = Ctx;

    fn name(&self) -> &'static str {
        "read-credit-test"
    }

    fn interest(&self) -> EventMask {
        let m = EventMask::of(&[
            EventKind::Start,
            EventKind::RxResponse,
            EventKind::Credit,
            EventKind::Timer,
        ]);
        if self.s.reads {
            m.union(EventMask::GATE_READ_RESPONSES)
        } else {
            m
        }
    }

    fn on_event(&mut self, now: Instant, ctx: &mut Ctx, event: &Event, act: &mut Actions) {
        match *event {
            Event::Start { .. } => {
                ctx.credit = self.s.initial;
                if let Some(r) = self.s.rate_bps {
                    act.set_rate(r);
                }
                if let Some(every) = self.s.regain {
                    act.arm_timer(now + every);
                }
            }
            Event::Timer => {
                ctx.credit = ctx.credit.max(self.s.initial);
                act.wake();
                if let Some(every) = self.s.regain {
                    act.arm_timer(now + every);
                }
            }
            Event::RxResponse { bytes, .. } => {
                self.heard.set(self.heard.get() + u64::from(bytes));
                if self.s.grant_back && bytes > 0 {
                    act.grant(u64::from(bytes));
                }
            }
            Event::Credit { bytes } => {
                ctx.credit = ctx.credit.saturating_add(bytes);
                act.wake();
            }
            _ => {}
        }
    }

    fn gate(&mut self, _: Instant, ctx: &mut Ctx, bytes: u32) -> Gate {
        let bytes = u64::from(bytes);
        if ctx.credit >= bytes {
            ctx.credit -= bytes;
            self.passed.set(self.passed.get() + bytes);
            Gate::Send
        } else {
            Gate::Hold
        }
    }
}

/// Two hosts under the test law, a connected pair with the credit CC extension header
/// (grants ride it), host 1's region filled with a pattern for host 0 to READ.
struct Rig {
    world: World,
    pair: Pair,
    heard: Rc<Cell<u64>>,
    passed: Rc<Cell<u64>>,
}

fn rig(s: Setting, link: Impairments, seed: u64, recovery: Recovery) -> Rig {
    rig_timing(s, link, seed, recovery, 6)
}

/// [`rig`] with the retransmit timeout code `timeout` (4.096 us x 2^timeout).
fn rig_timing(s: Setting, link: Impairments, seed: u64, recovery: Recovery, timeout: u8) -> Rig {
    let mut world = World::new(2, seed, link);
    world.watched_ports[1] = true;
    let (heard, passed) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
    for h in 0..2 {
        let law = ReadCredit {
            s,
            heard: heard.clone(),
            passed: passed.clone(),
        };
        world.set_controller(h, Box::new(Inline::new(law)));
    }
    let pair = Pair::connect(
        &mut world,
        &PairOptions {
            mtu: Mtu::M4096,
            mr_len: 4 << 20,
            ccx: [Some(CcxLayout::Credit); 2],
            recovery,
            timeout,
            ..PairOptions::default()
        },
    );
    let src = world.engines[1].mr_bytes_mut(pair.mr[1].lkey).unwrap();
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2];
    }
    Rig {
        world,
        pair,
        heard,
        passed,
    }
}

impl Rig {
    /// Posts READ `id` of `len` bytes of host 1's region at `offset` into host 0's at the
    /// same offset.
    fn read(&mut self, id: u64, offset: u64, len: u32) {
        let p = &self.pair;
        let op = SendOp::Read {
            remote_addr: p.mr[1].addr + offset,
            rkey: p.mr[1].rkey,
        };
        let sgl = [Sge {
            lkey: p.mr[0].lkey,
            addr: p.mr[0].addr + offset,
            len,
        }];
        self.world.engines[0]
            .post_send(p.qp[0], &SendWr::new(id, op, &sgl))
            .unwrap();
    }

    /// Runs until `n` completions are on host 0's send CQ, at most `limit`: whether they are.
    fn run(&mut self, n: usize, limit: Duration) -> bool {
        let cq = self.pair.send_cq[0];
        self.world
            .run_until(limit, |w| w.engines[0].cq_len(cq) >= n)
    }

    /// Whether host 0's region holds host 1's bytes over `[offset, offset + len)`.
    fn landed(&self, offset: u64, len: u32) -> bool {
        let r = offset as usize..offset as usize + len as usize;
        let a = self.world.engines[0]
            .mr_bytes(self.pair.mr[0].lkey)
            .unwrap();
        let b = self.world.engines[1]
            .mr_bytes(self.pair.mr[1].lkey)
            .unwrap();
        a[r.clone()] == b[r]
    }
}

/// Wire bytes per 4 KiB READ response on the test link (payload, BTH, AETH on some, the
/// credit CCX, ICRC, UDP/IP/Ethernet): a little over 4096; the expected times below allow
/// for it.
const PAYLOAD_SHARE: f64 = 4096.0 / 4180.0;

#[test]
fn a_read_is_paced_at_the_laws_rate_only_with_the_opt_in() {
    const LEN: u32 = 2 << 20;
    let rate = 5_000_000_000u64;
    let time = |reads: bool| {
        let mut r = rig(
            Setting {
                reads,
                rate_bps: Some(rate),
                initial: u64::MAX / 2,
                grant_back: false,
                regain: None,
            },
            Impairments::CLEAN,
            1,
            Recovery::GoBackN,
        );
        let start = r.world.now;
        r.read(1, 0, LEN);
        assert!(r.run(1, Duration::from_secs(1)), "the READ completes");
        let c = Pair::completions(&mut r.world, 0, r.pair.send_cq[0]);
        assert_eq!(c[0].status, WcStatus::Success);
        assert!(r.landed(0, LEN));
        // The requester heard every byte arrive, once (a clean link).
        assert_eq!(r.heard.get(), u64::from(LEN));
        (r.world.now - start, r.world.max_queue_since(Instant::ZERO))
    };
    let (paced, paced_queue) = time(true);
    let expected = f64::from(LEN) * 8.0 / PAYLOAD_SHARE / rate as f64;
    let ratio = paced.as_secs_f64() / expected;
    eprintln!("paced READ: {paced:?} ({ratio:.3} of {expected:.6} s), queue {paced_queue} B");
    // The pacer's slots plus one round trip (10 us of 3.4 ms).
    assert!((0.98..1.05).contains(&ratio), "{ratio}");
    // Paced below the 25 Gbit/s link: the responder's port never queues more than a packet
    // or two.
    assert!(paced_queue < 10_000, "{paced_queue} B");
    // Without the opt-in the rate paces requests only: the READ's data leaves at line rate
    // into the 25 Gbit/s link, as before (and queues there).
    let (free, free_queue) = time(false);
    assert!(
        free.as_secs_f64() < 0.3 * paced.as_secs_f64(),
        "{free:?} against {paced:?}"
    );
    assert!(free_queue > 1 << 20, "{free_queue} B");
}

#[test]
fn a_read_sends_only_the_bytes_it_was_credited() {
    const LEN: u32 = 1 << 20;
    // 64 KiB of credit and no grants: 16 packets go, then the responder holds the rest.
    let mut r = rig(
        Setting {
            reads: true,
            rate_bps: None,
            initial: 64 << 10,
            grant_back: false,
            regain: None,
        },
        Impairments::CLEAN,
        2,
        Recovery::GoBackN,
    );
    r.read(1, 0, LEN);
    // (Short of the requester's 262 us timeout: a READ held longer is asked for again.)
    assert!(!r.run(1, Duration::from_micros(200)), "held: no completion");
    assert_eq!(r.passed.get(), 64 << 10);
    assert_eq!(r.heard.get(), 64 << 10, "nothing past the credit arrived");
    assert_eq!(r.world.engines[1].counters().tx_bytes, 64 << 10);

    // Granting back what arrives keeps 64 KiB in flight: the READ completes, every byte.
    let mut r = rig(
        Setting {
            reads: true,
            rate_bps: None,
            initial: 64 << 10,
            grant_back: true,
            regain: None,
        },
        Impairments::CLEAN,
        3,
        Recovery::GoBackN,
    );
    r.read(1, 0, LEN);
    assert!(r.run(1, Duration::from_secs(1)));
    let c = Pair::completions(&mut r.world, 0, r.pair.send_cq[0]);
    assert_eq!(c[0].status, WcStatus::Success);
    assert!(r.landed(0, LEN));
    assert_eq!(
        r.passed.get(),
        u64::from(LEN),
        "every new packet asked once"
    );
    let grants = r.world.engines[0].counters().grants_sent;
    assert!(grants > 0 && r.world.engines[1].counters().grants_received > 0);
}

/// A lossy case: READs of these sizes, one after another on one queue pair.
#[derive(Debug, Clone)]
struct Case {
    sizes: Vec<u32>,
    loss: f64,
    reorder: bool,
    selective: bool,
    rate_gbps: Option<u64>,
    initial_kib: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(1u32..200_000, 1..8),
        prop_oneof![Just(0.0), Just(0.01), Just(0.05)],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(None), Just(Some(2)), Just(Some(10))],
        8u64..256,
    )
        .prop_map(
            |(sizes, loss, reorder, selective, rate_gbps, initial_kib)| Case {
                sizes,
                loss,
                reorder,
                selective,
                rate_gbps,
                initial_kib,
            },
        )
}

fn lossy(c: Case, seed: u64) -> Result<(), TestCaseError> {
    let link = Impairments {
        loss: c.loss,
        reorder: if c.reorder { 0.02 } else { 0.0 },
        jitter: Duration::from_micros(5),
        ..Impairments::CLEAN
    };
    let recovery = if c.selective {
        Recovery::SelectiveRepeat
    } else {
        Recovery::GoBackN
    };
    // The timeout (4.2 ms) above the time the responder's queue of READ responses takes at
    // the slowest rate (the READs' 1.6 MB at most, at 2 Gbit/s: 6.4 ms, which one or two
    // timeouts without progress cover): a response the requester asks for again is
    // served after what was owed before it, and a requester whose timeout is shorter than
    // that spends its retries while its responder drains (as on any slow path).
    let mut r = rig_timing(
        Setting {
            reads: true,
            rate_bps: c.rate_gbps.map(|g| g * 1_000_000_000),
            initial: c.initial_kib << 10,
            grant_back: true,
            regain: Some(Duration::from_micros(200)),
        },
        link,
        seed,
        recovery,
        10,
    );
    let mut at = 0u64;
    let mut placed = Vec::new();
    for (i, &len) in c.sizes.iter().enumerate() {
        r.read(i as u64, at, len);
        placed.push((at, len));
        at += u64::from(len).next_multiple_of(64);
    }
    let n = c.sizes.len();
    prop_assert!(
        r.run(n, Duration::from_secs(10)),
        "not every READ completed"
    );
    let done = Pair::completions(&mut r.world, 0, r.pair.send_cq[0]);
    let ids: Vec<u64> = done.iter().map(|c| c.wr_id).collect();
    prop_assert_eq!(
        ids,
        (0..n as u64).collect::<Vec<_>>(),
        "each once, in order"
    );
    for c in &done {
        prop_assert_eq!(c.status, WcStatus::Success, "{:?}", c);
    }
    for (i, &(at, len)) in placed.iter().enumerate() {
        prop_assert!(r.landed(at, len), "READ {} differs", i);
    }
    // Nothing past the READs' targets was written.
    let a = r.world.engines[0].mr_bytes(r.pair.mr[0].lkey).unwrap();
    prop_assert!(a[at as usize..].iter().all(|&b| b == CANARY));
    // Every new packet went through the gate once; replays of lost ones did not.
    let total: u64 = c.sizes.iter().map(|&s| u64::from(s)).sum();
    prop_assert_eq!(r.passed.get(), total);
    Ok(())
}

#[test]
fn credited_reads_complete_exactly_once_under_loss() {
    common::check_cases(24, &(case(), any::<u64>()), 16, |(c, seed)| lossy(c, seed));
}
