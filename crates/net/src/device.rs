//! A [`Device`]: one engine and the link it speaks RoCE v2 on (a UDP socket, or an AF_XDP
//! socket: `crate::link`), pumped by the caller's thread. No locks, no threads of its own:
//! one device per thread.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use sluice_core::{Engine, EngineConfig, Instant, Payload};
use sluice_wire::icrc::{self, IcrcInput, Ipv4IdSolver};
use sluice_wire::{
    AtomicEth, BTH_LEN, CCX_MAX_LEN, Ccx, ICRC_LEN, Opcode, ROCE_V2_PORT, RocePacket, pad_for,
};

use crate::capture::Capture;
use crate::link::{Link, UdpLink};
use crate::sys::{self, InMsg, MAX_GSO_BYTES, MAX_GSO_SEGMENTS, OutMsg, OutPacket};
use crate::xdp::{self, XdpLink};
use crate::{NetCounters, NetError};

/// Room kept before each packet's payload in the send buffer for its RoCE headers: the BTH,
/// the largest CC extension header and the largest extension headers (an AtomicETH, 28 bytes).
const HEADER_ROOM: usize = BTH_LEN + CCX_MAX_LEN + AtomicEth::LEN;
/// The largest RoCE payload (path MTU 4096).
const MAX_PAYLOAD: usize = 4096;
/// One packet's slot in the send buffer: headers, payload, pad and ICRC.
const TX_SLOT: usize = HEADER_ROOM + MAX_PAYLOAD + 8;
/// Packets taken from the engine per round before they are handed to the kernel.
const TX_PACKETS: usize = 256;
/// The largest IP + UDP header the ICRC covers (IPv6).
const MAX_IP_UDP: usize = icrc::MAX_IP_UDP_LEN;

/// How late a receive timeout may end (two ticks at 250 Hz, rounded up), and the shortest
/// wait that sleeps in the receive rather than in `ppoll` with a timer to the microsecond.
const RECV_TIMEOUT_SLACK: Duration = Duration::from_millis(10);

/// DSCP 26 (the class RoCE deployments use) with ECT(0): the TOS byte Sluice sends with.
pub const DEFAULT_TOS: u8 = (26 << 2) | 0b10;

/// How a device is set up.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// The address RoCE packets leave from and arrive at: a specific local IP (not the
    /// unspecified address: the ICRC covers the destination address) and UDP port.
    pub local: SocketAddr,
    /// The UDP port peers receive RoCE on (4791 for any standard peer).
    pub peer_port: u16,
    /// The whole IPv4 TOS / IPv6 traffic-class byte: DSCP and ECN bits.
    pub tos: u8,
    /// The DSCP of packet priority 0 when a control law sets priorities (Homa): a packet
    /// at priority `p` leaves with DSCP `dscp_base + p` and `tos`'s ECN bits, set per packet
    /// (`IP_TOS` control message; the AF_XDP path keeps `tos`). Default
    /// `sluice_wire::DEFAULT_DSCP_BASE` (8); at most 56.
    pub dscp_base: u8,
    /// The engine's configuration (its limits, timers and defaults).
    pub engine: EngineConfig,
    /// Let the kernel segment batches (UDP GSO) and coalesce receives (UDP GRO) where it can.
    pub offload: bool,
    /// Bytes of socket buffer each way.
    pub socket_buffer: usize,
    /// Send-only sockets opened beside the device's own, on ports the kernel picks: a queue
    /// pair's packets leave from source socket `p mod n`, `p` the UDP source port the
    /// engine gives it (a hash of its number, as Soft-RoCE does, or the path its control law
    /// set), so that ECMP spreads queue pairs over paths and a law can move one. 0 (the
    /// default): every packet leaves from the device's own port. The cost: packets of
    /// different queue pairs to one peer no longer share a GSO batch or a `sendmmsg` call
    /// when their sockets differ (figures in the README).
    pub source_sockets: u8,
    /// Send and receive RoCE through an AF_XDP socket on this network interface (queue 0)
    /// instead of the UDP socket, past the kernel's IP and UDP stack: IPv4 only, peers on
    /// the link, root; path MTU 4096 needs Linux 6.6 or later (frames of two UMEM chunks),
    /// 2048 before. The UDP socket stays bound, keeping the port. `None` (the default): the
    /// UDP socket.
    pub xdp: Option<String>,
}

impl DeviceConfig {
    /// A device on `ip`, UDP port 4791, talking to peers on 4791.
    pub fn new(ip: IpAddr) -> DeviceConfig {
        DeviceConfig {
            local: SocketAddr::new(ip, ROCE_V2_PORT),
            peer_port: ROCE_V2_PORT,
            tos: DEFAULT_TOS,
            dscp_base: sluice_wire::DEFAULT_DSCP_BASE,
            engine: EngineConfig::default(),
            offload: true,
            socket_buffer: 32 << 20,
            source_sockets: 0,
            xdp: None,
        }
    }
}

/// An RDMA device in software: a [`sluice_core::Engine`] (the verbs: PDs, MRs, CQs, QPs,
/// posting and polling, through [`Device::engine`]) bound to a UDP socket (or an AF_XDP
/// link, [`DeviceConfig::xdp`]), moved forward by
/// [`Device::poll`] and put to sleep by [`Device::wait`].
#[derive(Debug)]
pub struct Device {
    engine: Engine,
    /// What packets go over: the UDP socket, or an AF_XDP link.
    link: Link,
    local: SocketAddr,
    peer_port: u16,
    /// The socket's TOS byte and the DSCP of priority 0 (`DeviceConfig::dscp_base`).
    tos: u8,
    dscp_base: u8,
    epoch: std::time::Instant,
    /// The `now` of the latest poll: what packets received later may be timed no earlier
    /// than (everything the engine sent before was stamped no later).
    polled: Instant,
    /// Carries the kernel's receive stamps (wall clock) over to engine time.
    wall: WallClock,
    /// Wakes [`Device::wait`] for the engine's timers and the caller's timeout.
    alarm: sys::Alarm,
    /// Packets encoded and not yet accepted by the kernel.
    tx_buf: Vec<u8>,
    tx_packets: Vec<OutPacket>,
    tx_msgs: Vec<OutMsg>,
    /// The ACKs of the batch being staged (with where they go and the socket they leave
    /// from), placed after its other packets.
    tx_acks: Vec<(OutPacket, SocketAddr, u8, Option<u8>)>,
    /// Messages of `tx_msgs` already sent (the rest wait for room in the socket buffer).
    tx_sent: usize,
    /// Some staged packet carries CCX timestamps (to move to when it leaves).
    tx_stamps: bool,
    solver: Ipv4IdSolver,
    counters: NetCounters,
    /// Packets sent from each socket (0: the device's own, k: source socket k): which
    /// UDP source port, so which path of a multipath route, the packets took.
    tx_by_source: Vec<u64>,
    #[cfg(feature = "turn-timing")]
    turn: crate::turn_timing::TurnTiming,
    capture: Option<Capture>,
    /// Where a sent packet's parts are joined for the capture.
    capture_scratch: Vec<u8>,
    /// The ICRCs of the batch being sent, computed before they are written.
    tx_crcs: Vec<u32>,
}

impl Device {
    /// Opens a device: binds its socket and creates its engine (no congestion control).
    pub fn open(config: DeviceConfig) -> Result<Device, NetError> {
        Device::open_with_controller(config, Box::new(sluice_core::control::NoControl))
    }

    /// Opens a device whose engine runs `controller` (a control law, see
    /// `sluice_core::control`).
    pub fn open_with_controller(
        config: DeviceConfig,
        controller: Box<dyn sluice_core::control::Controller>,
    ) -> Result<Device, NetError> {
        let policies = sluice_core::Policies {
            controller,
            ..sluice_core::Policies::default()
        };
        Device::open_with_policies(config, policies)
    }

    /// Opens a device whose engine runs `policies` (see `sluice_core::policy`).
    pub fn open_with_policies(
        config: DeviceConfig,
        policies: sluice_core::Policies,
    ) -> Result<Device, NetError> {
        if config.local.ip().is_unspecified() {
            return Err(NetError::UnspecifiedAddress);
        }
        sluice_wire::check_dscp_base(config.dscp_base)
            .map_err(|why| NetError::DscpBase(config.dscp_base, why))?;
        let (link, local) = Link::open(&config)?;
        let sockets = 1 + link.sources().addrs().count();
        Ok(Device {
            engine: Engine::with_policies(config.engine, policies),
            link,
            local,
            peer_port: config.peer_port,
            tos: config.tos,
            dscp_base: config.dscp_base,
            epoch: std::time::Instant::now(),
            polled: Instant::ZERO,
            wall: WallClock::default(),
            alarm: sys::Alarm::new()?,
            tx_buf: vec![0; TX_PACKETS * TX_SLOT],
            tx_packets: Vec::with_capacity(TX_PACKETS),
            tx_msgs: Vec::with_capacity(TX_PACKETS),
            tx_acks: Vec::with_capacity(TX_PACKETS),
            tx_sent: 0,
            tx_stamps: false,
            solver: Ipv4IdSolver::new(),
            counters: NetCounters::default(),
            tx_by_source: vec![0; sockets],
            #[cfg(feature = "turn-timing")]
            turn: Default::default(),
            capture: None,
            capture_scratch: Vec::new(),
            tx_crcs: Vec::with_capacity(TX_PACKETS),
        })
    }

    /// The verbs: protection domains, memory regions, CQs, QPs, posting and polling.
    pub fn engine(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The engine, to read.
    pub fn engine_ref(&self) -> &Engine {
        &self.engine
    }

    /// The address the device sends from and receives on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Sets the UDP port peers receive on (tests run several devices on one address).
    pub fn set_peer_port(&mut self, port: u16) {
        self.peer_port = port;
    }

    /// The datapath's own counters (the engine has its own: `engine().counters()`).
    pub fn counters(&self) -> &NetCounters {
        &self.counters
    }

    /// Where this device's turns went so far (feature `turn-timing`).
    #[cfg(feature = "turn-timing")]
    pub fn turn_timing(&self) -> Option<crate::turn_timing::TurnSummary> {
        self.turn.summary()
    }

    /// Whether the kernel segments our batches (GSO) and coalesces what we receive (GRO).
    pub fn offloads(&self) -> (bool, bool) {
        let offers = self.link.offers();
        (offers.gso, offers.gro)
    }

    /// Records every packet sent and received from now on (see [`Capture`]).
    pub fn set_capture(&mut self, capture: Option<Capture>) {
        self.capture = capture;
    }

    /// Takes the capture back (to flush and close it).
    pub fn take_capture(&mut self) -> Option<Capture> {
        self.capture.take()
    }

    /// The addresses packets leave from: the device's own, then its source sockets'.
    pub fn source_addrs(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        std::iter::once(self.local).chain(self.link.sources().addrs())
    }

    /// Each address packets leave from ([`Device::source_addrs`]' order) with the packets
    /// sent from it so far (each segment of a GSO batch counted): with source sockets, how
    /// the path selector spread the packets over UDP source ports, so over the paths of a
    /// network that hashes them.
    pub fn packets_by_source(&self) -> impl Iterator<Item = (SocketAddr, u64)> + '_ {
        self.source_addrs().zip(self.tx_by_source.iter().copied())
    }

    /// The engine's clock: nanoseconds since the device opened.
    pub fn now(&self) -> Instant {
        engine_time(self.epoch, std::time::Instant::now())
    }

    /// The engine's time when the last [`Device::poll`] began: a clock reading a caller
    /// that polls in a loop can use instead of reading the clock again (in a VM each
    /// reading costs tens of nanoseconds, a spinning loop's largest user-space cost).
    pub fn polled_at(&self) -> Instant {
        self.polled
    }

    /// Does whatever can be done now without blocking: sends what the engine has (what the
    /// application posted, and ACKs and responses owed for what arrived last time), receives a
    /// batch of datagrams, fires due timers. Returns whether a datagram arrived or a timer
    /// fired, i.e. whether there may be new completions, or new packets for the engine to
    /// send; call it again until it returns `false` before [`Device::wait`]ing.
    ///
    /// Sending comes first so that what an application posts in reply to a message leaves in
    /// one system call with the ACK of that message, and reaches the peer in one wake-up.
    /// Sending alone does not count: once it is done the engine has nothing more to send
    /// until something arrives or a timer fires (or the socket is full, which `wait` also
    /// waits on), so a poll after it would only find the socket empty again, one system
    /// call per message in a ping-pong.
    pub fn poll(&mut self) -> Result<bool, NetError> {
        let now = self.now();
        let sent = self.transmit(now)?;
        // A poll that had nothing to send reaches the receive with nothing done since its
        // clock reading but an empty look at the engine: that reading serves as the
        // receive's.
        let read_at = (!sent).then_some(now);
        let mut progress = self.receive(false, read_at)?;
        // Deferred service stages get what this batch queued for them, after the batch:
        // off the packets' way, but never falling behind a poll (the engine's receive
        // credit bounds what waits if a stage is slow).
        if self.engine.run_deferred_at(now, usize::MAX) > 0 {
            progress = true;
        }
        self.polled = now;
        if self.engine.timeout_due(now) {
            self.engine.handle_timeout(now);
            progress = true;
        }
        Ok(progress)
    }

    /// Polls until nothing is left to do now: in particular, sends the ACKs owed for what the
    /// last poll received. Call it before going quiet (ending a run, closing the device), or
    /// a peer may wait for an ACK that was never sent.
    pub fn flush(&mut self) -> Result<(), NetError> {
        // Bounded: a round that receives nothing (and fires no timer) ends it.
        for _ in 0..1024 {
            if !self.poll()? {
                break;
            }
        }
        Ok(())
    }

    /// Blocks until a datagram arrives, the socket can take packets that are waiting, the
    /// engine's next timer is due, a queue pair its scheduler paces may send again
    /// (`Engine::next_transmit_at`), or `timeout` passes, whichever comes first. Datagrams
    /// that arrive may be handed to the engine here already (call [`Device::poll`] after,
    /// as always, to send what they call for). A `timeout` of 10 ms or more may be overrun
    /// by up to two scheduler ticks (8 ms at 250 Hz); shorter ones and engine timers are
    /// kept to the microsecond. While payloads are out with a service stage on a thread of
    /// its own (`Threaded`), or completions wait for one, it returns within 20 us: what
    /// the stage hands back wakes no socket.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<(), NetError> {
        /// How long a wait lasts at most while a service stage's thread has work out.
        const SERVICE_LOOK_AGAIN_NS: u64 = 20_000;
        // One clock read serves the engine's time and the alarm's.
        let wall = std::time::Instant::now();
        let now = engine_time(self.epoch, wall);
        let waiting = self.tx_msgs.get(self.tx_sent).map(|m| m.source);
        // A scheduler that paces (static, water-filling, nic-default) says when a queue
        // pair may send again: a wake-up too, unless packets already wait for room on the
        // link (its room wakes the wait then, and the next poll sends).
        let transmit = if waiting.is_none() {
            self.engine.next_transmit_at()
        } else {
            None
        };
        let timer = match (self.engine.next_timeout(), transmit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(|t| t.as_nanos().saturating_sub(now.as_nanos()));
        let mut limit = timeout.map(|d| d.as_nanos() as u64);
        // Payloads out with a stage on a worker thread (`Threaded`): what it returns makes no
        // datagram, so look again soon (a completion may wait for it).
        if self.engine.deferred_waiting().0 > 0 || self.engine.held_completions() > 0 {
            limit = Some(limit.map_or(SERVICE_LOOK_AGAIN_NS, |l| l.min(SERVICE_LOOK_AGAIN_NS)));
        }
        let ns = match (timer, limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if ns == Some(0) {
            return Ok(());
        }
        let udp = match &mut self.link {
            Link::Udp(udp) => udp,
            Link::Xdp { link, .. } => {
                if waiting.is_some() {
                    // Frames wait for room in the transmit ring, which the next poll's send
                    // makes (copy mode sends in the call): no sleep.
                    return Ok(());
                }
                self.alarm.set(wall, ns)?;
                sys::wait(link.fd(), None, &self.alarm)?;
                return Ok(());
            }
        };
        let pending = waiting.map(|source| udp.sources().fd(source, &udp.socket));
        // Waiting for a datagram alone (no packets waiting for room, no engine timer due
        // before the caller's limit or just after it, and a limit long enough for a receive
        // timeout, which the kernel counts in scheduler ticks and may end two ticks late):
        // sleep in the receive itself, one system call where `ppoll` and then `recvmmsg`
        // are two.
        let late = RECV_TIMEOUT_SLACK.as_nanos() as u64;
        let only_datagrams = pending.is_none()
            && limit.is_none_or(|l| l >= late)
            && timer.is_none_or(|t| limit.is_some_and(|l| t > l.saturating_add(late)));
        if only_datagrams {
            udp.socket.set_recv_timeout(timeout)?;
            self.receive(true, None)?;
            return Ok(());
        }
        self.alarm.set(wall, ns)?;
        sys::wait(udp.socket.fd(), pending, &self.alarm)?;
        Ok(())
    }

    /// When the engine next needs [`Device::poll`] even if no datagram arrives (for callers
    /// that wait on the socket themselves, e.g. in an async runtime).
    pub fn next_deadline(&mut self) -> Option<std::time::Instant> {
        let t = match (self.engine.next_timeout(), self.engine.next_transmit_at()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(self.epoch + Duration::from_nanos(t.as_nanos()))
    }

    // ---- receive ------------------------------------------------------------------------

    /// Receives a batch on the link (with `wait`, on a UDP socket, sleeping until one comes
    /// or the socket's receive timeout passes) and hands each packet to the engine, timed
    /// when it arrived as well as the link can tell ([`receive_udp`], [`receive_xdp`]).
    ///
    /// `read_at`: a clock reading taken just before this call, with nothing done since, to
    /// use as the time of the receive instead of reading the clock again after it (a
    /// reading costs 40 ns in a VM, and a ping-pong's every turn waits for one). Only a
    /// datagram that lands during the call itself (which does not wait) is stamped that
    /// much early; one that waited in the socket is stamped when it arrived, as always.
    fn receive(&mut self, wait: bool, read_at: Option<Instant>) -> Result<bool, NetError> {
        let clock = Clock {
            epoch: self.epoch,
            polled: self.polled,
        };
        let mut delivery = Delivery {
            engine: &mut self.engine,
            solver: &mut self.solver,
            counters: &mut self.counters,
            capture: self.capture.as_mut(),
            local: self.local,
        };
        match &mut self.link {
            Link::Udp(udp) => receive_udp(
                udp,
                &mut delivery,
                clock,
                &mut self.wall,
                wait,
                read_at,
                #[cfg(feature = "turn-timing")]
                &mut self.turn,
            ),
            Link::Xdp { link, .. } => Ok(receive_xdp(link, &mut delivery, clock, read_at)),
        }
    }

    // ---- transmit -----------------------------------------------------------------------

    /// Sends until the engine has nothing more or the socket is full. Returns whether there
    /// was anything to send.
    fn transmit(&mut self, now: Instant) -> Result<bool, NetError> {
        let mut any = false;
        loop {
            if self.tx_sent == self.tx_msgs.len() {
                self.tx_msgs.clear();
                self.tx_packets.clear();
                self.tx_sent = 0;
                self.tx_stamps = false;
                if self.stage(now) == 0 {
                    return Ok(any);
                }
            }
            any = true;
            if self.send_staged()? == 0 {
                self.counters.tx_blocked += 1;
                return Ok(true);
            }
        }
    }

    /// Hands staged messages to the kernel; returns how many it took.
    fn send_staged(&mut self) -> Result<usize, NetError> {
        // Packets leave now, not when the engine built them: what a CC extension header
        // says about time is moved to now (the engine's stamps are up to a batch older), and
        // the capture records them as they go.
        // One system call per socket: the run of messages that leave from the same one (as
        // many as one call takes).
        let source = self.tx_msgs[self.tx_sent].source;
        let run = self.tx_msgs[self.tx_sent..]
            .iter()
            .take(sys::MAX_BATCH)
            .take_while(|m| m.source == source)
            .count();
        let batch = self.tx_sent..self.tx_sent + run;
        // The ICRCs first: they take time (0.26 us per 4 KiB packet in a release build, 17.7
        // us in a debug one, on the 2-core VM), which the send times in CCX headers must not
        // include. They do not cover those times.
        if !self.write_icrcs(batch.clone()) {
            return Ok(self.drop_unsent());
        }
        let leaving = (self.tx_stamps || self.capture.is_some()).then(|| self.now());
        if let (true, Some(now)) = (self.tx_stamps, leaving) {
            self.restamp(now, batch.clone());
        }
        let msgs = &self.tx_msgs[batch];
        let (engine, buf) = (&self.engine, &self.tx_buf[..]);
        let parts = |p: &OutPacket| {
            packet_parts(engine, buf, p).expect("resolved when its ICRC was written, just above")
        };
        let (sent, stop) = self.link.send(
            &self.tx_packets,
            msgs,
            parts,
            &mut self.counters.tx_syscalls,
            #[cfg(feature = "turn-timing")]
            &mut self.turn,
        );
        match sent {
            Ok(n) => {
                for m in &msgs[..n] {
                    self.counters.tx_datagrams += m.count as u64;
                    self.tx_by_source[usize::from(m.source)] += m.count as u64;
                    if m.count > 1 {
                        self.counters.tx_gso_batches += 1;
                    }
                }
                if let (Some(capture), Some(now)) = (self.capture.as_mut(), leaving) {
                    for m in &msgs[..n] {
                        let from = *self.link.sources().addr(m.source, &self.local);
                        for p in &self.tx_packets[m.first..m.first + m.count] {
                            let roce = &mut self.capture_scratch;
                            roce.clear();
                            for part in parts(p) {
                                roce.extend_from_slice(part);
                            }
                            if let Ok(packet) = RocePacket::parse(roce) {
                                let tos = m.tos.unwrap_or(self.tos);
                                let path = (from, m.dst, p.ip_id, tos);
                                capture.record(now, true, path, roce, &packet);
                            }
                        }
                    }
                }
                self.tx_sent += n;
                match stop {
                    None => Ok(n),
                    // Dropped, as a loss on the network would: the engine resends it.
                    Some(xdp::SendStop::Unresolved) => {
                        self.counters.tx_unresolved += 1;
                        self.tx_sent += 1;
                        Ok(n + 1)
                    }
                    Some(xdp::SendStop::TooBig) => {
                        let m = self.tx_msgs[self.tx_sent];
                        Err(NetError::TooBig {
                            dst: m.dst,
                            len: self.tx_packets[m.first].len(),
                        })
                    }
                }
            }
            // The kernel refused a segmented send (a device without the offload): once.
            Err(e) if self.link.offers().gso && e.raw_os_error() == Some(libc::EIO) => {
                self.link.disable_gso();
                self.unbatch();
                self.send_staged()
            }
            Err(e) => Err(self.send_error(e)),
        }
    }

    /// Moves the CCX timestamps of the packets of messages `batch` (about to be sent) to `now`.
    fn restamp(&mut self, now: Instant, batch: std::ops::Range<usize>) {
        for m in &self.tx_msgs[batch] {
            for p in &mut self.tx_packets[m.first..m.first + m.count] {
                let Some(stamped) = p.stamped.filter(|&s| s < now) else {
                    continue;
                };
                let head_end = p.offset + usize::from(p.head_len);
                let ccx = &mut self.tx_buf[p.offset + BTH_LEN..head_end];
                sluice_wire::delay_timestamps(ccx, (now - stamped).as_nanos() as u64);
                p.stamped = Some(now);
            }
        }
    }

    /// Computes the ICRC of every packet of messages `batch`, about to be handed to the
    /// kernel, over its bytes as they are now (a payload read in place from a region is
    /// hashed where it lies, as the kernel will copy it), and writes it into the packet's
    /// last four bytes. False if a packet's region has been deregistered since the engine
    /// built it.
    fn write_icrcs(&mut self, batch: std::ops::Range<usize>) -> bool {
        // Each packet's ICRC input is prepared while the packet before it is hashed, so
        // that the CRC never reads headers the moment they are written (see `IcrcInput`).
        let (engine, buf, packets) = (&self.engine, &self.tx_buf, &self.tx_packets);
        // The addresses are read where they lie, not copied along: a copy of a copy was read
        // back wider than it was written (a store-forwarding stall, two fifths of
        // `send_staged`'s samples in a latency test).
        let prepare = |input: &mut IcrcInput, (i, from, dst): (usize, &SocketAddr, &_)| {
            let p = &packets[i];
            let [head, payload, tail] = packet_parts(engine, buf, p)?;
            input
                .prepare_between(*from, *dst, p.ip_id, head, payload, tail)
                .expect("headers built by `stage` are well formed, an MTU packet fits a datagram");
            Some([head, payload, tail])
        };
        let (sources, local) = (self.link.sources(), &self.local);
        let mut order = self.tx_msgs[batch.clone()].iter().flat_map(|m| {
            let from = sources.addr(m.source, local);
            (m.first..m.first + m.count).map(move |i| (i, from, &m.dst))
        });
        let crcs = &mut self.tx_crcs;
        crcs.clear();
        let mut inputs = [IcrcInput::new(), IcrcInput::new()];
        let mut next = match order.next() {
            Some(first) => prepare(&mut inputs[0], first),
            None => return true,
        };
        while let Some([head, payload, tail]) = next.take() {
            let k = crcs.len();
            if let Some(after) = order.next() {
                let Some(parts) = prepare(&mut inputs[(k + 1) % 2], after) else {
                    return false;
                };
                next = Some(parts);
            }
            crcs.push(inputs[k % 2].crc(head, payload, tail));
        }
        if crcs.is_empty() {
            return false; // the first packet's region was gone
        }
        for (i, crc) in self.tx_msgs[batch]
            .iter()
            .flat_map(|m| m.first..m.first + m.count)
            .zip(&self.tx_crcs)
        {
            let end = self.tx_packets[i].offset + self.tx_packets[i].len();
            self.tx_buf[end - ICRC_LEN..end].copy_from_slice(&crc.to_le_bytes());
        }
        true
    }

    /// Drops every staged packet not yet sent (one of them could not be read: its region
    /// is gone); returns how many messages that was. The engine resends what was lost, as
    /// after a loss on the network, and fails the request whose memory is gone.
    fn drop_unsent(&mut self) -> usize {
        let dropped = &self.tx_msgs[self.tx_sent..];
        self.counters.tx_region_gone += dropped.iter().map(|m| m.count as u64).sum::<u64>();
        let n = dropped.len();
        self.tx_sent = self.tx_msgs.len();
        n
    }

    /// Splits every unsent GSO batch into single datagrams (each leaves with IPv4
    /// identification 0; its ICRC is computed for that when it is sent).
    fn unbatch(&mut self) {
        let mut single = Vec::with_capacity(self.tx_packets.len());
        for m in &self.tx_msgs[self.tx_sent..] {
            for i in m.first..m.first + m.count {
                self.tx_packets[i].ip_id = 0;
                single.push(OutMsg {
                    dst: m.dst,
                    source: m.source,
                    first: i,
                    count: 1,
                    segment: 0,
                    ack: m.ack,
                    tos: m.tos,
                });
            }
        }
        self.tx_msgs.truncate(self.tx_sent);
        self.tx_msgs.extend(single);
    }

    fn send_error(&self, e: io::Error) -> NetError {
        let dst = self.tx_msgs.get(self.tx_sent).map(|m| m.dst);
        match (e.raw_os_error(), dst) {
            (Some(libc::EMSGSIZE), Some(dst)) => NetError::TooBig {
                dst,
                len: self.tx_packets[self.tx_msgs[self.tx_sent].first].len(),
            },
            (Some(libc::ENETUNREACH | libc::EHOSTUNREACH), Some(dst)) => {
                NetError::Unreachable { dst, source: e }
            }
            _ => NetError::Io(e),
        }
    }

    /// Takes packets from the engine into the send buffer, grouping runs of full-size
    /// packets to one destination into GSO batches. Returns how many it took.
    ///
    /// ACKs and NAKs are placed after the batch's other packets (`place`), in the same system
    /// call and, where GSO lets them, the same send. A datagram wakes its receiver as soon
    /// as it lands; a peer waiting for our reply (a ping-pong of WRITEs) should wake to the
    /// reply, not to the ACK before it and then sleep again. ACKs are cumulative and their
    /// PSN space is not the requests', so letting a request pass one changes nothing the
    /// peer can rely on.
    fn stage(&mut self, now: Instant) -> usize {
        let gso = self.link.offers().gso;
        loop {
            let staged = self.tx_packets.len() + self.tx_acks.len();
            if staged == TX_PACKETS {
                break;
            }
            let slot = staged * TX_SLOT;
            let buf = &mut self.tx_buf[slot..slot + TX_SLOT];
            let transmit = self
                .engine
                .poll_transmit(now, &mut buf[HEADER_ROOM..HEADER_ROOM + MAX_PAYLOAD]);
            // Read where it was returned: moved out of the `Option`, the 288-byte packet was
            // copied by a `memcpy` whose stores the reads of it that follow could not take
            // forwarded (the next load waited: 0.9% of write-bw's sending core).
            let Some(t) = &transmit else {
                break;
            };
            let dst = SocketAddr::new(t.dst, self.peer_port);
            let source = self.link.sources().pick(t.src_port);
            let payload_len = t.payload_len as usize;
            let Ok(header_len) = t.headers.header_len() else {
                self.counters.tx_encode_errors += 1;
                continue;
            };
            let start = HEADER_ROOM - header_len;
            if t.headers
                .emit_headers(payload_len, &mut buf[start..HEADER_ROOM])
                .is_err()
            {
                self.counters.tx_encode_errors += 1;
                continue;
            }
            let pad = usize::from(pad_for(payload_len));
            let end = HEADER_ROOM + payload_len + pad + ICRC_LEN;
            buf[HEADER_ROOM + payload_len..end - ICRC_LEN].fill(0);
            let stamped = matches!(t.headers.ccx, Some(Ccx::Timestamps { .. })).then_some(now);
            self.tx_stamps |= stamped.is_some();
            let packet = OutPacket {
                offset: slot + start,
                head_len: header_len as u16,
                payload_len: payload_len as u16,
                payload_at: t.payload_at,
                ip_id: 0, // set by `place`
                stamped,
            };
            debug_assert_eq!(packet.len(), end - start);
            // A priority the law set goes into the TOS byte's DSCP bits, per packet.
            let tos = t
                .priority
                .get()
                .map(|p| sluice_wire::priority_tos(self.tos, self.dscp_base, p));
            if t.headers.bth.opcode == Opcode::RC_ACKNOWLEDGE {
                self.tx_acks.push((packet, dst, source, tos));
            } else {
                self.place(packet, (dst, source, tos), false, gso);
            }
        }
        for i in 0..self.tx_acks.len() {
            let (packet, dst, source, tos) = self.tx_acks[i];
            self.place(packet, (dst, source, tos), true, gso);
        }
        self.tx_acks.clear();
        if !self.link.sources().is_empty() {
            self.group_by_source();
        }
        self.tx_packets.len()
    }

    /// Appends `packet`, for `dst` from socket `source`, to the staged packets: as the next
    /// segment of the last message if GSO lets it join (same destination and socket, the
    /// message's packets all full, room left, and this one no longer than they are), else
    /// as a message of its own. Segment k of a GSO batch leaves with IPv4 identification k,
    /// which its ICRC is computed for (and a single datagram, from an unconnected
    /// Don't-Fragment socket, with 0). An ACK placed after a reply to the same peer thus
    /// ends the reply's send as its shorter last segment: the kernel carries the two to a
    /// peer on this host as one datagram, where two would each cost a delivery (about a
    /// microsecond on loopback), and a peer that waits for a reply and for the ACK of its
    /// own message (perftest's latency loops) gets both at once; elsewhere the kernel or
    /// the network splits them as any GSO send. `gso`: whether the link segments batches.
    /// `to`: the destination, the socket, and the TOS if not the socket's (packets of one
    /// GSO batch share all three).
    fn place(
        &mut self,
        mut packet: OutPacket,
        to: (SocketAddr, u8, Option<u8>),
        ack: bool,
        gso: bool,
    ) {
        let (dst, source, tos) = to;
        let len = packet.len();
        if ack && gso {
            self.split_short_end(to, len);
        }
        let last = self.tx_msgs.last_mut().filter(|m| {
            // Every packet is placed here, in order: the last message ends at the last one.
            debug_assert_eq!(m.first + m.count, self.tx_packets.len());
            let segment = usize::from(m.segment);
            gso && m.dst == dst
                && m.source == source
                && m.tos == tos
                && m.count < MAX_GSO_SEGMENTS
                && (m.count + 1) * segment <= MAX_GSO_BYTES
                && self.tx_packets[m.first + m.count - 1].len() == segment
                && len <= segment
        });
        match last {
            Some(m) => {
                packet.ip_id = m.count as u16;
                m.count += 1;
            }
            None => self.tx_msgs.push(OutMsg {
                dst,
                source,
                first: self.tx_packets.len(),
                count: 1,
                segment: len as u16,
                ack,
                tos,
            }),
        }
        self.tx_packets.push(packet);
    }

    /// Before an ACK of `len` bytes for `to` is placed: if the last staged message goes to
    /// the same peer from the same socket and ends in a shorter last segment (a reply of
    /// more than one packet whose last one is not full), that segment leaves the batch and
    /// starts a message of its own, which the ACK then joins. Otherwise the ACK could not
    /// join (only a batch's last segment may be short) and would leave as a datagram of its
    /// own after the reply's: a ping-pong peer, which needs both, read the reply's datagram,
    /// sent the ACK it owed for it alone (its own reply still waited for our ACK), read our
    /// ACK and only then sent its reply, again in two datagrams. That cost a 4,097-byte
    /// write-lat at MTU 4096 6-7 us over a 4,096-byte one (docs/performance.md). Split, the
    /// reply's end and the ACK arrive in one datagram, after its other packets.
    fn split_short_end(&mut self, to: (SocketAddr, u8, Option<u8>), len: usize) {
        let (dst, source, tos) = to;
        let Some(m) = self.tx_msgs.last_mut() else {
            return;
        };
        let end = m.first + m.count - 1;
        let short = self.tx_packets[end].len();
        if m.count < 2
            || (m.dst, m.source, m.tos) != (dst, source, tos)
            || short == usize::from(m.segment)
            || len > short
        {
            return;
        }
        m.count -= 1;
        let split = OutMsg {
            first: end,
            count: 1,
            segment: short as u16,
            ..*m
        };
        // Segment 0 of its new batch: the identification its ICRC (computed when it is
        // sent) covers.
        self.tx_packets[end].ip_id = 0;
        self.tx_msgs.push(split);
    }

    /// Orders the staged messages by the socket they leave from, keeping their order within
    /// each (`first` grows in staging order, so a queue pair's packets stay in order): one
    /// `sendmmsg` per socket instead of one per change of socket. Packets of different
    /// queue pairs may pass each other, as they may on the network. So may a queue pair's
    /// own packets if its UDP source port (the socket is chosen by it) changes within one
    /// batch, as when a multipath law moves it: those before and after the change leave in
    /// socket order. The receiver sees reordering, which it handles as on any network with
    /// several paths. Sorts in place.
    fn group_by_source(&mut self) {
        self.tx_msgs
            .sort_unstable_by_key(|m| (m.source, m.ack, m.first));
    }
}

/// Where received packets go: the engine, and what checking them uses and counts.
struct Delivery<'a> {
    engine: &'a mut Engine,
    solver: &'a mut Ipv4IdSolver,
    counters: &'a mut NetCounters,
    capture: Option<&'a mut Capture>,
    local: SocketAddr,
}

impl Delivery<'_> {
    /// Hands `packets` (each: when it arrived, its datagram, the RoCE packet and its segment
    /// number in the datagram) to the engine in order. Each packet's ICRC input is prepared
    /// while the packet before it is handled, so that the CRC never reads headers the moment
    /// they are written (see `IcrcInput`).
    ///
    /// A datagram's description comes by reference where the receiver keeps it (a UDP
    /// socket's): copied along with each packet, it was read back with loads wider than the
    /// stores that had just written it, which the CPU cannot forward (two fifths of
    /// `Device::receive`'s samples in busy write-lat, `perf annotate`).
    fn all<'p, M: std::borrow::Borrow<InMsg>>(
        &mut self,
        packets: impl Iterator<Item = (Instant, M, &'p [u8], u16)>,
    ) {
        let mut packets = packets.peekable();
        let mut inputs = [IcrcInput::new(), IcrcInput::new()];
        let local = self.local;
        // Each ICRC is first computed under the IPv4 identification the packet most likely
        // left with: the one an XDP link saw; else `k`, which a GSO sender (Sluice) computed
        // segment k's ICRC for (the identification the segment has once the kernel splits
        // it), as 0 for a single datagram from an unconnected Don't-Fragment socket.
        let prepare = |input: &mut IcrcInput, next: Option<&(Instant, M, &[u8], u16)>| {
            next.and_then(|(_, msg, roce, k)| {
                let msg = msg.borrow();
                prepare_icrc(input, msg.src, local, roce, msg.ip_id.unwrap_or(*k))
            })
        };
        let mut head_len = prepare(&mut inputs[0], packets.peek());
        let mut j = 0;
        while let Some((now, msg, roce, k)) = packets.next() {
            let this = head_len;
            head_len = prepare(&mut inputs[(j + 1) % 2], packets.peek());
            let first = this.map(|n| (n, prepared_icrc(&inputs[j % 2], roce)));
            self.one(now, msg.borrow(), roce, k, first);
            j += 1;
        }
    }

    /// Checks one received RoCE packet `roce`, segment `k` of its datagram (0 unless the
    /// kernel joined several, GRO), and hands it to the engine. `first` is its ICRC as
    /// [`prepare_icrc`] guessed the IPv4 identification, with the length of the IP and UDP
    /// headers (`None`: too short to have one).
    fn one(&mut self, now: Instant, msg: &InMsg, roce: &[u8], k: u16, first: Option<(usize, u32)>) {
        let Delivery {
            engine,
            solver,
            counters,
            capture,
            local,
        } = self;
        let local = *local;
        counters.rx_datagrams += 1;
        // Read where `parse` returned it: moved out of the `Result`, the packet was copied
        // at once with loads wider than the stores that had just written it, which the CPU
        // cannot forward (half of this function's samples in a latency test).
        let parsed = RocePacket::parse(roce);
        let Ok(packet) = &parsed else {
            counters.rx_malformed += 1;
            return;
        };
        let seen = msg.ip_id;
        let Some((head_len, mut computed)) = first else {
            counters.rx_malformed += 1;
            return;
        };
        let mut ip_id = seen.unwrap_or(k);
        if seen.is_some() && computed != packet.icrc {
            counters.rx_icrc_errors += 1;
            return;
        }
        if computed != packet.icrc && k != 0 {
            ip_id = 0;
            computed = icrc_under(msg.src, local, roce, 0).unwrap_or(computed);
        }
        if computed != packet.icrc {
            // IPv4 from a sender that writes other identifications (Soft-RoCE): find the one
            // the ICRC was computed over, if one exists.
            match msg
                .src
                .is_ipv4()
                .then(|| solver.solve(head_len + roce.len(), computed, packet.icrc))
            {
                Some(Some(id)) => {
                    counters.rx_ipv4_id_nonzero += 1;
                    ip_id = id;
                }
                _ => {
                    counters.rx_icrc_errors += 1;
                    return;
                }
            }
        }
        let ce = msg.tos & 0b11 == 0b11;
        if ce {
            counters.rx_ce += 1;
        }
        if let Some(c) = capture.as_deref_mut() {
            c.record(now, false, (msg.src, local, ip_id, msg.tos), roce, packet);
        }
        let headers = packet.headers();
        engine.handle_packet(
            now,
            msg.src.ip(),
            ce,
            &headers,
            Payload::Bytes(packet.payload),
        );
    }
}

/// What receiving times packets by: the device's epoch, and the time of its latest poll.
#[derive(Debug, Clone, Copy)]
struct Clock {
    epoch: std::time::Instant,
    polled: Instant,
}

impl Clock {
    /// Engine time now.
    fn now(self) -> Instant {
        engine_time(self.epoch, std::time::Instant::now())
    }
}

/// Receives a batch on the UDP socket (with `wait`, sleeping until one comes or the socket's
/// receive timeout passes) and hands each packet to `delivery` timed when the kernel
/// received it: a packet that waited in the socket while this thread slept is not made to
/// look late (which would inflate RTT samples the most when traffic is slowest).
///
/// `read_at`: see [`Device::receive`].
fn receive_udp(
    udp: &mut UdpLink,
    delivery: &mut Delivery<'_>,
    clock: Clock,
    wall: &mut WallClock,
    wait: bool,
    read_at: Option<Instant>,
    #[cfg(feature = "turn-timing")] turn: &mut crate::turn_timing::TurnTiming,
) -> Result<bool, NetError> {
    #[cfg(feature = "turn-timing")]
    let start = crate::turn_timing::cycles();
    let n = udp
        .receiver
        .recv(&udp.socket, wait, &mut delivery.counters.rx_truncated)?;
    #[cfg(feature = "turn-timing")]
    turn.received(start, n > 0, wait);
    if n == 0 {
        return Ok(false);
    }
    delivery.counters.rx_syscalls += 1;
    // The kernel stamps with the wall clock; the engine runs on the monotonic one. Each
    // stamp is carried over by its age: the wall clock's reading now (estimated) less it.
    let read_at = read_at.unwrap_or_else(|| clock.now());
    let wall = wall.at(read_at, || clock.now());
    let (receiver, polled) = (&udp.receiver, clock.polled);
    let packets = (0..n).flat_map(|i| {
        let (msg, bytes) = receiver.message(i);
        let now = if msg.arrived_ns == 0 {
            read_at
        } else {
            let age = wall.saturating_sub(msg.arrived_ns);
            // max then min, not clamp: no panic even if the bounds ever crossed.
            Instant::from_nanos(read_at.as_nanos().saturating_sub(age))
                .max(polled)
                .min(read_at)
        };
        let segments = bytes.chunks(msg.segment).enumerate();
        segments.map(move |(k, roce)| (now, msg, roce, k as u16))
    });
    delivery.all(packets);
    Ok(true)
}

/// Takes the frames waiting on the XDP link (never waits: [`Device::wait`] sleeps on the
/// link's socket) and hands each packet to `delivery`, timed `read_at` (or now): the link
/// has no kernel stamps, and a frame is read within a poll of its arrival.
fn receive_xdp(
    link: &mut XdpLink,
    delivery: &mut Delivery<'_>,
    clock: Clock,
    read_at: Option<Instant>,
) -> bool {
    let n = link.recv();
    if n == 0 {
        return false;
    }
    let now = read_at.unwrap_or_else(|| clock.now());
    let link = &*link;
    let (mut malformed, mut too_long) = (0, 0);
    let packets = (0..n).filter_map(|i| match link.message(i) {
        Ok((msg, roce)) => Some((now, msg, roce, 0)),
        Err(xdp::Refusal::Malformed) => {
            malformed += 1;
            None
        }
        Err(xdp::Refusal::TooLong) => {
            too_long += 1;
            None
        }
    });
    delivery.all(packets);
    delivery.counters.rx_datagrams += malformed + too_long;
    delivery.counters.rx_malformed += malformed;
    delivery.counters.rx_too_long += too_long;
    true
}

/// The engine's time at `wall`, a reading of the monotonic clock: nanoseconds since the
/// device's `epoch`.
fn engine_time(epoch: std::time::Instant, wall: std::time::Instant) -> Instant {
    Instant::from_nanos(wall.duration_since(epoch).as_nanos() as u64)
}

/// The wall clock (`CLOCK_REALTIME`, what the kernel stamps received datagrams with) as an
/// offset from engine time, read again once the last reading is [`WallClock::REREAD`] old:
/// a clock reading costs 25-40 ns in a VM, a sizeable part of the user-space work of a
/// ping-pong's turn, and receives come every few microseconds when busy. Between readings
/// the estimate is off by the wall clock's slew (NTP slews at most 500 ppm: 0.5 us over a
/// millisecond) or by a step, which the clamp of each stamp to the receive's own time
/// bounds.
#[derive(Debug, Default)]
struct WallClock {
    /// Wall-clock ns at engine time zero, and the engine time it was read at (`None`: never).
    offset_ns: u64,
    read_at: Option<Instant>,
}

impl WallClock {
    const REREAD: Duration = Duration::from_millis(1);

    /// The wall clock, in ns since the Unix epoch, at engine time `now`. `clock` reads engine
    /// time afresh: a new offset pairs the wall clock with a reading taken beside it, not
    /// with `now`, which may be a reading from before a system call (a poll's), and an
    /// offset that took in the call's duration would shift every stamp until the next
    /// reading by that much (tens of microseconds in a debug build: enough to make a round
    /// trip's two one-way parts sum to less than nothing).
    fn at(&mut self, now: Instant, clock: impl FnOnce() -> Instant) -> u64 {
        let fresh = self.read_at.is_some_and(|t| {
            now.as_nanos().saturating_sub(t.as_nanos()) < Self::REREAD.as_nanos() as u64
        });
        if !fresh {
            let engine_ns = clock().as_nanos();
            self.offset_ns = sys::realtime_ns().saturating_sub(engine_ns);
            self.read_at = Some(now);
        }
        self.offset_ns.saturating_add(now.as_nanos())
    }
}

/// The parts packet `p` is sent in, one after the other: from its headers up to its payload
/// (in the send buffer), its payload, and its pad and ICRC (in the send buffer). A payload
/// read in place comes from its region; one in the buffer makes the three parts adjacent.
/// `None` if its region has been deregistered since the engine built the packet.
fn packet_parts<'a>(engine: &'a Engine, buf: &'a [u8], p: &OutPacket) -> Option<[&'a [u8]; 3]> {
    let packet = &buf[p.offset..p.offset + p.len()];
    let (head, rest) = packet.split_at(usize::from(p.head_len));
    let (in_buffer, tail) = rest.split_at(usize::from(p.payload_len));
    let payload = match engine.payload(p.payload_at, u32::from(p.payload_len), in_buffer)? {
        Payload::Bytes(bytes) => bytes,
        // Length-only memory has no bytes to send: whatever the buffer holds goes.
        Payload::Len(_) => in_buffer,
    };
    Some([head, payload, tail])
}

/// Prepares `input` for the ICRC of `roce`, received from `src`, as it would be under IPv4
/// identification `id`. Returns the length of the IP and UDP headers, or `None` when the
/// packet is too short to hold a BTH and an ICRC.
///
/// The headers are built here and copied in, not written in place by
/// `IcrcInput::prepare_between` as the sending side does: the last packet of a receive is
/// hashed right after it is prepared, and in place the wait for the headers' stores moved
/// into the CRC, which cost busy write-lat more than the fewer instructions saved.
fn prepare_icrc(
    input: &mut IcrcInput,
    src: SocketAddr,
    local: SocketAddr,
    roce: &[u8],
    id: u16,
) -> Option<usize> {
    let mut ip_udp = [0u8; MAX_IP_UDP];
    let head_len = icrc::masked_ip_udp(src, local, roce.len(), id, &mut ip_udp).ok()?;
    let (packet, tail) = roce.split_at(roce.len().saturating_sub(ICRC_LEN));
    input.prepare(&ip_udp[..head_len], packet, &[], tail).ok()?;
    Some(head_len)
}

/// The ICRC of `roce`, received from `src`, under IPv4 identification `id` (IPv6 has none:
/// any gives the same): a second guess, after the one prepared ahead missed.
#[cold]
fn icrc_under(src: SocketAddr, local: SocketAddr, roce: &[u8], id: u16) -> Option<u32> {
    let mut input = IcrcInput::new();
    prepare_icrc(&mut input, src, local, roce, id)?;
    Some(prepared_icrc(&input, roce))
}

/// The ICRC `input` was prepared for by [`prepare_icrc`] over `roce`.
fn prepared_icrc(input: &IcrcInput, roce: &[u8]) -> u32 {
    let (packet, tail) = roce.split_at(roce.len().saturating_sub(ICRC_LEN));
    input.crc(packet, &[], tail)
}

impl AsRawFd for Device {
    /// The socket: readable when datagrams wait (for epoll, mio or an async runtime; call
    /// [`Device::poll`] when it is, and by [`Device::next_deadline`] at the latest). It is a
    /// blocking socket, for [`Device::wait`]'s sake, but `poll` never blocks on it: every
    /// call it makes passes `MSG_DONTWAIT`. Read and write it only through the device.
    fn as_raw_fd(&self) -> RawFd {
        self.link.fd()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket};

    use sluice_core::{Access, Connection, Memory, Mtu, QpConfig, SendOp, SendWr, Sge, WcStatus};
    use sluice_wire::Psn;

    use super::*;

    /// The wall clock is read once per millisecond of engine time: between readings the
    /// estimate moves with engine time exactly; it stays near the real wall clock; a later
    /// time past the millisecond reads it again.
    #[test]
    fn the_wall_clock_estimate_follows_engine_time_and_is_reread() {
        let mut wall = WallClock::default();
        let t0 = Instant::from_nanos(5_000_000);
        let first = wall.at(t0, || t0);
        assert_eq!(wall.read_at, Some(t0));
        let near = Instant::from_nanos(t0.as_nanos() + 999_999);
        assert_eq!(wall.at(near, || near), first + 999_999);
        assert_eq!(wall.read_at, Some(t0), "no reading within the millisecond");
        let later = Instant::from_nanos(t0.as_nanos() + 1_000_000);
        wall.at(later, || later);
        assert_eq!(wall.read_at, Some(later), "read again after it");
        let real = sys::realtime_ns();
        assert!(first.abs_diff(real) < 1_000_000_000, "{first} vs {real}");
        // A reading pairs the wall clock with the fresh engine time, not with `now`: asked
        // for a time 50 ms before the fresh reading (a poll's clock, read before a long
        // call), the estimate is the wall clock 50 ms ago.
        let mut wall = WallClock::default();
        let fresh = Instant::from_nanos(t0.as_nanos() + 50_000_000);
        let estimate = wall.at(t0, || fresh);
        let expected = sys::realtime_ns() - 50_000_000;
        assert!(
            estimate.abs_diff(expected) < 5_000_000,
            "{estimate} vs {expected}"
        );
    }

    /// Payloads are read from their region when they leave. One whose region was
    /// deregistered while it waited is dropped, not sent with whatever that memory is now;
    /// when the request is sent again it fails.
    #[test]
    fn a_packet_whose_region_goes_before_it_leaves_is_dropped() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let peer = UdpSocket::bind((lo, 0)).unwrap();
        peer.set_nonblocking(true).unwrap();
        let mut config = DeviceConfig::new(lo);
        config.local.set_port(0);
        config.peer_port = peer.local_addr().unwrap().port();
        let mut dev = Device::open(config).unwrap();
        let e = dev.engine();
        let pd = e.alloc_pd();
        let memory = Memory::Bytes(vec![7; 1 << 16].into_boxed_slice());
        let mr = e.register_mr(pd, 0x1000, memory, Access::ALL).unwrap();
        let cq = e.create_cq(16).unwrap();
        let caps = Default::default();
        let qp = e
            .create_qp(QpConfig {
                pd,
                send_cq: cq,
                recv_cq: cq,
                caps,
            })
            .unwrap();
        let c = Connection {
            timeout: 1, // 8 us
            ..Connection::new(lo, 0x99, Mtu::M4096, Psn::new(0), Psn::new(0))
        };
        e.connect(qp, &c).unwrap();
        let sgl = [Sge {
            lkey: mr.lkey,
            addr: 0x1000,
            len: 1 << 16,
        }];
        let op = SendOp::Write {
            remote_addr: 0,
            rkey: 1,
        };
        e.post_send(qp, &SendWr::new(1, op, &sgl)).unwrap();

        let now = dev.now();
        assert_eq!(dev.stage(now), 16, "the WRITE's 16 packets wait to leave");
        dev.engine().deregister_mr(mr.lkey).unwrap();
        dev.transmit(now).unwrap();
        assert_eq!(dev.counters().tx_region_gone, 16);
        assert_eq!(dev.counters().tx_datagrams, 0);
        let mut buf = [0u8; 9000];
        assert!(peer.recv(&mut buf).is_err(), "nothing reached the peer");

        let start = std::time::Instant::now();
        let completion = loop {
            dev.poll().unwrap();
            if let Some(c) = dev.engine().poll_cq(cq).unwrap() {
                break c;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "no completion");
        };
        assert_eq!(
            (completion.wr_id, completion.status),
            (1, WcStatus::LocalProtectionError)
        );
        assert!(peer.recv(&mut buf).is_err(), "still nothing");
    }
}
