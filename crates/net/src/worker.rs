//! A payload stage beside the path on a thread of its own ([`Threaded`]): the engine's
//! thread copies each payload into a recycled buffer and hands it over a bounded
//! single-producer single-consumer ring; the stage's thread runs
//! [`Service::observe`] on it and hands the buffer back with its flags over a second ring.
//! The engine sees an asynchronous stage ([`Service::asynchronous`]): what is out counts
//! against its receive credit, a completion whose packets are out waits for them, and
//! what the credit or the ring cannot take goes uninspected (or, for a deferred stage,
//! is dropped and recovered by the transport). Nothing here blocks the engine's thread.
//!
//! Why `rtrb`: a wait-free SPSC ring of owned values (no allocation once built, no lock,
//! one cache line of indices each way), which is exactly the shape of one engine thread
//! feeding one worker; crossbeam's `ArrayQueue` is multi-producer and pays for it with a
//! compare-and-swap per push.
//!
//! Why copies, not references to the placed memory: a received packet's bytes are in the
//! socket's receive buffer, reused for the next batch, or (a WRITE) in the application's
//! region, which the next message may overwrite once this one completed; a sent packet's
//! region may be changed by the application once its send completes. A copy of at most
//! a path MTU into a warm buffer costs far less than the inspection it feeds.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
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

/// One payload on its way to the stage's thread and back.
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

/// What both threads share besides the rings.
#[derive(Debug, Default)]
struct Shared {
    /// The engine's side went (the worker ends once the ring is empty).
    stop: AtomicBool,
    /// The worker is about to park or parked: a push must wake it.
    sleeping: AtomicBool,
    /// The stage's counters as the worker last published them (when its ring ran empty,
    /// before it handed back the last payload: so once everything offered came back, they
    /// are final; and every 64 payloads). Locked once a burst, never per packet.
    counters: Mutex<Vec<(&'static str, u64)>>,
}

/// A stage beside the path run on its own thread (see the module's doc).
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
    /// What was offered and not yet returned, oldest first: each is returned exactly once,
    /// by the worker or, if it died, here with no flags.
    out: VecDeque<Returned>,
    spare: Vec<Vec<u8>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Offers refused because the ring was full.
    full: u64,
    /// Payloads returned unseen because the worker died (a panicking stage).
    lost: u64,
    /// Landings done on the engine's thread by the local instance (no room out).
    landed_here: u64,
}

impl Threaded {
    /// Runs `stage` (beside the path: its [`Service::observe`]) on a new thread, with room
    /// for `capacity` payloads in flight (at least 1; size it as the engine's receive
    /// credit's packets, which bounds them anyway).
    pub fn spawn(stage: Box<dyn Service + Send>, capacity: usize) -> std::io::Result<Threaded> {
        Self::spawn_with_local(stage, None, capacity)
    }

    /// [`Threaded::spawn`] for a stage that acts where READ data lands
    /// ([`Service::on_landing`]): `local`, a second instance of it, does on the engine's
    /// thread what the ring has no room for.
    pub fn spawn_with_local(
        stage: Box<dyn Service + Send>,
        local: Option<Box<dyn Service>>,
        capacity: usize,
    ) -> std::io::Result<Threaded> {
        let capacity = capacity.max(1);
        let (jobs, worker_jobs) = RingBuffer::new(capacity);
        let (worker_results, results) = RingBuffer::new(capacity);
        let shared = Arc::new(Shared::default());
        let name = stage.name().to_string();
        let deferred = stage.deferred();
        let on_landing = stage.on_landing();
        let thread = std::thread::Builder::new()
            .name(format!("sluice-{name}"))
            .spawn({
                let shared = shared.clone();
                move || run(stage, worker_jobs, worker_results, &shared)
            })?;
        Ok(Threaded {
            name,
            deferred,
            on_landing,
            local,
            jobs,
            results,
            out: VecDeque::with_capacity(capacity),
            spare: Vec::new(),
            shared,
            thread: Some(thread),
            full: 0,
            lost: 0,
            landed_here: 0,
        })
    }

    /// Payloads offered and not yet returned.
    pub fn outstanding(&self) -> usize {
        self.out.len()
    }

    fn dead(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
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
        if self.shared.sleeping.load(Ordering::SeqCst)
            && let Some(t) = &self.thread
        {
            t.thread().unpark();
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
        if self.jobs.is_full() || self.dead() {
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
        if !self.on_landing || self.jobs.is_full() || self.dead() {
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
        if !self.out.is_empty() && self.dead() && self.results.is_empty() {
            // The stage panicked: what it still had is owed back all the same (READ data
            // it had stays as it landed: counted, as the offload's loss).
            self.lost += self.out.len() as u64;
            out.extend(self.out.drain(..));
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self
            .shared
            .counters
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
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
        c
    }
}

impl Drop for Threaded {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            // A stage that panicked already said so on stderr.
            let _ = t.join();
        }
    }
}

/// The worker: observes each payload, hands it back with its flags; parks when there is
/// nothing to do, until a push wakes it or the engine's side goes.
fn run(
    mut stage: Box<dyn Service + Send>,
    mut jobs: Consumer<Job>,
    mut results: Producer<Job>,
    shared: &Shared,
) {
    let publish = |stage: &dyn Service| {
        if let Ok(mut c) = shared.counters.lock() {
            *c = stage.counters();
        }
    };
    // Beside the path: the datapath's threads come first on a busy machine; what this one
    // has no time for goes uninspected. Not an offload where READ data lands: its READs
    // wait for it. Failing to lower it only costs that preference.
    if LOW_PRIORITY.load(Ordering::Relaxed) && !stage.on_landing() {
        let _ = crate::sys::nice_this_thread(19);
    }
    publish(stage.as_ref());
    let mut since = 0u32;
    loop {
        // The engine's side went: what is still queued is nobody's any more.
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut job) = jobs.pop() else {
            if shared.stop.load(Ordering::SeqCst) || jobs.is_abandoned() {
                return;
            }
            shared.sleeping.store(true, Ordering::SeqCst);
            // Checked again after saying so: a push in between either is seen here or
            // sees `sleeping` and unparks.
            if jobs.is_empty() && !shared.stop.load(Ordering::SeqCst) {
                std::thread::park_timeout(Duration::from_millis(10));
            }
            shared.sleeping.store(false, Ordering::SeqCst);
            continue;
        };
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
        // When the ring ran empty (before handing back the last payload, so that the
        // counts are final once everything came back), and every so often when behind.
        since += 1;
        if jobs.is_empty() || since >= 64 {
            publish(stage.as_ref());
            since = 0;
        }
        // The ring back is as large as the ring in, and the engine never has more out
        // than that: it has room.
        while let Err(rtrb::PushError::Full(back)) = results.push(job) {
            if results.is_abandoned() {
                return;
            }
            job = back;
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::{Bth, ExtHeaders, Opcode, Psn};

    /// Flags payloads that start with 0xEE; panics on one that starts with 0xDD; sleeps
    /// `delay` on each.
    #[derive(Debug, Default)]
    struct Marker {
        seen: u64,
        delay: Duration,
    }

    impl Service for Marker {
        fn name(&self) -> &str {
            "marker"
        }
        fn in_line(&self) -> bool {
            false
        }
        fn observe(&mut self, _p: &ServicePacket<'_>, payload: &[u8]) -> ServiceFlags {
            std::thread::sleep(self.delay);
            self.seen += 1;
            match payload.first() {
                Some(0xEE) => ServiceFlags::EXECUTABLE,
                Some(0xDD) => panic!("marker: told to fail"),
                _ => ServiceFlags::NONE,
            }
        }
        fn counters(&self) -> Vec<(&'static str, u64)> {
            vec![("seen", self.seen)]
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

    fn headers(psn: u32) -> RoceHeaders {
        RoceHeaders {
            bth: Bth::new(Opcode::RC_SEND_ONLY, 1, Psn::new(psn)),
            ccx: None,
            ext: ExtHeaders::default(),
        }
    }

    fn offer(t: &mut Threaded, psn: u32, first: u8) -> bool {
        let h = headers(psn);
        let p = ServicePacket {
            qpn: QpNum(1),
            psn: h.bth.psn,
            opcode: h.bth.opcode,
            direction: Direction::Receive,
            len: 8,
            headers: &h,
        };
        t.offer(&p, &[first; 8])
    }

    /// Collects until `n` came back (or a few seconds passed).
    fn collect(t: &mut Threaded, n: usize) -> Vec<Returned> {
        let mut out = Vec::new();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while out.len() < n && std::time::Instant::now() < until {
            t.collect(&mut out, &mut |_, _| {});
            std::thread::yield_now();
        }
        out
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
        assert!(
            here >= 3,
            "a ring of 2 (and one being worked on) took at most 3"
        );
        let mut back = Vec::new();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while back.len() < 6 - here && std::time::Instant::now() < until {
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
        // The worker may have taken one off the ring already: at most capacity + 1.
        assert!((4..=5).contains(&taken), "{taken}");
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
        let started = std::time::Instant::now();
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
        assert!(!offer(&mut t, 9, 0), "a dead worker takes nothing more");
    }
}
