//! A queue pair in RTS and the rest of its NIC, for the requester's and responder's unit
//! tests: they call a handler on the queue pair with the `Nic` beside it, and play the peer
//! themselves (no second engine, no wire). Set up through the verbs, as an application
//! would; after that only the handlers run.

use std::net::{IpAddr, Ipv4Addr};

use sluice_wire::{
    Aeth, Bth, Credits, ExtHeaders, NakCode, Opcode, OpcodeInfo, Psn, Reth, RoceHeaders, Syndrome,
};

use super::{Connection, CqId, Engine, EngineConfig, Nic, Payload};
use crate::cq::Completion;
use crate::mr::{Access, Memory, MrInfo};
use crate::qp::{Qp, QpCaps, QpConfig, QpNum, SendOp, SendWr, Sge};
use crate::{Instant, Mtu, Recovery, RecvWr, Transmit};

/// The peer's address.
pub(crate) const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
/// The peer's queue pair number.
pub(crate) const PEER_QPN: u32 = 0x99;
/// The path MTU, in bytes.
pub(crate) const MTU: u32 = 1024;
/// The PSN of this queue pair's first request.
pub(crate) const SQ_PSN: u32 = 0;
/// The PSN of the peer's first request (the responder's first expected PSN).
pub(crate) const RQ_PSN: u32 = 100;
/// Bytes of the one memory region (all access).
pub(crate) const MR_LEN: usize = 64 * 1024;

/// One queue pair, one completion queue for both its queues, one region of real bytes.
pub(crate) struct Fixture {
    engine: Engine,
    pub(crate) qpn: QpNum,
    index: u32,
    pub(crate) mr: MrInfo,
    pub(crate) cq: CqId,
}

impl Fixture {
    /// Go-back-N, the default configuration.
    pub(crate) fn new() -> Fixture {
        Fixture::with(EngineConfig::default(), Recovery::GoBackN)
    }

    pub(crate) fn with(config: EngineConfig, recovery: Recovery) -> Fixture {
        Fixture::with_policies(config, recovery, crate::policy::Policies::default())
    }

    pub(crate) fn with_policies(
        config: EngineConfig,
        recovery: Recovery,
        policies: crate::policy::Policies,
    ) -> Fixture {
        let mut engine = Engine::with_policies(config, policies);
        let pd = engine.alloc_pd();
        let mr = engine
            .register_mr(
                pd,
                0x10_0000,
                Memory::Bytes(vec![0; MR_LEN].into_boxed_slice()),
                Access::ALL,
            )
            .unwrap();
        let cq = engine.create_cq(1024).unwrap();
        let qpn = engine
            .create_qp(QpConfig {
                pd,
                send_cq: cq,
                recv_cq: cq,
                caps: QpCaps::default(),
            })
            .unwrap();
        let mut c = Connection::new(
            PEER,
            PEER_QPN,
            Mtu::M1024,
            Psn::new(RQ_PSN),
            Psn::new(SQ_PSN),
        );
        c.recovery = recovery;
        engine.connect(qpn, &c).unwrap();
        let index = Engine::index(qpn).unwrap();
        Fixture {
            engine,
            qpn,
            index,
            mr,
            cq,
        }
    }

    /// The queue pair and the rest of the NIC, for a handler.
    pub(crate) fn parts(&mut self) -> (&mut Qp, &mut Nic) {
        self.engine.parts(self.index)
    }

    pub(crate) fn qp(&self) -> &Qp {
        self.engine.qp_at(self.index)
    }

    pub(crate) fn nic(&self) -> &Nic {
        &self.engine.nic
    }

    /// The region's bytes.
    pub(crate) fn memory(&mut self) -> &mut [u8] {
        self.engine.mr_bytes_mut(self.mr.lkey).unwrap()
    }

    pub(crate) fn poll(&mut self) -> Option<Completion> {
        self.engine.poll_cq(self.cq).unwrap()
    }

    /// Posts `op` over `len` bytes of the region from `offset`.
    pub(crate) fn post(&mut self, wr_id: u64, op: SendOp, offset: u64, len: u32) {
        let sge = [Sge {
            lkey: self.mr.lkey,
            addr: self.mr.addr + offset,
            len,
        }];
        self.engine
            .post_send(self.qpn, &SendWr::new(wr_id, op, &sge))
            .unwrap();
    }

    /// Posts a WRITE of `len` bytes to the peer's address 0 (its key 7).
    pub(crate) fn post_write(&mut self, wr_id: u64, len: u32) {
        let op = SendOp::Write {
            remote_addr: 0,
            rkey: 7,
        };
        self.post(wr_id, op, 0, len);
    }

    /// Posts a receive of the whole region.
    pub(crate) fn post_recv(&mut self, wr_id: u64) {
        let sge = [Sge {
            lkey: self.mr.lkey,
            addr: self.mr.addr,
            len: MR_LEN as u32,
        }];
        self.engine
            .post_recv(self.qpn, &RecvWr { wr_id, sgl: &sge })
            .unwrap();
    }

    /// The next request packet the requester sends at `now`, if any.
    pub(crate) fn next_request(&mut self, now: Instant) -> Option<Transmit> {
        let mut buffer = vec![0; MTU as usize];
        let (qp, nic) = self.parts();
        qp.next_request_packet(nic, now, &mut buffer)
    }

    /// The requester's timer fires at `now`.
    pub(crate) fn timer(&mut self, now: Instant) {
        let (qp, nic) = self.parts();
        qp.on_timer(nic, now);
    }

    /// The next response packet the responder sends at `now`, if any.
    pub(crate) fn next_response(&mut self, now: Instant) -> Option<Transmit> {
        let (qp, nic) = self.parts();
        qp.next_response_packet(nic, now)
    }

    /// A request from the peer reaches the responder.
    pub(crate) fn request(&mut self, headers: &RoceHeaders, payload: Payload<'_>) {
        let info = opcode_info(headers.bth.opcode);
        let (qp, nic) = self.parts();
        qp.on_request(nic, Instant::ZERO, false, headers, info, payload);
    }

    /// A response from the peer reaches the requester.
    pub(crate) fn respond(&mut self, now: Instant, headers: &RoceHeaders, payload: Payload<'_>) {
        let info = opcode_info(headers.bth.opcode);
        let (qp, nic) = self.parts();
        qp.on_response(nic, now, headers, info, payload);
    }
}

fn opcode_info(opcode: Opcode) -> &'static OpcodeInfo {
    opcode.info().expect("a known opcode")
}

/// A request from the peer: `opcode` at `psn`, with these extension headers.
pub(crate) fn request(opcode: Opcode, psn: u32, ack_req: bool, ext: ExtHeaders) -> RoceHeaders {
    let mut bth = Bth::new(opcode, 0x11, Psn::new(psn));
    bth.ack_req = ack_req;
    RoceHeaders {
        bth,
        ccx: None,
        ext,
    }
}

/// A WRITE ONLY from the peer at `psn`: `len` bytes to `va` of the region of `rkey`.
pub(crate) fn write_only(psn: u32, ack_req: bool, rkey: u32, va: u64, len: u32) -> RoceHeaders {
    let reth = Reth {
        va,
        rkey,
        dma_len: len,
    };
    request(
        Opcode::RC_RDMA_WRITE_ONLY,
        psn,
        ack_req,
        ExtHeaders {
            reth: Some(reth),
            ..ExtHeaders::default()
        },
    )
}

/// A response to the requester: `opcode` at `psn` with this AETH syndrome (if any).
pub(crate) fn response(opcode: Opcode, psn: u32, syndrome: Option<Syndrome>) -> RoceHeaders {
    RoceHeaders {
        bth: Bth::new(opcode, 0x11, Psn::new(psn)),
        ccx: None,
        ext: ExtHeaders {
            aeth: syndrome.map(|syndrome| Aeth { syndrome, msn: 0 }),
            ..ExtHeaders::default()
        },
    }
}

/// An ACK of everything up to `psn`.
pub(crate) fn ack(psn: u32) -> RoceHeaders {
    response(
        Opcode::RC_ACKNOWLEDGE,
        psn,
        Some(Syndrome::Ack(Credits::UNLIMITED)),
    )
}

/// A NAK of `psn`.
pub(crate) fn nak(psn: u32, code: NakCode) -> RoceHeaders {
    response(Opcode::RC_ACKNOWLEDGE, psn, Some(Syndrome::Nak(code)))
}
