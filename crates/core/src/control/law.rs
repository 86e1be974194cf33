//! The two traits of the control plane. A [`Law`] is what an algorithm author writes: one
//! event plus the queue pair's context in, [`Actions`] out. A [`Controller`] is what the
//! engine drives: it owns the contexts and decides when a law runs (at once, [`Inline`], or
//! after SCR's queueing, [`Decoupled`]).
//!
//! [`Inline`]: super::Inline
//! [`Decoupled`]: super::Decoupled

use sluice_wire::CcxLayout;

use crate::Instant;

use super::event::{Event, EventMask, OpcodeMask};

/// The most bytes a law's per-queue-pair context may take (SwCC's 128-byte context slot).
pub const MAX_CONTEXT_BYTES: usize = 128;

/// A control law: congestion control, a rate limiter, a credit scheme.
///
/// It sees one event at a time with the queue pair's context (run to completion, no
/// sharing), and answers through [`Actions`]. It never reads a clock: `now` is passed in.
pub trait Law: std::fmt::Debug {
    /// Per-queue-pair state, at most [`MAX_CONTEXT_BYTES`]; a new queue pair starts with
    /// `Default`.
    type Context: Copy + Default + std::fmt::Debug;

    /// A short name for the law, for reports and logs.
    fn name(&self) -> &'static str;

    /// The events this law reacts to (and [`EventMask::GATE`] if it gates packets). The
    /// engine builds no other events: what a law does not ask for costs nothing.
    fn interest(&self) -> EventMask;

    /// React to `event`.
    fn on_event(&mut self, now: Instant, ctx: &mut Self::Context, event: &Event, act: &mut Actions);

    /// [`Law::on_event`] told the engine's index of the queue pair (dense, reused after
    /// the queue pair is destroyed): for a law that keeps queue pairs in a law-wide table and
    /// later wakes one ([`Law::take_wake`]). The controllers call this one; the default
    /// forgets the index.
    fn on_event_at(
        &mut self,
        now: Instant,
        _qp: u32,
        ctx: &mut Self::Context,
        event: &Event,
        act: &mut Actions,
    ) {
        self.on_event(now, ctx, event, act);
    }

    /// A queue pair (an index from [`Law::on_event_at`]) that should hear
    /// [`Event::Timer`] now, though none of its events is being handled: a law acting for
    /// another queue pair than the current one (Homa's receiver handing a freed grant place
    /// to the best waiting message). The controller asks until `None`, when it next runs
    /// its timers ([`Law::wakes_pending`] makes that now). A queue pair's context decides
    /// what the Timer means: one woken that has nothing to do ignores it. Default: none.
    fn take_wake(&mut self) -> Option<u32> {
        None
    }

    /// Whether [`Law::take_wake`] has a queue pair to give. Default: no.
    fn wakes_pending(&self) -> bool {
        false
    }

    /// SwCC's TX function: may a new request packet carrying `bytes` of payload go now?
    /// Asked only if [`Law::interest`] holds [`EventMask::GATE`], and only for packets sent
    /// for the first time (recovery never waits for credit); with
    /// [`EventMask::GATE_READ_RESPONSES`], asked too before every new READ response packet
    /// (not one replayed for a duplicate READ), `bytes` its payload. On [`Gate::Send`] the packet
    /// goes at once; on [`Gate::Hold`] the queue pair waits until an action of the law calls
    /// [`Actions::wake`].
    fn gate(&mut self, _now: Instant, _ctx: &mut Self::Context, _bytes: u32) -> Gate {
        Gate::Send
    }

    /// [`Law::gate`] told where the packet lies in its message (a work request): what a law
    /// that schedules messages rather than bytes (Homa) needs. The engine asks this one;
    /// the default forgets the position and asks [`Law::gate`].
    fn gate_message(&mut self, now: Instant, ctx: &mut Self::Context, pos: &MessagePos) -> Gate {
        self.gate(now, ctx, pos.bytes)
    }

    /// The CC extension header this law reads its signal from best (timestamps for a delay
    /// law, INT for HPCC), if any. A driver turns it on where it knows both ends agree;
    /// without it the law gets what plain RoCE gives.
    fn ccx(&self) -> Option<CcxLayout> {
        None
    }

    /// SwCC's opcode mask: of the events a packet causes (see [`OpcodeMask`]), only those
    /// of packets with these opcodes reach the law, beside [`Law::interest`]'s kinds (READ
    /// responses only, say). Default: every opcode, at no cost.
    fn opcodes(&self) -> OpcodeMask {
        OpcodeMask::ALL
    }

    /// SwCC's `updatePkt`: fills the fields of the CC header layout this law declared
    /// ([`Law::ccx`] giving `CcxLayout::Declared`) in a packet about to leave; `out` starts
    /// with every field zero. Called for every packet of a queue pair whose two ends agreed
    /// on that layout, requests and responses alike. Default: every field left zero.
    fn stamp(
        &mut self,
        _now: Instant,
        _ctx: &mut Self::Context,
        _out: &mut sluice_wire::DeclaredCcx,
    ) {
    }

    /// [`Law::stamp`] for a request packet, told where it lies in its message (resent
    /// packets too, with their own position). The default forgets the position.
    fn stamp_request(
        &mut self,
        now: Instant,
        ctx: &mut Self::Context,
        _pos: &MessagePos,
        out: &mut sluice_wire::DeclaredCcx,
    ) {
        self.stamp(now, ctx, out);
    }

    /// `bytes` of payload (requests, or READ responses) arrived on this host for a queue
    /// pair that another law runs (a simulator host whose apps choose their own laws): a
    /// host-domain signal, for a law that measures its port (SCR's receiver-driven
    /// control). Its own queue pairs' arrivals come as [`Event::Rx`] and
    /// [`Event::RxResponse`]. Default: ignored.
    fn on_foreign_rx(&mut self, _now: Instant, _bytes: u32) {}
}

/// Where a request packet lies in its message (one work request), for
/// [`Law::gate_message`] and [`Law::stamp_request`]. Both ends of a queue pair name a message
/// by its first PSN, which the responder sees too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MessagePos {
    /// The message's first PSN (24 bits): its name on the wire.
    pub id: u32,
    /// The message's payload length in bytes (0 for READ requests and atomics, which carry
    /// none).
    pub len: u32,
    /// The offset in the message of the packet's first payload byte.
    pub offset: u32,
    /// The packet's payload bytes.
    pub bytes: u32,
}

/// The answer of [`Law::gate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The packet goes now.
    Send,
    /// The packet goes now at priority `level` (0 lowest ..= 7 highest, clamped), as do
    /// the queue pair's later request packets until changed: [`Actions::set_priority`] for
    /// this packet on (Homa sends a message's unscheduled bytes and its granted bytes at
    /// different levels, decided packet by packet).
    SendAt(u8),
    /// The packet waits until the law calls [`Actions::wake`].
    Hold,
}

/// What a law decided for one queue pair; the engine applies it after the law returns.
/// Every field left untouched leaves the engine's setting as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Actions {
    rate: Option<Option<u64>>,
    window: Option<Option<u64>>,
    timer: Option<Option<Instant>>,
    grant: u64,
    cnp: bool,
    path: Option<u16>,
    wake: bool,
    priority: Option<u8>,
    response_priority: Option<u8>,
    homa: Option<sluice_wire::HomaControl>,
    busy: Option<u32>,
}

impl Actions {
    /// Pace the queue pair's request packets at `bps` bits per second (headers included).
    pub fn set_rate(&mut self, bps: u64) {
        self.rate = Some(Some(bps.max(1)));
    }

    /// No pacing: line rate.
    pub fn unpace(&mut self) {
        self.rate = Some(None);
    }

    /// At most `bytes` of request payload unacknowledged (enforced in whole packets of the
    /// path MTU, rounded up, at least one).
    pub fn set_window(&mut self, bytes: u64) {
        self.window = Some(Some(bytes));
    }

    /// Back to the engine's configured window.
    pub fn clear_window(&mut self) {
        self.window = Some(None);
    }

    /// Deliver [`Event::Timer`] to this queue pair at `at` (replacing an earlier request).
    pub fn arm_timer(&mut self, at: Instant) {
        self.timer = Some(Some(at));
    }

    /// Cancel the timer requested with [`Actions::arm_timer`].
    pub fn cancel_timer(&mut self) {
        self.timer = Some(None);
    }

    /// Send the peer a grant of `bytes` more credit (a control packet; it arrives there as
    /// [`Event::Credit`]). Grants made before the engine sends one add up.
    pub fn grant(&mut self, bytes: u64) {
        self.grant = self.grant.saturating_add(bytes);
    }

    /// Send the peer a RoCE v2 congestion notification packet (the DCQCN notification point).
    pub fn send_cnp(&mut self) {
        self.cnp = true;
    }

    /// Send this queue pair's packets from UDP source port `port` (a path, under ECMP).
    pub fn set_path(&mut self, port: u16) {
        self.path = Some(port);
    }

    /// Ask the engine to try sending again (after [`Gate::Hold`]).
    pub fn wake(&mut self) {
        self.wake = true;
    }

    /// Send this queue pair's request packets (new and resent) at priority `level`, 0 the
    /// lowest ..= 7 the highest (above 7 counts as 7), from the next one built on, until
    /// changed. The engine hands it to the driver with each packet
    /// ([`crate::Transmit::priority`]), which writes it into the IP header's DSCP bits
    /// (`sluice_wire::priority_tos`: DSCP = a configured base + level, ECN bits kept).
    /// Without it (the default) a packet carries no priority and the driver's own TOS.
    pub fn set_priority(&mut self, level: u8) {
        self.priority = Some(level.min(sluice_wire::PRIORITY_LEVELS - 1));
    }

    /// Send this queue pair's responses (ACKs, NAKs, READ responses), CNPs and control
    /// packets at priority `level` (as [`Actions::set_priority`]): Homa sends its grants
    /// and acknowledgements at the highest level so that they overtake data.
    pub fn set_response_priority(&mut self, level: u8) {
        self.response_priority = Some(level.min(sluice_wire::PRIORITY_LEVELS - 1));
    }

    /// The rate decision: `None` if untouched, `Some(None)` for no pacing ([`Actions::unpace`]),
    /// `Some(Some(bps))` for a rate in bits per second ([`Actions::set_rate`]).
    pub fn rate(&self) -> Option<Option<u64>> {
        self.rate
    }

    /// The window decision: `None` if untouched, `Some(None)` for the configured window
    /// ([`Actions::clear_window`]), `Some(Some(bytes))` for a window in bytes
    /// ([`Actions::set_window`]).
    pub fn window(&self) -> Option<Option<u64>> {
        self.window
    }

    /// The timer decision: `None` if untouched, `Some(None)` to cancel, `Some(Some(at))` to
    /// arm.
    pub fn timer(&self) -> Option<Option<Instant>> {
        self.timer
    }

    /// Bytes of credit granted ([`Actions::grant`]), summed; 0 if none.
    pub fn granted(&self) -> u64 {
        self.grant
    }

    /// Whether a CNP is to be sent ([`Actions::send_cnp`]).
    pub fn cnp(&self) -> bool {
        self.cnp
    }

    /// The UDP source port requested ([`Actions::set_path`]), if any.
    pub fn path(&self) -> Option<u16> {
        self.path
    }

    /// Whether [`Actions::wake`] was called.
    pub fn woken(&self) -> bool {
        self.wake
    }

    /// Send the peer one of Homa's control messages (a control packet of kind 4-6; it
    /// arrives there as [`Event::Homa`]). A GRANT or RESEND replaces one decided earlier and
    /// not yet sent (a GRANT's offset is a total; a RESEND asks for what is still missing);
    /// a BUSY is kept apart, so a queue pair that both sends and receives messages can owe
    /// one of each. Sent only if the two ends agreed to control packets; otherwise counted
    /// in `Counters::homa_unsent`.
    pub fn send_homa(&mut self, message: sluice_wire::HomaControl) {
        match message {
            sluice_wire::HomaControl::Busy { message } => self.busy = Some(message),
            m => self.homa = Some(m),
        }
    }

    /// The GRANT or RESEND to send ([`Actions::send_homa`]), if any.
    pub fn homa(&self) -> Option<sluice_wire::HomaControl> {
        self.homa
    }

    /// The message a BUSY is to be sent for ([`Actions::send_homa`]), if any.
    pub fn busy(&self) -> Option<u32> {
        self.busy
    }

    /// The request priority set ([`Actions::set_priority`]), if any.
    pub fn priority(&self) -> Option<u8> {
        self.priority
    }

    /// The response priority set ([`Actions::set_response_priority`]), if any.
    pub fn response_priority(&self) -> Option<u8> {
        self.response_priority
    }

    /// Whether nothing was decided.
    pub fn is_empty(&self) -> bool {
        *self == Actions::default()
    }

    /// Takes the timer request out (the controller keeps law timers; the engine never sees
    /// them).
    pub(crate) fn take_timer(&mut self) -> Option<Option<Instant>> {
        self.timer.take()
    }

    /// Adds `later` on top of these: the later decision wins, grants add up.
    pub fn merge(&mut self, later: Actions) {
        self.rate = later.rate.or(self.rate);
        self.window = later.window.or(self.window);
        self.timer = later.timer.or(self.timer);
        self.grant = self.grant.saturating_add(later.grant);
        self.cnp |= later.cnp;
        self.path = later.path.or(self.path);
        self.wake |= later.wake;
        self.priority = later.priority.or(self.priority);
        self.response_priority = later.response_priority.or(self.response_priority);
        self.homa = later.homa.or(self.homa);
        self.busy = later.busy.or(self.busy);
    }
}

/// Actions decided for queue pairs other than the one whose event is being handled, or
/// later than it (decoupled processing, law timers): queue pair index and actions.
pub type Deferred = Vec<(u32, Actions)>;

/// The engine's side of the control plane. Queue pairs are named by their engine index
/// (dense, reused after a queue pair is destroyed; [`Controller::reset`] says when).
pub trait Controller: std::fmt::Debug {
    /// The events the engine should build (see [`Law::interest`]). Asked once.
    fn interest(&self) -> EventMask;

    /// Queue pair `qp` is new: forget whatever an earlier one at this index left.
    fn reset(&mut self, qp: u32);

    /// An event on queue pair `qp`; actions for it go to `act`, applied when this returns.
    fn on_event(&mut self, now: Instant, qp: u32, event: &Event, act: &mut Actions);

    /// May a request packet of `bytes` go now on `qp`? (Asked only with [`EventMask::GATE`].)
    fn gate(&mut self, now: Instant, qp: u32, bytes: u32) -> Gate;

    /// [`Controller::gate`] told where the packet lies in its message (see
    /// [`Law::gate_message`]). Default: asks [`Controller::gate`].
    fn gate_message(&mut self, now: Instant, qp: u32, pos: &MessagePos) -> Gate {
        self.gate(now, qp, pos.bytes)
    }

    /// When [`Controller::on_timeout`] should next run.
    fn next_timeout(&mut self) -> Option<Instant>;

    /// Runs whatever is due at `now`, appending the resulting actions to `out`.
    fn on_timeout(&mut self, now: Instant, out: &mut Deferred);

    /// The CC extension header the law would have (see [`Law::ccx`]).
    fn ccx(&self) -> Option<CcxLayout>;

    /// The law's opcode mask (see [`Law::opcodes`]). Asked once.
    fn opcodes(&self) -> OpcodeMask {
        OpcodeMask::ALL
    }

    /// Fills the declared CC header of a packet of `qp` about to leave (see [`Law::stamp`]).
    fn stamp(&mut self, _now: Instant, _qp: u32, _out: &mut sluice_wire::DeclaredCcx) {}

    /// Fills the declared CC header of a request of `qp` about to leave (see
    /// [`Law::stamp_request`]). Default: [`Controller::stamp`].
    fn stamp_request(
        &mut self,
        now: Instant,
        qp: u32,
        _pos: &MessagePos,
        out: &mut sluice_wire::DeclaredCcx,
    ) {
        self.stamp(now, qp, out);
    }

    /// What SCR's decoupled loop did, if the law runs behind one (`None`: inline).
    fn decoupled_stats(&self) -> Option<super::DecoupledStats> {
        None
    }

    /// See [`Law::on_foreign_rx`]: passed straight to the law (a counter, not an event).
    fn on_foreign_rx(&mut self, _now: Instant, _bytes: u32) {}
}

/// No control: line rate and the engine's window. Asks for no events at all.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoControl;

impl Controller for NoControl {
    fn interest(&self) -> EventMask {
        EventMask::NONE
    }

    fn reset(&mut self, _: u32) {}

    fn on_event(&mut self, _: Instant, _: u32, _: &Event, _: &mut Actions) {}

    fn gate(&mut self, _: Instant, _: u32, _: u32) -> Gate {
        Gate::Send
    }

    fn next_timeout(&mut self) -> Option<Instant> {
        None
    }

    fn on_timeout(&mut self, _: Instant, _: &mut Deferred) {}

    fn ccx(&self) -> Option<CcxLayout> {
        None
    }
}
