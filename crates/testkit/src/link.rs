//! Engines joined by an in-memory link that drops, duplicates, reorders, corrupts and
//! delays packets from a seeded generator. Packets cross it as real bytes, encoded and
//! decoded (ICRC included) with `sluice-wire`, so a corrupted packet is caught exactly where
//! a real receiver would catch it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use sluice_core::*;
use sluice_wire::{IpHeader, IpUdp, Ipv4Header, ROCE_V2_PORT, UdpHeader, emit_datagram};

use crate::pair::{Hosts, host_addr};

/// What the link does to packets. The link serialises packets at `gbps` and delivers them
/// after `delay`, in order, except that a packet is lost, duplicated or corrupted with the
/// given probabilities, and held back by up to `jitter` with probability `reorder`.
#[derive(Debug, Clone, Copy)]
pub struct Impairments {
    /// Chance that a packet is lost.
    pub loss: f64,
    /// Chance that a packet arrives twice.
    pub duplicate: f64,
    /// Chance that one bit of a packet is flipped.
    pub corrupt: f64,
    /// Chance that a packet is held back by up to `jitter` (and so may overtake or be
    /// overtaken).
    pub reorder: f64,
    /// The longest a reordered packet is held back.
    pub jitter: Duration,
    /// Propagation delay.
    pub delay: Duration,
    /// The rate each host's outgoing link serialises packets at.
    pub gbps: u64,
    /// Chance that a packet arrives marked Congestion Experienced.
    pub ce_mark: f64,
}

impl Impairments {
    /// A 25 Gbit/s link with a 5 us delay that loses, duplicates, corrupts and reorders
    /// nothing.
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
    /// Queued bytes up to which nothing is marked.
    pub kmin: u64,
    /// Queued bytes above which everything is marked.
    pub kmax: u64,
    /// The chance of a mark at `kmax`.
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

/// Reordering as deep as spraying over unequal paths causes: a packet is held back, with
/// probability `chance`, by a whole number of its own transmission times drawn up to
/// `packets`, so that up to that many packets sent back to back after it overtake it.
/// (`Impairments::jitter` holds packets by a time, a few packets deep at most on a fast
/// link; this is counted in packets, and drawn from its own generator so that a world's
/// other chances stay as they were with it off.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeepReorder {
    /// Chance that a packet (each copy of a duplicated one) is held back.
    pub chance: f64,
    /// The most packet times it is held back by.
    pub packets: u32,
}

/// A packet on the link: when it arrives, a tie-breaking sequence number, to which host,
/// its number among the packets (copies included) sent to that host.
type InFlight = (Instant, u64, usize, u64, Vec<u8>);

/// Something the link does on purpose to one packet (see [`World::impair_next`]), on top
/// of what [`Impairments`] does by chance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The packet is lost.
    Drop,
    /// The packet arrives twice.
    Duplicate,
    /// This bit of the packet (modulo its length in bits) is flipped.
    Corrupt {
        /// Which bit, counted from the first of the IP header.
        bit: u32,
    },
    /// The packet is held back this long (and may be overtaken).
    Delay(Duration),
}

/// Engines joined by a simulated link (see the module's documentation): the clock, the
/// packets in flight, the switch ports' behaviour and what the link counted.
#[derive(Debug)]
pub struct World {
    /// The engines, host 0 first.
    pub engines: Vec<Engine>,
    seed: u64,
    /// Each host's address.
    pub addrs: Vec<IpAddr>,
    /// The simulated time.
    pub now: Instant,
    /// What the link does to packets by chance.
    pub link: Impairments,
    rng: Rng,
    in_flight: BinaryHeap<Reverse<InFlight>>,
    /// When each host's outgoing link is free again.
    link_free: Vec<Instant>,
    sequence: u64,
    /// Packets handed to an engine.
    pub delivered: u64,
    /// Packets the link lost.
    pub dropped_by_link: u64,
    /// Packets the wire decoder refused (corrupted ones).
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
    /// What the link does on purpose to each host's next packets, in order.
    faults: Vec<VecDeque<Fault>>,
    /// Paths by UDP source port, both ways: a packet whose source port is listed takes that
    /// much longer (`Some`), or is lost (`None`), as if ECMP hashed its port onto a slower
    /// or failed path. Ports not listed take the link as it is.
    pub port_paths: Vec<(u16, Option<Duration>)>,
    /// Deep reordering on top of `link` (off: `None`).
    pub deep_reorder: Option<DeepReorder>,
    /// Draws the deep reordering's chances (apart from `rng`: see [`DeepReorder`]).
    deep_rng: Rng,
    /// Packets (copies included) sent to each host, and those that arrived there.
    sent_to: Vec<u64>,
    arrived_at: Vec<u64>,
    /// The most packets sent to a host after one packet that arrived before it (at least:
    /// packets lost on the way count for nothing): how deep the link reordered.
    pub deepest_overtaking: u64,
}

impl World {
    /// `hosts` engines, each configured from `seed` (see [`World::engine_config`]), joined
    /// by a link that does what `link` says, its chances drawn from `seed`.
    pub fn new(hosts: usize, seed: u64, link: Impairments) -> World {
        World {
            engines: (0..hosts)
                .map(|h| Engine::new(Self::engine_config(seed, h)))
                .collect(),
            seed,
            addrs: (0..hosts).map(host_addr).collect(),
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
            faults: vec![VecDeque::new(); hosts],
            port_paths: Vec::new(),
            deep_reorder: None,
            deep_rng: Rng::new(seed ^ 0xDEE9_0DE9),
            sent_to: vec![0; hosts],
            arrived_at: vec![0; hosts],
            deepest_overtaking: 0,
        }
    }

    /// The configuration of `host`'s engine in a world seeded with `seed`: the default,
    /// with a seed of its own.
    pub fn engine_config(seed: u64, host: usize) -> EngineConfig {
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
        // Serialisation: the packet leaves when the link is free and takes its length on an
        // Ethernet link (framing, preamble and gap included: as the engine's pacer and the
        // simulator's links count it).
        let start = self.link_free[from].max(self.now);
        let link_bytes = sluice_wire::link_len(bytes.len());
        let on_wire = Duration::from_nanos((link_bytes as u64 * 8).div_ceil(self.link.gbps));
        self.link_free[from] = start + on_wire;
        self.port_tx_bytes[from] = self.port_tx_bytes[from].wrapping_add(link_bytes as u32);
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
        let mut arrives = start + on_wire + self.link.delay;
        let number = self.sends[from];
        self.sends[from] += 1;
        // IPv4 without options (what `encode` writes): the UDP source port at 20.
        let port = u16::from_be_bytes([bytes[20], bytes[21]]);
        match self.port_paths.iter().find(|(p, _)| *p == port) {
            Some((_, None)) => {
                self.dropped_by_link += 1;
                return;
            }
            Some((_, Some(extra))) => arrives = arrives + *extra,
            None => {}
        }
        let fault = self.faults[from].pop_front();
        if fault == Some(Fault::Drop)
            || self.lost_sends[from].iter().any(|r| r.contains(&number))
            || self.rng.chance(self.link.loss)
        {
            self.dropped_by_link += 1;
            return;
        }
        if let Some(Fault::Corrupt { bit }) = fault {
            let bit = bit as usize % (bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
        if self.rng.chance(self.link.corrupt) {
            let bit = self.rng.below(bytes.len() as u64 * 8) as usize;
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
        let copies = if self.rng.chance(self.link.duplicate) {
            2
        } else {
            1
        } + usize::from(fault == Some(Fault::Duplicate));
        let arrives = match fault {
            Some(Fault::Delay(d)) => arrives + d,
            _ => arrives,
        };
        for _ in 0..copies {
            let held = if self.rng.chance(self.link.reorder) {
                self.rng.below(self.link.jitter.as_nanos() as u64 + 1)
            } else {
                0
            };
            let deep = match self.deep_reorder {
                Some(d) if self.deep_rng.chance(d.chance) => {
                    on_wire * self.deep_rng.below(u64::from(d.packets) + 1) as u32
                }
                _ => Duration::ZERO,
            };
            let at = arrives + Duration::from_nanos(held) + deep;
            self.sequence += 1;
            let number = self.sent_to[to];
            self.sent_to[to] += 1;
            self.in_flight
                .push(Reverse((at, self.sequence, to, number, bytes.clone())));
        }
    }

    /// Delivers every packet due now, through the real decoder and ICRC check.
    fn deliver(&mut self) {
        while let Some(Reverse((at, ..))) = self.in_flight.peek() {
            if *at > self.now {
                break;
            }
            let Reverse((_, _, to, number, bytes)) = self.in_flight.pop().expect("peeked");
            // Arriving k-th, packet n was overtaken by at least k - n sent after it.
            let overtaken = self.arrived_at[to].saturating_sub(number);
            self.deepest_overtaking = self.deepest_overtaking.max(overtaken);
            self.arrived_at[to] += 1;
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

    /// Makes the link do `fault` to the next packet `from` sends that has no fault yet
    /// (faults apply to its packets in the order they were asked for).
    pub fn impair_next(&mut self, from: usize, fault: Fault) {
        self.faults[from].push_back(fault);
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
            // The engines' timers, and when a scheduler lets a queue pair it holds back send
            // (`transmit` took everything that could go now).
            let now = self.now;
            let next_timer = self
                .engines
                .iter_mut()
                .flat_map(|e| {
                    let send = e.next_transmit_at().filter(|&t| t > now);
                    [e.next_timeout(), send]
                })
                .flatten()
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
                    || self
                        .engines
                        .iter_mut()
                        .any(|e| e.next_timeout().is_some() || e.next_transmit_at().is_some());
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

/// The bytes a length-only payload is sent as (an MTU's worth).
static ZEROS: [u8; 4096] = [0; 4096];

impl Hosts for World {
    fn engines_mut(&mut self) -> &mut [Engine] {
        &mut self.engines
    }

    fn addrs(&self) -> &[IpAddr] {
        &self.addrs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Pair, PairOptions};

    /// A 512-packet WRITE sent back to back, over a clean link with or without deep
    /// reordering: how deep the link reordered it, and that it completed.
    fn overtaking(deep: Option<DeepReorder>) -> u64 {
        let mut world = World::new(2, 7, Impairments::CLEAN);
        world.deep_reorder = deep;
        let options = PairOptions {
            recovery: Recovery::SelectiveRepeat,
            ..PairOptions::default()
        };
        let pair = Pair::connect(&mut world, &options);
        pair.write_and_wait(&mut world, 512 * 1024);
        world.deepest_overtaking
    }

    #[test]
    fn deep_reorder_holds_packets_back_by_hundreds_of_packets() {
        assert_eq!(overtaking(None), 0, "a clean link keeps order");
        let deep = overtaking(Some(DeepReorder {
            chance: 0.05,
            packets: 400,
        }));
        assert!((200..=400).contains(&deep), "{deep} packets deep");
    }
}
