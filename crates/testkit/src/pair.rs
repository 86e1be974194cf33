//! Queue pairs set up and connected between hosts 0 and 1, on either rig.

use std::net::{IpAddr, Ipv4Addr};

use sluice_core::*;
use sluice_wire::{CcxLayout, Psn};

/// The address of host `host` (0-based): 10.0.0.1, 10.0.0.2, ...
pub fn host_addr(host: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, host as u8 + 1))
}

/// Engines and their addresses: what a [`Pair`] is set up on (a [`crate::World`] or a
/// [`crate::Direct`]).
pub trait Hosts {
    /// The engines, host 0 first.
    fn engines_mut(&mut self) -> &mut [Engine];
    /// Each host's address.
    fn addrs(&self) -> &[IpAddr];
}

/// The byte pattern memory regions are filled with by default, to see any byte written
/// where it should not be.
pub const CANARY: u8 = 0xC5;

/// What a pair's memory regions hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionMemory {
    /// Real bytes, every one set to this value at first.
    Bytes(u8),
    /// Lengths only: the engine checks bounds and keys and moves no byte (engine work
    /// alone, as the bench measures it).
    LengthOnly,
}

/// How a [`Pair`] is set up: everything the tests, the bench and the fuzz target choose.
#[derive(Debug, Clone, Copy)]
pub struct PairOptions {
    /// The path MTU both sides use.
    pub mtu: Mtu,
    /// Bytes in each side's memory region.
    pub mr_len: usize,
    /// What the regions hold.
    pub memory: RegionMemory,
    /// Where each side's region starts (its virtual address).
    pub mr_addr: [u64; 2],
    /// Each side's first request PSN.
    pub sq_psn: [u32; 2],
    /// The local ACK timeout exponent (4.096 us x 2^timeout).
    pub timeout: u8,
    /// Retries after a timeout or sequence error before the request fails.
    pub retry_cnt: u8,
    /// Retries after a receiver-not-ready NAK (7: forever).
    pub rnr_retry: u8,
    /// The RNR wait each side asks of its peer (the IB table's index).
    pub min_rnr_timer: u8,
    /// READs and atomics in flight each way (both as requester and as responder).
    pub max_rd_atomic: u8,
    /// Remote operations each side accepts.
    pub access: Access,
    /// Each queue pair's capacities.
    pub caps: QpCaps,
    /// Entries in each completion queue.
    pub cq_entries: u32,
    /// One completion queue per side for sends and receives alike, instead of one each.
    pub shared_cq: bool,
    /// Go-back-N or selective repeat.
    pub recovery: Recovery,
    /// The CC extension header each side sends and accepts.
    pub ccx: [Option<CcxLayout>; 2],
    /// Each side is told the receive window the other's engine advertises
    /// (`Connection::peer_receive_window`, from `Engine::receive_window`), as two Sluice
    /// ends agree at connection setup; without it (the default) each takes the peer's
    /// tracker to be its own.
    pub advertise_receive_window: bool,
}

impl Default for PairOptions {
    /// The tests' setup: MTU 1024, 1 MiB regions of [`CANARY`], PSNs that wrap early on
    /// host 1, a 1 ms ACK timeout, a 10 us RNR wait, go-back-N.
    fn default() -> Self {
        PairOptions {
            mtu: Mtu::M1024,
            mr_len: 1 << 20,
            memory: RegionMemory::Bytes(CANARY),
            mr_addr: [0x10_0000, 0x20_0000],
            sq_psn: [100, 0xFF_FFF0],
            timeout: 8, // 4.096 us x 2^8 = 1 ms
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1, // 10 us
            max_rd_atomic: 16,
            access: Access::ALL,
            caps: QpCaps::default(),
            cq_entries: 4096,
            shared_cq: false,
            recovery: Recovery::GoBackN,
            ccx: [None; 2],
            advertise_receive_window: false,
        }
    }
}

/// A connected pair of RC queue pairs between hosts 0 and 1, with a PD, CQs and one memory
/// region on each side.
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    /// Each side's queue pair.
    pub qp: [QpNum; 2],
    /// Each side's send completion queue.
    pub send_cq: [CqId; 2],
    /// Each side's receive completion queue (the send one if shared).
    pub recv_cq: [CqId; 2],
    /// Each side's protection domain.
    pub pd: [PdId; 2],
    /// Each side's memory region.
    pub mr: [MrInfo; 2],
}

impl Pair {
    /// Sets up a PD, CQs and a memory region on hosts 0 and 1 as `o` says, and a connected
    /// pair of queue pairs on them.
    pub fn connect(hosts: &mut impl Hosts, o: &PairOptions) -> Pair {
        let engines = hosts.engines_mut();
        let mut pair = Pair {
            qp: [QpNum(0); 2],
            send_cq: [CqId(0); 2],
            recv_cq: [CqId(0); 2],
            pd: [PdId(0); 2],
            mr: [MrInfo {
                lkey: 0,
                rkey: 0,
                addr: 0,
                len: 0,
            }; 2],
        };
        for (h, e) in engines.iter_mut().enumerate().take(2) {
            pair.pd[h] = e.alloc_pd();
            pair.send_cq[h] = e.create_cq(o.cq_entries).unwrap();
            pair.recv_cq[h] = if o.shared_cq {
                pair.send_cq[h]
            } else {
                e.create_cq(o.cq_entries).unwrap()
            };
            let memory = match o.memory {
                RegionMemory::Bytes(fill) => Memory::Bytes(vec![fill; o.mr_len].into_boxed_slice()),
                RegionMemory::LengthOnly => Memory::LengthOnly(o.mr_len as u64),
            };
            pair.mr[h] = e
                .register_mr(pair.pd[h], o.mr_addr[h], memory, Access::ALL)
                .unwrap();
        }
        pair.qp = pair.another(hosts, o);
        pair
    }

    /// Another connected pair of queue pairs on this pair's PDs, CQs and regions (as a
    /// bench with many queue pairs sharing them wants).
    pub fn another(&self, hosts: &mut impl Hosts, o: &PairOptions) -> [QpNum; 2] {
        self.another_with(hosts, o, |_, c| c)
    }

    /// [`Pair::another`], each end's connection passed through `adjust` (with the end's
    /// host index) before it is made: ends that differ (each its own recovery, say).
    pub fn another_with(
        &self,
        hosts: &mut impl Hosts,
        o: &PairOptions,
        adjust: impl Fn(usize, Connection) -> Connection,
    ) -> [QpNum; 2] {
        let addrs = [hosts.addrs()[0], hosts.addrs()[1]];
        let engines = hosts.engines_mut();
        let qp = [0, 1].map(|h| {
            engines[h]
                .create_qp(QpConfig {
                    pd: self.pd[h],
                    send_cq: self.send_cq[h],
                    recv_cq: self.recv_cq[h],
                    caps: o.caps,
                })
                .unwrap()
        });
        for h in 0..2 {
            let peer = 1 - h;
            let c = Connection {
                access: o.access,
                timeout: o.timeout,
                retry_cnt: o.retry_cnt,
                rnr_retry: o.rnr_retry,
                min_rnr_timer: o.min_rnr_timer,
                max_rd_atomic: o.max_rd_atomic,
                max_dest_rd_atomic: o.max_rd_atomic,
                recovery: o.recovery,
                ccx: o.ccx[h],
                peer_receive_window: o
                    .advertise_receive_window
                    .then(|| engines[peer].receive_window()),
                ..Connection::new(
                    addrs[peer],
                    qp[peer].0,
                    o.mtu,
                    Psn::new(o.sq_psn[peer]),
                    Psn::new(o.sq_psn[h]),
                )
            };
            engines[h].connect(qp[h], &adjust(h, c)).unwrap();
        }
        qp
    }

    /// Drains a CQ of `host`.
    pub fn completions(hosts: &mut impl Hosts, host: usize, cq: CqId) -> Vec<Completion> {
        let engine = &mut hosts.engines_mut()[host];
        let mut out = Vec::new();
        while let Ok(Some(c)) = engine.poll_cq(cq) {
            out.push(c);
        }
        out
    }

    /// Posts WRITE `wr_id` of `len` bytes on host 0's queue pair `qp` (one of this pair's)
    /// from host 0's region at `offset` to host 1's region at the same offset.
    pub fn post_write_on(
        &self,
        hosts: &mut impl Hosts,
        qp: QpNum,
        wr_id: u64,
        offset: u64,
        len: u32,
    ) {
        let op = SendOp::Write {
            remote_addr: self.mr[1].addr + offset,
            rkey: self.mr[1].rkey,
        };
        let sgl = [Sge {
            lkey: self.mr[0].lkey,
            addr: self.mr[0].addr + offset,
            len,
        }];
        hosts.engines_mut()[0]
            .post_send(qp, &SendWr::new(wr_id, op, &sgl))
            .unwrap();
    }

    /// Posts WRITE `wr_id` of `len` bytes from host 0's region at `offset` to host 1's
    /// region at the same offset.
    pub fn post_write(&self, hosts: &mut impl Hosts, wr_id: u64, offset: u64, len: u32) {
        self.post_write_on(hosts, self.qp[0], wr_id, offset, len);
    }

    /// Posts one WRITE of `len` bytes from host 0 and runs until it completes (at most 1 s
    /// of simulated time) with success; returns the time it took.
    pub fn write_and_wait(&self, world: &mut crate::World, len: u32) -> std::time::Duration {
        let start = world.now;
        self.post_write(world, 1, 0, len);
        let cq = self.send_cq[0];
        assert!(world.run_until(std::time::Duration::from_secs(1), |w| {
            w.engines[0].cq_len(cq) == 1
        }));
        assert_eq!(Pair::completions(world, 0, cq)[0].status, WcStatus::Success);
        world.now - start
    }

    /// A RoCE v2 CNP to host 0's queue pair.
    pub fn cnp(&self) -> sluice_wire::RoceHeaders {
        sluice_wire::RoceHeaders {
            bth: sluice_wire::Bth::new(sluice_wire::Opcode::CNP, self.qp[0].0, Psn::new(0)),
            ccx: None,
            ext: sluice_wire::ExtHeaders::default(),
        }
    }
}
