//! The traffic of each test: what each side posts, what it waits for, what it times.

use std::time::{Duration, Instant};

use sluice_core::weir::{Decision, Doorbell, Weir, WeirConfig, WeirError};
use sluice_core::{Completion, SendOp, SendWr, Sge, WcStatus};

use super::cost::PacerTimers;
use super::pacer::PacerReport;
use super::session::{QpEnd, Session};
use super::verify;
use super::{Options, PerfError, Role, Verb};

/// What one run of a test measured on this side.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    /// Messages completed (and timed).
    pub(crate) messages: u64,
    pub(crate) elapsed: Duration,
    /// One sample per message, nanoseconds (latency tests only).
    pub(crate) samples: Vec<u64>,
    /// With `--tenant`, each QP's messages completed and when its last one completed
    /// (since the start).
    pub(crate) per_qp: Vec<(u64, Duration)>,
    /// With `--tenant`, each QP's message latencies (post to completion, nanoseconds): a
    /// latency tenant's QPs (`lat`) only; empty for the others.
    pub(crate) qp_samples: Vec<Vec<u64>>,
    /// `--pacer weir`: what the pacer did.
    pub(crate) pacer: Option<PacerReport>,
}

/// The most latency samples a QP keeps (8 bytes each).
const MAX_QP_SAMPLES: usize = 1 << 22;

/// What one QP of a bandwidth run posts: its operation, message size and messages in
/// flight (the test's for every QP, or its tenant's).
#[derive(Debug, Clone, Copy)]
struct Flow {
    verb: Verb,
    size: u32,
    depth: u32,
    /// Time every message, post to completion (every one is signaled).
    timed: bool,
}

/// Polls the device once. A side with nothing to do spins (polls again) for `spin`, then
/// sleeps on the socket until a packet or the next timer; with `--busy-poll` (`spin` is
/// `Duration::MAX`) it never sleeps. A short spin catches a reply that comes within
/// microseconds without the cost of a wake-up (in a VM a wake-up is several microseconds);
/// sleeping after it keeps an idle side off the CPU. The sleep is capped so that stall
/// timeouts and the peer's end of test are noticed within 10 ms (18 ms at worst: see
/// `Device::wait`).
///
/// Time is the poll's own clock reading (`Device::polled_at`): a spinning side reads the
/// clock once per round, not three times.
pub(super) fn pump(s: &mut Session) -> Result<(), PerfError> {
    pump_until(s, None)
}

/// A sleep shorter than this ends late (a wake-up costs several microseconds in a VM, and
/// each is a system call): a pacer credit due sooner is waited for by spinning.
const SHORTEST_SLEEP: Duration = Duration::from_micros(20);

/// [`pump`], with a sleep that ends by `due` too (the pacer's next credit): when that is
/// less than [`SHORTEST_SLEEP`] away, no sleep at all.
fn pump_until(s: &mut Session, due: Option<sluice_core::Instant>) -> Result<(), PerfError> {
    if s.dev.poll()? {
        s.idle_since = None;
        return Ok(());
    }
    // Between idle polls, one pass through the scheduler (`sched_yield`). Without it, in
    // some turns a spinning side saw the datagram it waited for only once it went to sleep
    // (p99 = the spin + 2 us) or, never sleeping, up to a scheduler tick later (maximum
    // 4 ms). `perf sched` showed no other task waiting for the core, so what the pass
    // releases is not identified. It shortens the latency tail and leaves the median as it
    // was (the measurements are in CHANGELOG.md).
    std::thread::yield_now();
    if s.spin == Duration::MAX {
        return Ok(());
    }
    let now = s.dev.polled_at();
    if now - *s.idle_since.get_or_insert(now) < s.spin {
        return Ok(());
    }
    let mut cap = Duration::from_millis(10);
    if let Some(due) = due {
        if due <= now || due - now < SHORTEST_SLEEP {
            return Ok(());
        }
        cap = cap.min(due - now);
    }
    s.dev.wait(Some(cap))?;
    // Spin again the next time there is nothing to do: the wait may have handed what
    // arrived to the engine itself, so the next poll finds nothing and could not say so.
    s.idle_since = None;
    Ok(())
}

/// The next completion, if any; an unsuccessful one is a transport error.
pub(super) fn next_completion(s: &mut Session) -> Result<Option<Completion>, PerfError> {
    let cq = s.cq;
    match s.dev.engine().poll_cq(cq) {
        Ok(Some(c)) if c.status == WcStatus::Success => {
            if !c.flags.is_empty() {
                s.flagged_completions += 1;
            }
            Ok(Some(c))
        }
        Ok(Some(c)) => {
            let what = format!(
                "QP {:#x}: work request {} completed with {:?}",
                c.qp.0, c.wr_id, c.status
            );
            s.last_error_completion = Some(what.clone());
            Err(s.transport_error(what))
        }
        Ok(None) => Ok(None),
        Err(_) => Err(s.transport_error("completion queue overrun".into())),
    }
}

/// The operation a requester posts for `verb` on `qp`, reaching `size` bytes of the peer.
fn send_op(verb: Verb, qp: &QpEnd, compare_swap: bool, n: u64) -> SendOp {
    match verb {
        Verb::Write => SendOp::Write {
            remote_addr: qp.remote_addr,
            rkey: qp.remote_rkey,
        },
        Verb::Read => SendOp::Read {
            remote_addr: qp.remote_addr,
            rkey: qp.remote_rkey,
        },
        Verb::Send => SendOp::Send,
        Verb::Atomic if compare_swap => SendOp::CompareSwap {
            remote_addr: qp.remote_addr,
            rkey: qp.remote_rkey,
            compare: n,
            swap: n + 1,
        },
        Verb::Atomic => SendOp::FetchAdd {
            remote_addr: qp.remote_addr,
            rkey: qp.remote_rkey,
            add: 1,
        },
    }
}

/// write-bw `--verify`: message `seq` of the QP `qp` lands in the slot at the server that
/// its source has here (slot `seq` mod `-t` of the QP's; the server's slots for the QP
/// begin at the address it gave), and its immediate says where, for the server's check.
///
/// Why a slot is never written over before the server checked it: this side posts message
/// `seq` only once message `seq - tx_depth`, the slot's previous message, completed, i.e.
/// once the server's ACK covering it arrived. The server sends that ACK only after it
/// checked the message: `Device::poll` sends what the engine owes *before* it receives,
/// so the ACK for a message received in one poll leaves in the next, and the server's
/// loop (`bw_responder`) polls every completion, checking its slot, between the two.
/// A duplicate of an old WRITE (a retransmission) is acknowledged again, never written
/// again (the responder's `on_duplicate`).
fn landing_write(qp: &QpEnd, slots: verify::Slots, seq: u64) -> SendOp {
    let offset = slots.offset_in_qp(seq);
    SendOp::WriteWithImm {
        remote_addr: qp.remote_addr + offset as u64,
        rkey: qp.remote_rkey,
        // The slots of a QP are at most `MAX_SLOT_BYTES` (1 GiB): the offset fits.
        imm: offset as u32,
    }
}

/// A local buffer: a region's key and an address in it.
pub(super) type Buffer = (u32, u64);

#[allow(clippy::too_many_arguments)]
pub(super) fn post(
    s: &mut Session,
    q: usize,
    op: SendOp,
    (lkey, addr): Buffer,
    size: u32,
    wr_id: u64,
    signaled: bool,
    inline_size: u32,
) -> Result<(), PerfError> {
    let qp = &s.qps[q];
    let sge = [Sge {
        lkey,
        addr,
        len: size,
    }];
    let inline = size <= inline_size
        && matches!(
            op,
            SendOp::Send | SendOp::Write { .. } | SendOp::WriteWithImm { .. }
        );
    let wr = SendWr {
        signaled,
        inline,
        ..SendWr::new(wr_id, op, &sge)
    };
    let qpn = qp.qpn;
    s.dev.engine().post_send(qpn, &wr)?;
    Ok(())
}

/// Where message `seq` (of this size) of the QP at `q` is sent from (WRITE, SEND) or lands
/// (READ): the start of the run's region, as in perftest; with `--verify`, the message's
/// own slot (or that start, where one message at a time is in flight), filled with the
/// pattern of the QP's next message (numbered over every size of the run, as its receiver
/// counts them), or cleared for a READ (so that a READ that brought nothing fails).
fn message_buffer(s: &mut Session, verb: Verb, q: usize, seq: u64, size: u32) -> Buffer {
    if let (Some(run), Verb::Read) = (&s.offload, verb) {
        let slots = run.slots;
        return (slots.mr.lkey, slots.mr.addr + slots.offset(q, seq) as u64);
    }
    let Some(v) = s.verify.as_mut() else {
        return (s.mr.lkey, s.mr.addr);
    };
    let (lkey, addr, offset) = match v.slots {
        Some(slots) => (slots.mr.lkey, slots.mr.addr, slots.offset(q, seq)),
        None => (s.mr.lkey, s.mr.addr, 0),
    };
    if let Some(b) = s.dev.engine().mr_bytes_mut(lkey) {
        let buf = &mut b[offset..offset + size as usize];
        match verb {
            Verb::Read => buf.fill(0),
            _ => v.fill_next(buf, q),
        }
    }
    (lkey, addr + offset as u64)
}

/// `--verify`: checks what READ `seq` of the QP at `q` brought (into the buffer
/// `message_buffer` gave it) against the memory the responder serves.
fn check_read(s: &mut Session, q: usize, seq: u64, size: u32) {
    if let Some(run) = s.offload.as_mut() {
        let offset = run.slots.offset(q, seq);
        if let Some(b) = s.dev.engine().mr_bytes_mut(run.slots.mr.lkey) {
            run.completed(&mut b[offset..offset + size as usize], seq, size);
        }
        return;
    }
    let Some(v) = s.verify.as_mut() else {
        return;
    };
    let (lkey, offset) = match v.slots {
        Some(slots) => (slots.mr.lkey, slots.offset(q, seq)),
        None => (s.mr.lkey, 0),
    };
    if let Some(b) = s.dev.engine_ref().mr_bytes(lkey) {
        let got = &b[offset..offset + size as usize];
        v.check(got, verify::READ_SOURCE, s.qps[q].qpn.0, seq);
    }
}

/// `--verify`: checks the `len` bytes the peer's next message on the QP at `q` left in
/// receive `wr_id`'s buffer (or in the receive area, where one message at a time lands).
fn check_received(s: &mut Session, q: usize, wr_id: u64, len: u32) {
    let Some(v) = s.verify.as_mut() else {
        return;
    };
    let msg = v.received[q];
    v.received[q] += 1;
    let (lkey, offset) = match v.slots {
        Some(slots) => (slots.mr.lkey, slots.offset(q, wr_id)),
        None => (s.mr.lkey, s.recv_offset as usize),
    };
    if let Some(b) = s.dev.engine_ref().mr_bytes(lkey) {
        let got = &b[offset..offset + len as usize];
        v.check(got, verify::tag(q, msg), s.qps[q].qpn.0, msg);
    }
}

/// write-bw `--verify` at the server: checks the message of the QP at `q` a WRITE with
/// immediate left `len` bytes of at `offset` (its immediate) in the QP's slots.
fn check_landed(s: &mut Session, q: usize, offset: u32, len: u32) {
    let Some(v) = s.verify.as_mut() else {
        return;
    };
    let Some(slots) = v.slots else {
        return;
    };
    let msg = v.received[q];
    v.received[q] += 1;
    let qpn = s.qps[q].qpn.0;
    let (offset, len) = (offset as usize, len as usize);
    if offset + len > slots.per_qp_bytes() {
        // Outside this QP's slots (a client with a larger -t or -s than ours, or a forged
        // immediate): what is there is another message's.
        v.misplaced(qpn, msg, offset);
        return;
    }
    if let Some(b) = s.dev.engine_ref().mr_bytes(slots.mr.lkey) {
        let at = slots.offset(q, 0) + offset;
        v.check(&b[at..at + len], verify::tag(q, msg), qpn, msg);
    }
}

fn post_recv(s: &mut Session, q: usize, wr_id: u64) -> Result<(), PerfError> {
    let qp = &s.qps[q];
    if s.write_imm {
        // A WRITE with immediate writes where its RETH says: the receive holds nothing.
        let qpn = qp.qpn;
        s.dev
            .engine()
            .post_recv(qpn, &sluice_core::RecvWr { wr_id, sgl: &[] })?;
        return Ok(());
    }
    // Every receive can hold the largest message of the run.
    let (lkey, addr) = match s.verify.as_ref().and_then(|v| v.slots) {
        Some(slots) => (slots.mr.lkey, slots.mr.addr + slots.offset(q, wr_id) as u64),
        None => (s.mr.lkey, s.mr.addr + s.recv_offset),
    };
    let sge = [Sge {
        lkey,
        addr,
        len: s.recv_size,
    }];
    let qpn = qp.qpn;
    s.dev
        .engine()
        .post_recv(qpn, &sluice_core::RecvWr { wr_id, sgl: &sge })?;
    Ok(())
}

/// Bandwidth, requester side: keep `tx_depth` messages in flight on every QP, ask for a
/// completion every `cq_mod`, until each QP completed its iterations (or the duration passed).
pub(crate) fn bw_requester(s: &mut Session, o: &Options, size: u32) -> Result<Measured, PerfError> {
    let flow = Flow {
        verb: o.test.verb(),
        size,
        depth: o.tx_depth,
        timed: false,
    };
    drive(s, o, &vec![flow; s.qps.len()])
}

/// Bandwidth with `--tenant`: each QP posts its tenant's operation and size, with its
/// tenant's depth; each QP's count and time are kept for the per-tenant report.
pub(crate) fn bw_tenants(s: &mut Session, o: &Options) -> Result<Measured, PerfError> {
    let flows: Vec<Flow> = (0..s.qps.len())
        .map(|q| {
            let t = o.tenants[o.tenant_of(q).expect("every QP has a tenant")];
            Flow {
                verb: t.verb,
                size: t.size.expect("set by Options::with_tenants"),
                depth: t.tx_depth.expect("set by Options::with_tenants"),
                timed: t.latency,
            }
        })
        .collect();
    drive(s, o, &flows)
}

/// `--pacer weir` in the requester's loop: the pacer, and each QP's posts it holds (their
/// operation and buffer, by `seq` mod the QP's depth), to post their pieces from.
///
/// A slot is free again once its post completed for the application, which comes after
/// every piece of it was doorbelled: `drive` posts `seq + depth` only after `seq`
/// completed.
struct Paced {
    weir: Weir,
    held: Vec<Vec<(SendOp, Buffer)>>,
    /// The rate (bit/s) and delay (ns) after the last completion that left work in flight,
    /// and the lowest rate: Weir goes back to line rate and forgets its delay once the
    /// run drains, so its state at the end says nothing of the run.
    busy: Option<(u64, Option<f64>)>,
    lowest: u64,
    /// The time of the last turn's doorbells.
    last_turn: sluice_core::Instant,
    /// The clock, read at the start of each turn and after its pump: a poll's own reading
    /// (`Device::polled_at`) may be from before a sleep, or before the run's setup, and
    /// would add that to every delay Weir measures.
    now: sluice_core::Instant,
    /// The sampled cost of Weir's calls (`cost.rs`).
    timers: PacerTimers,
}

impl Paced {
    /// One pacer for the session's engine, sized for its QPNs and the flows' depths.
    fn new(s: &Session, cfg: &WeirConfig, flows: &[Flow]) -> Result<Paced, PerfError> {
        let depth = flows.iter().map(|f| f.depth).max().unwrap_or(1);
        let max_qpn = s.qps.iter().map(|q| q.qpn.0 + 1).max().unwrap_or(1);
        let weir = Weir::new(WeirConfig {
            max_qpn,
            // The application's queue per QP, and the pieces in flight on the engine: as
            // many as its send queue holds, every piece a WR of its own.
            max_wqes: depth,
            sq_depth: s.send_depth,
            ..*cfg
        })
        .map_err(|e| PerfError::Usage(format!("--pacer weir: {e}")))?;
        let held = flows
            .iter()
            .map(|f| vec![(SendOp::Send, (0, 0)); f.depth as usize])
            .collect();
        let lowest = weir.rate();
        Ok(Paced {
            weir,
            held,
            busy: None,
            lowest,
            last_turn: s.dev.now(),
            now: s.dev.now(),
            timers: PacerTimers::new(),
        })
    }

    /// Posts doorbell `d` to the engine: its piece of the held post, signaled, with the
    /// pacer's tag as the engine's `wr_id`.
    /// Posts `d` and, if it opens a run (`max_batch` above 1), the rest of the run at
    /// once, at `at`, the time the run was handed out.
    fn ring_run(
        &mut self,
        s: &mut Session,
        mut d: Doorbell,
        at: sluice_core::Instant,
        inline_size: u32,
    ) -> Result<(), PerfError> {
        loop {
            self.ring(s, d, inline_size)?;
            if !d.more {
                return Ok(());
            }
            let weir = &mut self.weir;
            match self.timers.doorbell.time(|| weir.poll_doorbell(at)) {
                Some(next) => d = next,
                None => return Ok(()),
            }
        }
    }

    fn ring(&self, s: &mut Session, d: Doorbell, inline_size: u32) -> Result<(), PerfError> {
        let q = s.index_of(d.qp);
        let slots = self.held[q].len() as u64;
        let (op, (lkey, addr)) = self.held[q][(d.wr_id % slots) as usize];
        let at = u64::from(d.offset);
        let op = match op {
            SendOp::Write { remote_addr, rkey } => SendOp::Write {
                remote_addr: remote_addr + at,
                rkey,
            },
            SendOp::Read { remote_addr, rkey } => SendOp::Read {
                remote_addr: remote_addr + at,
                rkey,
            },
            // A SEND is never split (`validate`), nor an atomic paced.
            other => other,
        };
        post(s, q, op, (lkey, addr + at), d.len, d.tag, true, inline_size)
    }

    /// Rings every doorbell whose credit fell due by the turn's clock reading.
    ///
    /// A credit falls due `size / rate` after the doorbell before it and does not
    /// accumulate, and the engine sends what was posted only at the next poll. Handed one
    /// time per turn, Weir would release one doorbell per loop turn (a turn is microseconds,
    /// a 4 KiB credit at 100 Gbit/s 328 ns), one packet per system call. So each credit
    /// that fell due since the last turn is spent at its own due time: a turn rings what
    /// the rate allows over the time since the last one, and no more. That time is capped
    /// at [`SHORTEST_SLEEP`], so that a slow turn (one that posted thousands of WRs) does not
    /// release a burst Weir's non-accumulating credit is there to prevent. A doorbell's time
    /// is then up to one turn before the poll that hands it to the engine, which the delay
    /// Weir measures includes.
    fn ring_due(&mut self, s: &mut Session, inline_size: u32) -> Result<(), PerfError> {
        let now = self.now;
        let since = self.last_turn.max(sluice_core::Instant::from_nanos(
            now.as_nanos()
                .saturating_sub(SHORTEST_SLEEP.as_nanos() as u64),
        ));
        while let Some(due) = self.weir.next_timeout().filter(|&due| due <= now) {
            let weir = &mut self.weir;
            let at = due.max(since);
            let Some(d) = self.timers.doorbell.time(|| weir.poll_doorbell(at)) else {
                break;
            };
            self.ring_run(s, d, at, inline_size)?;
        }
        self.last_turn = now;
        Ok(())
    }

    /// The application's completion for the engine's `c`, if it gets one, timed by the
    /// engine's stamp (`Completion::time`: the engine's clock when the packet that completed
    /// it was handled). The engine's clock is the device's, the host's here too, so the
    /// clocks are synchronised as one.
    fn complete(&mut self, mut c: Completion) -> Result<Option<Completion>, WeirError> {
        let now = self.now;
        let weir = &mut self.weir;
        let app = self.timers.completion.time(|| {
            if weir.sync_due() {
                weir.sync(now, now);
            }
            weir.on_completion(c.qp, c.wr_id, c.time, c.status == WcStatus::Success)
        })?;
        if self.weir.active_qps() > 0 {
            let rate = self.weir.rate();
            self.busy = Some((rate, self.weir.delay()));
            self.lowest = self.lowest.min(rate);
        }
        Ok(app.map(|a| {
            c.wr_id = a.wr_id;
            c.byte_len = a.len;
            c
        }))
    }
}

/// Keeps each QP's `depth` messages in flight until it completed its iterations (or the
/// duration passed).
fn drive(s: &mut Session, o: &Options, flows: &[Flow]) -> Result<Measured, PerfError> {
    let iterations = if o.duration.is_some() {
        u64::MAX
    } else {
        o.iterations()
    };
    let n = s.qps.len();
    let mut finished_at = vec![Duration::ZERO; n];
    // A timed QP's post times (ns since the start) of its messages in flight, by `seq` mod
    // its depth, and its samples.
    let mut sent_at: Vec<Vec<u64>> = flows
        .iter()
        .map(|f| vec![0; if f.timed { f.depth as usize } else { 0 }])
        .collect();
    let mut samples: Vec<Vec<u64>> = vec![Vec::new(); n];
    let mut posted = vec![0u64; n];
    let mut completed = vec![0u64; n];
    let mut last_signaled = vec![0u64; n];
    // READs checked (`--verify`): those up to the last completion, which RC's ordering
    // says have all completed.
    let mut checked = vec![0u64; n];
    // The QPs that may have room for more (every one at first, then those with a new
    // completion; one may be listed twice), and how many posted their last message: a round
    // costs what completed, not a pass over every QP (16,384 of them take tens of us, and
    // a round is one poll of the device).
    let mut room: Vec<usize> = (0..n).collect();
    let mut all_posted = 0;
    let start = Instant::now();
    let stop_at = o.duration.map(|d| start + d);
    let mut last_progress = start;
    let mut stopping = false;
    let mut paced = match &o.pacer {
        Some(cfg) => Some(Paced::new(s, cfg, flows)?),
        None => None,
    };
    loop {
        if let Some(t) = stop_at {
            if !stopping && Instant::now() >= t {
                stopping = true;
            }
        }
        if let Some(p) = paced.as_mut() {
            p.now = s.dev.now();
        }
        for q in room.drain(..) {
            let Flow {
                verb,
                size,
                depth,
                timed,
            } = flows[q];
            let cq_mod = if timed {
                1
            } else {
                u64::from(o.cq_mod.min(depth))
            };
            while !stopping && posted[q] < iterations && posted[q] - completed[q] < u64::from(depth)
            {
                let seq = posted[q];
                let signaled = (seq + 1) % cq_mod == 0 || seq + 1 == iterations;
                let op = match s.verify.as_ref().and_then(|v| v.slots) {
                    Some(slots) if s.write_imm => landing_write(&s.qps[q], slots, seq),
                    _ => send_op(verb, &s.qps[q], o.compare_swap, seq),
                };
                let buffer = message_buffer(s, verb, q, seq, size);
                if timed {
                    sent_at[q][(seq % u64::from(depth)) as usize] =
                        start.elapsed().as_nanos() as u64;
                }
                match paced.as_mut() {
                    None => post(s, q, op, buffer, size, seq, signaled, o.inline_size)?,
                    Some(p) => {
                        p.held[q][(seq % u64::from(depth)) as usize] = (op, buffer);
                        let qpn = s.qps[q].qpn;
                        let (weir, now) = (&mut p.weir, p.now);
                        match p
                            .timers
                            .post
                            .time(|| weir.post(qpn, seq, size, signaled, now))
                        {
                            Ok(Decision::Ring(d)) => p.ring_run(s, d, now, o.inline_size)?,
                            Ok(Decision::Hold { .. }) => {}
                            Err(e) => return Err(PerfError::Usage(format!("--pacer weir: {e}"))),
                        }
                    }
                }
                posted[q] += 1;
                if signaled {
                    last_signaled[q] = seq + 1;
                }
                if posted[q] == iterations {
                    all_posted += 1;
                }
            }
        }
        if let Some(p) = paced.as_mut() {
            p.ring_due(s, o.inline_size)?;
        }
        pump_until(s, paced.as_ref().and_then(|p| p.weir.next_timeout()))?;
        if let Some(p) = paced.as_mut() {
            p.now = s.dev.now();
        }
        let mut swallowed = false;
        while let Some(c) = next_completion(s)? {
            let c = match paced.as_mut() {
                None => c,
                Some(p) => match p
                    .complete(c)
                    .map_err(|e| s.transport_error(format!("--pacer weir: {e}")))?
                {
                    Some(c) => c,
                    // A piece's or an unsignaled post's: the engine's send queue has room
                    // again, which the next turn's doorbells use. It is progress too: with
                    // 16,384 QPs served in turn at -Q 100, every QP reached its first
                    // signaled post only after more than the stall timeout, and the run was
                    // given up with a million messages delivered.
                    None => {
                        swallowed = true;
                        continue;
                    }
                },
            };
            let q = s.index_of(c.qp);
            completed[q] = completed[q].max(c.wr_id + 1);
            finished_at[q] = start.elapsed();
            let Flow { depth, timed, .. } = flows[q];
            if timed && samples[q].len() < MAX_QP_SAMPLES {
                let at = sent_at[q][(c.wr_id % u64::from(depth)) as usize];
                samples[q].push((finished_at[q].as_nanos() as u64).saturating_sub(at));
            }
            if flows[q].verb == Verb::Read {
                while checked[q] < completed[q] {
                    check_read(s, q, checked[q], flows[q].size);
                    checked[q] += 1;
                }
            }
            room.push(q);
            last_progress = Instant::now();
        }
        if swallowed {
            last_progress = Instant::now();
        }
        // Done when every QP's last signaled message completed (and, by iterations, when
        // every message was posted): looked at only once nothing more will be posted.
        let done =
            (stopping || all_posted == n) && (0..n).all(|q| completed[q] >= last_signaled[q]);
        if done {
            break;
        }
        if last_progress.elapsed() > o.stall_timeout {
            return Err(
                s.transport_error(format!("no message completed for {:?}", o.stall_timeout))
            );
        }
    }
    Ok(Measured {
        messages: completed.iter().sum(),
        elapsed: start.elapsed(),
        samples: Vec::new(),
        per_qp: completed.into_iter().zip(finished_at).collect(),
        qp_samples: samples,
        pacer: paced.map(|p| {
            let mut r = PacerReport::of(&p.weir, p.busy, p.lowest);
            r.cost = Some(p.timers.summary());
            r
        }),
    })
}

/// Posts the receives a test needs before its traffic starts: `rx_depth` per QP for the SEND
/// bandwidth server (and the WRITE one with `--verify`, for the WRITEs with immediate), a
/// window on QP 0 for SEND latency on both sides.
pub(crate) fn post_initial_receives(s: &mut Session, o: &Options) -> Result<(), PerfError> {
    if !o.tenants.is_empty() {
        // `--tenant`: the server's receives for the SEND tenants' QPs.
        if s.role == Role::Server {
            for q in 0..s.qps.len() {
                let tenant = o.tenant_of(q).map(|t| o.tenants[t].verb);
                if tenant == Some(Verb::Send) {
                    for i in 0..u64::from(o.rx_depth) {
                        post_recv(s, q, i)?;
                    }
                }
            }
        }
        return Ok(());
    }
    if o.test.verb() != Verb::Send && !(s.write_imm && s.role == Role::Server) {
        return Ok(());
    }
    let (qps, depth) = match (o.test.is_latency(), s.role) {
        (false, Role::Server) => (s.qps.len(), o.rx_depth),
        (true, _) => (1, o.rx_depth.min(64)),
        (false, Role::Client) => return Ok(()),
    };
    for q in 0..qps {
        for i in 0..u64::from(depth) {
            post_recv(s, q, i)?;
        }
    }
    Ok(())
}

/// The responder of a test where it only serves (and, for SEND, reposts receives): runs
/// until the client starts the end-of-test exchange. Counts the messages received.
pub(crate) fn bw_responder(s: &mut Session) -> Result<Measured, PerfError> {
    let mut received = 0u64;
    let mut start = None;
    let mut last = Instant::now();
    loop {
        pump(s)?;
        while let Some(c) = next_completion(s)? {
            let q = s.index_of(c.qp);
            received += 1;
            start.get_or_insert_with(Instant::now);
            last = Instant::now();
            match c.imm {
                Some(offset) if s.write_imm => check_landed(s, q, offset, c.byte_len),
                _ => check_received(s, q, c.wr_id, c.byte_len),
            }
            post_recv(s, q, c.wr_id)?;
        }
        // Only now, every completion polled and checked, may the next poll send the ACKs
        // of what the last one received (see `landing_write`).
        if s.peer_finished()? {
            break;
        }
    }
    Ok(Measured {
        messages: received,
        elapsed: start.map_or(Duration::ZERO, |t| last - t),
        samples: Vec::new(),
        per_qp: Vec::new(),
        qp_samples: Vec::new(),
        pacer: None,
    })
}

/// Latency: one message at a time on QP 0, as perftest's `run_iter_lat*` do.
pub(crate) fn latency(s: &mut Session, o: &Options, size: u32) -> Result<Measured, PerfError> {
    match (o.test.verb(), s.role) {
        (Verb::Write, _) if s.soft_cipher.is_some() => write_ping_pong_doorbell(s, o, size),
        (Verb::Write, _) => write_ping_pong(s, o, size),
        (Verb::Send, _) => send_ping_pong(s, o, size),
        // READ and atomics: the server only serves (see `bw_responder`).
        _ => round_trips(s, o, size),
    }
}

/// READ or atomic latency: the client's requests, one at a time; a sample is a round trip.
fn round_trips(s: &mut Session, o: &Options, size: u32) -> Result<Measured, PerfError> {
    let iterations = o.iterations();
    let mut samples = Vec::with_capacity(iterations.min(1 << 24) as usize);
    let start = Instant::now();
    let deadline = o.duration.map(|d| start + d);
    let mut i = 0;
    while i < iterations && deadline.is_none_or(|d| Instant::now() < d) {
        let t0 = Instant::now();
        let op = send_op(o.test.verb(), &s.qps[0], o.compare_swap, i);
        let buffer = message_buffer(s, o.test.verb(), 0, i, size);
        post(s, 0, op, buffer, size, i, true, o.inline_size)?;
        wait_for_send(s, o, i, &mut 0)?;
        samples.push(t0.elapsed().as_nanos() as u64);
        if o.test.verb() == Verb::Read {
            check_read(s, 0, i, size);
        }
        i += 1;
    }
    Ok(Measured {
        messages: i,
        elapsed: start.elapsed(),
        samples,
        per_qp: Vec::new(),
        qp_samples: Vec::new(),
        pacer: None,
    })
}

/// WRITE ping-pong (perftest's `run_iter_lat_write`): each side's k-th WRITE carries k (mod
/// 256) in its last byte; a side writes its k-th once the peer's k-th landed, except that the
/// server writes its first at once, and waits for each WRITE's completion (its ACK) before it
/// looks for the peer's next, as perftest does. A sample is half the time between the
/// client's writes.
fn write_ping_pong(s: &mut Session, o: &Options, size: u32) -> Result<Measured, PerfError> {
    let iterations = o.iterations();
    let server = s.role == Role::Server;
    // Only the client times (it reports the samples); the server keeps no stamps.
    let keep = if server {
        0
    } else {
        iterations.min(1 << 24) as usize
    };
    let mut stamps = Vec::with_capacity(keep);
    let (mut sent, mut received) = (0u64, 0u64);
    let start = Instant::now();
    while sent < iterations || received < iterations {
        if received < iterations && !(server && sent == 0) {
            received += 1;
            wait_for_mark(s, o, size, received)?;
            // The mark (the last byte) is not part of the pattern.
            check_received(s, 0, 0, size - 1);
        }
        if sent < iterations {
            sent += 1;
            let buffer = message_buffer(s, Verb::Write, 0, sent, size - 1);
            let (lkey, at) = (s.mr.lkey, (size - 1) as usize);
            if let Some(b) = s.dev.engine().mr_bytes_mut(lkey) {
                b[at] = sent as u8;
            }
            let op = send_op(Verb::Write, &s.qps[0], false, sent);
            post(s, 0, op, buffer, size, sent, true, o.inline_size)?;
            // The poll that sends the WRITE reads the clock as it begins: that reading is
            // the WRITE's stamp (perftest's is read just before `ibv_post_send`). A clock
            // reading of its own would cost the turn 25-40 ns more in a VM.
            pump(s)?;
            if !server {
                stamps.push(s.dev.polled_at().as_nanos());
            }
            wait_for_send(s, o, sent, &mut 0)?;
        }
    }
    let elapsed = start.elapsed();
    let samples = stamps.windows(2).map(|w| (w[1] - w[0]) / 2).collect();
    Ok(Measured {
        messages: sent,
        elapsed,
        samples,
        per_qp: Vec::new(),
        qp_samples: Vec::new(),
        pacer: None,
    })
}

/// write-lat as RoCE BALBOA Fig 7's CPU baseline (`Options::doorbell_crypt`, see
/// `doorbell.rs`): as [`write_ping_pong`], but each side seals its message on its own CPU,
/// sends all but its last 8 bytes as a plain WRITE and then those 8 (the doorbell, carrying
/// the mark) as a second WRITE behind it; a side that sees the peer's doorbell opens the
/// peer's message where it landed before it answers. A sample is half the time between the
/// client's doorbells: one seal, one WRITE, one doorbell and one open.
fn write_ping_pong_doorbell(
    s: &mut Session,
    o: &Options,
    size: u32,
) -> Result<Measured, PerfError> {
    use super::doorbell::DOORBELL;
    let iterations = o.iterations();
    let server = s.role == Role::Server;
    let keep = if server {
        0
    } else {
        iterations.min(1 << 24) as usize
    };
    let mut stamps = Vec::with_capacity(keep);
    let (lkey, data) = (s.mr.lkey, (size - DOORBELL) as usize);
    let landed = s.recv_offset as usize..s.recv_offset as usize + data;
    // The data WRITE's completion is not asked for: the doorbell's, behind it, covers it.
    const DATA: u64 = 1 << 62;
    let (mut sent, mut received) = (0u64, 0u64);
    let start = Instant::now();
    while sent < iterations || received < iterations {
        if received < iterations && !(server && sent == 0) {
            received += 1;
            wait_for_mark(s, o, size, received)?;
            let opened = match (s.soft_cipher.as_mut(), s.dev.engine().mr_bytes_mut(lkey)) {
                (Some(c), Some(b)) => c.open(&mut b[landed.clone()]),
                _ => Err("doorbell baseline: no cipher or region".into()),
            };
            opened.map_err(|m| s.transport_error(m))?;
        }
        if sent < iterations {
            sent += 1;
            let sealed = match (s.soft_cipher.as_mut(), s.dev.engine().mr_bytes_mut(lkey)) {
                (Some(c), Some(b)) => {
                    b[size as usize - 1] = sent as u8;
                    c.seal(&mut b[..data])
                }
                _ => Err("doorbell baseline: no cipher or region".into()),
            };
            sealed.map_err(|m| s.transport_error(m))?;
            let (addr, qp) = (s.mr.addr, &s.qps[0]);
            let write = |at: u64| SendOp::Write {
                remote_addr: qp.remote_addr + at,
                rkey: qp.remote_rkey,
            };
            let (message, bell) = (write(0), write(data as u64));
            post(
                s,
                0,
                message,
                (lkey, addr),
                data as u32,
                DATA | sent,
                false,
                0,
            )?;
            let bell_at = (lkey, addr + data as u64);
            post(s, 0, bell, bell_at, DOORBELL, sent, true, o.inline_size)?;
            pump(s)?;
            if !server {
                stamps.push(s.dev.polled_at().as_nanos());
            }
            wait_for_send(s, o, sent, &mut 0)?;
        }
    }
    let elapsed = start.elapsed();
    let samples = stamps.windows(2).map(|w| (w[1] - w[0]) / 2).collect();
    Ok(Measured {
        messages: sent,
        elapsed,
        samples,
        per_qp: Vec::new(),
        qp_samples: Vec::new(),
        pacer: None,
    })
}

/// SEND ping-pong (perftest's `run_iter_lat_send`): the client sends first, each side
/// answers each receive and waits for each SEND's completion (its ACK), as perftest does. A
/// sample is half the client's round trip.
fn send_ping_pong(s: &mut Session, o: &Options, size: u32) -> Result<Measured, PerfError> {
    let iterations = o.iterations();
    let client = s.role == Role::Client;
    let mut samples = Vec::with_capacity(iterations.min(1 << 24) as usize);
    // The peer's next SEND may complete here before our own SEND's ACK does.
    let mut received = 0;
    let start = Instant::now();
    for i in 0..iterations {
        let t0 = Instant::now();
        if !client {
            wait_for_receive(s, o, i, &mut received)?;
        }
        let buffer = message_buffer(s, Verb::Send, 0, i, size);
        post(s, 0, SendOp::Send, buffer, size, i + 1, true, o.inline_size)?;
        wait_for_send(s, o, i + 1, &mut received)?;
        if client {
            wait_for_receive(s, o, i, &mut received)?;
            samples.push(t0.elapsed().as_nanos() as u64 / 2);
        }
    }
    let elapsed = start.elapsed();
    Ok(Measured {
        messages: iterations,
        elapsed,
        samples,
        per_qp: Vec::new(),
        qp_samples: Vec::new(),
        pacer: None,
    })
}

/// Pumps the device until `done` says so, or fails with `what` after the stall timeout.
fn wait_until(
    s: &mut Session,
    o: &Options,
    what: impl Fn() -> String,
    mut done: impl FnMut(&mut Session) -> Result<bool, PerfError>,
) -> Result<(), PerfError> {
    // Timed by the pumps' polls: the first pump, which sends a reply the caller just
    // posted, comes before anything else. A pump that slept is counted from the poll before
    // its sleep, at most 18 ms behind a stall timeout of seconds.
    let mut since = None;
    while !done(s)? {
        pump(s)?;
        let now = s.dev.polled_at();
        if now - *since.get_or_insert(now) > o.stall_timeout {
            let message = format!("{} within {:?}", what(), o.stall_timeout);
            return Err(s.transport_error(message));
        }
    }
    Ok(())
}

/// Waits until the last byte of our receive area shows `mark` (the peer's WRITE number).
fn wait_for_mark(s: &mut Session, o: &Options, size: u32, mark: u64) -> Result<(), PerfError> {
    let (lkey, at) = (s.mr.lkey, (s.recv_offset + u64::from(size) - 1) as usize);
    let what = || format!("WRITE {mark} from the peer did not land");
    wait_until(s, o, what, |s| {
        Ok(s.dev.engine().mr_bytes(lkey).map(|b| b[at]) == Some(mark as u8))
    })
}

/// Waits for a receive completion (the peer's `i`-th SEND) and reposts the receive, or
/// takes one of the `received` that completed earlier.
fn wait_for_receive(
    s: &mut Session,
    o: &Options,
    i: u64,
    received: &mut u64,
) -> Result<(), PerfError> {
    let what = || format!("SEND {i} from the peer did not arrive");
    wait_until(s, o, what, |s| {
        // Our own sends' completions (none is outstanding here) are passed over.
        while *received == 0 && next_send_completion(s, received)?.is_some() {}
        if *received == 0 {
            return Ok(false);
        }
        *received -= 1;
        Ok(true)
    })
}

/// Waits for our own request `i` to complete. Receives that complete meanwhile are reposted
/// and counted in `received` (for `wait_for_receive`).
fn wait_for_send(
    s: &mut Session,
    o: &Options,
    i: u64,
    received: &mut u64,
) -> Result<(), PerfError> {
    let what = || format!("request {i} did not complete");
    wait_until(s, o, what, |s| {
        while let Some(c) = next_send_completion(s, received)? {
            if c.wr_id == i {
                return Ok(true);
            }
        }
        Ok(false)
    })
}

/// The next completion of one of our own requests, if any; receive completions before it
/// are reposted and counted in `received`.
fn next_send_completion(
    s: &mut Session,
    received: &mut u64,
) -> Result<Option<Completion>, PerfError> {
    while let Some(c) = next_completion(s)? {
        if c.opcode != sluice_core::WcOpcode::Recv {
            return Ok(Some(c));
        }
        check_received(s, 0, c.wr_id, c.byte_len);
        post_recv(s, 0, c.wr_id)?;
        *received += 1;
    }
    Ok(None)
}
