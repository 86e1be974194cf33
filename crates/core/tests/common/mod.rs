//! A test world: engines joined by an in-memory link that drops, duplicates, reorders,
//! corrupts and delays packets from a seeded generator. Packets cross it as real bytes,
//! encoded and decoded (ICRC included) with `sluice-wire`, so a corrupted packet is caught
//! exactly where a real receiver would catch it.

#![allow(dead_code, unreachable_pub)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use sluice_core::*;
use sluice_wire::{IpHeader, IpUdp, Ipv4Header, ROCE_V2_PORT, UdpHeader, emit_datagram};

/// What the link does to packets. The link serialises packets at `gbps` and delivers them
/// after `delay`, in order, except that a packet is lost, duplicated or corrupted with the
/// given probabilities, and held back by up to `jitter` with probability `reorder`.
#[derive(Debug, Clone, Copy)]
pub struct Impairments {
    pub loss: f64,
    pub duplicate: f64,
    pub corrupt: f64,
    pub reorder: f64,
    pub jitter: Duration,
    pub delay: Duration,
    pub gbps: u64,
    /// Chance that a packet arrives marked Congestion Experienced.
    pub ce_mark: f64,
}

impl Impairments {
    pub const CLEAN: Impairments = Impairments {
        loss: 0.0,
        duplicate: 0.0,
        corrupt: 0.0,
        reorder: 0.0,
        jitter: Duration::ZERO,
        delay: Duration::from_micros(5),
        gbps: 25,
        ce_mark: 0.0,
    };
}

/// RED/ECN marking at a switch port, on the queue a packet finds ahead of it: none up to
/// `kmin` bytes, then with a chance rising linearly to `pmax` at `kmax`, every packet above
/// `kmax` (DCQCN's switch). `kmin == kmax` with `pmax` 1 is DCTCP's step at K.
#[derive(Debug, Clone, Copy)]
pub struct RedMarking {
    pub kmin: u64,
    pub kmax: u64,
    pub pmax: f64,
}

impl RedMarking {
    fn chance(&self, queued: u64) -> f64 {
        if queued <= self.kmin {
            0.0
        } else if queued > self.kmax {
            1.0
        } else {
            self.pmax * (queued - self.kmin) as f64 / (self.kmax - self.kmin).max(1) as f64
        }
    }
}

/// The seed of a test run: `SLUICE_SEED` replays one.
pub fn seeds(count: u64) -> Vec<u64> {
    match std::env::var("SLUICE_SEED") {
        Ok(s) => vec![s.parse().expect("SLUICE_SEED is a number")],
        Err(_) => (1..=count).collect(),
    }
}

/// A packet on the link: when it arrives, a tie-breaking sequence number, to which host.
type InFlight = (Instant, u64, usize, Vec<u8>);

pub struct World {
    pub engines: Vec<Engine>,
    seed: u64,
    pub addrs: Vec<IpAddr>,
    pub now: Instant,
    pub link: Impairments,
    rng: Rng,
    in_flight: BinaryHeap<Reverse<InFlight>>,
    /// When each host's outgoing link is free again.
    link_free: Vec<Instant>,
    sequence: u64,
    pub delivered: u64,
    pub dropped_by_link: u64,
    pub rejected_by_wire: u64,
    /// Hosts whose outgoing link acts as an INT switch port: it writes a hop record into
    /// every packet carrying an INT CC extension header, in place, as a switch would.
    pub int_ports: Vec<bool>,
    /// Bytes each host's outgoing link has sent (the INT `tx_bytes` counter).
    port_tx_bytes: Vec<u32>,
    /// Hosts whose outgoing link acts as an ECN-marking switch port.
    pub ecn_ports: Vec<Option<RedMarking>>,
    /// Packets the marking ports marked.
    pub ecn_marked: u64,
    /// Packets each host's link loses on purpose, by their number among what the host sent
    /// (0 first): a burst where the test wants one, besides the random `link.loss`.
    pub lost_sends: Vec<Vec<std::ops::Range<u64>>>,
    /// Packets each host has sent.
    sends: Vec<u64>,
    /// Hosts whose outgoing link's queue is logged (INT and marking ports always are).
    pub watched_ports: Vec<bool>,
    /// At watched, INT and marking ports: when each packet was queued and how many bytes
    /// were ahead of it.
    pub queue_log: Vec<(Instant, u64)>,
    /// How long each host takes to answer what it receives: a host that sleeps between
    /// packets (a software stack) wakes up this long after a packet arrives. Its engine is
    /// told the arrival time, as a kernel receive timestamp would, but sends nothing before.
    pub answer_delay: Vec<Duration>,
    /// When each host is awake again to send.
    awake_at: Vec<Instant>,
}

impl World {
    pub fn new(hosts: usize, seed: u64, link: Impairments) -> World {
        World {
            engines: (0..hosts)
                .map(|h| Engine::new(Self::engine_config(seed, h)))
                .collect(),
            seed,
            addrs: (0..hosts)
                .map(|h| IpAddr::V4(Ipv4Addr::new(10, 0, 0, h as u8 + 1)))
                .collect(),
            now: Instant::ZERO,
            link,
            rng: Rng::new(seed),
            in_flight: BinaryHeap::new(),
            link_free: vec![Instant::ZERO; hosts],
            sequence: 0,
            delivered: 0,
            dropped_by_link: 0,
            rejected_by_wire: 0,
            int_ports: vec![false; hosts],
            port_tx_bytes: vec![0; hosts],
            ecn_ports: vec![None; hosts],
            ecn_marked: 0,
            lost_sends: vec![Vec::new(); hosts],
            sends: vec![0; hosts],
            watched_ports: vec![false; hosts],
            queue_log: Vec::new(),
            answer_delay: vec![Duration::ZERO; hosts],
            awake_at: vec![Instant::ZERO; hosts],
        }
    }

    fn engine_config(seed: u64, host: usize) -> EngineConfig {
        EngineConfig {
            seed: seed ^ ((host as u64 + 1) * 0x1234_5678),
            ..EngineConfig::default()
        }
    }

    /// Gives `host` a fresh engine driven by `controller` (before connecting anything).
    pub fn set_controller(
        &mut self,
        host: usize,
        controller: Box<dyn sluice_core::control::Controller>,
    ) {
        self.set_controller_configured(host, controller, |_| {});
    }

    /// [`World::set_controller`] with the configuration `edit` changed from the default.
    pub fn set_controller_configured(
        &mut self,
        host: usize,
        controller: Box<dyn sluice_core::control::Controller>,
        edit: impl FnOnce(&mut EngineConfig),
    ) {
        let mut config = Self::engine_config(self.seed, host);
        edit(&mut config);
        self.engines[host] = Engine::with_controller(config, controller);
    }

    /// Gives `host` a fresh engine, without a control law, whose configuration `edit`
    /// changed from the test default (before connecting anything).
    pub fn configure(&mut self, host: usize, edit: impl FnOnce(&mut EngineConfig)) {
        let mut config = Self::engine_config(self.seed, host);
        edit(&mut config);
        self.engines[host] = Engine::new(config);
    }

    /// The largest queue a logging port (INT or marking) saw from `from` on.
    pub fn max_queue_since(&self, from: Instant) -> u64 {
        self.queue_log
            .iter()
            .filter(|(at, _)| *at >= from)
            .map(|(_, q)| *q)
            .max()
            .unwrap_or(0)
    }

    fn host_of(&self, addr: IpAddr) -> usize {
        self.addrs
            .iter()
            .position(|&a| a == addr)
            .expect("a known host")
    }

    /// Sends everything every engine has to send now onto the link.
    fn transmit(&mut self) {
        let mut payload = [0u8; 4096];
        for h in 0..self.engines.len() {
            if self.now < self.awake_at[h] {
                continue;
            }
            while let Some(t) = self.engines[h].poll_transmit(self.now, &mut payload) {
                let ce = self.rng.chance(self.link.ce_mark);
                let bytes = match self.engines[h].payload(t.payload_at, t.payload_len, &payload) {
                    Some(Payload::Bytes(b)) => self.encode(h, &t, ce, b),
                    Some(Payload::Len(n)) => self.encode(h, &t, ce, &ZEROS[..n as usize]),
                    None => continue, // its region is gone: dropped, as a driver would
                };
                let to = self.host_of(t.dst);
                self.send(h, to, bytes);
            }
        }
    }

    fn encode(&self, from: usize, t: &Transmit, ce: bool, payload: &[u8]) -> Vec<u8> {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (self.addrs[from], t.dst) else {
            unreachable!()
        };
        let ip = IpHeader::V4(Ipv4Header {
            src,
            dst,
            tos: if ce { 0x03 } else { 0x02 },
            identification: 0,
            dont_fragment: true,
            ttl: 64,
        });
        let udp = UdpHeader {
            src_port: t.src_port,
            dst_port: ROCE_V2_PORT,
        };
        let mut buf = vec![0u8; 4096 + 128];
        let n = emit_datagram(&ip, &udp, &t.headers, payload, &mut buf)
            .expect("the engine emits valid packets");
        buf.truncate(n);
        buf
    }

    fn send(&mut self, from: usize, to: usize, mut bytes: Vec<u8>) {
        // Serialisation: the packet leaves when the link is free and takes its length.
        let start = self.link_free[from].max(self.now);
        let on_wire = Duration::from_nanos((bytes.len() as u64 * 8).div_ceil(self.link.gbps));
        self.link_free[from] = start + on_wire;
        self.port_tx_bytes[from] = self.port_tx_bytes[from].wrapping_add(bytes.len() as u32);
        // The queue ahead of this packet: what the link still has to send.
        let queued = (start - self.now).as_nanos() as u64 * self.link.gbps / 8;
        if self.watched_ports[from] || self.int_ports[from] || self.ecn_ports[from].is_some() {
            self.queue_log.push((self.now, queued));
        }
        if self.int_ports[from] {
            stamp_int(
                &mut bytes,
                queued as u32,
                self.port_tx_bytes[from],
                start,
                self.link.gbps,
            );
        }
        if let Some(red) = self.ecn_ports[from] {
            if self.rng.chance(red.chance(queued)) && mark_ce(&mut bytes) {
                self.ecn_marked += 1;
            }
        }
        let arrives = start + on_wire + self.link.delay;
        let number = self.sends[from];
        self.sends[from] += 1;
        if self.lost_sends[from].iter().any(|r| r.contains(&number))
            || self.rng.chance(self.link.loss)
        {
            self.dropped_by_link += 1;
            return;
        }
        if self.rng.chance(self.link.corrupt) {
            let bit = self.rng.below(bytes.len() as u64 * 8) as usize;
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
        let copies = if self.rng.chance(self.link.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let held = if self.rng.chance(self.link.reorder) {
                self.rng.below(self.link.jitter.as_nanos() as u64 + 1)
            } else {
                0
            };
            let at = arrives + Duration::from_nanos(held);
            self.sequence += 1;
            self.in_flight
                .push(Reverse((at, self.sequence, to, bytes.clone())));
        }
    }

    /// Delivers every packet due now, through the real decoder and ICRC check.
    fn deliver(&mut self) {
        while let Some(Reverse((at, _, _, _))) = self.in_flight.peek() {
            if *at > self.now {
                break;
            }
            let Reverse((_, _, to, bytes)) = self.in_flight.pop().expect("peeked");
            let Ok(datagram) = IpUdp::parse(&bytes) else {
                self.rejected_by_wire += 1;
                continue;
            };
            let Ok(packet) = datagram.roce() else {
                self.rejected_by_wire += 1;
                continue;
            };
            let headers = packet.headers();
            self.delivered += 1;
            let (from, ce) = (datagram.ip.src(), datagram.ip.ecn() == 3);
            let awake = self.now + self.answer_delay[to];
            self.awake_at[to] = self.awake_at[to].max(awake);
            self.engines[to].handle_packet(
                self.now,
                from,
                ce,
                &headers,
                Payload::Bytes(packet.payload),
            );
        }
    }

    /// No packet is on the links.
    pub fn links_empty(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// Runs until `done` holds or `limit` of simulated time passes; true if `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut World) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            self.transmit();
            if done(self) {
                return true;
            }
            let next_packet = self.in_flight.peek().map(|Reverse((at, ..))| *at);
            let next_timer = self
                .engines
                .iter_mut()
                .filter_map(|e| e.next_timeout())
                .min();
            let next_wake = self
                .awake_at
                .iter()
                .copied()
                .filter(|&t| t > self.now)
                .min();
            let Some(next) = [next_packet, next_timer, next_wake]
                .into_iter()
                .flatten()
                .min()
            else {
                // Nothing on the links or due: but `done` may have just given an engine work
                // (posted, resumed a drained queue pair), which only a transmit shows.
                self.transmit();
                let moving = !self.in_flight.is_empty()
                    || self.engines.iter_mut().any(|e| e.next_timeout().is_some());
                if !moving {
                    return done(self);
                }
                continue;
            };
            if next > end {
                return false;
            }
            self.now = self.now.max(next);
            for e in &mut self.engines {
                e.handle_timeout(self.now);
            }
            self.deliver();
        }
    }
}

/// Marks an ECN-capable IPv4 datagram Congestion Experienced, as a switch does: the ECN bits
/// of the TOS byte to 11 and the header checksum redone (the ICRC masks the TOS byte).
fn mark_ce(bytes: &mut [u8]) -> bool {
    if bytes.len() < 20 || bytes[1] & 0b11 == 0 {
        return false;
    }
    bytes[1] |= 0b11;
    bytes[10..12].fill(0);
    let sum = sluice_wire::internet_checksum(&bytes[..20], 0);
    bytes[10..12].copy_from_slice(&sum.to_be_bytes());
    true
}

/// Writes one INT hop record into the IPv4 datagram `bytes` if it carries an INT CC
/// extension header with a free slot, byte by byte from the documented layout (an encoder
/// independent of `sluice-wire`'s). The ICRC is left as it was: it masks these bytes.
fn stamp_int(bytes: &mut [u8], qlen: u32, tx_bytes: u32, at: Instant, gbps: u64) {
    const CCX: usize = 20 + 8 + 12;
    if bytes.len() < CCX + 64 || bytes[CCX - 11] & 0x0F != 1 || bytes[CCX + 1] != 2 {
        return;
    }
    let count = usize::from(bytes[CCX + 2]);
    if count >= 5 {
        return;
    }
    let hop = &mut bytes[CCX + 4 + 12 * count..CCX + 16 + 12 * count];
    hop[0..4].copy_from_slice(&tx_bytes.to_be_bytes());
    hop[4..8].copy_from_slice(&(at.as_nanos() as u32).to_be_bytes());
    hop[8..10].copy_from_slice(&(qlen.div_ceil(256).min(0xFFFF) as u16).to_be_bytes());
    hop[10..12].copy_from_slice(&((gbps * 10) as u16).to_be_bytes());
    bytes[CCX + 2] += 1;
}

/// A connected pair of RC queue pairs between hosts 0 and 1, with a PD, CQs and one memory
/// region of `mr_len` bytes on each side.
pub struct Pair {
    pub qp: [QpNum; 2],
    pub send_cq: [CqId; 2],
    pub recv_cq: [CqId; 2],
    pub pd: [PdId; 2],
    pub mr: [MrInfo; 2],
}

pub struct PairOptions {
    pub mtu: Mtu,
    pub mr_len: usize,
    pub sq_psn: [u32; 2],
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub access: Access,
    pub caps: QpCaps,
    pub cq_entries: u32,
    pub recovery: Recovery,
    /// The CC extension header each side sends and accepts.
    pub ccx: [Option<sluice_wire::CcxLayout>; 2],
}

impl Default for PairOptions {
    fn default() -> Self {
        PairOptions {
            mtu: Mtu::M1024,
            mr_len: 1 << 20,
            sq_psn: [100, 0xFF_FFF0],
            timeout: 8, // 4.096 us x 2^8 = 1 ms
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1, // 10 us
            access: Access::ALL,
            caps: QpCaps::default(),
            cq_entries: 4096,
            recovery: Recovery::GoBackN,
            ccx: [None; 2],
        }
    }
}

/// The bytes a length-only payload is sent as (an MTU's worth).
static ZEROS: [u8; 4096] = [0; 4096];

/// The byte pattern memory regions are filled with, to see any byte written where it should
/// not be.
pub const CANARY: u8 = 0xC5;

impl Pair {
    pub fn connect(world: &mut World, o: &PairOptions) -> Pair {
        let mut qp = [QpNum(0); 2];
        let mut send_cq = [CqId(0); 2];
        let mut recv_cq = [CqId(0); 2];
        let mut pd = [PdId(0); 2];
        let mut mr = [MrInfo {
            lkey: 0,
            rkey: 0,
            addr: 0,
            len: 0,
        }; 2];
        for h in 0..2 {
            let e = &mut world.engines[h];
            pd[h] = e.alloc_pd();
            send_cq[h] = e.create_cq(o.cq_entries).unwrap();
            recv_cq[h] = e.create_cq(o.cq_entries).unwrap();
            let memory = Memory::Bytes(vec![CANARY; o.mr_len].into_boxed_slice());
            mr[h] = e
                .register_mr(pd[h], 0x10_0000 * (h as u64 + 1), memory, Access::ALL)
                .unwrap();
            qp[h] = e
                .create_qp(QpConfig {
                    pd: pd[h],
                    send_cq: send_cq[h],
                    recv_cq: recv_cq[h],
                    caps: o.caps,
                })
                .unwrap();
        }
        for h in 0..2 {
            let peer = 1 - h;
            let psn = |p: u32| sluice_wire::Psn::new(p);
            let c = Connection {
                access: o.access,
                timeout: o.timeout,
                retry_cnt: o.retry_cnt,
                rnr_retry: o.rnr_retry,
                min_rnr_timer: o.min_rnr_timer,
                recovery: o.recovery,
                ccx: o.ccx[h],
                ..Connection::new(
                    world.addrs[peer],
                    qp[peer].0,
                    o.mtu,
                    psn(o.sq_psn[peer]),
                    psn(o.sq_psn[h]),
                )
            };
            world.engines[h].connect(qp[h], &c).unwrap();
        }
        Pair {
            qp,
            send_cq,
            recv_cq,
            pd,
            mr,
        }
    }

    /// Drains a CQ.
    pub fn completions(world: &mut World, host: usize, cq: CqId) -> Vec<Completion> {
        let mut out = Vec::new();
        while let Ok(Some(c)) = world.engines[host].poll_cq(cq) {
            out.push(c);
        }
        out
    }

    /// Posts WRITE `wr_id` of `len` bytes from host 0's region at `offset` to host 1's
    /// region at the same offset.
    pub fn post_write(&self, world: &mut World, wr_id: u64, offset: u64, len: u32) {
        let op = SendOp::Write {
            remote_addr: self.mr[1].addr + offset,
            rkey: self.mr[1].rkey,
        };
        let sgl = [Sge {
            lkey: self.mr[0].lkey,
            addr: self.mr[0].addr + offset,
            len,
        }];
        world.engines[0]
            .post_send(self.qp[0], &SendWr::new(wr_id, op, &sgl))
            .unwrap();
    }

    /// Posts one WRITE of `len` bytes from host 0 and runs until it completes (at most 1 s
    /// of simulated time) with success; returns the time it took.
    pub fn write_and_wait(&self, world: &mut World, len: u32) -> Duration {
        let start = world.now;
        self.post_write(world, 1, 0, len);
        let cq = self.send_cq[0];
        assert!(world.run_until(Duration::from_secs(1), |w| w.engines[0].cq_len(cq) == 1));
        assert_eq!(Pair::completions(world, 0, cq)[0].status, WcStatus::Success);
        world.now - start
    }

    /// A RoCE v2 CNP to host 0's queue pair.
    pub fn cnp(&self) -> sluice_wire::RoceHeaders {
        sluice_wire::RoceHeaders {
            bth: sluice_wire::Bth::new(
                sluice_wire::Opcode::CNP,
                self.qp[0].0,
                sluice_wire::Psn::new(0),
            ),
            ccx: None,
            ext: sluice_wire::ExtHeaders::default(),
        }
    }
}

/// The ACK events among `events`, and the RTT samples they carried.
pub fn rtt_samples(events: &[sluice_core::control::Event]) -> (usize, Vec<Duration>) {
    use sluice_core::control::Event;
    let acks = events
        .iter()
        .filter(|e| matches!(e, Event::Ack { .. }))
        .count();
    let rtts = events
        .iter()
        .filter_map(|e| match e {
            Event::Ack { rtt, .. } => *rtt,
            _ => None,
        })
        .collect();
    (acks, rtts)
}

/// A control law that records every event, and sets a fixed rate and window (if given) on
/// every queue pair at each one.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    pub events: std::rc::Rc<std::cell::RefCell<Vec<sluice_core::control::Event>>>,
    pub rate_bps: Option<u64>,
    pub window_bytes: Option<u64>,
}

impl sluice_core::control::Law for Recorder {
    type Context = ();

    fn name(&self) -> &'static str {
        "recorder"
    }

    fn interest(&self) -> sluice_core::control::EventMask {
        sluice_core::control::EventMask::ALL
    }

    fn on_event(
        &mut self,
        _: Instant,
        _: &mut (),
        event: &sluice_core::control::Event,
        act: &mut sluice_core::control::Actions,
    ) {
        self.events.borrow_mut().push(*event);
        if let Some(r) = self.rate_bps {
            act.set_rate(r);
        }
        if let Some(w) = self.window_bytes {
            act.set_window(w);
        }
    }
}
