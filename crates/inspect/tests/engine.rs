//! The inspection and DLRM services on two engines over the test kit's link (every packet
//! encoded, ICRC-checked and decoded; loss, duplication and reordering by seed):
//!
//! - the DLRM chain applied where each READ response lands gives, byte for byte, what
//!   receiving the whole buffer and then processing it gives, whatever the losses,
//!   re-requests, recovery mode and MTU;
//! - inspection's flags reach the application in the completions: a READ, a SEND (at both
//!   ends) and a WRITE (its sender) of executable code complete flagged; of text, not.

use std::time::Duration;

use sluice_core::policy::ServiceFlags;
use sluice_core::*;
use sluice_inspect::Inspect;
use sluice_inspect::corpus::elf_code_ranges;
use sluice_inspect::dlrm::{self, Chain, Offload};
use sluice_testkit::*;

fn lossy() -> Impairments {
    Impairments {
        loss: 0.02,
        duplicate: 0.02,
        reorder: 0.1,
        jitter: Duration::from_micros(20),
        ..Impairments::CLEAN
    }
}

fn options(seed: u64) -> PairOptions {
    PairOptions {
        mtu: [Mtu::M256, Mtu::M1024, Mtu::M4096][seed as usize % 3],
        recovery: if seed % 2 == 0 {
            Recovery::GoBackN
        } else {
            Recovery::SelectiveRepeat
        },
        ..PairOptions::default()
    }
}

fn read(p: &Pair, wr_id: u64, local: u64, remote: u64, len: u32) -> (SendOp, [Sge; 1]) {
    let op = SendOp::Read {
        remote_addr: p.mr[1].addr + remote,
        rkey: p.mr[1].rkey,
    };
    let _ = wr_id;
    let sge = [Sge {
        lkey: p.mr[0].lkey,
        addr: p.mr[0].addr + local,
        len,
    }];
    (op, sge)
}

#[test]
fn dlrm_where_responses_land_equals_receive_then_process() {
    for seed in seeds(12) {
        let mut world = World::new(2, seed, lossy());
        let o = options(seed);
        let p = Pair::connect(&mut world, &o);
        world.engines[0]
            .set_services(p.qp[0], vec![Box::new(Offload::new(Chain::default()))])
            .unwrap();
        // 2,500 rows and two odd bytes: a trailing partial word is left alone both ways.
        let len = 2_500 * dlrm::ROW_BYTES + 2;
        let mut table = dlrm::generate(2_501, seed);
        table.truncate(len);
        world.engines[1].mr_bytes_mut(p.mr[1].lkey).unwrap()[..len].copy_from_slice(&table);
        // Two READs at once, the second of a part starting mid-row at the responder but at
        // the start of its own buffer (its columns count from there).
        let second = 40_000 + 4 * 7;
        for (wr_id, local, remote, n) in [(1, 0, 0, len), (2, 600_000, second, 100_000)] {
            let (op, sge) = read(&p, wr_id, local, remote as u64, n as u32);
            world.engines[0]
                .post_send(p.qp[0], &SendWr::new(wr_id, op, &sge))
                .unwrap();
        }
        let cq = p.send_cq[0];
        assert!(
            world.run_until(Duration::from_secs(5), |w| w.engines[0].cq_len(cq) == 2),
            "seed {seed}: the READs did not complete"
        );
        for c in Pair::completions(&mut world, 0, cq) {
            assert_eq!(c.status, WcStatus::Success, "seed {seed}: {c:?}");
        }
        let mut whole = table.clone();
        Chain::default().apply(&mut whole, 0);
        let mut part = table[second..second + 100_000].to_vec();
        Chain::default().apply(&mut part, 0);
        let got = world.engines[0].mr_bytes(p.mr[0].lkey).unwrap();
        assert!(
            got[..len] == whole[..],
            "seed {seed} ({o:?}): READ 1 differs"
        );
        assert!(
            got[600_000..700_000] == part[..],
            "seed {seed}: READ 2 differs"
        );
        // Every response processed at least once (resent ones again).
        let counters = world.engines[0].services(p.qp[0])[0].counters();
        assert!(counters[1].1 >= (len + 100_000) as u64 - 2, "{counters:?}");
        assert_eq!(counters[2], ("unaligned", 0));
    }
}

/// Machine code from this test's own executable (`None` if it is not a 64-bit ELF file).
fn code(len: usize) -> Option<Vec<u8>> {
    let b = std::fs::read(std::env::current_exe().ok()?).ok()?;
    let code: Vec<u8> = elf_code_ranges(&b)?
        .iter()
        .flat_map(|&(a, e)| b[a..e].to_vec())
        .collect();
    let mid = code.len().checked_sub(len)? / 2;
    Some(code[mid..mid + len].to_vec())
}

#[test]
fn inspection_flags_reach_the_completions() {
    const LEN: usize = 16_384;
    let Some(code) = code(LEN) else {
        eprintln!("skipped: this test's executable is not a 64-bit ELF file");
        return;
    };
    let text: Vec<u8> = include_bytes!("../src/model.rs")
        .iter()
        .copied()
        .cycle()
        .take(LEN)
        .collect();
    for seed in seeds(6) {
        for (what, data, flagged) in [("code", &code, true), ("text", &text, false)] {
            let mut world = World::new(2, seed, lossy());
            let p = Pair::connect(&mut world, &options(seed));
            for h in 0..2 {
                world.engines[h]
                    .set_services(p.qp[h], vec![Box::new(Inspect::builtin())])
                    .unwrap();
                world.engines[h].mr_bytes_mut(p.mr[h].lkey).unwrap()[..LEN].copy_from_slice(data);
            }
            let recv = [Sge {
                lkey: p.mr[1].lkey,
                addr: p.mr[1].addr + 200_000,
                len: LEN as u32,
            }];
            world.engines[1]
                .post_recv(
                    p.qp[1],
                    &RecvWr {
                        wr_id: 9,
                        sgl: &recv,
                    },
                )
                .unwrap();
            let local = |at: u64| {
                [Sge {
                    lkey: p.mr[0].lkey,
                    addr: p.mr[0].addr + at,
                    len: LEN as u32,
                }]
            };
            let write = SendOp::Write {
                remote_addr: p.mr[1].addr + 400_000,
                rkey: p.mr[1].rkey,
            };
            let (read_op, read_sge) = read(&p, 3, 600_000, 0, LEN as u32);
            let e = &mut world.engines[0];
            e.post_send(p.qp[0], &SendWr::new(1, write, &local(0)))
                .unwrap();
            e.post_send(p.qp[0], &SendWr::new(2, SendOp::Send, &local(0)))
                .unwrap();
            e.post_send(p.qp[0], &SendWr::new(3, read_op, &read_sge))
                .unwrap();
            let (cq, rcq) = (p.send_cq[0], p.recv_cq[1]);
            assert!(
                world.run_until(Duration::from_secs(5), |w| w.engines[0].cq_len(cq) == 3
                    && w.engines[1].cq_len(rcq) == 1),
                "seed {seed} {what}: not complete"
            );
            let mut all = Pair::completions(&mut world, 0, cq);
            all.extend(Pair::completions(&mut world, 1, rcq));
            for c in &all {
                assert_eq!(c.status, WcStatus::Success, "seed {seed} {what}: {c:?}");
                assert_eq!(
                    c.flags.contains(ServiceFlags::EXECUTABLE),
                    flagged,
                    "seed {seed} {what}: {c:?}"
                );
            }
            let counters = world.engines[0].counters();
            assert_eq!(
                counters.service_flagged_packets > 0,
                flagged,
                "seed {seed} {what}"
            );
            // The WRITE's flags at its responder have no completion to go in: counted.
            assert_eq!(
                world.engines[1].counters().service_flags_uncompleted > 0,
                flagged,
                "seed {seed} {what}"
            );
            let _ = world.engines[1].services(p.qp[1])[0].counters();
        }
    }
}
