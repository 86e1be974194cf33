//! What the engine counts, as a NIC would: traffic, retransmissions, NAKs by kind, RNR
//! events, duplicates, and drops by reason.

/// Counters of one engine. Every field only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Request packets sent again (go-back-N or a READ re-request).
    pub retransmitted_packets: u64,
    pub retransmit_timeouts: u64,
    pub naks_sent_sequence: u64,
    pub naks_sent_rnr: u64,
    pub naks_sent_invalid_request: u64,
    pub naks_sent_remote_access: u64,
    pub naks_sent_remote_operational: u64,
    /// NAKs not sent because the queue of owed responses was full.
    pub naks_dropped: u64,
    pub naks_received_sequence: u64,
    pub naks_received_rnr: u64,
    pub naks_received_error: u64,
    pub cnps_received: u64,
    /// CNPs a control law had sent (the DCQCN notification point).
    pub cnps_sent: u64,
    /// Grants for receiver-driven laws: sent (each a control packet, or folded into the
    /// total the next packet's credit CCX carries), and received (totals that were news,
    /// from either).
    pub grants_sent: u64,
    pub grants_received: u64,
    /// Grants a law made that could not be sent: the queue pair negotiated neither control
    /// packets nor the credit CCX, or it is in the error state.
    pub grants_unsent: u64,
    /// Selective repeat: packets the responder held past a gap.
    pub packets_held: u64,
    /// Duplicate requests the responder answered again (or dropped).
    pub duplicate_requests: u64,
    /// Responses that matched nothing outstanding (late duplicates).
    pub stale_responses: u64,
    pub drops_unknown_qp: u64,
    pub drops_wrong_peer: u64,
    pub drops_bad_state: u64,
    pub drops_bad_pkey: u64,
    pub drops_unexpected_opcode: u64,
    /// Packets with a CC extension header the queue pair did not agree on.
    pub drops_unnegotiated_ccx: u64,
    /// Received packets an in-line payload service dropped (e.g. failed authentication).
    pub drops_service: u64,
    pub cq_overruns: u64,
}
