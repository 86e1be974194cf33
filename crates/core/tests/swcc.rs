//! SwCC's programmability between two engines: a CC header layout a law declares itself,
//! negotiated by both ends, stamped by each end's law and read by the other's; refused on a
//! queue pair that did not agree; and SwCC's opcode mask (a law that asks for READ responses
//! only sees only their events). Packets cross the test link as bytes, ICRC checked.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use sluice_core::control::{
    Actions, Decoupled, Event, EventKind, EventMask, Inline, Law, OpcodeMask, ScrConfig,
};
use sluice_core::*;
use sluice_testkit::*;
use sluice_wire::{
    CcxLayout, Coverage, DeclareError, DeclaredCcx, DeclaredLayout, Field, FieldSpec,
};

/// Each end stamps the request payload it has received from its peer (a field none of the
/// fixed layouts has; covered, nothing may change it), a 12-bit tenant tag (covered), and
/// its clock as the packet leaves (variant: a driver may move it). It records what the
/// peer's packets carried.
#[derive(Debug)]
struct Stamper {
    tenant: u64,
    delivered: Field,
    tag: Field,
    sent_ns: Field,
    seen: Rc<RefCell<Vec<(u64, u64, u64)>>>,
    layout: CcxLayout,
}

fn declaration() -> DeclaredLayout {
    DeclaredLayout::new(
        9,
        &[
            FieldSpec::bytes("delivered", 0, 8, Coverage::Covered),
            FieldSpec::bits("tenant", 64, 12, Coverage::Covered),
            FieldSpec::bytes("sent_ns", 10, 8, Coverage::Variant),
        ],
    )
    .unwrap()
}

impl Stamper {
    fn new(tenant: u64) -> Stamper {
        let d = declaration();
        Stamper {
            tenant,
            delivered: d.field("delivered").unwrap(),
            tag: d.field("tenant").unwrap(),
            sent_ns: d.field("sent_ns").unwrap(),
            seen: Rc::default(),
            layout: d.layout(),
        }
    }
}

impl Law for Stamper {
    /// Request payload received from the peer.
    type Context = u64;

    fn name(&self) -> &'static str {
        "stamper"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[EventKind::Rx, EventKind::Header])
    }

    fn on_event(&mut self, _: Instant, received: &mut u64, event: &Event, _: &mut Actions) {
        match event {
            Event::Rx { bytes, .. } => *received += u64::from(*bytes),
            Event::Header(h) => self.seen.borrow_mut().push((
                h.get(self.delivered),
                h.get(self.tag),
                h.get(self.sent_ns),
            )),
            _ => {}
        }
    }

    fn stamp(&mut self, now: Instant, received: &mut u64, out: &mut DeclaredCcx) {
        out.set(self.delivered, *received);
        out.set(self.tag, self.tenant);
        out.set(self.sent_ns, now.as_nanos());
    }

    fn ccx(&self) -> Option<CcxLayout> {
        Some(self.layout)
    }
}

type Seen = Rc<RefCell<Vec<(u64, u64, u64)>>>;

/// Two hosts, each running a [`Stamper`] (tenant 0xA0 + host), connected with `ccx`.
fn stamped(ccx: [Option<CcxLayout>; 2]) -> (World, Pair, [Seen; 2]) {
    stamped_in(ccx, false)
}

/// As [`stamped`], the laws inline or behind SCR's queues (`decoupled`).
fn stamped_in(ccx: [Option<CcxLayout>; 2], decoupled: bool) -> (World, Pair, [Seen; 2]) {
    let mut world = World::new(2, 11, Impairments::CLEAN);
    let laws = [Stamper::new(0xA0), Stamper::new(0xA1)];
    let seen = [laws[0].seen.clone(), laws[1].seen.clone()];
    for (h, law) in laws.into_iter().enumerate() {
        if decoupled {
            world.set_controller(h, Box::new(Decoupled::new(law, ScrConfig::default())));
        } else {
            world.set_controller(h, Box::new(Inline::new(law)));
        }
    }
    let p = Pair::connect(
        &mut world,
        &PairOptions {
            ccx,
            retry_cnt: 1,
            ..PairOptions::default()
        },
    );
    (world, p, seen)
}

fn write_all(world: &mut World, p: &Pair, count: u64, len: u32) -> Vec<WcStatus> {
    for i in 0..count {
        p.post_write(world, i, i * u64::from(len), len);
    }
    let cq = p.send_cq[0];
    world.run_until(Duration::from_millis(20), |w| {
        w.engines[0].cq_len(cq) == count as usize
    });
    Pair::completions(world, 0, cq)
        .iter()
        .map(|c| c.status)
        .collect()
}

#[test]
fn two_engines_negotiate_a_declared_layout_and_read_each_others_fields() {
    // The negotiation: each end offers its declaration; each agrees to the other's.
    let (a, b) = (declaration(), declaration());
    let agreed = [
        a.agree(Some(b.offer())).unwrap(),
        b.agree(Some(a.offer())).unwrap(),
    ];
    let (mut world, p, seen) = stamped(agreed.map(Some));
    assert_eq!(
        write_all(&mut world, &p, 16, 1024),
        vec![WcStatus::Success; 16]
    );
    assert_eq!(world.rejected_by_wire, 0);
    for e in &world.engines {
        assert_eq!(e.counters().drops_unnegotiated_ccx, 0);
    }
    // The responder saw every request's header: the requester's tag, its clock rising,
    // and nothing delivered to the requester (nothing came its way but ACKs).
    let at_responder = seen[1].borrow();
    assert!(at_responder.len() >= 16, "{}", at_responder.len());
    assert!(at_responder.iter().all(|&(d, t, _)| d == 0 && t == 0xA0));
    assert!(at_responder.windows(2).all(|w| w[0].2 <= w[1].2));
    // The requester saw the responder's ACKs, each carrying what had arrived by then: a
    // count that only grows, in whole packets, ending at everything written.
    let at_requester = seen[0].borrow();
    assert!(!at_requester.is_empty());
    assert!(
        at_requester
            .iter()
            .all(|&(d, t, _)| t == 0xA1 && d % 1024 == 0)
    );
    assert!(at_requester.windows(2).all(|w| w[0].0 <= w[1].0));
    assert_eq!(at_requester.last().unwrap().0, 16 * 1024);
}

#[test]
fn behind_scrs_queues_stamps_lag_by_the_loop_and_no_more() {
    let layout = Some(declaration().layout());
    let (mut world, p, seen) = stamped_in([layout, layout], true);
    assert_eq!(
        write_all(&mut world, &p, 16, 1024),
        vec![WcStatus::Success; 16]
    );
    {
        // The responder stamps its context as each ACK leaves; behind SCR's queues its Rx
        // events reach its law a loop later (2 us to the queue, 1 us per run), and the
        // headers reach the requester's law a loop after they arrive: when the WRITEs
        // complete, the requester has heard a total behind, never ahead.
        let at_requester = seen[0].borrow();
        assert!(at_requester.windows(2).all(|w| w[0].0 <= w[1].0));
        let last = at_requester.last().unwrap().0;
        assert!(last < 16 * 1024, "{last}");
    }
    // Once the loop has drained, the next ACK carries everything received before its
    // request (and at most that request too).
    world.run_until(Duration::from_micros(200), |_| false);
    p.post_write(&mut world, 16, 16 * 1024, 1024);
    let cq = p.send_cq[0];
    world.run_until(Duration::from_millis(5), |w| w.engines[0].cq_len(cq) == 1);
    world.run_until(Duration::from_micros(200), |_| false);
    let last = seen[0].borrow().last().unwrap().0;
    assert!((16 * 1024..=17 * 1024).contains(&last), "{last}");
    assert!(seen[1].borrow().iter().all(|&(_, t, _)| t == 0xA0));
}

#[test]
fn a_peer_that_did_not_agree_is_refused_and_never_sent_a_declared_header() {
    let ours = declaration();
    let other =
        DeclaredLayout::new(9, &[FieldSpec::bytes("delivered", 0, 8, Coverage::Variant)]).unwrap();
    let e = ours.agree(Some(other.offer())).unwrap_err();
    assert!(matches!(e, DeclareError::NotAgreed { .. }));
    assert!(e.to_string().contains("did not agree"), "{e}");
    assert!(ours.agree(None).is_err());

    // Host 1 agreed on nothing: it drops every declared header host 0 sends, and its law
    // hears none; host 1 sends none, so host 0's law hears none either.
    let (mut world, p, seen) = stamped([Some(ours.layout()), None]);
    let statuses = write_all(&mut world, &p, 2, 512);
    assert!(
        statuses.iter().all(|s| *s != WcStatus::Success),
        "{statuses:?}"
    );
    assert!(world.engines[1].counters().drops_unnegotiated_ccx > 0);
    assert!(seen[0].borrow().is_empty() && seen[1].borrow().is_empty());

    // Host 1 agreed on another declaration with the same id: its packets say so (another
    // length and coverage) and are dropped just the same.
    let (mut world, p, seen) = stamped([Some(ours.layout()), Some(other.layout())]);
    let statuses = write_all(&mut world, &p, 2, 512);
    assert!(
        statuses.iter().all(|s| *s != WcStatus::Success),
        "{statuses:?}"
    );
    assert!(world.engines[1].counters().drops_unnegotiated_ccx > 0);
    assert!(seen[1].borrow().is_empty());
}

/// Records the ACK events it is given, with the opcode mask it was built with.
#[derive(Debug)]
struct AckCounter {
    opcodes: OpcodeMask,
    acks: Rc<RefCell<u32>>,
}

impl Law for AckCounter {
    type Context = ();

    fn name(&self) -> &'static str {
        "ack-counter"
    }

    fn interest(&self) -> EventMask {
        EventMask::of(&[EventKind::Ack, EventKind::Tx, EventKind::Timer])
    }

    fn opcodes(&self) -> OpcodeMask {
        self.opcodes
    }

    fn on_event(&mut self, _: Instant, _: &mut (), event: &Event, _: &mut Actions) {
        if matches!(event, Event::Ack { .. }) {
            *self.acks.borrow_mut() += 1;
        }
    }
}

/// Runs `writes` one-packet WRITEs, then `reads` one-packet READs, one at a time, under a
/// law with `opcodes`; returns how many ACK events the law heard.
fn acks_heard(opcodes: OpcodeMask, writes: u64, reads: u64) -> u32 {
    let mut world = World::new(2, 5, Impairments::CLEAN);
    let acks = Rc::new(RefCell::new(0));
    let law = AckCounter {
        opcodes,
        acks: acks.clone(),
    };
    world.set_controller(0, Box::new(Inline::new(law)));
    let p = Pair::connect(&mut world, &PairOptions::default());
    let cq = p.send_cq[0];
    for i in 0..writes + reads {
        let remote_addr = p.mr[1].addr + i * 512;
        let rkey = p.mr[1].rkey;
        let op = if i < writes {
            SendOp::Write { remote_addr, rkey }
        } else {
            SendOp::Read { remote_addr, rkey }
        };
        let sgl = [Sge {
            lkey: p.mr[0].lkey,
            addr: p.mr[0].addr + i * 512,
            len: 512,
        }];
        world.engines[0]
            .post_send(p.qp[0], &SendWr::new(i, op, &sgl))
            .unwrap();
        world.run_until(Duration::from_millis(5), |w| w.engines[0].cq_len(cq) == 1);
        let done = Pair::completions(&mut world, 0, cq);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].status, WcStatus::Success);
    }
    acks.take()
}

#[test]
fn a_law_that_asks_for_read_responses_hears_only_their_events() {
    let reads = OpcodeMask::READ_RESPONSES;
    // Every one-packet request is confirmed by one response: an ACK or a READ response.
    assert_eq!(acks_heard(OpcodeMask::ALL, 6, 0), 6);
    assert_eq!(acks_heard(OpcodeMask::ALL, 0, 4), 4);
    assert_eq!(acks_heard(OpcodeMask::ALL, 6, 4), 10);
    // Masked: the WRITEs' ACKs never reach the law, the READ responses all do.
    assert_eq!(acks_heard(reads, 6, 0), 0);
    assert_eq!(acks_heard(reads, 0, 4), 4);
    assert_eq!(acks_heard(reads, 6, 4), 4);
    // Tx events are filtered by the opcode of the request that left: none is a response.
    assert_eq!(acks_heard(OpcodeMask::NONE, 6, 4), 0);
}
