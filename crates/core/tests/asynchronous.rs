//! Asynchronous stages beside the path (`Service::asynchronous`: the engine offers a copy
//! of each payload and collects the verdicts later, as `sluice-net`'s `Threaded` does
//! from its thread). Here the stage is deterministic: it returns what the test's clock
//! allows, one payload per few simulated microseconds. Whatever the credit, the rate, the
//! recovery and the link's losses: what is out never passes the credit; every payload
//! offered comes back exactly once; every message completes exactly once with its bytes
//! exact; and a completion carries exactly its message's flags (a deferred stage drops
//! and recovers what it has no room for, so nothing goes unseen), even when the stage
//! returns them after the message was taken: the completion waits for them.

mod common;

use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use proptest::prelude::*;
use sluice_core::policy::{Returned, Service, ServiceFlags, ServicePacket};
use sluice_core::*;
use sluice_testkit::*;

/// The marker a flagged message's bytes are all made of.
const MARK: u8 = 0xEE;

/// What the test and the stage share.
#[derive(Debug, Default)]
struct Tally {
    /// Payloads the stage may still return (the test's clock adds to it).
    allowance: Cell<u64>,
    offered: Cell<u64>,
    returned: Cell<u64>,
    /// The most payloads out at once.
    peak: Cell<u64>,
}

impl Tally {
    /// Counts a payload the stage took; `waiting` is how many it holds now.
    fn took(&self, waiting: usize) {
        self.offered.set(self.offered.get() + 1);
        self.peak.set(self.peak.get().max(waiting as u64));
    }

    /// Counts a payload returned, spending one of the allowance (the caller checked it).
    fn gave_back(&self) {
        self.allowance.set(self.allowance.get() - 1);
        self.returned.set(self.returned.get() + 1);
    }
}

/// Asynchronous, beside the path: flags payloads that start with [`MARK`]; returns them
/// in order as the allowance permits.
#[derive(Debug)]
struct Later {
    deferred: bool,
    out: VecDeque<Returned>,
    tally: Rc<Tally>,
}

impl Service for Later {
    fn name(&self) -> &str {
        "later"
    }
    fn in_line(&self) -> bool {
        false
    }
    fn deferred(&self) -> bool {
        self.deferred
    }
    fn asynchronous(&self) -> bool {
        true
    }
    fn observe(&mut self, _p: &ServicePacket<'_>, _payload: &[u8]) -> ServiceFlags {
        panic!("an asynchronous stage is offered payloads, never given them");
    }
    fn offer(&mut self, p: &ServicePacket<'_>, payload: &[u8]) -> bool {
        let flags = if payload.first() == Some(&MARK) {
            ServiceFlags::EXECUTABLE
        } else {
            ServiceFlags::NONE
        };
        self.out.push_back(Returned {
            psn: p.psn,
            opcode: p.opcode,
            direction: p.direction,
            len: payload.len() as u32,
            flags,
        });
        self.tally.took(self.out.len());
        true
    }
    fn collect(
        &mut self,
        out: &mut Vec<Returned>,
        _put_back: &mut dyn FnMut(sluice_core::policy::Landing, &[u8]),
    ) {
        let t = &self.tally;
        while t.allowance.get() > 0 {
            let Some(r) = self.out.pop_front() else {
                break;
            };
            t.gave_back();
            out.push(r);
        }
    }
}

#[derive(Debug, Clone)]
struct Case {
    credit: ServiceCredit,
    cost_us: u64,
    selective: bool,
    loss: f64,
    /// Each message's length and whether it is flagged.
    messages: Vec<(u32, bool)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1u32..12,
        1u64..24,
        1u64..6,
        any::<bool>(),
        prop_oneof![Just(0.0), Just(0.03)],
        prop::collection::vec((1u32..12_000, any::<bool>()), 4..14),
    )
        .prop_map(|(packets, kib, cost_us, selective, loss, messages)| Case {
            credit: ServiceCredit {
                packets,
                bytes: (kib * 1024).max(1024),
            },
            cost_us,
            selective,
            loss,
            messages,
        })
}

/// A message's bytes: all [`MARK`] if flagged, else a pattern without it.
fn bytes(len: u32, flagged: bool, salt: u32) -> Vec<u8> {
    (0..len)
        .map(|i| {
            if flagged {
                MARK
            } else {
                (i.wrapping_mul(31).wrapping_add(salt) % 0xE0) as u8
            }
        })
        .collect()
}

fn stage(deferred: bool, tally: &Rc<Tally>) -> Box<dyn Service> {
    Box::new(Later {
        deferred,
        out: VecDeque::new(),
        tally: tally.clone(),
    })
}

/// Host 1 receives SENDs (with a deferred asynchronous stage); host 0 sends them (with one
/// beside the path that is not deferred, under the default credit).
fn run(c: Case, seed: u64) -> Result<(), TestCaseError> {
    let mut world = common::lossy_world(seed, c.loss);
    world.configure(1, |e| e.service_credit = c.credit);
    // Host 0's stage is neither deferred nor landing: its completions would go without
    // their flags after `service_flag_wait`; here they wait as long as it takes.
    world.configure(0, |e| e.service_flag_wait = Duration::from_secs(60));
    let p = Pair::connect(&mut world, &common::recovering(c.selective));
    let tallies = [Rc::new(Tally::default()), Rc::new(Tally::default())];
    for (host, deferred) in [(0, false), (1, true)] {
        world.engines[host]
            .set_services(p.qp[host], vec![stage(deferred, &tallies[host])])
            .unwrap();
    }
    let mut at = 0u64;
    let mut placed = Vec::new();
    for (i, &(len, flagged)) in c.messages.iter().enumerate() {
        let data = bytes(len, flagged, i as u32);
        world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[at as usize..at as usize + data.len()]
            .copy_from_slice(&data);
        let sge = [Sge {
            lkey: p.mr[0].lkey,
            addr: p.mr[0].addr + at,
            len,
        }];
        common::post_recv(&mut world, &p, i as u64, at, len);
        world.engines[0]
            .post_send(p.qp[0], &SendWr::new(i as u64, SendOp::Send, &sge))
            .unwrap();
        placed.push((at, data));
        at += u64::from(len).next_multiple_of(64);
    }
    let n = c.messages.len();
    let (cq, rcq, credit) = (p.send_cq[0], p.recv_cq[1], c.credit);
    let cost = Duration::from_micros(c.cost_us);
    let mut next = world.now + cost;
    let mut over = None;
    let mut done = false;
    // The world stops when nothing is on the links or due: completions held for the stage
    // are not, so the stage's clock moves time on itself then.
    for _ in 0..100_000 {
        if done || world.now.as_nanos() > 30_000_000_000 {
            break;
        }
        done = world.run_until(Duration::from_secs(30), |w| {
            let (packets, bytes) = w.engines[1].deferred_waiting();
            if packets > credit.packets as usize || bytes > credit.bytes {
                over = Some(format!("{packets} packets, {bytes} bytes out"));
            }
            while next <= w.now {
                for (h, t) in tallies.iter().enumerate() {
                    t.allowance.set(t.allowance.get() + 1);
                    w.engines[h].run_deferred(0);
                }
                next = next + cost;
            }
            w.engines[0].cq_len(cq) == n && w.engines[1].cq_len(rcq) == n
        });
        if !done {
            world.now = world.now + cost;
        }
    }
    prop_assert!(over.is_none(), "past the credit {:?}: {:?}", credit, over);
    prop_assert!(done, "not every message completed");
    for (h, cq) in [(0, cq), (1, rcq)] {
        let mut got: Vec<(u64, bool)> = Pair::completions(&mut world, h, cq)
            .iter()
            .map(|c| {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                (c.wr_id, c.flags.contains(ServiceFlags::EXECUTABLE))
            })
            .collect();
        got.sort_unstable();
        let want: Vec<(u64, bool)> = c
            .messages
            .iter()
            .enumerate()
            .map(|(i, &(_, f))| (i as u64, f))
            .collect();
        prop_assert_eq!(got, want, "host {}: each once, with its message's flag", h);
    }
    let memory = world.engines[1].mr_bytes(p.mr[1].lkey).unwrap();
    for (i, (at, data)) in placed.iter().enumerate() {
        prop_assert!(
            memory[*at as usize..*at as usize + data.len()] == data[..],
            "message {} differs",
            i
        );
    }
    prop_assert!(tallies[1].peak.get() <= u64::from(credit.packets));
    prop_assert!(world.engines[1].counters().service_queue_peak_bytes <= credit.bytes);
    for (h, t) in tallies.iter().enumerate() {
        t.allowance.set(u64::MAX);
        world.engines[h].run_deferred(0);
        prop_assert_eq!(
            t.returned.get(),
            t.offered.get(),
            "host {}: each back once",
            h
        );
        prop_assert_eq!(world.engines[h].deferred_waiting(), (0, 0));
        prop_assert_eq!(world.engines[h].held_completions(), 0);
    }
    Ok(())
}

#[test]
fn flags_reach_their_completions_within_the_credit_exactly_once() {
    common::check_cases(24, &(case(), any::<u64>()), 16, |(c, seed)| run(c, seed));
}

/// A stage that returns nothing holds the completions of its queue pair (and those after
/// them), and releases them, with their flags, once it returns; one that is not deferred,
/// given no room, lets packets go uninspected and counted instead of dropping them.
#[test]
fn completions_wait_for_their_flags_and_a_full_stage_is_passed_over() {
    let mut world = World::new(2, 3, Impairments::CLEAN);
    world.configure(1, |e| {
        e.service_credit = ServiceCredit {
            packets: 4,
            bytes: 1 << 20,
        }
    });
    let p = Pair::connect(&mut world, &PairOptions::default());
    let tally = Rc::new(Tally::default());
    world.engines[1]
        .set_services(p.qp[1], vec![stage(false, &tally)])
        .unwrap();
    let data = bytes(2048, true, 0);
    world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[..2048].copy_from_slice(&data);
    let rcq = p.recv_cq[1];
    for i in 0..3u64 {
        common::post_recv(&mut world, &p, i, i * 4096, 2048);
        let sge = [Sge {
            lkey: p.mr[0].lkey,
            addr: p.mr[0].addr,
            len: 2048,
        }];
        world.engines[0]
            .post_send(p.qp[0], &SendWr::new(i, SendOp::Send, &sge))
            .unwrap();
    }
    // 1 KiB packets: 6 payloads, the credit takes 4; the other two go on unseen.
    assert!(world.run_until(
        Duration::from_secs(1),
        |w| w.engines[0].cq_len(p.send_cq[0]) == 3
    ));
    assert_eq!(world.engines[1].cq_len(rcq), 0, "held for their flags");
    assert_eq!(world.engines[1].held_completions(), 3);
    let c = *world.engines[1].counters();
    assert_eq!(
        (tally.offered.get(), c.service_uninspected),
        (4, 2),
        "{c:?}"
    );
    tally.allowance.set(u64::MAX);
    world.engines[1].run_deferred(0);
    let got: Vec<(u64, bool)> = Pair::completions(&mut world, 1, rcq)
        .iter()
        .map(|c| (c.wr_id, c.flags.contains(ServiceFlags::EXECUTABLE)))
        .collect();
    // The first two messages' packets were seen; the third's went uninspected.
    assert_eq!(got, [(0, true), (1, true), (2, false)]);
    assert_eq!(c.service_held_completions, 3);
}

/// A stage beside the path that does not return in time: its queue pair's completions go
/// without its flags once `service_flag_wait` is over, and what it returns later is
/// counted, not lost and not held.
#[test]
fn a_stage_that_keeps_a_completion_waiting_too_long_is_passed_over() {
    let mut world = World::new(2, 5, Impairments::CLEAN);
    world.configure(1, |e| e.service_flag_wait = Duration::from_micros(100));
    let p = Pair::connect(&mut world, &PairOptions::default());
    let tally = Rc::new(Tally::default());
    world.engines[1]
        .set_services(p.qp[1], vec![stage(false, &tally)])
        .unwrap();
    let data = bytes(1024, true, 0);
    world.engines[0].mr_bytes_mut(p.mr[0].lkey).unwrap()[..1024].copy_from_slice(&data);
    common::post_recv(&mut world, &p, 9, 0, 1024);
    let sge = [Sge {
        lkey: p.mr[0].lkey,
        addr: p.mr[0].addr,
        len: 1024,
    }];
    world.engines[0]
        .post_send(p.qp[0], &SendWr::new(9, SendOp::Send, &sge))
        .unwrap();
    assert!(world.run_until(
        Duration::from_secs(1),
        |w| w.engines[0].cq_len(p.send_cq[0]) == 1
    ));
    let rcq = p.recv_cq[1];
    let now = world.now;
    world.engines[1].run_deferred_at(now + Duration::from_micros(50), 0);
    assert_eq!(world.engines[1].cq_len(rcq), 0, "still within its wait");
    world.engines[1].run_deferred_at(now + Duration::from_micros(200), 0);
    let got = Pair::completions(&mut world, 1, rcq);
    assert_eq!(got.len(), 1);
    assert!(got[0].flags.is_empty(), "went without its flags");
    tally.allowance.set(1);
    world.engines[1].run_deferred(0);
    let c = world.engines[1].counters();
    assert_eq!(
        (c.service_flags_uncompleted, c.service_flagged_packets),
        (1, 1)
    );
    assert_eq!(world.engines[1].deferred_waiting(), (0, 0));
}

/// What a landing stage makes of READ data: each byte from itself and its place in the
/// READ's data (so a response that lands again maps to the same bytes).
fn mapped(byte: u8, at: u32) -> u8 {
    byte.wrapping_mul(3).wrapping_add(at as u8)
}

/// Asynchronous, where READ data lands: keeps up to `room` pieces out, returns them mapped as
/// the allowance permits; what it has no room for, the engine's thread maps (`landed`).
#[derive(Debug)]
struct LandLater {
    room: usize,
    out: VecDeque<(sluice_core::policy::Landing, u32, Vec<u8>)>,
    tally: Rc<Tally>,
    /// Pieces mapped on the engine's thread.
    here: Rc<Cell<u64>>,
}

impl Service for LandLater {
    fn name(&self) -> &str {
        "land-later"
    }
    fn in_line(&self) -> bool {
        false
    }
    fn asynchronous(&self) -> bool {
        true
    }
    fn on_landing(&self) -> bool {
        true
    }
    fn offer(&mut self, _p: &ServicePacket<'_>, _payload: &[u8]) -> bool {
        panic!("a landing stage is offered landings only");
    }
    fn landed(&mut self, _qpn: QpNum, offset: u32, bytes: &mut [u8]) {
        self.here.set(self.here.get() + 1);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = mapped(*b, offset + i as u32);
        }
    }
    fn offer_landed(
        &mut self,
        _qpn: QpNum,
        offset: u32,
        bytes: &[u8],
        at: sluice_core::policy::Landing,
    ) -> bool {
        if self.out.len() >= self.room {
            return false;
        }
        self.out.push_back((at, offset, bytes.to_vec()));
        self.tally.took(self.out.len());
        true
    }
    fn collect(
        &mut self,
        out: &mut Vec<Returned>,
        put_back: &mut dyn FnMut(sluice_core::policy::Landing, &[u8]),
    ) {
        let t = &self.tally;
        while t.allowance.get() > 0 {
            let Some((at, offset, mut bytes)) = self.out.pop_front() else {
                break;
            };
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = mapped(*b, offset + i as u32);
            }
            put_back(at, &bytes);
            t.gave_back();
            out.push(Returned {
                psn: sluice_wire::Psn::new(0),
                opcode: sluice_wire::Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                direction: sluice_core::policy::Direction::Receive,
                len: bytes.len() as u32,
                flags: ServiceFlags::NONE,
            });
        }
    }
}

/// READs whose responses a landing stage maps off the engine's thread, on a lossy link
/// (responses lost, re-requested, placed again): each READ completes once, only after all
/// its pieces came back, with every byte mapped exactly once from the bytes the responder
/// sent; what the stage had no room for was mapped on the engine's thread instead.
#[test]
fn landed_reads_complete_once_with_every_byte_mapped_under_loss() {
    common::check_cases(
        16,
        &(
            prop::collection::vec(1u32..20_000, 2..8),
            1usize..16,
            1u64..6,
            any::<bool>(),
            any::<u64>(),
        ),
        8,
        |(sizes, room, cost_us, selective, seed)| {
            let mut world = common::lossy_world(seed, 0.03);
            let p = Pair::connect(&mut world, &common::recovering(selective));
            let tally = Rc::new(Tally::default());
            let here = Rc::new(Cell::new(0));
            world.engines[0]
                .set_services(
                    p.qp[0],
                    vec![Box::new(LandLater {
                        room,
                        out: VecDeque::new(),
                        tally: tally.clone(),
                        here: here.clone(),
                    })],
                )
                .unwrap();
            let mut at = 0u64;
            let mut reads = Vec::new();
            for (i, &len) in sizes.iter().enumerate() {
                let data = bytes(len, false, i as u32);
                world.engines[1].mr_bytes_mut(p.mr[1].lkey).unwrap()
                    [at as usize..at as usize + data.len()]
                    .copy_from_slice(&data);
                let sge = [Sge {
                    lkey: p.mr[0].lkey,
                    addr: p.mr[0].addr + at,
                    len,
                }];
                let op = SendOp::Read {
                    remote_addr: p.mr[1].addr + at,
                    rkey: p.mr[1].rkey,
                };
                world.engines[0]
                    .post_send(p.qp[0], &SendWr::new(i as u64, op, &sge))
                    .unwrap();
                reads.push((at, data));
                at += u64::from(len).next_multiple_of(64);
            }
            let (n, cq) = (sizes.len(), p.send_cq[0]);
            let cost = Duration::from_micros(cost_us);
            let mut next = world.now + cost;
            let want = |i: usize| -> Vec<u8> {
                let data = &reads[i].1;
                data.iter()
                    .enumerate()
                    .map(|(k, &b)| mapped(b, k as u32))
                    .collect()
            };
            // Each READ's buffer is checked when its completion comes: mapped already.
            let mut ids = Vec::new();
            let mut unmapped = None;
            let mut done = false;
            for _ in 0..100_000 {
                if done || world.now.as_nanos() > 30_000_000_000 {
                    break;
                }
                done = world.run_until(Duration::from_secs(30), |w| {
                    while next <= w.now {
                        tally.allowance.set(tally.allowance.get() + 1);
                        w.engines[0].run_deferred(0);
                        next = next + cost;
                    }
                    for c in Pair::completions(w, 0, cq) {
                        assert_eq!(c.status, WcStatus::Success, "{c:?}");
                        let (at, data) = &reads[c.wr_id as usize];
                        let memory = w.engines[0].mr_bytes(p.mr[0].lkey).unwrap();
                        if memory[*at as usize..*at as usize + data.len()]
                            != want(c.wr_id as usize)[..]
                        {
                            unmapped.get_or_insert(c.wr_id);
                        }
                        ids.push(c.wr_id);
                    }
                    ids.len() == n
                });
                if !done {
                    world.now = world.now + cost;
                }
            }
            prop_assert!(done, "not every READ completed");
            prop_assert!(
                unmapped.is_none(),
                "READ {:?} completed before it was mapped",
                unmapped
            );
            ids.sort_unstable();
            prop_assert_eq!(ids, (0..n as u64).collect::<Vec<_>>(), "each once");
            tally.allowance.set(u64::MAX);
            world.engines[0].run_deferred(0);
            prop_assert_eq!(tally.returned.get(), tally.offered.get(), "each back once");
            prop_assert!(tally.peak.get() <= room as u64);
            prop_assert_eq!(world.engines[0].deferred_waiting(), (0, 0));
            let memory = world.engines[0].mr_bytes(p.mr[0].lkey).unwrap();
            for (i, (at, data)) in reads.iter().enumerate() {
                prop_assert!(
                    memory[*at as usize..*at as usize + data.len()] == want(i)[..],
                    "READ {} not mapped exactly once (offered {}, mapped here {})",
                    i,
                    tally.offered.get(),
                    here.get()
                );
            }
            Ok(())
        },
    );
}

/// Runs `world` until `done` (false if not within 30 simulated seconds), with host `host`'s
/// stage returning one payload every `cost_us` microseconds: its returns are events of their
/// own (the engine is driven then, as a driver does when its stage's thread hands work
/// back), so the world never sleeps past them to a timer.
fn drive(
    world: &mut World,
    tally: &Tally,
    host: usize,
    cost_us: u64,
    mut done: impl FnMut(&mut World) -> bool,
) -> bool {
    let cost = Duration::from_micros(cost_us);
    let mut next = world.now + cost;
    while world.now.as_nanos() < 30_000_000_000 {
        let step = Duration::from_nanos(next.as_nanos().saturating_sub(world.now.as_nanos()));
        if world.run_until(step, &mut done) {
            return true;
        }
        world.now = world.now.max(next);
        tally.allowance.set(tally.allowance.get() + 1);
        world.engines[host].run_deferred(0);
        next = next + cost;
    }
    false
}

/// READs whose responses a deferred asynchronous stage on the requester takes one at a time,
/// with a credit far smaller than a READ: past it, responses are dropped and recovered. Only
/// a response the READ takes and has not taken is offered (one past a go-back-N gap would be
/// discarded, and taking the credit it crowded out the re-requested one, so the READ never
/// progressed; one held already under selective repeat was offered when it came first):
/// every READ completes once with its bytes, and the stage saw each response exactly once.
/// Nothing is lost on the wire, so nothing waits for the retransmission timeout: a READ's
/// last responses dropped past the credit are asked for again when the credit comes back.
#[test]
fn reads_through_a_deferred_stage_within_a_small_credit_each_response_once() {
    common::check_cases(
        12,
        &(
            prop::collection::vec(1u32..20_000, 2..6),
            1u32..6,
            1u64..5,
            any::<bool>(),
            any::<u64>(),
        ),
        6,
        |(sizes, packets, cost_us, selective, seed)| {
            let mut world = common::lossy_world(seed, 0.0);
            world.configure(0, |e| {
                e.service_credit = ServiceCredit {
                    packets,
                    bytes: 1 << 20,
                }
            });
            let p = Pair::connect(&mut world, &common::recovering(selective));
            let tally = Rc::new(Tally::default());
            world.engines[0]
                .set_services(p.qp[0], vec![stage(true, &tally)])
                .unwrap();
            let mut at = 0u64;
            let mut reads = Vec::new();
            for (i, &len) in sizes.iter().enumerate() {
                let data = bytes(len, false, i as u32);
                world.engines[1].mr_bytes_mut(p.mr[1].lkey).unwrap()
                    [at as usize..at as usize + data.len()]
                    .copy_from_slice(&data);
                let sge = [Sge {
                    lkey: p.mr[0].lkey,
                    addr: p.mr[0].addr + at,
                    len,
                }];
                let op = SendOp::Read {
                    remote_addr: p.mr[1].addr + at,
                    rkey: p.mr[1].rkey,
                };
                world.engines[0]
                    .post_send(p.qp[0], &SendWr::new(i as u64, op, &sge))
                    .unwrap();
                reads.push((at, data));
                at += u64::from(len).next_multiple_of(64);
            }
            let (n, cq) = (sizes.len(), p.send_cq[0]);
            let done = drive(&mut world, &tally, 0, cost_us, |w| {
                w.engines[0].cq_len(cq) == n
            });
            prop_assert!(done, "not every READ completed");
            common::each_completed_once(&mut world, 0, cq, n)?;
            let memory = world.engines[0].mr_bytes(p.mr[0].lkey).unwrap();
            common::placed_intact(memory, &reads, "READ")?;
            prop_assert!(tally.peak.get() <= u64::from(packets));
            let responses: u64 = sizes.iter().map(|&l| u64::from(l.div_ceil(1024))).sum();
            prop_assert_eq!(tally.offered.get(), responses, "each response once");
            let c = world.engines[0].counters();
            prop_assert_eq!(c.retransmit_timeouts, 0, "{:?}", c);
            Ok(())
        },
    );
}

/// WRITEs and SENDs into a deferred asynchronous stage on the responder with a credit of a
/// few packets, on a link that loses nothing: past the credit, requests are dropped and
/// answered with an RNR NAK at the expected PSN once the credit is back, so the last packets
/// of a message dropped past it (nothing behind them reveals the gap) come again at once,
/// not at the retransmission timeout. Every message completes once with its bytes, the
/// stage saw each request's payload exactly once (a request held already past a gap is not
/// offered again when it is resent), under both recoveries.
#[test]
fn requests_dropped_past_the_credit_come_again_without_the_timeout_each_offered_once() {
    common::check_cases(
        12,
        &(
            prop::collection::vec(1u32..20_000, 2..8),
            1u32..6,
            1u64..5,
            any::<bool>(),
            any::<u64>(),
        ),
        6,
        |(sizes, packets, cost_us, selective, seed)| {
            requests_through_a_small_credit(&sizes, packets, cost_us, selective, seed).map(|_| ())
        },
    );
}

/// One WRITE of 16 packets into a credit of 2 with a stage slower than the link: its last
/// packets are dropped with nothing behind them, and an RNR NAK (not the timer) brings
/// them again, under both recoveries.
#[test]
fn a_writes_tail_dropped_past_the_credit_is_asked_for_with_an_rnr_nak() {
    for selective in [false, true] {
        let (requester, responder) =
            requests_through_a_small_credit(&[16 * 1024], 2, 3, selective, 1).unwrap();
        assert!(responder.drops_service_credit > 0, "{responder:?}");
        assert!(responder.naks_sent_rnr > 0, "{responder:?}");
        assert_eq!(requester.retransmit_timeouts, 0, "{requester:?}");
    }
}

/// WRITEs and SENDs (alternating) of `sizes` into host 1's deferred stage with a credit of
/// `packets`, one payload returned every `cost_us`: checks what every such run must show,
/// and gives both hosts' counters.
fn requests_through_a_small_credit(
    sizes: &[u32],
    packets: u32,
    cost_us: u64,
    selective: bool,
    seed: u64,
) -> Result<(Counters, Counters), TestCaseError> {
    {
        {
            let mut world = common::lossy_world(seed, 0.0);
            world.configure(1, |e| {
                e.service_credit = ServiceCredit {
                    packets,
                    bytes: 1 << 20,
                }
            });
            let p = Pair::connect(&mut world, &common::recovering(selective));
            let tally = Rc::new(Tally::default());
            world.engines[1]
                .set_services(p.qp[1], vec![stage(true, &tally)])
                .unwrap();
            let messages = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| bytes(len, false, i as u32))
                .collect();
            let placed = common::post_writes_and_sends(&mut world, &p, messages);
            let (n, cq) = (sizes.len(), p.send_cq[0]);
            let done = drive(&mut world, &tally, 1, cost_us, |w| {
                w.engines[0].cq_len(cq) == n
            });
            prop_assert!(done, "not every message completed");
            common::each_completed_once(&mut world, 0, cq, n)?;
            let memory = world.engines[1].mr_bytes(p.mr[1].lkey).unwrap();
            common::placed_intact(memory, &placed, "message")?;
            prop_assert!(tally.peak.get() <= u64::from(packets));
            let requests: u64 = sizes.iter().map(|&l| u64::from(l.div_ceil(1024))).sum();
            prop_assert_eq!(tally.offered.get(), requests, "each request once");
            let c = *world.engines[0].counters();
            prop_assert_eq!(c.retransmit_timeouts, 0, "{:?}", c);
            Ok((c, *world.engines[1].counters()))
        }
    }
}
