//! What the engine counts, as a NIC would: traffic, retransmissions, NAKs by kind, RNR
//! events, duplicates, and drops by reason.

/// Counters of one engine. Every field only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent (requests, responses and control packets; each [`crate::Transmit`] returned
    /// by `poll_transmit`).
    pub tx_packets: u64,
    /// Payload bytes sent, headers not included.
    pub tx_bytes: u64,
    /// Packets received (every packet given to `handle_packet`, including those then dropped).
    pub rx_packets: u64,
    /// Payload bytes received, headers not included.
    pub rx_bytes: u64,
    /// Request packets sent again (go-back-N or a READ re-request).
    pub retransmitted_packets: u64,
    /// Retransmit timer expiries that found requests outstanding.
    pub retransmit_timeouts: u64,
    /// PSN sequence error NAKs sent (a request arrived past a gap).
    pub naks_sent_sequence: u64,
    /// RNR NAKs sent (a SEND or WRITE with immediate found no posted receive, or selective
    /// repeat asking again for packets it refused past its receive tracker).
    pub naks_sent_rnr: u64,
    /// Invalid request NAKs sent.
    pub naks_sent_invalid_request: u64,
    /// Remote access error NAKs sent (R_Key, bounds or permission).
    pub naks_sent_remote_access: u64,
    /// Remote operational error NAKs sent.
    pub naks_sent_remote_operational: u64,
    /// NAKs not sent because the queue of owed responses was full.
    pub naks_dropped: u64,
    /// PSN sequence error NAKs received.
    pub naks_received_sequence: u64,
    /// RNR NAKs received.
    pub naks_received_rnr: u64,
    /// NAKs received with a fatal code (invalid request, remote access or remote
    /// operational error).
    pub naks_received_error: u64,
    /// Congestion notification packets (CNPs) received for a known queue pair.
    pub cnps_received: u64,
    /// CNPs a control law had sent (the DCQCN notification point).
    pub cnps_sent: u64,
    /// Grants for receiver-driven laws: sent (each a control packet, or folded into the
    /// total the next packet's credit CCX carries), and received (totals that were news,
    /// from either).
    pub grants_sent: u64,
    /// Credit totals received that were news, from either a control packet or a credit CCX.
    pub grants_received: u64,
    /// Grants a law made that could not be sent: the queue pair negotiated neither control
    /// packets nor the credit CCX, or it is in the error state.
    pub grants_unsent: u64,
    /// Homa control messages (GRANT, RESEND, BUSY: control packets of kinds 4-6) sent.
    pub homa_sent: u64,
    /// Homa control messages received and handed to the law.
    pub homa_received: u64,
    /// Homa control messages a law asked for that were not sent: the queue pair did not
    /// agree to control packets, or it is in the error state.
    pub homa_unsent: u64,
    /// Homa control messages received on a queue pair that did not agree to control
    /// packets: dropped (also counted as unexpected opcodes).
    pub drops_homa_unagreed: u64,
    /// Path probes sent (for a path selector that probes, e.g. `rtt-probe`), and replies
    /// sent to the peer's probes.
    pub probes_sent: u64,
    /// Replies sent to the peer's path probes.
    pub probe_replies_sent: u64,
    /// Replies to this engine's probes received (and handed to the path selector).
    pub probe_replies_received: u64,
    /// Probes the path selector asked for that were not sent: the queue pair did not agree
    /// to probes with its peer (or is not connected), or too many were waiting to leave.
    pub probes_unsent: u64,
    /// Request packets that arrived past a gap (ahead of the expected PSN), in either
    /// recovery mode: reordering (multipath spraying) or loss.
    pub out_of_order_arrivals: u64,
    /// Selective repeat: packets the responder held past a gap.
    pub packets_held: u64,
    /// Of those, WRITE packets whose payload was placed at its address on arrival (their
    /// WRITE's first packet had arrived) rather than copied and placed when the gap filled.
    pub packets_placed: u64,
    /// Selective repeat: packets past a gap the responder could not hold (past its
    /// tracker's capacity, or no shared tracker memory left), for the requester to send
    /// again. None when the requester keeps within the receive window this side
    /// advertised (BDP flow control).
    pub packets_refused: u64,
    /// Duplicate requests the responder answered again (or dropped).
    pub duplicate_requests: u64,
    /// Responses that matched nothing outstanding (late duplicates).
    pub stale_responses: u64,
    /// Received packets dropped because their destination queue pair does not exist.
    pub drops_unknown_qp: u64,
    /// Received packets dropped because they came from an address other than the queue
    /// pair's peer.
    pub drops_wrong_peer: u64,
    /// Received packets dropped because the queue pair's state does not accept them
    /// (a response while not sending, a request while not receiving).
    pub drops_bad_state: u64,
    /// Received packets dropped because their P_Key is not the default partition (0x7FFF,
    /// membership bit ignored).
    pub drops_bad_pkey: u64,
    /// Received packets dropped for their opcode: unknown, not RC or CNP, or not valid
    /// where it arrived.
    pub drops_unexpected_opcode: u64,
    /// Packets with a CC extension header the queue pair did not agree on.
    pub drops_unnegotiated_ccx: u64,
    /// Received packets an in-line payload service dropped (e.g. failed authentication).
    pub drops_service: u64,
    /// Packets not sent because an in-line payload service failed on them (a used-up key,
    /// say); each moved its queue pair to the error state.
    pub service_send_failures: u64,
    /// Packets a stage beside the path raised a flag on (inspection's executable content),
    /// either way, each time it was seen.
    pub service_flagged_packets: u64,
    /// Flagged messages taken that have no completion to carry the flag (a plain RDMA
    /// WRITE at its responder; an incoming READ's responses): counted here only.
    pub service_flags_uncompleted: u64,
    /// Received packets dropped before they were taken because the receive credit of the
    /// deferred stages was used up ([`crate::EngineConfig::service_credit`]); the transport
    /// recovers them.
    pub drops_service_credit: u64,
    /// The most payload bytes that ever waited for deferred stages at once (queued, or
    /// out with an asynchronous stage).
    pub service_queue_peak_bytes: u64,
    /// Payloads an asynchronous stage beside the path did not see because the receive
    /// credit was used up or its queue was full: they went on uninspected (never held).
    pub service_uninspected: u64,
    /// Completions that waited for an asynchronous stage to return their packets' flags.
    pub service_held_completions: u64,
    /// Completions lost because their completion queue was full (the queue pair then goes
    /// to the error state).
    pub cq_overruns: u64,
}
