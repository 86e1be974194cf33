//! Completion queues: bounded, and what happens at the bound is defined.

use std::collections::VecDeque;

use crate::QpNum;

/// The status of a completed work request (the verbs `ibv_wc_status` that RC can produce).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// The request completed without error.
    Success,
    /// A receive buffer too small for the SEND, or a gather/scatter list longer than allowed.
    LocalLengthError,
    /// A local key, bound or permission check failed.
    LocalProtectionError,
    /// The queue pair went to the error state before this request completed.
    WrFlushError,
    /// The responder sent something the protocol does not allow here.
    BadResponseError,
    /// NAK: invalid request.
    RemoteInvalidRequestError,
    /// NAK: remote access error (R_Key, bounds or permission at the responder).
    RemoteAccessError,
    /// NAK: remote operational error.
    RemoteOperationalError,
    /// The transport retry count ran out (timeouts or sequence-error NAKs).
    RetryExceeded,
    /// The RNR retry count ran out.
    RnrRetryExceeded,
}

/// What a completion completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (with or without immediate).
    Send,
    /// An RDMA WRITE (with or without immediate), on the requester.
    RdmaWrite,
    /// An RDMA READ.
    RdmaRead,
    /// An atomic Compare and Swap.
    CompareSwap,
    /// An atomic Fetch and Add.
    FetchAdd,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
}

/// One work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The `wr_id` of the work request, as posted.
    pub wr_id: u64,
    /// How the request ended.
    pub status: WcStatus,
    /// What kind of request it was.
    pub opcode: WcOpcode,
    /// The queue pair the request was posted on.
    pub qp: QpNum,
    /// Bytes received (receives) or transferred (READ).
    pub byte_len: u32,
    /// The immediate data of a receive consumed by a SEND or WRITE with immediate; `None`
    /// otherwise.
    pub imm: Option<u32>,
    /// When the engine completed it, on the engine's clock: the `now` of the call that
    /// completed it (a packet handled, a packet sent, a timeout), or for one a verb
    /// completed (a flush), the latest `now` the engine had been given. A hardware NIC's
    /// completion timestamp; what a doorbell pacer (Weir) measures a work request's delay
    /// to.
    pub time: crate::Instant,
    /// What the queue pair's stages beside the path raised on the message's packets
    /// (inspection's executable content), ORed: on a receive, the SEND or WRITE with
    /// immediate it took; on a READ, its responses; on a SEND or WRITE, the packets sent.
    pub flags: crate::policy::ServiceFlags,
}

impl Completion {
    /// A request that completes without being carried out: a flush, or the failure named by
    /// `status`.
    pub(crate) fn unfinished(
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        qp: QpNum,
    ) -> Completion {
        Completion {
            wr_id,
            status,
            opcode,
            qp,
            byte_len: 0,
            imm: None,
            time: crate::Instant::ZERO,
            flags: crate::policy::ServiceFlags::NONE,
        }
    }
}

/// A completion queue with room for `capacity` completions. When a completion finds it full,
/// the queue goes into an overrun state: the completion is lost, the queue pair that produced
/// it is moved to the error state (as IBTA prescribes for a CQ overrun), and polling reports
/// the overrun once the queued completions are drained.
#[derive(Debug)]
pub(crate) struct CompletionQueue {
    entries: VecDeque<Completion>,
    capacity: usize,
    pub(crate) overrun: bool,
}

impl CompletionQueue {
    pub(crate) fn new(capacity: usize) -> CompletionQueue {
        CompletionQueue {
            entries: VecDeque::with_capacity(capacity.min(4096)),
            capacity,
            overrun: false,
        }
    }

    /// Adds a completion; `false` (and the overrun state) if the queue is full.
    pub(crate) fn push(&mut self, c: Completion) -> bool {
        if self.entries.len() >= self.capacity || self.overrun {
            self.overrun = true;
            return false;
        }
        self.entries.push_back(c);
        true
    }

    pub(crate) fn pop(&mut self) -> Option<Completion> {
        self.entries.pop_front()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}
