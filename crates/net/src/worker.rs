//! Payload stages beside the path off the engine's thread. A [`ServiceWorker`] is one
//! thread for one stage kind on a device, serving every queue pair registered with it, as
//! a NIC's service slot serves all its queue pairs; [`Threaded`] is one queue pair's
//! handle on it, the stage as the engine sees it. The engine's thread copies each payload
//! into a recycled buffer and hands it over the queue pair's own bounded
//! single-producer single-consumer ring; the worker runs [`Service::observe`] (or
//! [`Service::landed`]) on it with that queue pair's instance of the stage and hands the
//! buffer back with its flags over a second ring. The engine sees an asynchronous stage
//! ([`Service::asynchronous`]): what is out counts against its receive credit, a
//! completion whose packets are out waits for them, and what the credit or the ring
//! cannot take goes uninspected (or, for a deferred stage, is dropped and recovered by
//! the transport). Nothing here blocks the engine's thread.
//!
//! Why one thread per stage kind and device, not per queue pair: a thread per queue pair
//! would start 16 inspection threads for `sluice perf -q 16 --inspect` on a
//! 2-core machine, each waking for a few payloads, all competing with the datapath. One
//! worker polls every queue pair's ring in turn, at most [`BURST`] payloads from one ring
//! a pass so that one queue pair's burst cannot starve the others, and parks when all are
//! empty until a push wakes it.
//!
//! Why a ring pair per queue pair rather than one shared ring: each ring stays single
//! producer (the engine's thread that owns the queue pair) and single consumer (the
//! worker), wait-free with no compare-and-swap; the results come back on the queue pair's
//! own ring, so each queue pair's payloads come back in the order offered with no
//! sorting. Registering and deregistering take a lock, at connection time only.
//!
//! Why `rtrb`: a wait-free SPSC ring of owned values (no allocation once built, no lock,
//! one cache line of indices each way); crossbeam's `ArrayQueue` is multi-producer and
//! pays for it with a compare-and-swap per push.
//!
//! Why copies, not references to the placed memory: a received packet's bytes are in the
//! socket's receive buffer, reused for the next batch, or (a WRITE) in the application's
//! region, which the next message may overwrite once this one completed; a sent packet's
//! region may be changed by the application once its send completes. A copy of at most
//! a path MTU into a warm buffer costs far less than the inspection it feeds.
//!
//! A stage that panics loses only its own queue pair: the worker catches the panic, drops
//! that queue pair's stage and rings, and its handle returns what it still had out with
//! no flags (counted in `worker_lost`); the other queue pairs go on.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use rtrb::{Consumer, Producer, RingBuffer};
use sluice_core::QpNum;
use sluice_core::policy::{Direction, Landing, Returned, Service, ServiceFlags, ServicePacket};
use sluice_wire::RoceHeaders;

/// Whether workers started from now on run at the lowest priority (nice 19).
static LOW_PRIORITY: AtomicBool = AtomicBool::new(true);

/// Whether stage threads beside the path started from now on lower their priority below
/// the datapath's (nice 19, the default) or keep the caller's: for measuring the
/// difference. A stage where READ data lands keeps the caller's (its READs wait for it).
pub fn set_low_priority(low: bool) {
    LOW_PRIORITY.store(low, Ordering::Relaxed);
}

/// The most payloads the worker takes from one queue pair's ring before it looks at the
/// next one: bounds how long one queue pair's burst holds up the others (at most this
/// many of its payloads between two of theirs), while still taking several from a busy
/// ring per look (the ring's indices and the stage's state stay warm).
pub(crate) const BURST: usize = 8;

/// How long the worker parks with every ring empty before it looks again unwoken: a
/// bound on what a missed wake-up could cost, and how soon it notices a queue pair gone.
const PARK: Duration = Duration::from_millis(10);

/// One payload on its way to the worker and back.
#[derive(Debug)]
struct Job {
    qpn: QpNum,
    headers: RoceHeaders,
    direction: Direction,
    flags: ServiceFlags,
    /// READ data landed ([`Service::offer_landed`]): where it goes back, and its offset
    /// in the READ's data.
    landing: Option<(Landing, u32)>,
    bytes: Vec<u8>,
}

/// What the worker thread, the [`ServiceWorker`]s and every queue pair's handle share.
#[derive(Debug, Default)]
struct Core {
    /// The last handle went: the worker ends (what is still queued is nobody's).
    stop: AtomicBool,
    /// The worker is about to park or parked: a push must wake it.
    sleeping: AtomicBool,
    /// The worker thread ended, by `stop` or by a panic outside a stage: every queue pair
    /// still registered is owed back what it has out.
    exited: AtomicBool,
    /// `joining` has queue pairs the worker has not taken yet.
    changed: AtomicBool,
    /// Queue pairs registered and not yet taken by the worker (locked at connection time
    /// only).
    joining: Mutex<Vec<Slot>>,
    /// Queue pairs registered and not yet gone (deregistered, or their stage panicked).
    queue_pairs: AtomicUsize,
}

/// The worker thread, joined when the last [`ServiceWorker`] or handle goes.
#[derive(Debug)]
struct Inner {
    core: Arc<Core>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.core.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            // A stage that panicked already said so on stderr.
            let _ = t.join();
        }
    }
}

/// What one queue pair's handle and the worker share besides the rings.
#[derive(Debug, Default)]
struct SlotShared {
    /// This queue pair's stage panicked: the worker dropped it and hands back nothing more.
    dead: AtomicBool,
    /// The stage's counters as the worker last published them (when the queue pair's ring
    /// ran empty, before it handed back the last payload: so once everything offered came
    /// back, they are final; and every 64 payloads). At light load the ring runs empty
    /// after every payload, so then this is a lock per payload on the worker thread,
    /// uncontended (the handle takes it only when its counters are read), the stage
    /// writing into this buffer ([`Service::counters_into`]) without allocating.
    counters: Mutex<Vec<(&'static str, u64)>>,
}

/// The worker's side of one queue pair.
///
/// The worker owns one instance of the stage per queue pair, not one shared by all:
/// [`Service`]'s methods take `&mut self` and know no queue pair but the packet's, so a
/// stage's counters (which the engine reports per queue pair, as a NIC's per-QP counters)
/// and its state (an offload's place in a READ) would mix across queue pairs in a shared
/// one; and a panic in one instance must not take the others' state with it. An instance
/// is small (the classifier is a few hundred bytes), so this costs nothing worth sharing.
#[derive(Debug)]
struct Slot {
    stage: Box<dyn Service + Send>,
    jobs: Consumer<Job>,
    results: Producer<Job>,
    shared: Arc<SlotShared>,
    /// A payload done that the ring back had no room for (not expected: a handle has at
    /// most the ring's capacity out), handed back before any more is taken.
    held: Option<Job>,
    /// Payloads since the counters were last published.
    since: u32,
}

/// One worker thread for one stage kind, serving every queue pair registered with it (see
/// the module's doc). Cloning it shares the thread; the thread ends when this and every
/// clone and every queue pair's [`Threaded`] went.
#[derive(Debug, Clone)]
pub struct ServiceWorker {
    inner: Arc<Inner>,
    /// The worker thread, for waking it.
    waker: Thread,
}

impl ServiceWorker {
    /// Starts the worker for stages called `name` (the thread is `sluice-NAME`). One
    /// beside the path runs at nice 19 ([`set_low_priority`]); one where READ data lands
    /// (`on_landing`) at the caller's priority, since its READs wait for it.
    pub fn spawn(name: &str, on_landing: bool) -> std::io::Result<ServiceWorker> {
        let core = Arc::new(Core::default());
        let low = LOW_PRIORITY.load(Ordering::Relaxed) && !on_landing;
        let thread = std::thread::Builder::new()
            .name(format!("sluice-{name}"))
            .spawn({
                let core = core.clone();
                move || run(&core, low)
            })?;
        let waker = thread.thread().clone();
        Ok(ServiceWorker {
            inner: Arc::new(Inner {
                core,
                thread: Some(thread),
            }),
            waker,
        })
    }

    /// Registers a queue pair: `stage` is its own instance of the stage, run on the worker
    /// with room for `capacity` payloads out (at least 1; size it as the engine's receive
    /// credit's packets, which bounds them anyway); `local`, for a stage that acts where
    /// READ data lands ([`Service::on_landing`]), a second instance that does on the
    /// engine's thread what the ring has no room for. Takes a lock: connection time only.
    pub fn register(
        &self,
        stage: Box<dyn Service + Send>,
        local: Option<Box<dyn Service>>,
        capacity: usize,
    ) -> Threaded {
        let capacity = capacity.max(1);
        let (jobs, worker_jobs) = RingBuffer::new(capacity);
        let (worker_results, results) = RingBuffer::new(capacity);
        // Its counters are there from the start, before the worker first publishes them.
        let shared = Arc::new(SlotShared {
            dead: AtomicBool::new(false),
            counters: Mutex::new(stage.counters()),
        });
        let handle = Threaded {
            name: stage.name().to_string(),
            deferred: stage.deferred(),
            on_landing: stage.on_landing(),
            local,
            jobs,
            results,
            capacity,
            out: VecDeque::with_capacity(capacity),
            spare: Vec::new(),
            slot: shared.clone(),
            core: self.inner.core.clone(),
            waker: self.waker.clone(),
            full: 0,
            lost: 0,
            landed_here: 0,
            _worker: self.inner.clone(),
        };
        let slot = Slot {
            stage,
            jobs: worker_jobs,
            results: worker_results,
            shared,
            held: None,
            since: 0,
        };
        let core = &self.inner.core;
        core.queue_pairs.fetch_add(1, Ordering::SeqCst);
        match core.joining.lock() {
            Ok(mut j) => j.push(slot),
            // Only a panic while pushing could poison it; the list itself is sound.
            Err(poisoned) => poisoned.into_inner().push(slot),
        }
        core.changed.store(true, Ordering::SeqCst);
        self.waker.unpark();
        handle
    }

    /// Queue pairs registered and not gone yet (the worker counts one gone once it
    /// dropped its side: its handle dropped, or its stage panicked).
    pub fn queue_pairs(&self) -> usize {
        self.inner.core.queue_pairs.load(Ordering::SeqCst)
    }

    /// The worker thread still runs.
    pub fn running(&self) -> bool {
        !self.inner.core.exited.load(Ordering::SeqCst)
    }
}

/// One queue pair's stage beside the path, run on a [`ServiceWorker`] shared with other
/// queue pairs (see the module's doc).
#[derive(Debug)]
pub struct Threaded {
    name: String,
    deferred: bool,
    on_landing: bool,
    /// A second instance of the stage on the engine's thread, for READ data landed when
    /// the ring is full (an offload must be done, unlike an inspection).
    local: Option<Box<dyn Service>>,
    jobs: Producer<Job>,
    results: Consumer<Job>,
    /// The most payloads out at once: the rings' size.
    capacity: usize,
    /// What was offered and not yet returned, oldest first: each is returned exactly once,
    /// by the worker or, if this queue pair's stage or the worker died, here with no flags.
    out: VecDeque<Returned>,
    spare: Vec<Vec<u8>>,
    slot: Arc<SlotShared>,
    core: Arc<Core>,
    waker: Thread,
    /// Offers refused because the ring was full.
    full: u64,
    /// Payloads returned unseen because the stage (or the worker) died.
    lost: u64,
    /// Landings done on the engine's thread by the local instance (no room out).
    landed_here: u64,
    /// Keeps the worker running; the last handle (with no [`ServiceWorker`] left) stops and
    /// joins it. Last, so that the rings are gone first.
    _worker: Arc<Inner>,
}

impl Threaded {
    /// Runs `stage` (beside the path: its [`Service::observe`]) on a worker of its own,
    /// with room for `capacity` payloads in flight (see [`ServiceWorker::register`]).
    pub fn spawn(stage: Box<dyn Service + Send>, capacity: usize) -> std::io::Result<Threaded> {
        Self::spawn_with_local(stage, None, capacity)
    }

    /// [`Threaded::spawn`] for a stage that acts where READ data lands
    /// ([`Service::on_landing`]), with `local` (see [`ServiceWorker::register`]).
    pub fn spawn_with_local(
        stage: Box<dyn Service + Send>,
        local: Option<Box<dyn Service>>,
        capacity: usize,
    ) -> std::io::Result<Threaded> {
        let worker = ServiceWorker::spawn(stage.name(), stage.on_landing())?;
        Ok(worker.register(stage, local, capacity))
    }

    /// Payloads offered and not yet returned.
    pub fn outstanding(&self) -> usize {
        self.out.len()
    }

    /// This queue pair's stage panicked, or the worker is gone: nothing more is taken.
    fn dead(&self) -> bool {
        self.slot.dead.load(Ordering::Acquire) || self.core.exited.load(Ordering::Acquire)
    }

    /// No room for another payload: the ring is full, or as many as it holds are out
    /// (which keeps the ring back from ever being full when the worker hands one back).
    fn no_room(&self) -> bool {
        self.out.len() >= self.capacity || self.jobs.is_full() || self.dead()
    }

    /// `bytes` in a buffer the ring gave back (or a new one while none has come back yet).
    fn copy_of(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(bytes);
        buf
    }

    /// Hands `job` to the worker (the caller saw room) and records what it owes back, in
    /// the order offered; wakes the worker if it sleeps.
    fn submit(&mut self, job: Job, psn: sluice_wire::Psn, opcode: sluice_wire::Opcode) -> bool {
        let returned = Returned {
            psn,
            opcode,
            direction: job.direction,
            len: job.bytes.len() as u32,
            flags: ServiceFlags::NONE,
        };
        if self.jobs.push(job).is_err() {
            return false; // not full a moment ago, and only this thread pushes
        }
        self.out.push_back(returned);
        // The push (a release store) must be seen before `sleeping` is read: without the
        // fence the load may pass the store, and a worker that set `sleeping` and then found
        // the ring empty would sleep through this payload (until `PARK`).
        fence(Ordering::SeqCst);
        if self.core.sleeping.load(Ordering::SeqCst) {
            self.waker.unpark();
        }
        true
    }
}

impl Service for Threaded {
    fn name(&self) -> &str {
        &self.name
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

    fn offer(&mut self, packet: &ServicePacket<'_>, payload: &[u8]) -> bool {
        if self.no_room() {
            self.full += 1;
            return false;
        }
        let job = Job {
            qpn: packet.qpn,
            headers: *packet.headers,
            direction: packet.direction,
            flags: ServiceFlags::NONE,
            landing: None,
            bytes: self.copy_of(payload),
        };
        self.submit(job, packet.psn, packet.opcode)
    }

    fn on_landing(&self) -> bool {
        self.on_landing
    }

    fn landed(&mut self, qpn: QpNum, offset: u32, bytes: &mut [u8]) {
        if let Some(local) = &mut self.local {
            self.landed_here += 1;
            local.landed(qpn, offset, bytes);
        }
    }

    fn offer_landed(&mut self, qpn: QpNum, offset: u32, bytes: &[u8], at: Landing) -> bool {
        if !self.on_landing || self.no_room() {
            self.full += 1;
            return false;
        }
        // The headers say nothing here: a landing is known by where it goes.
        let headers = RoceHeaders {
            bth: sluice_wire::Bth::new(
                sluice_wire::Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                qpn.0,
                sluice_wire::Psn::new(0),
            ),
            ccx: None,
            ext: sluice_wire::ExtHeaders::default(),
        };
        let job = Job {
            qpn,
            headers,
            direction: Direction::Receive,
            flags: ServiceFlags::NONE,
            landing: Some((at, offset)),
            bytes: self.copy_of(bytes),
        };
        self.submit(job, headers.bth.psn, headers.bth.opcode)
    }

    fn collect(&mut self, out: &mut Vec<Returned>, put_back: &mut dyn FnMut(Landing, &[u8])) {
        while let Ok(job) = self.results.pop() {
            if let Some((at, _)) = job.landing {
                put_back(at, &job.bytes);
            }
            let mut r = self
                .out
                .pop_front()
                .expect("the worker returns only what was offered");
            debug_assert_eq!(r.psn, job.headers.bth.psn, "returned in the order offered");
            r.flags = job.flags;
            out.push(r);
            self.spare.push(job.bytes);
        }
        // `dead` before the ring's emptiness: the worker hands back what it did before it
        // says it is dead, so once dead is seen, an empty ring stays empty.
        if !self.out.is_empty() && self.dead() && self.results.is_empty() {
            // The stage panicked: what it still had is owed back all the same (READ data
            // it had stays as it landed: counted, as the offload's loss).
            self.lost += self.out.len() as u64;
            out.extend(self.out.drain(..));
        }
    }

    fn counters_into(&self, c: &mut Vec<(&'static str, u64)>) {
        c.clear();
        if let Ok(published) = self.slot.counters.lock() {
            c.extend_from_slice(&published);
        }
        // The local instance's counts (what the ring had no room for) join the worker's.
        if let Some(local) = &self.local {
            for (name, n) in local.counters() {
                match c.iter_mut().find(|(k, _)| *k == name) {
                    Some((_, m)) => *m += n,
                    None => c.push((name, n)),
                }
            }
        }
        c.push(("worker_full", self.full));
        c.push(("worker_lost", self.lost));
        if self.on_landing {
            c.push(("landed_on_engine_thread", self.landed_here));
        }
    }
}

/// Sets the flag when dropped: the worker thread's end, however it ends.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The worker: takes the queue pairs registered since it last looked, serves each queue
/// pair's ring in turn (at most [`BURST`] payloads each), and parks when every ring is
/// empty, until a push or a registration wakes it or the last handle goes.
fn run(core: &Core, low_priority: bool) {
    let _exited = SetOnDrop(&core.exited);
    // Beside the path: the datapath's threads come first on a busy machine; what this one
    // has no time for goes uninspected. Not an offload where READ data lands: its READs
    // wait for it. Failing to lower it only costs that preference.
    if low_priority {
        let _ = crate::sys::nice_this_thread(19);
    }
    let mut slots: Vec<Slot> = Vec::new();
    loop {
        // The last handle went: what is still queued is nobody's any more.
        if core.stop.load(Ordering::Relaxed) {
            return;
        }
        // A plain load a pass; the swap only when someone registered.
        if core.changed.load(Ordering::Relaxed) && core.changed.swap(false, Ordering::SeqCst) {
            match core.joining.lock() {
                Ok(mut j) => slots.append(&mut j),
                Err(poisoned) => slots.append(&mut poisoned.into_inner()),
            }
        }
        let mut worked = false;
        let mut i = 0;
        while i < slots.len() {
            match serve(&mut slots[i]) {
                Some(n) => {
                    worked |= n > 0;
                    i += 1;
                }
                // Its handle went or its stage panicked: its stage and rings go now (in
                // the registration order of the others, which keeps the turns fair).
                None => {
                    slots.remove(i);
                    core.queue_pairs.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
        if worked {
            continue;
        }
        core.sleeping.store(true, Ordering::SeqCst);
        // Checked again after saying so: a push in between either is seen here or sees
        // `sleeping` and unparks (each side fences between its store and its look).
        fence(Ordering::SeqCst);
        let idle = slots.iter().all(|s| s.jobs.is_empty() && s.held.is_none())
            && !core.changed.load(Ordering::SeqCst)
            && !core.stop.load(Ordering::SeqCst);
        if idle {
            std::thread::park_timeout(PARK);
        }
        core.sleeping.store(false, Ordering::SeqCst);
    }
}

/// One turn of one queue pair: at most [`BURST`] payloads observed (or landed) and handed
/// back. `None`: the queue pair is gone (its handle dropped, or its stage panicked just
/// now); otherwise how many payloads it took.
fn serve(slot: &mut Slot) -> Option<usize> {
    // Its handle went: what it queued is nobody's any more.
    if slot.results.is_abandoned() {
        return None;
    }
    if let Some(job) = slot.held.take()
        && let Err(rtrb::PushError::Full(job)) = slot.results.push(job)
    {
        slot.held = Some(job);
        return Some(0);
    }
    let mut took = 0;
    while took < BURST {
        let Ok(mut job) = slot.jobs.pop() else {
            break;
        };
        took += 1;
        slot.since += 1;
        // When the ring ran empty (before handing back the last payload, so that the
        // counts are final once everything came back), and every so often when behind.
        let publish = slot.jobs.is_empty() || slot.since >= 64;
        let stage = &mut slot.stage;
        let counters = &slot.shared.counters;
        let done = catch_unwind(AssertUnwindSafe(|| {
            let packet = ServicePacket {
                qpn: job.qpn,
                psn: job.headers.bth.psn,
                opcode: job.headers.bth.opcode,
                direction: job.direction,
                len: job.bytes.len() as u32,
                headers: &job.headers,
            };
            match job.landing {
                Some((_, offset)) => stage.landed(job.qpn, offset, &mut job.bytes),
                None => job.flags = stage.observe(&packet, &job.bytes),
            }
            if publish && let Ok(mut c) = counters.lock() {
                // Into the published buffer itself: no allocation once it has room.
                stage.counters_into(&mut c);
            }
        }));
        if done.is_err() {
            // Its stage panicked (it said so on stderr): nothing more of this queue pair
            // is seen; its handle returns the rest, unseen and counted. Said after the last
            // hand-back, so the handle finds everything done in the ring before it.
            slot.shared.dead.store(true, Ordering::Release);
            return None;
        }
        if publish {
            slot.since = 0;
        }
        // The handle never has more out than the ring back holds: it has room.
        if let Err(rtrb::PushError::Full(job)) = slot.results.push(job) {
            slot.held = Some(job);
            break;
        }
    }
    Some(took)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::{Bth, ExtHeaders, Opcode, Psn};
    use std::sync::Condvar;
    use std::sync::atomic::AtomicU64;
    use std::time::Instant;

    /// A gate the stage waits at on a payload starting 0xAA, until the test opens it.
    #[derive(Debug, Default)]
    struct Gate {
        state: Mutex<(bool, bool)>, // (a stage waits, open)
        changed: Condvar,
    }

    impl Gate {
        fn wait(&self) {
            let mut s = self.state.lock().unwrap();
            s.0 = true;
            self.changed.notify_all();
            while !s.1 {
                s = self.changed.wait(s).unwrap();
            }
        }
        fn until_waiting(&self) {
            let mut s = self.state.lock().unwrap();
            while !s.0 {
                s = self.changed.wait(s).unwrap();
            }
        }
        fn open(&self) {
            self.state.lock().unwrap().1 = true;
            self.changed.notify_all();
        }
    }

    /// Flags payloads that start with 0xEE; panics on one that starts with 0xDD; waits at
    /// `gate` on one that starts with 0xAA; sleeps `delay` on each; logs each payload's
    /// queue pair in `log`; sets `_dropped` when dropped.
    #[derive(Debug, Default)]
    struct Marker {
        seen: u64,
        delay: Duration,
        gate: Option<Arc<Gate>>,
        log: Option<Arc<Mutex<Vec<u32>>>>,
        /// Held only to be dropped with the stage.
        _dropped: Option<DropFlag>,
    }

    /// Set when the stage holding it is dropped.
    #[derive(Debug)]
    struct DropFlag(Arc<AtomicBool>);

    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    impl Service for Marker {
        fn name(&self) -> &str {
            "marker"
        }
        fn in_line(&self) -> bool {
            false
        }
        fn observe(&mut self, p: &ServicePacket<'_>, payload: &[u8]) -> ServiceFlags {
            std::thread::sleep(self.delay);
            if let Some(log) = &self.log {
                log.lock().unwrap().push(p.qpn.0);
            }
            self.seen += 1;
            match payload.first() {
                Some(0xEE) => ServiceFlags::EXECUTABLE,
                Some(0xDD) => panic!("marker: told to fail"),
                Some(0xAA) => {
                    if let Some(g) = &self.gate {
                        g.wait();
                    }
                    ServiceFlags::NONE
                }
                _ => ServiceFlags::NONE,
            }
        }
        fn counters_into(&self, out: &mut Vec<(&'static str, u64)>) {
            out.clear();
            out.push(("seen", self.seen));
        }
        fn on_landing(&self) -> bool {
            true
        }
        fn landed(&mut self, _qpn: QpNum, offset: u32, bytes: &mut [u8]) {
            self.seen += 1;
            for b in bytes {
                *b = b.wrapping_add(offset as u8);
            }
        }
    }

    fn headers(qp: u32, psn: u32) -> RoceHeaders {
        RoceHeaders {
            bth: Bth::new(Opcode::RC_SEND_ONLY, qp, Psn::new(psn)),
            ccx: None,
            ext: ExtHeaders::default(),
        }
    }

    fn offer_on(t: &mut Threaded, qp: u32, psn: u32, first: u8) -> bool {
        let h = headers(qp, psn);
        let p = ServicePacket {
            qpn: QpNum(qp),
            psn: h.bth.psn,
            opcode: h.bth.opcode,
            direction: Direction::Receive,
            len: 8,
            headers: &h,
        };
        t.offer(&p, &[first; 8])
    }

    fn offer(t: &mut Threaded, psn: u32, first: u8) -> bool {
        offer_on(t, 1, psn, first)
    }

    /// Collects until `n` came back (or a few seconds passed).
    fn collect(t: &mut Threaded, n: usize) -> Vec<Returned> {
        let mut out = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        while out.len() < n && Instant::now() < until {
            t.collect(&mut out, &mut |_, _| {});
            std::thread::yield_now();
        }
        out
    }

    /// Waits (a few seconds at most) until `f` holds.
    fn eventually(mut f: impl FnMut() -> bool) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        f()
    }

    #[test]
    fn flags_come_back_once_each_in_the_order_offered() {
        let mut t = Threaded::spawn(Box::new(Marker::default()), 8).unwrap();
        let mut out = Vec::new();
        for psn in 0..100u32 {
            while !offer(&mut t, psn, if psn % 7 == 0 { 0xEE } else { 0 }) {
                t.collect(&mut out, &mut |_, _| {});
            }
        }
        out.extend(collect(&mut t, 100 - out.len()));
        assert_eq!(out.len(), 100);
        for (i, r) in out.iter().enumerate() {
            assert_eq!(r.psn, Psn::new(i as u32));
            assert_eq!(
                r.flags.contains(ServiceFlags::EXECUTABLE),
                i % 7 == 0,
                "{i}"
            );
            assert_eq!(r.len, 8);
        }
        assert_eq!(t.outstanding(), 0);
        assert!(t.counters().contains(&("seen", 100)), "{:?}", t.counters());
    }

    /// Counts its payloads and how often its counters were asked for as a new `Vec`.
    #[derive(Debug, Default)]
    struct Counted {
        seen: u64,
        vec_asks: Arc<AtomicU64>,
    }

    impl Service for Counted {
        fn name(&self) -> &str {
            "counted"
        }
        fn in_line(&self) -> bool {
            false
        }
        fn observe(&mut self, _: &ServicePacket<'_>, _: &[u8]) -> ServiceFlags {
            self.seen += 1;
            ServiceFlags::NONE
        }
        fn counters(&self) -> Vec<(&'static str, u64)> {
            self.vec_asks.fetch_add(1, Ordering::Relaxed);
            vec![("seen", self.seen)]
        }
        fn counters_into(&self, out: &mut Vec<(&'static str, u64)>) {
            out.clear();
            out.push(("seen", self.seen));
        }
    }

    #[test]
    fn at_light_load_the_worker_publishes_counters_without_a_new_vec_and_they_end_final() {
        let vec_asks = Arc::new(AtomicU64::new(0));
        let stage = Counted {
            vec_asks: vec_asks.clone(),
            ..Counted::default()
        };
        let mut t = Threaded::spawn(Box::new(stage), 8).unwrap();
        let asked_at_start = vec_asks.load(Ordering::Relaxed);
        // One payload at a time: the ring runs empty after each, so each is published.
        for psn in 0..50u32 {
            assert!(offer(&mut t, psn, 0));
            assert_eq!(collect(&mut t, 1).len(), 1);
        }
        assert_eq!(
            vec_asks.load(Ordering::Relaxed),
            asked_at_start,
            "a Vec per publish"
        );
        assert!(t.counters().contains(&("seen", 50)), "{:?}", t.counters());
    }

    #[test]
    fn landed_data_comes_back_processed_or_is_processed_here_when_full() {
        let stage = Marker {
            delay: Duration::from_millis(20),
            ..Marker::default()
        };
        let local: Box<dyn Service> = Box::new(Marker::default());
        let mut t = Threaded::spawn_with_local(Box::new(stage), Some(local), 2).unwrap();
        let at = |i: u64| Landing::for_tests(1, i * 8);
        let mut here = 0;
        for i in 0..6u64 {
            if !t.offer_landed(QpNum(1), 3, &[10; 8], at(i)) {
                let mut bytes = [10u8; 8];
                t.landed(QpNum(1), 3, &mut bytes);
                assert_eq!(bytes, [13; 8], "processed here");
                here += 1;
            }
        }
        assert!(here >= 4, "a ring of 2 took at most 2");
        let mut back = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        while back.len() < 6 - here && Instant::now() < until {
            let mut out = Vec::new();
            t.collect(&mut out, &mut |at, bytes| back.push((at, bytes.to_vec())));
            assert!(out.iter().all(|r| r.flags.is_empty()));
        }
        assert_eq!(back.len(), 6 - here);
        assert!(back.iter().all(|(_, b)| b == &[13; 8]));
        // Counted by both instances, together.
        assert!(t.counters().contains(&("seen", 6)), "{:?}", t.counters());
    }

    #[test]
    fn the_ring_bounds_what_is_out_and_refuses_more() {
        let stage = Marker {
            delay: Duration::from_millis(50),
            ..Marker::default()
        };
        let mut t = Threaded::spawn(Box::new(stage), 4).unwrap();
        let taken = (0..20).filter(|&p| offer(&mut t, p, 0)).count();
        // At most the ring's size out, whatever the worker took off it already.
        assert_eq!(taken, 4);
        assert_eq!(t.outstanding(), taken);
        assert!(t.counters().contains(&("worker_full", 20 - taken as u64)));
        assert_eq!(collect(&mut t, taken).len(), taken);
    }

    #[test]
    fn dropping_it_stops_the_worker_with_work_queued() {
        let stage = Marker {
            delay: Duration::from_millis(20),
            ..Marker::default()
        };
        let mut t = Threaded::spawn(Box::new(stage), 64).unwrap();
        for p in 0..32 {
            assert!(offer(&mut t, p, 0));
        }
        let started = Instant::now();
        drop(t);
        // It ends after the payload in hand (20 ms), not after the 32 queued (640 ms).
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_stage_that_panics_still_returns_everything_once() {
        let mut t = Threaded::spawn(Box::new(Marker::default()), 16).unwrap();
        for p in 0..4 {
            assert!(offer(&mut t, p, 0));
        }
        assert!(offer(&mut t, 4, 0xDD));
        for p in 5..9 {
            assert!(offer(&mut t, p, 0xEE));
        }
        let out = collect(&mut t, 9);
        let psns: Vec<u32> = out.iter().map(|r| r.psn.value()).collect();
        assert_eq!(psns, (0..9).collect::<Vec<_>>());
        // Those after the panic were never seen: returned with no flags, counted.
        assert!(out[5..].iter().all(|r| r.flags.is_empty()));
        assert!(
            t.counters().contains(&("worker_lost", 5)),
            "{:?}",
            t.counters()
        );
        assert!(!offer(&mut t, 9, 0), "a dead stage takes nothing more");
    }

    /// Offers `n` payloads on each queue pair in turn (queue pair `i` is `qps[i]`, numbered
    /// `i + 1`; every 5th flagged), collecting as it goes, until those and the `queued`
    /// offered before came back; returns what each got back.
    fn run_all(qps: &mut [Threaded], n: u32, queued: usize) -> Vec<Vec<Returned>> {
        let mut back: Vec<Vec<Returned>> = vec![Vec::new(); qps.len()];
        for psn in 0..n {
            for (i, t) in qps.iter_mut().enumerate() {
                let first = if (psn + i as u32) % 5 == 0 { 0xEE } else { 0 };
                while !offer_on(t, i as u32 + 1, psn, first) {
                    t.collect(&mut back[i], &mut |_, _| {});
                    std::thread::yield_now();
                }
            }
        }
        for (i, t) in qps.iter_mut().enumerate() {
            let left = (n as usize + queued).saturating_sub(back[i].len());
            back[i].extend(collect(t, left));
        }
        back
    }

    #[test]
    fn queue_pairs_on_one_worker_get_theirs_back_in_order_exactly_once() {
        let worker = ServiceWorker::spawn("marker", false).unwrap();
        // Rings of different sizes: one queue pair's room is its own.
        let mut qps: Vec<Threaded> = [2, 8, 8, 32]
            .into_iter()
            .map(|cap| worker.register(Box::new(Marker::default()), None, cap))
            .collect();
        assert_eq!(worker.queue_pairs(), 4);
        let back = run_all(&mut qps, 300, 0);
        for (i, got) in back.iter().enumerate() {
            let psns: Vec<u32> = got.iter().map(|r| r.psn.value()).collect();
            assert_eq!(psns, (0..300).collect::<Vec<_>>(), "queue pair {i}");
            for r in got {
                let flagged = (r.psn.value() + i as u32) % 5 == 0;
                assert_eq!(r.flags.contains(ServiceFlags::EXECUTABLE), flagged);
            }
            // Each queue pair's own counters: its stage saw its 300, no others.
            assert!(qps[i].counters().contains(&("seen", 300)), "{i}");
            assert!(qps[i].counters().contains(&("worker_lost", 0)), "{i}");
            assert_eq!(qps[i].outstanding(), 0);
        }
    }

    #[test]
    fn one_queue_pair_flooding_holds_up_the_others_at_most_a_burst_a_turn() {
        let worker = ServiceWorker::spawn("marker", false).unwrap();
        let gate = Arc::new(Gate::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut qps: Vec<Threaded> = (0..3)
            .map(|_| {
                let stage = Marker {
                    gate: Some(gate.clone()),
                    log: Some(log.clone()),
                    ..Marker::default()
                };
                worker.register(Box::new(stage), None, 256)
            })
            .collect();
        // One payload each first, so that the worker has taken all three in before the
        // flood (it takes queue pairs registered since its last look at a pass's start).
        for (i, t) in qps.iter_mut().enumerate() {
            assert!(offer_on(t, i as u32 + 1, 1000, 0));
            assert_eq!(collect(t, 1).len(), 1);
        }
        log.lock().unwrap().clear();
        // Queue pair 1 floods: its first payload holds the worker at the gate while all of
        // its 256 and the others' 10 each are queued.
        assert!(offer_on(&mut qps[0], 1, 0, 0xAA));
        gate.until_waiting();
        for psn in 1..256 {
            assert!(offer_on(&mut qps[0], 1, psn, 0));
        }
        for psn in 0..10 {
            assert!(offer_on(&mut qps[1], 2, psn, 0));
            assert!(offer_on(&mut qps[2], 3, psn, 0));
        }
        gate.open();
        for (i, t) in qps.iter_mut().enumerate() {
            let n = if i == 0 { 256 } else { 10 };
            assert_eq!(collect(t, n).len(), n);
        }
        let log = log.lock().unwrap().clone();
        assert_eq!(log.len(), 276);
        // While the others have payloads queued, the flooder gets at most a burst at once,
        // and they are done within two turns of it (10 payloads each, a burst a turn).
        let others_done = log.iter().rposition(|&q| q != 1).unwrap();
        let mut run = 0;
        for &q in &log[..others_done] {
            run = if q == 1 { run + 1 } else { 0 };
            assert!(run <= BURST, "{log:?}");
        }
        let flood_before = log[..others_done].iter().filter(|&&q| q == 1).count();
        assert!(flood_before <= 2 * BURST, "{flood_before}: {log:?}");
    }

    #[test]
    fn a_queue_pair_that_goes_leaves_the_others_running() {
        let worker = ServiceWorker::spawn("marker", false).unwrap();
        let dropped = Arc::new(AtomicBool::new(false));
        let stage = |dropped: Option<Arc<AtomicBool>>| {
            Box::new(Marker {
                delay: Duration::from_micros(200),
                _dropped: dropped.map(DropFlag),
                ..Marker::default()
            })
        };
        let mut a = worker.register(stage(None), None, 16);
        let mut b = worker.register(stage(Some(dropped.clone())), None, 16);
        let mut c = worker.register(stage(None), None, 16);
        // All three busy, then the middle one goes with payloads still queued.
        for psn in 0..16 {
            assert!(offer_on(&mut a, 1, psn, 0));
            assert!(offer_on(&mut b, 2, psn, 0));
            assert!(offer_on(&mut c, 3, psn, 0));
        }
        drop(b);
        let mut rest = [a, c];
        let back = run_all(&mut rest, 100, 16);
        // The first 16 each were offered above, before run_all's 100 (numbered from 0
        // again): 116 each, in order.
        for (i, got) in back.iter().enumerate() {
            let psns: Vec<u32> = got.iter().map(|r| r.psn.value()).collect();
            let want: Vec<u32> = (0..16).chain(0..100).collect();
            assert_eq!(psns, want, "queue pair {i}");
            assert!(rest[i].counters().contains(&("seen", 116)));
        }
        // The worker let the one that went go: its stage dropped, two left.
        assert!(eventually(|| worker.queue_pairs() == 2));
        assert!(dropped.load(Ordering::SeqCst));
        assert!(worker.running());
    }

    #[test]
    fn the_worker_ends_when_the_last_handle_goes() {
        let worker = ServiceWorker::spawn("marker", false).unwrap();
        let gone: Vec<Arc<AtomicBool>> = (0..2).map(|_| Arc::new(AtomicBool::new(false))).collect();
        let mut qps: Vec<Threaded> = gone
            .iter()
            .map(|d| {
                let stage = Marker {
                    _dropped: Some(DropFlag(d.clone())),
                    ..Marker::default()
                };
                worker.register(Box::new(stage), None, 8)
            })
            .collect();
        let core = worker.inner.core.clone();
        // The worker itself gone, the handles keep it running.
        drop(worker);
        let mut last = qps.pop().unwrap();
        drop(qps);
        assert!(offer_on(&mut last, 2, 0, 0xEE));
        let back = collect(&mut last, 1);
        assert_eq!(back.len(), 1);
        assert!(back[0].flags.contains(ServiceFlags::EXECUTABLE));
        assert!(!core.exited.load(Ordering::SeqCst));
        // The last one goes: the thread is joined before the drop returns, every stage
        // with it.
        drop(last);
        assert!(core.exited.load(Ordering::SeqCst));
        assert!(gone.iter().all(|d| d.load(Ordering::SeqCst)));
    }

    #[test]
    fn a_panicking_stage_loses_only_its_own_queue_pair() {
        let worker = ServiceWorker::spawn("marker", false).unwrap();
        let mut bad = worker.register(Box::new(Marker::default()), None, 16);
        let mut good = worker.register(Box::new(Marker::default()), None, 16);
        for psn in 0..9 {
            let first = match psn {
                4 => 0xDD,
                5.. => 0xEE,
                _ => 0,
            };
            assert!(offer_on(&mut bad, 1, psn, first));
            assert!(offer_on(&mut good, 2, psn, 0xEE));
        }
        let lost = collect(&mut bad, 9);
        let psns: Vec<u32> = lost.iter().map(|r| r.psn.value()).collect();
        assert_eq!(psns, (0..9).collect::<Vec<_>>());
        assert!(lost[5..].iter().all(|r| r.flags.is_empty()));
        assert!(bad.counters().contains(&("worker_lost", 5)));
        assert!(
            !offer_on(&mut bad, 1, 9, 0),
            "a dead stage takes nothing more"
        );
        // The other queue pair lost nothing and goes on, as do queue pairs registered after.
        let mut back = collect(&mut good, 9);
        assert!(eventually(|| worker.queue_pairs() == 1));
        let mut later = worker.register(Box::new(Marker::default()), None, 16);
        for psn in 9..50 {
            while !offer_on(&mut good, 2, psn, 0xEE) {
                good.collect(&mut back, &mut |_, _| {});
            }
        }
        back.extend(collect(&mut good, 50 - back.len()));
        let psns: Vec<u32> = back.iter().map(|r| r.psn.value()).collect();
        assert_eq!(psns, (0..50).collect::<Vec<_>>());
        assert!(
            back.iter()
                .all(|r| r.flags.contains(ServiceFlags::EXECUTABLE))
        );
        assert!(good.counters().contains(&("worker_lost", 0)));
        assert!(offer_on(&mut later, 3, 0, 0));
        assert_eq!(collect(&mut later, 1).len(), 1);
        assert!(worker.running());
    }
}
