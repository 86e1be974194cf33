//! Queue pairs: their state machine, attributes and work requests.

use std::collections::VecDeque;
use std::net::IpAddr;

use sluice_wire::Psn;

use crate::mr::Access;
use crate::{CqId, PdId};

/// A queue pair number (24 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpNum(pub u32);

/// The RC queue pair state machine: RESET -> INIT -> RTR -> RTS <-> SQD, and ERROR from
/// anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// New or reset: no packet is sent or accepted, and no work request may be posted.
    Reset,
    /// Initialized: receive requests may be posted, send requests are refused; no packet is
    /// sent or accepted.
    Init,
    /// Ready to receive: the responder works, the requester does not.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drain: requests already begun are carried to completion (resends
    /// included), new ones are queued but not begun; the responder works as in RTS. When
    /// no begun request is left the engine reports [`crate::AsyncEvent::SqDrained`].
    Sqd,
    /// Every outstanding and new work request completes with a flush error.
    Error,
}

impl QpState {
    /// The requester sends (in SQD only what it has begun) and takes responses.
    pub(crate) fn sending(self) -> bool {
        matches!(self, QpState::Rts | QpState::Sqd)
    }

    /// The responder takes requests.
    pub(crate) fn receiving(self) -> bool {
        matches!(self, QpState::Rtr | QpState::Rts | QpState::Sqd)
    }
}

/// What an engine tells the application outside the completion queues (verbs' affiliated
/// asynchronous events), from [`crate::Engine::poll_async_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// The queue pair is in SQD and every request it had begun has completed: its
    /// attributes may be changed, or it may be resumed (`Transition::Resume`).
    SqDrained(QpNum),
}

/// Path MTU: the largest payload of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mtu {
    /// 256 bytes.
    M256,
    /// 512 bytes.
    M512,
    /// 1024 bytes.
    M1024,
    /// 2048 bytes.
    M2048,
    /// 4096 bytes.
    M4096,
}

impl Mtu {
    /// The MTU in bytes.
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::M256 => 256,
            Mtu::M512 => 512,
            Mtu::M1024 => 1024,
            Mtu::M2048 => 2048,
            Mtu::M4096 => 4096,
        }
    }

    /// Every MTU, smallest first.
    pub const ALL: [Mtu; 5] = [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096];

    /// The MTU of `bytes` bytes, if it is one of the five.
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| m.bytes() == bytes)
    }
}

/// How a queue pair recovers lost packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Recovery {
    /// Standard RoCE: the responder drops out-of-sequence packets and NAKs; the requester
    /// resends everything from the first missing PSN.
    #[default]
    GoBackN,
    /// IRN-style: the responder keeps packets that arrive past a gap (tracked in a bitmap)
    /// and NAKs the first missing PSN; the requester resends only that packet. Timeouts
    /// still go back to the first unacknowledged PSN. Standard packets on the wire: a
    /// go-back-N requester interoperates with this responder (it just resends more), but
    /// this requester needs a responder that holds: a go-back-N responder drops what
    /// follows the gap and takes the resent packet silently, so each loss costs a
    /// retransmit timeout (`tests/recovery_mismatch.rs`). Both ends must agree on it.
    SelectiveRepeat,
}

/// Sizes fixed when a queue pair is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send requests that may be outstanding (posted, not yet completed); at least 1,
    /// default 256.
    pub max_send_wr: u32,
    /// Receive requests that may be posted and not yet consumed; at least 1, default 256.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per work request, at most [`MAX_SGE`].
    pub max_sge: u32,
    /// Bytes a SEND or WRITE may carry inline (copied at post time).
    pub max_inline: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_sge: MAX_SGE as u32,
            max_inline: 256,
        }
    }
}

/// The most scatter/gather entries any work request may have.
pub const MAX_SGE: usize = 4;

/// What a queue pair is created with.
#[derive(Debug, Clone, Copy)]
pub struct QpConfig {
    /// The protection domain: the queue pair reaches only memory regions of this domain.
    pub pd: PdId,
    /// The completion queue of send requests.
    pub send_cq: CqId,
    /// The completion queue of receive requests.
    pub recv_cq: CqId,
    /// Queue sizes.
    pub caps: QpCaps,
}

/// A state change with the attributes it needs, as `ibv_modify_qp` takes them.
#[derive(Debug, Clone, Copy)]
pub enum Transition {
    /// RESET -> INIT: which remote operations the queue pair accepts.
    Init {
        /// Remote operations (WRITE, READ, atomics) the peer may perform at this queue pair.
        access: Access,
    },
    /// INIT -> RTR: the peer and the receive side.
    Rtr {
        /// The IP address of the peer; packets from any other address are dropped.
        peer: IpAddr,
        /// The peer's queue pair number (24 bits).
        dest_qpn: u32,
        /// The largest payload of one packet, both ways.
        path_mtu: Mtu,
        /// The PSN the first request from the peer carries.
        rq_psn: Psn,
        /// READ and atomic requests the peer may have outstanding at us.
        max_dest_rd_atomic: u8,
        /// The RNR NAK timer code (0..=31) we ask the peer to wait.
        min_rnr_timer: u8,
        /// How lost packets are recovered.
        recovery: Recovery,
    },
    /// RTR -> RTS: the send side.
    Rts {
        /// The PSN of the first request this queue pair sends.
        sq_psn: Psn,
        /// Retransmit timeout 4.096 us x 2^timeout (1..=31; 0 means wait forever).
        timeout: u8,
        /// Transport retries after a timeout or sequence-error NAK (0..=7).
        retry_cnt: u8,
        /// Retries after an RNR NAK (0..=6; 7 means retry forever).
        rnr_retry: u8,
        /// READ and atomic requests we may have outstanding at the peer.
        max_rd_atomic: u8,
    },
    /// RTS -> SQD: finish the requests already begun, begin no new one (see
    /// [`QpState::Sqd`]).
    Drain,
    /// SQD -> RTS: begin queued requests again.
    Resume,
    /// Any state -> ERROR.
    Error,
    /// Any state -> RESET: forget everything queued.
    Reset,
}

/// One scatter/gather entry: `len` bytes at `addr` in the region of `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// The local key of the memory region.
    pub lkey: u32,
    /// The virtual address of the first byte, inside the region.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
}

/// The operation of a send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: the message goes into the peer's next posted receive.
    Send,
    /// SEND with immediate: a SEND that also delivers this 32-bit value in the receive
    /// completion.
    SendWithImm(u32),
    /// RDMA WRITE: the message is written at `remote_addr` in the peer's region of `rkey`;
    /// no receive is consumed.
    Write {
        /// The virtual address at the peer, in the region of `rkey`.
        remote_addr: u64,
        /// The remote key of the peer's memory region.
        rkey: u32,
    },
    /// RDMA WRITE with immediate: a WRITE that also consumes a receive at the peer and
    /// delivers `imm` in its completion.
    WriteWithImm {
        /// The virtual address at the peer, in the region of `rkey`.
        remote_addr: u64,
        /// The remote key of the peer's memory region.
        rkey: u32,
        /// The immediate data.
        imm: u32,
    },
    /// RDMA READ: the peer's memory at `remote_addr` is read into the local buffers.
    Read {
        /// The virtual address at the peer, in the region of `rkey`.
        remote_addr: u64,
        /// The remote key of the peer's memory region.
        rkey: u32,
    },
    /// Atomic Compare and Swap on the 8 bytes at `remote_addr`: if they equal `compare`
    /// they become `swap`; the original value is written into the local 8-byte buffer.
    CompareSwap {
        /// The virtual address at the peer, in the region of `rkey`.
        remote_addr: u64,
        /// The remote key of the peer's memory region.
        rkey: u32,
        /// The value expected at `remote_addr`.
        compare: u64,
        /// The value stored if the expected one is there.
        swap: u64,
    },
    /// Atomic Fetch and Add on the 8 bytes at `remote_addr`: `add` is added to them; the
    /// original value is written into the local 8-byte buffer.
    FetchAdd {
        /// The virtual address at the peer, in the region of `rkey`.
        remote_addr: u64,
        /// The remote key of the peer's memory region.
        rkey: u32,
        /// The value added (wrapping).
        add: u64,
    },
}

impl SendOp {
    pub(crate) fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }

    pub(crate) fn is_atomic(self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
}

/// A send work request.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Where the data comes from (SEND, WRITE) or goes to (READ; 8 bytes for atomics).
    pub sgl: &'a [Sge],
    /// Produce a completion on success (errors always complete).
    pub signaled: bool,
    /// Wait for every earlier READ and atomic to complete before starting.
    pub fence: bool,
    /// Set the solicited-event bit on the last packet.
    pub solicited: bool,
    /// Copy the data at post time (SEND and WRITE, at most `max_inline` bytes).
    pub inline: bool,
}

impl<'a> SendWr<'a> {
    /// A signaled request with no flags.
    pub fn new(wr_id: u64, op: SendOp, sgl: &'a [Sge]) -> SendWr<'a> {
        SendWr {
            wr_id,
            op,
            sgl,
            signaled: true,
            fence: false,
            solicited: false,
            inline: false,
        }
    }
}

/// A receive work request.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Where the received message is written (at most `max_sge` entries).
    pub sgl: &'a [Sge],
}

/// A fixed-capacity scatter/gather list (no allocation per work request). The count comes
/// first (`repr(C)`), beside the first entry: a one-entry list is read in 24 bytes.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(crate) struct SgList {
    count: u8,
    sges: [Sge; MAX_SGE],
}

impl SgList {
    pub(crate) fn new(sgl: &[Sge]) -> Option<SgList> {
        if sgl.len() > MAX_SGE {
            return None;
        }
        let mut list = SgList {
            sges: [Sge::default(); MAX_SGE],
            count: sgl.len() as u8,
        };
        list.sges[..sgl.len()].copy_from_slice(sgl);
        Some(list)
    }

    pub(crate) fn entries(&self) -> &[Sge] {
        &self.sges[..usize::from(self.count)]
    }

    /// Total bytes, or `None` past 2^31 (the largest RC message).
    pub(crate) fn total(&self) -> Option<u32> {
        let sum: u64 = self.entries().iter().map(|s| u64::from(s.len)).sum();
        (sum <= 1 << 31).then_some(sum as u32)
    }

    /// The pieces covering message bytes `offset..offset + len`, as `(lkey, addr, len)`.
    pub(crate) fn pieces(
        &self,
        mut offset: u32,
        mut len: u32,
    ) -> impl Iterator<Item = (u32, u64, u32)> + '_ {
        self.entries().iter().filter_map(move |sge| {
            if len == 0 {
                return None;
            }
            if offset >= sge.len {
                offset -= sge.len;
                return None;
            }
            let take = (sge.len - offset).min(len);
            let piece = (sge.lkey, sge.addr + u64::from(offset), take);
            offset = 0;
            len -= take;
            Some(piece)
        })
    }
}

/// A posted send request inside the engine. Aligned to a cache line, with what sending and
/// retiring read in the first line (`repr(C)`: declaration order) and the data's location
/// after it: acknowledging a request reads one line of it.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct SendWqe {
    pub(crate) wr_id: u64,
    pub(crate) op: SendOp,
    pub(crate) len: u32,
    /// The PSNs this request occupies: `first_psn .. first_psn + span`, set when it is first
    /// sent. A READ occupies one PSN per response packet; an atomic one.
    pub(crate) first_psn: Psn,
    pub(crate) span: u32,
    /// READ: response bytes received in order so far.
    pub(crate) read_done: u32,
    pub(crate) signaled: bool,
    pub(crate) fence: bool,
    pub(crate) solicited: bool,
    pub(crate) started: bool,
    /// READ and atomics: every response has arrived.
    pub(crate) responded: bool,
    /// What stages beside the path raised on its packets (sent, or READ responses).
    pub(crate) flags: crate::policy::ServiceFlags,
    pub(crate) sgl: SgList,
    /// Inline data, in the first `len` bytes (a buffer reused from an earlier request may be
    /// longer).
    pub(crate) inline: Option<Box<[u8]>>,
}

impl SendWqe {
    pub(crate) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.span - 1)
    }

    /// True once every response this request needs has arrived (SEND and WRITE need none:
    /// an ACK covering their last PSN completes them).
    pub(crate) fn responses_complete(&self) -> bool {
        match self.op {
            SendOp::Read { .. } => self.responded,
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => self.responded,
            _ => true,
        }
    }
}

/// A posted receive request inside the engine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvWqe {
    pub(crate) wr_id: u64,
    pub(crate) sgl: SgList,
    pub(crate) len: u32,
}

/// Attributes set by the transitions, with defaults until then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpAttrs {
    pub(crate) access: Access,
    pub(crate) peer: Option<IpAddr>,
    pub(crate) dest_qpn: u32,
    pub(crate) mtu: u32,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) recovery: Recovery,
    /// Both ends agreed to exchange Sluice's control packets (credit grants).
    pub(crate) cc_control: bool,
    /// The CC extension header layout the two ends agreed on; `None`: plain RoCE v2.
    pub(crate) ccx: Option<sluice_wire::CcxLayout>,
    /// What its in-line services add in front of each payload it sends (and take off each
    /// it receives): builders write the payload this far into the transmit buffer.
    /// (Bytes: `set_services` keeps the two under 128 together.)
    pub(crate) service_head: u8,
    /// What they add behind it. `mtu` is the path MTU less both.
    pub(crate) service_tail: u8,
}

impl Default for QpAttrs {
    fn default() -> Self {
        QpAttrs {
            access: Access::NONE,
            peer: None,
            dest_qpn: 0,
            mtu: 1024,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 0,
            recovery: Recovery::GoBackN,
            cc_control: false,
            ccx: None,
            service_head: 0,
            service_tail: 0,
        }
    }
}

/// The requester's sequence state. In declaration order (`repr(C)`): one cache line of
/// what sending and acknowledging read (sequence numbers, cursor, send queue), one of the
/// timers and the RTT probe, then what only recovery reads.
/// The largest window a queue pair may have, in packets: half the 24-bit PSN space, so
/// that PSN comparisons stay unambiguous.
pub(crate) const MAX_WINDOW: u32 = 1 << 23;

/// The shift of [`MAX_WINDOW`] that gives the largest power of two at most `window`
/// (1..=`MAX_WINDOW` packets): BDP flow control's cap is a power of two, kept as one byte.
pub(crate) fn window_shift(window: u32) -> u8 {
    debug_assert!((1..=MAX_WINDOW).contains(&window));
    MAX_WINDOW.ilog2().saturating_sub(window.max(1).ilog2()) as u8
}

#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Requester {
    /// PSN of the next packet to send.
    pub(crate) next_psn: Psn,
    /// Oldest PSN not yet acknowledged.
    pub(crate) una: Psn,
    /// PSN after the last one ever sent (retransmissions stay below it).
    pub(crate) max_sent: Psn,
    /// The responder has confirmed (by ACK or NAK) receiving every request before this PSN.
    pub(crate) confirmed: Psn,
    /// Index in `sq` of the request to send from next, and the byte offset in it.
    pub(crate) cursor: usize,
    pub(crate) cursor_offset: u32,
    pub(crate) retries_left: u8,
    pub(crate) rnr_retries_left: u8,
    /// The most packets it may have unacknowledged whatever the window says is
    /// [`MAX_WINDOW`] shifted right by this: with selective repeat, the largest power of two
    /// at most one more than the receive tracker holds past a gap (IRN's BDP flow control:
    /// no packet can then land past what the responder can keep; 256 for the 255-PSN bitmap
    /// and LEFT); else 0, no cap. (A byte, in the padding before `sq`; 0 by default.)
    pub(crate) window_cap_shift: u8,
    /// The same shift for the receive window the peer advertised (`Connection::
    /// peer_receive_window`; 0 if it advertised none): `window_cap_shift` is the larger of
    /// this and its own tracker's. (A byte, in the same padding.)
    pub(crate) peer_cap_shift: u8,
    /// Posted, not yet completed; the front is the oldest.
    pub(crate) sq: VecDeque<SendWqe>,
    /// No sending before this time (an RNR NAK's wait).
    pub(crate) rnr_wait_until: Option<crate::Instant>,
    /// When the retransmit timer fires, if armed.
    pub(crate) deadline: Option<crate::Instant>,
    /// The packet timed for an RTT sample: when it left (`None`: none is timed) ...
    pub(crate) rtt_probe_sent: Option<crate::Instant>,
    /// ... and its PSN. (Not an `Option` of the pair: the pair's padding would take the
    /// four bytes `oldest_read` has beside the PSN.)
    pub(crate) rtt_probe_psn: Psn,
    /// The place in `sq` of the oldest READ still waiting for responses: what every READ
    /// response is matched against, kept rather than searched for (`oldest_read.rs`).
    pub(crate) oldest_read: crate::oldest_read::OldestRead,
    /// A go-back-N from an out-of-order READ response was already asked for this PSN.
    pub(crate) read_retry_at: Option<Psn>,
    /// Selective repeat of READ responses; kept out of line (boxed once per queue pair, at
    /// its first READ response out of order): most queue pairs never need it.
    pub(crate) read_repair: Option<Box<ReadRepair>>,
    /// Selective repeat: single PSNs the responder NAK'd, to resend before anything new.
    pub(crate) resend: VecDeque<Psn>,
}

/// Selective repeat of READ responses at the requester.
#[derive(Debug, Default)]
pub(crate) struct ReadRepair {
    /// Which PSNs past the oldest waiting READ's first missing response arrived (their
    /// data is already in place).
    pub(crate) held: crate::held_ranges::HeldRanges,
    /// A response needed a run `held` had no room for (and was dropped).
    pub(crate) overflow: bool,
    /// The gap asked for again, PSNs `from..until`: its re-request (queued in `resend` at
    /// `from`) asks for just those, and while the first missing PSN lies in it nothing is
    /// asked again (its responses are on their way).
    pub(crate) asked: Option<(Psn, Psn)>,
}

/// What the responder owes the peer, in PSN order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Response {
    /// READ response packets for PSNs `psn ..` carrying `remaining` bytes from `va`.
    /// `replay`: served again for a duplicate request.
    Read {
        psn: Psn,
        rkey: u32,
        va: u64,
        remaining: u32,
        first: bool,
        replay: bool,
    },
    AtomicAck {
        psn: Psn,
        original: u64,
        replay: bool,
    },
    Nak {
        psn: Psn,
        syndrome: sluice_wire::Syndrome,
    },
}

impl Response {
    /// Whether it answers a new READ or atomic: the requester keeps at most
    /// `max_dest_rd_atomic` of those outstanding, so that is the room they get. NAKs and
    /// replays for duplicates share a small room of their own, so that a duplicate never
    /// takes the place of a new request the requester is entitled to send.
    pub(crate) fn answers_new_request(&self) -> bool {
        matches!(
            self,
            Response::Read { replay: false, .. } | Response::AtomicAck { replay: false, .. }
        )
    }
}

/// A READ or atomic the responder executed, kept to answer duplicates of it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResponderResource {
    pub(crate) first_psn: Psn,
    pub(crate) span: u32,
    pub(crate) atomic_original: Option<u64>,
}

/// A multi-packet request the responder is in the middle of.
#[derive(Debug, Clone, Copy)]
pub(crate) enum InProgress {
    Send {
        wqe: RecvWqe,
        received: u32,
    },
    /// `total` is the RETH's DMA length: a WRITE with immediate reports it.
    Write {
        rkey: u32,
        va: u64,
        remaining: u32,
        total: u32,
    },
}

/// The responder's sequence state. In declaration order (`repr(C)`): one cache line of
/// what every request and every ACK reads (sequence numbers, what is owed, whether packets
/// are held), then the message in progress and the queues only some operations use.
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Responder {
    /// The PSN the next new request must carry.
    pub(crate) epsn: Psn,
    /// Requests completed, mod 2^24: what the AETH carries.
    pub(crate) msn: u32,
    /// An ACK of everything before `epsn` is due.
    pub(crate) ack_due: bool,
    /// A sequence-error NAK was sent for the current `epsn`: do not send another.
    pub(crate) nak_sent: bool,
    /// New request packets taken since the last coalesced ACK.
    pub(crate) unacked: u32,
    pub(crate) responses: VecDeque<Response>,
    /// Selective repeat: packets held past a gap (boxed: a pointer in the hot line).
    pub(crate) reorder: Option<Box<crate::reorder::ReorderBuffer>>,
    /// Credit the control law granted the peer, not sent yet.
    pub(crate) grant_due: u64,
    pub(crate) in_progress: Option<InProgress>,
    pub(crate) rq: VecDeque<RecvWqe>,
    pub(crate) resources: VecDeque<ResponderResource>,
}

/// How much a queue pair holds: every one of these queues has a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueDepths {
    /// Send requests not yet completed (at most `max_send_wr`).
    pub send: usize,
    /// Receive requests not yet consumed (at most `max_recv_wr`).
    pub recv: usize,
    /// READ responses, atomic ACKs and NAKs owed to the peer (at most `max_dest_rd_atomic`
    /// plus 8).
    pub owed_responses: usize,
    /// READs and atomics kept to answer duplicates (at most `max_dest_rd_atomic`).
    pub responder_resources: usize,
    /// Selective repeat: packets held past a gap (at most what its receive tracker records:
    /// 255 for the default bitmap).
    pub held_packets: usize,
    /// Selective repeat: PSNs queued for resending (at most 64).
    pub resends: usize,
}

/// Where a queue pair's two PSN sequences stand (`ibv_query_qp`'s `sq_psn` and `rq_psn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpPsns {
    /// The PSN the next new request packet will carry.
    pub sq_psn: Psn,
    /// The PSN the next new request from the peer must carry.
    pub rq_psn: Psn,
}

/// What the control law set for a queue pair (see `control::Actions`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Knobs {
    /// Pacing rate in bits per second on the wire; `None` is line rate.
    pub(crate) rate_bps: Option<u64>,
    /// Request payload bytes allowed unacknowledged; `None` is the engine's window.
    pub(crate) window_bytes: Option<u64>,
}

/// The packet priorities the control law set (see `Actions::set_priority`): request
/// packets, and responses, CNPs and control packets; `Priority::NONE`: none. Two bytes,
/// kept apart from `Knobs` to sit in the padding after `recv_cq` (the line layout is pinned).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Priorities {
    pub(crate) request: crate::Priority,
    pub(crate) response: crate::Priority,
}

/// One queue pair. Laid out for the cache (`repr(C)`: declaration order): with thousands of
/// queue pairs each packet finds its queue pair cold, and every cache line it touches is a
/// miss. Line 0 holds what every visit reads (state, flags, attributes, the protection domain,
/// send CQ and path); lines 1 and 2 the requester's sequence state, send queue, timers and
/// RTT probe; line 4 what else sending a request reads (knobs, pacing); line 5 the
/// responder's sequence state, what it owes (responses, an ACK, a grant) and held packets.
/// Its creation settings (`QpConfig`) are kept apart by field for that.
/// `the_hot_fields_share_lines` pins the offsets.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Qp {
    pub(crate) state: QpState,
    /// In the engine's ready list.
    pub(crate) scheduled: bool,
    /// An `AsyncEvent` of this queue pair waits in the engine's queue (at most one each, so
    /// the queue is bounded by the queue pairs).
    pub(crate) async_pending: bool,
    /// The control law asked for a CNP to the peer.
    pub(crate) cnp_due: bool,
    /// The control law asked for a Homa control message to the peer (`homa_due`,
    /// `busy_due`): a flag on line 0, so a visit that owes nothing reads no further.
    pub(crate) control_due: bool,
    /// The control law was told the queue pair started sending.
    pub(crate) control_started: bool,
    /// Both ends agreed to exchange Sluice's path probes (control packets of kinds 2 and 3).
    /// (An attribute, kept here in the padding before `num` so that the attributes, the
    /// path and the CQ stay in one cache line.)
    pub(crate) path_probes: bool,
    /// Payload services run on its packets (the engine holds them, by index). (As
    /// `path_probes`, an attribute kept here.)
    pub(crate) services: bool,
    pub(crate) num: QpNum,
    pub(crate) attrs: QpAttrs,
    pub(crate) pd: PdId,
    pub(crate) send_cq: CqId,
    /// The UDP source port the control law chose (a multipath law's path); `None`: the
    /// queue pair's own (`src_port`). Beside the attributes, since every packet reads it.
    pub(crate) path: Option<u16>,
    pub(crate) req: Requester,
    /// The CC extension header of the latest request from the peer: what responses echo.
    pub(crate) ccx_echo: Option<Box<CcxEcho>>,
    pub(crate) caps: QpCaps,
    /// What the control law set.
    pub(crate) knobs: Knobs,
    /// Pacing: the slot the last request packet took, and its bits on the wire. The next
    /// may go one packet time later at the rate in force *now*, so a law that raises the
    /// rate shortens the wait at once.
    pub(crate) paced: (crate::Instant, u64),
    pub(crate) recv_cq: CqId,
    pub(crate) priorities: Priorities,
    /// The largest credit total the peer has granted us. (Here, so that `resp` starts a
    /// line.)
    pub(crate) credit_total_seen: u64,
    pub(crate) resp: Responder,
    /// Credit granted to the peer in all, sent (wrapping; grants carry the total).
    pub(crate) granted_total: u64,
    /// A Homa GRANT or RESEND the law asked for, not yet sent.
    pub(crate) homa_due: Option<sluice_wire::HomaControl>,
    /// A Homa BUSY (for this message) the law asked for, not yet sent.
    pub(crate) busy_due: Option<u32>,
}

/// The CC extension header of a request, kept for the responses that echo it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CcxEcho {
    pub(crate) ccx: sluice_wire::Ccx,
    /// When the request arrived: a timestamp echo is advanced by the time since, so that
    /// the requester's RTT sample leaves out how long this host held the request.
    pub(crate) arrived: crate::Instant,
}

impl Qp {
    pub(crate) fn new(num: QpNum, config: QpConfig) -> Qp {
        Qp {
            num,
            pd: config.pd,
            send_cq: config.send_cq,
            recv_cq: config.recv_cq,
            caps: config.caps,
            state: QpState::Reset,
            attrs: QpAttrs::default(),
            req: Requester::default(),
            resp: Responder::default(),
            scheduled: false,
            async_pending: false,
            knobs: Knobs::default(),
            priorities: Priorities::default(),
            cnp_due: false,
            control_due: false,
            path: None,
            granted_total: 0,
            homa_due: None,
            busy_due: None,
            credit_total_seen: 0,
            control_started: false,
            path_probes: false,
            services: false,
            paced: (crate::Instant::ZERO, 0),
            ccx_echo: None,
        }
    }

    /// What it was created with.
    pub(crate) fn config(&self) -> QpConfig {
        QpConfig {
            pd: self.pd,
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
            caps: self.caps,
        }
    }

    /// The CC extension header for a packet leaving at `now`, if the ends agreed on one: a
    /// request carries its send time (or an empty INT record for switches to fill); a
    /// response echoes the latest request's time, advanced by how long this host held that
    /// request (or echoes its INT record, HPCC's ACK); every packet of a credit layout
    /// carries the total credit granted the peer.
    ///
    /// Inline, for a queue pair without one: out of line, the `None` came back through
    /// memory as a one-byte store that the packet's 16-byte copies then read, a load the CPU
    /// cannot forward from a narrower store (it waits for the store to reach the cache: a
    /// fifth of `packet_at_cursor`'s samples in write-bw, `perf annotate`).
    #[inline]
    pub(crate) fn ccx_out(&self, now: crate::Instant, response: bool) -> Option<sluice_wire::Ccx> {
        // The layout first: without one, the echo's cache line is not read.
        let layout = self.attrs.ccx?;
        Some(self.ccx_of(layout, now, response))
    }

    fn ccx_of(
        &self,
        layout: sluice_wire::CcxLayout,
        now: crate::Instant,
        response: bool,
    ) -> sluice_wire::Ccx {
        use sluice_wire::{Ccx, CcxLayout, IntPath};
        let echo = self.ccx_echo.as_deref().copied().filter(|_| response);
        match layout {
            CcxLayout::Timestamps => Ccx::Timestamps {
                tx_ns: now.as_nanos(),
                echo_ns: match echo {
                    Some(CcxEcho {
                        ccx: Ccx::Timestamps { tx_ns, .. },
                        arrived,
                    }) => Some(tx_ns.wrapping_add((now - arrived).as_nanos() as u64)),
                    _ => None,
                },
            },
            CcxLayout::Int => match echo {
                Some(CcxEcho {
                    ccx: int @ Ccx::Int(_),
                    ..
                }) => int,
                _ => Ccx::Int(IntPath::default()),
            },
            CcxLayout::Credit => Ccx::Credit {
                granted_total: self.granted_total,
            },
            // The law stamps its fields before the packet leaves (`Nic::stamp_declared`).
            CcxLayout::Declared(tag) => Ccx::Declared(sluice_wire::DeclaredCcx::empty(tag)),
        }
    }

    /// Whether a turn on the ready list could find a packet to send: anything owed to the
    /// peer, or requests not wholly sent (whether pacing, the window or an RNR wait let them
    /// go now is found out at that turn). Never false when a packet could go.
    pub(crate) fn may_send_more(&self) -> bool {
        self.owes_peer() || self.requests_to_send()
    }

    /// Payload bytes left to send of the message this queue pair sends next
    /// ([`crate::policy::Served::left`], what SRPT ranks by): 0 when it owes the peer a
    /// packet (that goes first), when its next request is a READ or an atomic (one packet,
    /// no payload), or when it has no request to send. Out of line: only a scheduler other
    /// than round robin asks, after a packet.
    #[inline(never)]
    pub(crate) fn next_message_left(&self) -> u32 {
        if self.owes_peer() {
            return 0;
        }
        match self.req.sq.get(self.req.cursor) {
            Some(w) if !w.op.is_read_or_atomic() => w.len.saturating_sub(self.req.cursor_offset),
            _ => 0,
        }
    }

    /// Whether the responder owes the peer a packet, or the control law asked for one.
    pub(crate) fn owes_peer(&self) -> bool {
        self.cnp_due
            || self.control_due
            || self.resp.grant_due > 0
            || self.resp.ack_due
            || !self.resp.responses.is_empty()
    }

    /// Whether requests are not wholly sent, or NAK'd ones wait to be sent again.
    pub(crate) fn requests_to_send(&self) -> bool {
        self.req.cursor < self.req.sq.len() || self.resends_queued()
    }

    /// Whether NAK'd PSNs wait to be resent. Only selective repeat queues them, so a
    /// go-back-N queue pair does not read the queue (a cache line of its own).
    pub(crate) fn resends_queued(&self) -> bool {
        debug_assert!(
            self.attrs.recovery == Recovery::SelectiveRepeat || self.req.resend.is_empty()
        );
        self.attrs.recovery == Recovery::SelectiveRepeat && !self.req.resend.is_empty()
    }

    /// Takes the next NAK'd PSN to resend, under the same rule as [`Qp::resends_queued`].
    pub(crate) fn next_resend(&mut self) -> Option<Psn> {
        if self.attrs.recovery != Recovery::SelectiveRepeat {
            debug_assert!(self.req.resend.is_empty());
            return None;
        }
        self.req.resend.pop_front()
    }

    pub(crate) fn psns(&self) -> QpPsns {
        QpPsns {
            sq_psn: self.req.max_sent,
            rq_psn: self.resp.epsn,
        }
    }

    pub(crate) fn depths(&self) -> QueueDepths {
        QueueDepths {
            send: self.req.sq.len(),
            recv: self.resp.rq.len(),
            owed_responses: self.resp.responses.len(),
            responder_resources: self.resp.resources.len(),
            held_packets: self.resp.reorder.as_ref().map_or(0, |r| r.held.len()),
            resends: self.req.resend.len(),
        }
    }

    /// The earliest time its timer has anything to do (see `Engine::on_timer`): the next
    /// paced packet's slot while a rate is set, the end of an RNR wait, the retransmit
    /// deadline. `None`: nothing for a timer.
    pub(crate) fn timer_need(&self) -> Option<crate::Instant> {
        let paced = self.knobs.rate_bps.map(|_| self.next_send_at());
        [paced, self.req.rnr_wait_until, self.req.deadline]
            .into_iter()
            .flatten()
            .min()
    }

    /// Pacing: no request packet before this time (no limit without a rate).
    pub(crate) fn next_send_at(&self) -> crate::Instant {
        match self.knobs.rate_bps {
            Some(rate) if rate > 0 => {
                let (slot, bits) = self.paced;
                // A packet's bits (< 2^16) times 10^9 fits a u64: no wide division per packet.
                let gap = bits.saturating_mul(1_000_000_000) / rate;
                slot + std::time::Duration::from_nanos(gap)
            }
            _ => crate::Instant::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sg_list_pieces_span_entries() {
        let sgl = SgList::new(&[
            Sge {
                lkey: 1,
                addr: 100,
                len: 10,
            },
            Sge {
                lkey: 2,
                addr: 200,
                len: 5,
            },
            Sge {
                lkey: 3,
                addr: 300,
                len: 20,
            },
        ])
        .unwrap();
        assert_eq!(sgl.total(), Some(35));
        let pieces: Vec<_> = sgl.pieces(8, 10).collect();
        assert_eq!(pieces, vec![(1, 108, 2), (2, 200, 5), (3, 300, 3)]);
        assert_eq!(sgl.pieces(35, 0).count(), 0);
        assert!(SgList::new(&[Sge::default(); MAX_SGE + 1]).is_none());
    }

    /// The layout the cache work depends on (`repr(C)` keeps declaration order; this
    /// catches a field added in the wrong place). Lines are 64 bytes.
    #[test]
    fn the_hot_fields_share_lines() {
        use std::mem::{offset_of, size_of};
        let line = |offset: usize| offset / 64;
        let end = |offset: usize, size: usize| line(offset + size - 1);
        // Line 0: what every visit reads.
        assert_eq!(end(offset_of!(Qp, attrs), size_of::<QpAttrs>()), 0);
        assert_eq!(line(offset_of!(Qp, cnp_due)), 0);
        assert_eq!(line(offset_of!(Qp, path)), 0);
        assert_eq!(line(offset_of!(Qp, pd)), 0);
        assert_eq!(line(offset_of!(Qp, send_cq)), 0);
        // Lines 1 and 2, the requester's: sequence numbers, cursor and send queue; then the
        // RNR wait, the retransmit deadline, the RTT probe and the READ retry mark.
        let req = offset_of!(Qp, req);
        assert_eq!(req, 64);
        let sq_end = offset_of!(Requester, sq) + size_of::<VecDeque<SendWqe>>();
        assert_eq!(line(sq_end - 1), 0);
        assert_eq!(line(offset_of!(Requester, rnr_wait_until)), 1);
        assert_eq!(line(offset_of!(Requester, rtt_probe_sent)), 1);
        assert_eq!(line(offset_of!(Requester, oldest_read)), 1);
        assert_eq!(end(offset_of!(Requester, read_retry_at), 8), 1);
        // What else sending a request reads: one line.
        let knobs = offset_of!(Qp, knobs);
        assert_eq!(line(knobs), 4);
        assert_eq!(end(knobs, size_of::<Knobs>()), 4);
        assert_eq!(end(offset_of!(Qp, paced), 16), 4);
        // Line 5, the responder's: sequence numbers, what is owed, held packets.
        let resp = offset_of!(Qp, resp);
        assert_eq!(resp, 5 * 64);
        assert_eq!(end(offset_of!(Responder, reorder), 8), 0);
        assert_eq!(line(offset_of!(Responder, ack_due)), 0);
        assert_eq!(end(offset_of!(Responder, grant_due), 8), 0);
        assert!(size_of::<Qp>() <= 9 * 64, "{}", size_of::<Qp>());
        // A work request: one line for sending and retiring, the list's count and first
        // entry in the next.
        assert_eq!(std::mem::align_of::<SendWqe>(), 64);
        assert_eq!(line(offset_of!(SendWqe, responded)), 0);
        assert_eq!(line(offset_of!(SendWqe, first_psn)), 0);
        assert_eq!(offset_of!(SendWqe, sgl), 64);
        assert_eq!(end(offset_of!(SgList, sges), size_of::<Sge>()), 0);
    }
}
