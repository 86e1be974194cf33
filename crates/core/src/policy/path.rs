//! Each packet's UDP source port: the entropy ECMP switches hash to pick a path.

use std::time::Duration;

use sluice_wire::{Opcode, Psn};

use crate::{Instant, QpNum, Rng};

/// What a path selector may look at of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathPacket {
    /// The sending queue pair.
    pub qpn: QpNum,
    /// The packet's PSN.
    pub psn: Psn,
    /// The packet's opcode.
    pub opcode: Opcode,
}

/// Chooses each packet's UDP source port. A control law that sets a path (its `set_path`
/// action) overrides it for that queue pair.
pub trait PathSelector: std::fmt::Debug + std::any::Any {
    /// A new queue pair at index `qp`: forget anything an earlier one left.
    fn reset(&mut self, qp: u32) {
        let _ = qp;
    }

    /// The source port of `packet`, sent by queue pair `qp` (its index).
    fn source_port(&mut self, qp: u32, packet: &PathPacket) -> u16;

    /// The source port of `packet` sent at `now`: what a selector that watches time between
    /// packets (flowlets) needs. The engine does not pass the time yet; until it does, it
    /// asks [`PathSelector::source_port`], which this calls by default.
    fn source_port_at(&mut self, qp: u32, now: Instant, packet: &PathPacket) -> u16 {
        let _ = now;
        self.source_port(qp, packet)
    }

    /// What queue pair `qp`'s path looked like over its last round (about one RTT of
    /// acknowledgements): a selector that re-paths on congestion (PLB) listens here. The
    /// engine calls it once a round, when an acknowledgement confirms everything that was in
    /// flight when the round began, with the CNPs and the smallest RTT sample of the round;
    /// by default it is ignored.
    fn on_signal(&mut self, qp: u32, now: Instant, signal: &PathSignal) {
        let _ = (qp, now, signal);
    }

    /// A probe to send now, if one is due: a selector that measures its paths out of band
    /// (SCR's RTT probes) asks the engine to send a probe from a source port and to report
    /// the reply ([`PathSelector::on_probe_reply`]). The engine does not ask yet; by default
    /// there is none. Asked again until it answers `None`.
    fn next_probe(&mut self, now: Instant) -> Option<PathProbe> {
        let _ = now;
        None
    }

    /// When [`PathSelector::next_probe`] will next have a probe or a probe's timeout
    /// falls (for the engine's `next_timeout`); `None`: nothing planned.
    fn next_probe_at(&self) -> Option<Instant> {
        None
    }

    /// The reply to `probe` arrived at `now`.
    fn on_probe_reply(&mut self, probe: PathProbe, now: Instant) {
        let _ = (probe, now);
    }
}

/// A probe a selector asks the engine to send to queue pair `qp`'s peer, which reflects it,
/// with this source port (so that ECMP takes it along that port's path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathProbe {
    /// The queue pair (its index) whose path it measures.
    pub qp: u32,
    /// The source port it goes out with.
    pub port: u16,
    /// Its number on this port: a reply to a probe given up on (timed out) is not taken
    /// for the reply to the next one, whose RTT it would understate.
    pub seq: u32,
}

/// One round's congestion signal of a queue pair's current path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathSignal {
    /// Some acknowledgement of the round echoed an ECN mark (or a CNP arrived).
    pub ecn: bool,
    /// The round's RTT sample, if one was taken.
    pub rtt: Option<Duration>,
}

/// The entropy `step` ports past queue pair `qpn`'s own, in the dynamic range.
#[inline]
fn port_at(qpn: QpNum, step: u16) -> u16 {
    let base = QpnHash::port(qpn) & 0x3FFF;
    0xC000 | (base.wrapping_add(step) & 0x3FFF)
}

/// The queue pair's own port for every packet: 0xC000 plus a hash of the QPN (Soft-RoCE's
/// choice), so ECMP spreads queue pairs, not packets, over paths.
#[derive(Debug, Clone, Copy, Default)]
pub struct QpnHash;

impl QpnHash {
    /// The port of queue pair `qpn`.
    #[inline]
    pub fn port(qpn: QpNum) -> u16 {
        let h = qpn.0.wrapping_mul(0x9E37_79B1);
        0xC000 | ((h >> 18) as u16 & 0x3FFF)
    }
}

impl PathSelector for QpnHash {
    #[inline]
    fn source_port(&mut self, _qp: u32, packet: &PathPacket) -> u16 {
        QpnHash::port(packet.qpn)
    }
}

/// Per-packet spraying over `paths` entropies per queue pair: consecutive PSNs take
/// consecutive ports after the queue pair's own, so a queue pair's packets cross every path
/// (and arrive out of order when paths differ).
#[derive(Debug, Clone, Copy)]
pub struct Spray {
    /// The number of ports per queue pair (0 acts as 1).
    pub paths: u16,
}

impl PathSelector for Spray {
    fn source_port(&mut self, _qp: u32, packet: &PathPacket) -> u16 {
        let step = (packet.psn.value() % u32::from(self.paths.max(1))) as u16;
        port_at(packet.qpn, step)
    }
}

/// Per-packet spraying over `paths` entropies per queue pair, each packet's drawn at random
/// from a seeded generator: the same seed and packets give the same ports, but no path
/// pattern lines up with PSN order (as round robin's does with a periodic workload).
#[derive(Debug, Clone)]
pub struct RandomSpray {
    paths: u16,
    rng: Rng,
}

impl RandomSpray {
    /// Spraying over `paths` ports (0 acts as 1), drawn from a generator seeded with `seed`.
    pub fn new(paths: u16, seed: u64) -> RandomSpray {
        RandomSpray {
            paths: paths.max(1),
            rng: Rng::new(seed),
        }
    }
}

impl PathSelector for RandomSpray {
    fn source_port(&mut self, _qp: u32, packet: &PathPacket) -> u16 {
        let step = self.rng.below(u64::from(self.paths)) as u16;
        port_at(packet.qpn, step)
    }
}

/// Per queue pair: its current entropy step and when it last sent (or was last judged).
#[derive(Debug, Clone, Copy, Default)]
struct PathState {
    step: u16,
    last: Option<Instant>,
    congested_rounds: u32,
}

/// Grows `states` to hold queue pair `qp`.
fn state(states: &mut Vec<PathState>, qp: u32) -> &mut PathState {
    let i = qp as usize;
    if states.len() <= i {
        states.resize(i + 1, PathState::default());
    }
    &mut states[i]
}

/// A step in `0..paths` other than `current` (when there is another).
fn another_step(rng: &mut Rng, paths: u16, current: u16) -> u16 {
    if paths <= 1 {
        return 0;
    }
    let draw = rng.below(u64::from(paths - 1)) as u16;
    if draw >= current { draw + 1 } else { draw }
}

/// Flowlet switching: a queue pair keeps its entropy while it sends back to back, and takes
/// a new one (drawn among `paths`) after an idle `gap`. A gap longer than the paths' delay
/// difference lets the earlier burst drain first, so a flowlet switch reorders nothing.
///
/// It needs the send time ([`PathSelector::source_port_at`]); asked without one, it sees no
/// gap and keeps the queue pair's entropy.
#[derive(Debug, Clone)]
pub struct Flowlet {
    paths: u16,
    gap: Duration,
    rng: Rng,
    states: Vec<PathState>,
}

impl Flowlet {
    /// Flowlets over `paths` ports (0 acts as 1), a new one after an idle `gap`; new
    /// entropies drawn from a generator seeded with `seed`.
    pub fn new(paths: u16, gap: Duration, seed: u64) -> Flowlet {
        Flowlet {
            paths: paths.max(1),
            gap,
            rng: Rng::new(seed),
            states: Vec::new(),
        }
    }

    /// Queue pair `qp`'s current entropy step (0 is its own port).
    pub fn step(&self, qp: u32) -> u16 {
        self.states.get(qp as usize).map_or(0, |s| s.step)
    }
}

impl PathSelector for Flowlet {
    fn reset(&mut self, qp: u32) {
        *state(&mut self.states, qp) = PathState::default();
    }

    fn source_port(&mut self, qp: u32, packet: &PathPacket) -> u16 {
        port_at(packet.qpn, self.step(qp))
    }

    fn source_port_at(&mut self, qp: u32, now: Instant, packet: &PathPacket) -> u16 {
        let s = state(&mut self.states, qp);
        if s.last.is_some_and(|last| now - last > self.gap) {
            s.step = another_step(&mut self.rng, self.paths, s.step);
        }
        s.last = Some(now);
        port_at(packet.qpn, s.step)
    }
}

/// Protective load balancing (PLB): a queue pair keeps its entropy until its path stays
/// congested for `rounds` rounds in a row (every round ECN-marked, or its RTT above
/// `delay`), then moves to another drawn among `paths`. With a `delay` threshold, a round
/// with neither an ECN mark nor an RTT sample is skipped (neither congested nor calm). One congested round is ordinary
/// queueing; a run of them says this path is worse than a random other one.
#[derive(Debug, Clone)]
pub struct Plb {
    paths: u16,
    rounds: u32,
    delay: Option<Duration>,
    rng: Rng,
    states: Vec<PathState>,
}

impl Plb {
    /// Re-paths among `paths` ports (0 acts as 1) after `rounds` (0 acts as 1) congested
    /// rounds in a row; a round's RTT above `delay` counts as congestion (`None`: ECN only).
    pub fn new(paths: u16, rounds: u32, delay: Option<Duration>, seed: u64) -> Plb {
        Plb {
            paths: paths.max(1),
            rounds: rounds.max(1),
            delay,
            rng: Rng::new(seed),
            states: Vec::new(),
        }
    }

    /// Queue pair `qp`'s current entropy step (0 is its own port).
    pub fn step(&self, qp: u32) -> u16 {
        self.states.get(qp as usize).map_or(0, |s| s.step)
    }
}

impl PathSelector for Plb {
    fn reset(&mut self, qp: u32) {
        *state(&mut self.states, qp) = PathState::default();
    }

    fn source_port(&mut self, qp: u32, packet: &PathPacket) -> u16 {
        port_at(packet.qpn, self.step(qp))
    }

    fn on_signal(&mut self, qp: u32, _now: Instant, signal: &PathSignal) {
        let delayed = matches!((signal.rtt, self.delay), (Some(rtt), Some(d)) if rtt > d);
        let s = state(&mut self.states, qp);
        if !signal.ecn && signal.rtt.is_none() && self.delay.is_some() {
            // No ECN and no RTT sample (the requester times one packet at a time): no
            // evidence either way about delay, so the run of congested rounds neither grows
            // nor ends.
            return;
        }
        if !(signal.ecn || delayed) {
            s.congested_rounds = 0;
            return;
        }
        s.congested_rounds += 1;
        if s.congested_rounds >= self.rounds {
            s.congested_rounds = 0;
            s.step = another_step(&mut self.rng, self.paths, s.step);
        }
    }
}

/// One probed path of a queue pair.
#[derive(Debug, Clone, Copy)]
struct Probed {
    port: u16,
    /// The smoothed RTT; `None` before the first reply.
    rtt: Option<Duration>,
    /// When the outstanding probe left.
    sent: Option<Instant>,
    /// The number of the last probe sent.
    seq: u32,
    alive: bool,
    /// When a reply to one of its probes last came back, in time or not: the evidence
    /// that it still delivers when every path has timed out (a loaded host answers late
    /// on live paths too, and a failed one not at all).
    heard: Option<Instant>,
}

/// A queue pair's probed paths, once it has sent (its QPN is what the ports derive from).
#[derive(Debug, Clone, Default)]
struct ProbeState {
    paths: Vec<Probed>,
    next_round: Instant,
    /// The path its packets take.
    best: usize,
}

/// SCR's multipath selection (A.7): each queue pair's own port and `paths - 1` others drawn
/// at random (no two alike mod `paths`) are probed every `interval`; its packets take the
/// live path of lowest smoothed RTT, and a probe unanswered for `timeout` marks its path
/// dead until a reply comes back.
/// With every path dead, they take the one a reply (late or not) came from last.
/// Probing finds a better path before the data suffers, where PLB waits for congestion.
///
/// It needs the engine to send its probes and report their replies
/// ([`PathSelector::next_probe`]); without them every queue pair keeps its own port.
#[derive(Debug, Clone)]
pub struct RttProbe {
    paths: u16,
    interval: Duration,
    timeout: Duration,
    rng: Rng,
    states: Vec<Option<ProbeState>>,
    /// No later than the earliest probe or timeout due (`next_probe_at`), kept so that the
    /// engine's `next_timeout`, which a driver asks at every poll, does not walk every queue
    /// pair's paths: computed by the walk [`PathSelector::next_probe`] ends with, and only
    /// ever moved earlier between walks (a reply makes it early, never late: an early wake
    /// finds nothing due and walks again).
    earliest: Option<Instant>,
}

impl RttProbe {
    /// Probes `paths` ports a queue pair (0 acts as 1, and more than the 2^14 of the
    /// dynamic range as 2^14) every `interval`; a probe unanswered for `timeout` marks its
    /// path dead (SCR: 100 µs). Ports drawn from a generator seeded with `seed`.
    pub fn new(paths: u16, interval: Duration, timeout: Duration, seed: u64) -> RttProbe {
        RttProbe {
            paths: paths.clamp(1, 0x4000),
            interval,
            timeout,
            rng: Rng::new(seed),
            states: Vec::new(),
            earliest: None,
        }
    }

    /// The earliest probe round or probe timeout of any queue pair (a walk over all).
    fn walk_earliest(&self) -> Option<Instant> {
        self.states
            .iter()
            .flatten()
            .flat_map(|s| {
                let expiries = s
                    .paths
                    .iter()
                    .filter_map(|p| p.sent.map(|t| t + self.timeout));
                std::iter::once(s.next_round).chain(expiries)
            })
            .min()
    }

    /// Queue pair `qp`'s probed ports, its own first (none before it sends).
    pub fn ports(&self, qp: u32) -> Vec<u16> {
        self.state(qp)
            .map(|s| s.paths.iter().map(|p| p.port).collect())
            .unwrap_or_default()
    }

    /// Queue pair `qp`'s smoothed RTT on `port`, if measured and alive.
    pub fn rtt(&self, qp: u32, port: u16) -> Option<Duration> {
        let s = self.state(qp)?;
        let p = s.paths.iter().find(|p| p.port == port)?;
        p.rtt.filter(|_| p.alive)
    }

    fn state(&self, qp: u32) -> Option<&ProbeState> {
        self.states.get(qp as usize)?.as_ref()
    }

    /// Picks queue pair `qp`'s path: the live one of lowest RTT; with none alive, the one
    /// heard from last (its own port may be the one that failed); its own port when none
    /// was ever heard from.
    fn choose(s: &mut ProbeState) {
        let live = s
            .paths
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.rtt.filter(|_| p.alive).map(|rtt| (rtt, i)))
            .min()
            .map(|(_, i)| i);
        s.best = live
            .or_else(|| {
                s.paths
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| p.heard.map(|at| (at, i)))
                    .max()
                    .map(|(_, i)| i)
            })
            .unwrap_or(0);
    }
}

impl PathSelector for RttProbe {
    fn reset(&mut self, qp: u32) {
        if let Some(s) = self.states.get_mut(qp as usize) {
            *s = None;
        }
    }

    fn source_port(&mut self, qp: u32, packet: &PathPacket) -> u16 {
        let i = qp as usize;
        if self.states.len() <= i {
            self.states.resize(i + 1, None);
        }
        if self.states[i].is_none() {
            // Its own port, and others drawn from the rest of the range, each from a residue
            // mod `paths` not yet taken: over sluice-net's source sockets (a port leaves from
            // socket `port mod n`) with `n` a multiple of `paths`, every probed path then
            // has a socket, so a route of its own, to itself. Ports drawn freely share
            // sockets (8 of them take about 5 of 8): a probe then measures a path already
            // probed, and over two links every probed path can sit on the one that fails.
            // Once per queue pair, not per packet.
            let paths = usize::from(self.paths);
            let own = port_at(packet.qpn, 0);
            let mut taken = vec![false; paths];
            taken[usize::from(own) % paths] = true;
            let mut ports = vec![own];
            while ports.len() < paths {
                let port = port_at(packet.qpn, 1 + self.rng.below(0x3FFF) as u16);
                // Every residue has a port in the 2^14 of the range (paths <= 2^14), and
                // the own port's is taken: the loop ends.
                let residue = &mut taken[usize::from(port) % paths];
                if !*residue {
                    *residue = true;
                    ports.push(port);
                }
            }
            let paths = ports
                .into_iter()
                .map(|port| Probed {
                    port,
                    rtt: None,
                    sent: None,
                    seq: 0,
                    alive: true,
                    heard: None,
                })
                .collect();
            self.states[i] = Some(ProbeState {
                paths,
                next_round: Instant::ZERO,
                best: 0,
            });
            // Its first round is due at once.
            self.earliest = Some(Instant::ZERO);
        }
        let s = self.states[i].as_ref().expect("just made");
        s.paths[s.best].port
    }

    fn next_probe(&mut self, now: Instant) -> Option<PathProbe> {
        for (qp, s) in self.states.iter_mut().enumerate() {
            let Some(s) = s else { continue };
            // Unanswered too long: dead until a reply to a later probe says otherwise.
            let mut changed = false;
            for p in &mut s.paths {
                if p.sent.is_some_and(|t| now - t >= self.timeout) {
                    p.sent = None;
                    changed |= std::mem::replace(&mut p.alive, false);
                }
            }
            if changed {
                Self::choose(s);
            }
            if now < s.next_round {
                continue;
            }
            let due = s.paths.iter_mut().find(|p| p.sent.is_none());
            if let Some(p) = due {
                p.sent = Some(now);
                p.seq = p.seq.wrapping_add(1);
                return Some(PathProbe {
                    qp: qp as u32,
                    port: p.port,
                    seq: p.seq,
                });
            }
            s.next_round = now + self.interval;
        }
        self.earliest = self.walk_earliest();
        None
    }

    fn next_probe_at(&self) -> Option<Instant> {
        debug_assert!(
            match (self.earliest, self.walk_earliest()) {
                (Some(kept), Some(walked)) => kept <= walked,
                (None, Some(_)) => false,
                (_, None) => true,
            },
            "the kept time is never later than the walk's"
        );
        self.earliest
    }

    fn on_probe_reply(&mut self, probe: PathProbe, now: Instant) {
        let Some(Some(s)) = self.states.get_mut(probe.qp as usize) else {
            return;
        };
        let Some(p) = s.paths.iter_mut().find(|p| p.port == probe.port) else {
            return;
        };
        // One of its probes (not one from the future): the path delivers, if late.
        if p.seq.wrapping_sub(probe.seq) < 1 << 16 {
            p.heard = Some(now);
        }
        if probe.seq != p.seq || p.sent.is_none() {
            // Given up on, or a reply already counted: no RTT sample, but with every path
            // timed out it says which still answers.
            if !s.paths.iter().any(|p| p.alive) {
                Self::choose(s);
            }
            return;
        }
        let Some(sent) = p.sent.take() else {
            return;
        };
        let sample = now - sent;
        // Smoothed as TCP's SRTT is (gain 1/8), restarted after a death.
        p.rtt = Some(match p.rtt.filter(|_| p.alive) {
            Some(rtt) => (rtt * 7 + sample) / 8,
            None => sample,
        });
        p.alive = true;
        Self::choose(s);
    }
}

/// The engine's path selector, with the default one called directly rather than through its
/// vtable (it is asked for every packet; the hash is a few instructions).
#[derive(Debug)]
pub(crate) enum EnginePathSelector {
    QpnHash,
    Other {
        selector: Box<dyn PathSelector>,
        /// Each queue pair's current round (by index): what the engine gathers between
        /// calls of [`PathSelector::on_signal`].
        rounds: Vec<Round>,
    },
}

/// One queue pair's round of acknowledgements in progress: the congestion signals seen since
/// it began, and the PSN that ends it.
///
/// A round is what TCP's PLB calls one: it starts at an acknowledgement and ends once every
/// packet sent before it began is acknowledged (about one RTT of ACKs, however many ACKs
/// that is), so a selector counting congested rounds counts round trips, not ACKs (a queue
/// pair acknowledged per packet would otherwise re-path after N packets).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Round {
    /// The round is over once every PSN before this one is confirmed; `None`: no round
    /// begun (before the first acknowledgement).
    end: Option<Psn>,
    /// A CNP arrived during the round (the requester's only ECN echo in RoCE).
    ecn: bool,
    /// The smallest RTT sample of the round: the round counts as delayed only if even its
    /// fastest sample was slow, so one sample that waited behind a burst does not make a
    /// round congested.
    rtt: Option<Duration>,
}

impl EnginePathSelector {
    pub(crate) fn new(selector: Box<dyn PathSelector>) -> EnginePathSelector {
        let any: &dyn std::any::Any = &*selector;
        if any.is::<QpnHash>() {
            EnginePathSelector::QpnHash
        } else {
            EnginePathSelector::Other {
                selector,
                rounds: Vec::new(),
            }
        }
    }

    pub(crate) fn reset(&mut self, qp: u32) {
        if let EnginePathSelector::Other { selector, rounds } = self {
            selector.reset(qp);
            if let Some(r) = rounds.get_mut(qp as usize) {
                *r = Round::default();
            }
        }
    }

    /// The source port of a packet of queue pair `qp` (its index), numbered `qpn`, sent
    /// at `now`.
    #[inline]
    pub(crate) fn source_port(
        &mut self,
        qp: u32,
        qpn: QpNum,
        psn: Psn,
        opcode: Opcode,
        now: Instant,
    ) -> u16 {
        match self {
            EnginePathSelector::QpnHash => QpnHash::port(qpn),
            EnginePathSelector::Other { selector, .. } => {
                Self::ask(&mut **selector, qp, qpn, psn, opcode, now)
            }
        }
    }

    /// Out of line, so that the packet's description is built only for a selector that
    /// reads it.
    #[inline(never)]
    fn ask(
        s: &mut dyn PathSelector,
        qp: u32,
        qpn: QpNum,
        psn: Psn,
        opcode: Opcode,
        now: Instant,
    ) -> u16 {
        s.source_port_at(qp, now, &PathPacket { qpn, psn, opcode })
    }

    /// Queue pair `qp`'s requester learned at `now` that every PSN before `confirmed` was
    /// received, with `rtt` if the acknowledgement gave a sample; `max_sent` is one past the
    /// highest PSN it has sent. Ends the queue pair's round (and tells the selector how it
    /// went) once `confirmed` reaches the round's end. The default selector listens to
    /// nothing: one test.
    #[inline]
    pub(crate) fn on_ack(
        &mut self,
        qp: u32,
        now: Instant,
        confirmed: Psn,
        max_sent: Psn,
        rtt: Option<Duration>,
    ) {
        if let EnginePathSelector::Other { selector, rounds } = self {
            Self::round_ack(&mut **selector, rounds, qp, now, confirmed, max_sent, rtt);
        }
    }

    #[inline(never)]
    fn round_ack(
        selector: &mut dyn PathSelector,
        rounds: &mut Vec<Round>,
        qp: u32,
        now: Instant,
        confirmed: Psn,
        max_sent: Psn,
        rtt: Option<Duration>,
    ) {
        let r = round(rounds, qp);
        if let Some(sample) = rtt {
            r.rtt = Some(r.rtt.map_or(sample, |kept| kept.min(sample)));
        }
        let end = *r.end.get_or_insert(max_sent);
        if end.distance_to(confirmed) < 0 {
            return; // the round goes on
        }
        let signal = PathSignal {
            ecn: r.ecn,
            rtt: r.rtt,
        };
        // The next round ends once what is in flight now is confirmed; with nothing in
        // flight (the queue pair went idle) it begins at the next acknowledgement instead,
        // or that acknowledgement alone would make a round.
        *r = Round {
            end: (max_sent != confirmed).then_some(max_sent),
            ..Round::default()
        };
        selector.on_signal(qp, now, &signal);
    }

    /// When the selector next has a probe to send or a probe's timeout falls
    /// ([`PathSelector::next_probe_at`]); `None` for the default selector.
    #[inline]
    pub(crate) fn next_probe_at(&self) -> Option<Instant> {
        match self {
            EnginePathSelector::QpnHash => None,
            EnginePathSelector::Other { selector, .. } => selector.next_probe_at(),
        }
    }

    /// The next probe due at `now` ([`PathSelector::next_probe`]).
    pub(crate) fn next_probe(&mut self, now: Instant) -> Option<PathProbe> {
        match self {
            EnginePathSelector::QpnHash => None,
            EnginePathSelector::Other { selector, .. } => selector.next_probe(now),
        }
    }

    /// The reply to one of queue pair `probe.qp`'s probes arrived at `now`.
    pub(crate) fn on_probe_reply(&mut self, probe: PathProbe, now: Instant) {
        if let EnginePathSelector::Other { selector, .. } = self {
            selector.on_probe_reply(probe, now);
        }
    }

    /// A CNP arrived for queue pair `qp`: its round is ECN-marked.
    #[inline]
    pub(crate) fn on_cnp(&mut self, qp: u32) {
        if let EnginePathSelector::Other { rounds, .. } = self {
            round(rounds, qp).ecn = true;
        }
    }
}

/// Grows `rounds` to hold queue pair `qp`'s.
fn round(rounds: &mut Vec<Round>, qp: u32) -> &mut Round {
    let i = qp as usize;
    if rounds.len() <= i {
        rounds.resize(i + 1, Round::default());
    }
    &mut rounds[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(qpn: u32, psn: u32) -> PathPacket {
        PathPacket {
            qpn: QpNum(qpn),
            psn: Psn::new(psn),
            opcode: Opcode::RC_RDMA_WRITE_MIDDLE,
        }
    }

    #[test]
    fn the_hash_gives_a_queue_pair_one_port_in_the_dynamic_range() {
        let mut p = QpnHash;
        let port = p.source_port(0, &packet(0x11, 0));
        assert!(port >= 0xC000);
        assert_eq!(p.source_port(0, &packet(0x11, 99)), port);
        assert_ne!(p.source_port(1, &packet(0x12, 0)), port);
    }

    #[test]
    fn spray_cycles_through_its_paths_by_psn() {
        let mut p = Spray { paths: 4 };
        let ports: Vec<u16> = (0..8)
            .map(|psn| p.source_port(0, &packet(0x11, psn)))
            .collect();
        assert_eq!(ports[..4], ports[4..]);
        let mut distinct = ports[..4].to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 4);
        assert!(ports.iter().all(|&p| p >= 0xC000));
    }

    fn distinct(ports: &[u16]) -> usize {
        let mut d = ports.to_vec();
        d.sort_unstable();
        d.dedup();
        d.len()
    }

    #[test]
    fn random_spray_is_seeded_and_stays_within_its_paths() {
        let run = |seed| {
            let mut p = RandomSpray::new(4, seed);
            (0..64)
                .map(|psn| p.source_port(0, &packet(0x11, psn)))
                .collect::<Vec<u16>>()
        };
        let ports = run(7);
        assert_eq!(ports, run(7));
        assert_ne!(ports, run(8));
        // The same four ports as round robin, in another order.
        let mut rr = Spray { paths: 4 };
        let mut expected: Vec<u16> = (0..4)
            .map(|psn| rr.source_port(0, &packet(0x11, psn)))
            .collect();
        expected.sort_unstable();
        let mut seen = ports.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, expected);
        assert_ne!(
            ports[..8],
            [ports[0], ports[1], ports[2], ports[3]].repeat(2)[..]
        );
    }

    #[test]
    fn a_flowlet_keeps_its_port_back_to_back_and_moves_after_a_gap() {
        let gap = Duration::from_micros(50);
        let mut p = Flowlet::new(8, gap, 1);
        let at = |us: u64| Instant::from_nanos(us * 1000);
        let first = p.source_port_at(0, at(0), &packet(0x11, 0));
        assert_eq!(first, QpnHash::port(QpNum(0x11)));
        // Packets 10 µs apart: one flowlet, however long it lasts.
        for i in 1..20 {
            assert_eq!(
                p.source_port_at(0, at(10 * i), &packet(0x11, i as u32)),
                first
            );
        }
        // Exactly the gap is not past it.
        assert_eq!(p.source_port_at(0, at(240), &packet(0x11, 20)), first);
        let second = p.source_port_at(0, at(291), &packet(0x11, 21));
        assert_ne!(second, first);
        assert_eq!(p.source_port_at(0, at(300), &packet(0x11, 22)), second);
        // Without the time, the current flowlet's port.
        assert_eq!(p.source_port(0, &packet(0x11, 23)), second);
        // Another queue pair has flowlets of its own.
        assert_eq!(
            p.source_port_at(1, at(1000), &packet(0x12, 0)),
            QpnHash::port(QpNum(0x12))
        );
        p.reset(0);
        assert_eq!(p.source_port(0, &packet(0x11, 0)), first);
    }

    #[test]
    fn flowlets_spread_over_their_paths() {
        let mut p = Flowlet::new(4, Duration::from_micros(1), 3);
        let ports: Vec<u16> = (0..200)
            .map(|i| p.source_port_at(0, Instant::from_nanos(i * 10_000), &packet(0x11, 0)))
            .collect();
        assert!(ports.windows(2).all(|w| w[0] != w[1]));
        assert_eq!(distinct(&ports), 4);
    }

    #[test]
    fn plb_repaths_after_enough_congested_rounds_in_a_row_only() {
        let mut p = Plb::new(4, 3, Some(Duration::from_micros(20)), 5);
        let now = Instant::ZERO;
        let own = p.source_port(0, &packet(0x11, 0));
        let ecn = PathSignal {
            ecn: true,
            rtt: None,
        };
        let calm = PathSignal {
            ecn: false,
            rtt: Some(Duration::from_micros(10)),
        };
        let slow = PathSignal {
            ecn: false,
            rtt: Some(Duration::from_micros(30)),
        };
        // Two congested rounds, then a calm one: the count starts again.
        p.on_signal(0, now, &ecn);
        p.on_signal(0, now, &slow);
        p.on_signal(0, now, &calm);
        p.on_signal(0, now, &ecn);
        p.on_signal(0, now, &ecn);
        assert_eq!(p.source_port(0, &packet(0x11, 1)), own);
        // The third in a row moves it; its other queue pairs stay.
        p.on_signal(0, now, &slow);
        let moved = p.source_port(0, &packet(0x11, 2));
        assert_ne!(moved, own);
        assert_eq!(p.source_port(0, &packet(0x11, 3)), moved);
        assert_eq!(p.step(1), 0);
        // Delay alone counts only with a threshold.
        let mut ecn_only = Plb::new(4, 1, None, 5);
        ecn_only.on_signal(0, now, &slow);
        assert_eq!(ecn_only.step(0), 0);
        ecn_only.on_signal(0, now, &ecn);
        assert_ne!(ecn_only.step(0), 0);
        // A round without a sample says nothing about delay: the run goes on across it.
        let mut p = Plb::new(4, 2, Some(Duration::from_micros(20)), 5);
        p.on_signal(0, now, &slow);
        p.on_signal(0, now, &PathSignal::default());
        assert_eq!(p.step(0), 0);
        p.on_signal(0, now, &slow);
        assert_ne!(p.step(0), 0);
        // With one path there is nowhere to go.
        let mut one = Plb::new(1, 1, None, 5);
        one.on_signal(0, now, &ecn);
        assert_eq!(one.step(0), 0);
    }

    /// Probes in flight and when their replies arrive, µs.
    type Flight = Vec<(u64, PathProbe)>;

    /// Drives `p` from `from` to `until` µs: probes answered after `delay(port)` µs
    /// (`None`: lost).
    fn probe_for(
        p: &mut RttProbe,
        flight: &mut Flight,
        from: u64,
        until: u64,
        delay: &dyn Fn(u16) -> Option<u64>,
    ) {
        for us in from..until {
            let now = Instant::from_nanos(us * 1000);
            flight.retain(|&(at, probe)| {
                if at <= us {
                    p.on_probe_reply(probe, now);
                }
                at > us
            });
            while let Some(probe) = p.next_probe(now) {
                if let Some(d) = delay(probe.port) {
                    flight.push((us + d, probe));
                }
            }
        }
    }

    #[test]
    fn rtt_probe_takes_the_fastest_live_path_and_leaves_a_dead_one() {
        let interval = Duration::from_micros(10);
        let mut p = RttProbe::new(3, interval, Duration::from_micros(100), 9);
        // Nothing to probe before the queue pair sends.
        assert_eq!(p.next_probe(Instant::ZERO), None);
        let own = p.source_port(0, &packet(0x11, 0));
        assert_eq!(own, QpnHash::port(QpNum(0x11)));
        let ports = p.ports(0);
        assert_eq!((ports.len(), ports[0]), (3, own));
        assert!(ports.iter().all(|&q| q >= 0xC000));
        let (slow, fast) = (ports[0], ports[2]);
        let mut flight = Flight::new();
        // Its own port 10 µs slower than the others (SCR's Fig 19b), the fastest third.
        let delays = move |port: u16| {
            Some(if port == slow {
                30
            } else if port == fast {
                15
            } else {
                20
            })
        };
        probe_for(&mut p, &mut flight, 0, 200, &delays);
        assert_eq!(p.source_port(0, &packet(0x11, 1)), fast);
        assert_eq!(p.rtt(0, fast), Some(Duration::from_micros(15)));
        assert!(p.next_probe_at().is_some());
        // The fastest path fails: 100 µs without a reply, and traffic moves.
        let failed = move |port: u16| if port == fast { None } else { delays(port) };
        probe_for(&mut p, &mut flight, 200, 260, &failed);
        assert_eq!(
            p.source_port(0, &packet(0x11, 2)),
            fast,
            "not yet timed out"
        );
        probe_for(&mut p, &mut flight, 260, 400, &failed);
        assert_eq!(p.source_port(0, &packet(0x11, 3)), ports[1]);
        assert_eq!(p.rtt(0, fast), None);
        // It recovers: the next reply brings the traffic back.
        probe_for(&mut p, &mut flight, 400, 500, &delays);
        assert_eq!(p.source_port(0, &packet(0x11, 4)), fast);
        p.reset(0);
        assert_eq!(p.ports(0), Vec::<u16>::new());
    }

    #[test]
    fn with_every_path_timed_out_it_takes_one_that_still_answers_not_its_own_port() {
        let mut p = RttProbe::new(3, Duration::from_micros(10), Duration::from_micros(100), 9);
        let own = p.source_port(0, &packet(0x11, 0));
        let ports = p.ports(0);
        let mut flight = Flight::new();
        // Its own port's link fails; the others answer, but later than the timeout (a
        // loaded host): every path is dead by the probes' rule.
        let late = move |port: u16| (port != own).then_some(150);
        probe_for(&mut p, &mut flight, 0, 1_000, &late);
        assert!(
            ports.iter().all(|&q| p.rtt(0, q).is_none()),
            "all timed out"
        );
        let taken = p.source_port(0, &packet(0x11, 1));
        assert_ne!(taken, own, "the failed path, though nothing answers there");
        assert!(ports[1..].contains(&taken));
        // A path answering in time again is taken by its RTT, as before.
        let fast = ports[2];
        let back = move |port: u16| if port == fast { Some(20) } else { late(port) };
        probe_for(&mut p, &mut flight, 1_000, 1_200, &back);
        assert_eq!(p.source_port(0, &packet(0x11, 2)), fast);
        assert_eq!(p.rtt(0, fast), Some(Duration::from_micros(20)));
    }

    /// The probed ports of a queue pair fall on as many source sockets as there are paths
    /// when sluice-net sends port `p` from socket `p mod n` and `paths` divides `n`. The
    /// case of the multipath test's flake: `sluice perf`'s first queue pair (0x11), the
    /// default seed, 8 paths over 8 sockets; drawn freely, its 8 ports took 6 sockets (4
    /// and 7 twice), and all 6 hashed onto the failed link about one run in 32.
    #[test]
    fn rtt_probe_ports_differ_mod_paths_so_each_has_a_source_socket_of_its_own() {
        let sockets = |ports: &[u16], n: u16| -> Vec<u16> {
            let mut s: Vec<u16> = ports.iter().map(|p| p % n).collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        let mut p = RttProbe::new(8, Duration::from_micros(5), Duration::from_micros(20), 1);
        p.source_port(0, &packet(0x11, 0));
        let ports = p.ports(0);
        assert_eq!(sockets(&ports, 8).len(), 8, "{ports:?}");
        assert_eq!(sockets(&ports, 16).len(), 8, "{ports:?}");
        for (paths, seed, qpn) in [(2, 3, 0x11), (4, 7, 0x40), (16, 1, 0x12), (3, 5, 0x99)] {
            let mut p = RttProbe::new(
                paths,
                Duration::from_micros(5),
                Duration::from_micros(20),
                seed,
            );
            p.source_port(0, &packet(qpn, 0));
            let ports = p.ports(0);
            assert_eq!(ports[0], QpnHash::port(QpNum(qpn)), "its own port first");
            assert_eq!(
                sockets(&ports, paths).len(),
                usize::from(paths),
                "{ports:?}"
            );
        }
        // The whole range: one port of every residue, and the loop still ends.
        let mut p = RttProbe::new(
            u16::MAX,
            Duration::from_micros(5),
            Duration::from_micros(20),
            2,
        );
        p.source_port(0, &packet(0x11, 0));
        assert_eq!(sockets(&p.ports(0), 0x4000).len(), 0x4000);
    }

    #[test]
    fn a_late_reply_to_a_probe_given_up_on_is_not_an_rtt_sample() {
        let us = |n: u64| Instant::from_nanos(n * 1000);
        let mut p = RttProbe::new(1, Duration::from_micros(10), Duration::from_micros(100), 1);
        let port = p.source_port(0, &packet(0x11, 0));
        let first = p.next_probe(us(0)).unwrap();
        assert_eq!(p.next_probe(us(0)), None);
        assert_eq!(p.next_probe_at(), Some(us(10)));
        // Given up on at 100 µs, probed again at once.
        let second = p.next_probe(us(100)).unwrap();
        assert_eq!((second.port, second.seq), (port, first.seq + 1));
        p.on_probe_reply(first, us(105));
        assert_eq!(p.rtt(0, port), None);
        p.on_probe_reply(second, us(130));
        assert_eq!(p.rtt(0, port), Some(Duration::from_micros(30)));
        // A duplicate reply counts once.
        p.on_probe_reply(second, us(140));
        assert_eq!(p.rtt(0, port), Some(Duration::from_micros(30)));
    }
}
