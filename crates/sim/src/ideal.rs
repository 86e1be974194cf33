//! The ideal flow-completion time: a flow alone on the idle fabric, the denominator of every
//! FCT slowdown.
//!
//! Its packets cross the path store-and-forward (a packet starts on a hop once the hop is
//! free and the whole packet has arrived), then the ACK of the last one comes back. That is
//! this simulator's link model, so the value is exact: a lone flow's measured FCT equals it
//! (`tests/closed_form.rs`). It is computed in closed form, in time independent of the
//! flow's size: a 256 GiB flow costs what a 1 KiB one does.

use sluice_core::Mtu;
use sluice_wire::{Bth, ExtHeaders, Opcode, Psn, RoceHeaders};

use crate::event::{Ps, serialisation_ps};
use crate::network::{flight_ps, frame_bytes};
use crate::topology::{Routes, Topology};
use crate::{Flow, NodeId};

/// The completion time flow `f` would have alone on the idle fabric, in ps (0 when it has
/// no path; `Ps::MAX` if it does not fit the clock). `ccx` is the congestion-control
/// extension header the law adds to every packet, if any; `nic_ps` the NIC delay.
pub(crate) fn ideal_fct_ps(
    topo: &Topology,
    routes: &Routes,
    f: &Flow,
    ccx: Option<sluice_wire::CcxLayout>,
    mtu: Mtu,
    nic_ps: Ps,
) -> Ps {
    let forward = topo.path(routes, f.src, f.dst);
    let back = topo.path(routes, f.dst, f.src);
    if forward.is_empty() {
        return 0;
    }
    // Frame sizes from the headers the engine sends: a CC extension header on every packet
    // when the law negotiated one, the RETH on the first packet of the WRITE.
    let ccx_len = ccx.map_or(0, |l| l.wire_len() as u64);
    let frame = |opcode: Opcode, payload: u64| {
        let headers = RoceHeaders {
            bth: Bth::new(opcode, 0, Psn::new(0)),
            ccx: None,
            ext: ExtHeaders::default(),
        };
        frame_bytes(&headers, payload) + ccx_len
    };
    let mtu = u64::from(mtu.bytes());
    let packets = f.bytes.div_ceil(mtu).max(1);
    let (first, middle, last) = if packets == 1 {
        let only = frame(Opcode::RC_RDMA_WRITE_ONLY, f.bytes);
        (only, 0, only)
    } else {
        (
            frame(Opcode::RC_RDMA_WRITE_FIRST, mtu),
            frame(Opcode::RC_RDMA_WRITE_MIDDLE, mtu),
            frame(Opcode::RC_RDMA_WRITE_LAST, f.bytes - (packets - 1) * mtu),
        )
    };
    let serialisations: Vec<[Ps; 3]> = forward
        .iter()
        .map(|hop| [first, middle, last].map(|bytes| serialisation_ps(bytes, hop.bps)))
        .collect();
    let ack = frame(Opcode::RC_ACKNOWLEDGE, 0);
    let mut total = pipeline_ps(&serialisations, packets);
    for (path, from) in [(&forward, f.src), (&back, f.dst)] {
        let mut node: NodeId = from;
        for hop in path.iter() {
            total += u128::from(flight_ps(topo, node, hop, nic_ps));
            node = hop.peer;
        }
    }
    for hop in &back {
        total += u128::from(serialisation_ps(ack, hop.bps));
    }
    Ps::try_from(total).unwrap_or(Ps::MAX)
}

/// When the last of `packets` packets, all ready at time 0, has been sent on the last hop,
/// leaving propagation out: `hops[j]` holds hop j's serialisation of the first, a middle and
/// the last packet (all middle packets are the same size; one packet is its own first and
/// last).
///
/// Hop j starts packet k once it has sent packet k-1 and packet k has crossed hop j-1, so
/// the finish time of (k, j) is the longest monotone path from (0, 0) to (k, j) through the
/// grid of serialisations (propagation adds the same amount to every path: each crosses
/// every link once). The longest path to the last packet on the last hop sends the first
/// packet over hops 0..=a, the middle packets over hops a..=b (each of those hops once,
/// the rest of them all on the slowest), and the last over hops b..=H-1.
fn pipeline_ps(hops: &[[Ps; 3]], packets: u64) -> u128 {
    let s = |j: usize, class: usize| u128::from(hops[j][class]);
    let h = hops.len();
    if packets == 1 {
        return (0..h).map(|j| s(j, 0)).sum();
    }
    // after[b]: the last packet's serialisations over hops b..H-1.
    let mut after = vec![0u128; h + 1];
    for j in (0..h).rev() {
        after[j] = after[j + 1] + s(j, 2);
    }
    let middles = u128::from(packets - 2);
    let (mut longest, mut before) = (0, 0);
    for a in 0..h {
        before += s(a, 0);
        if middles == 0 {
            longest = longest.max(before + after[a]);
            continue;
        }
        let (mut across, mut slowest) = (0, 0);
        for (hop, rest) in hops[a..].iter().zip(&after[a..]) {
            let middle = u128::from(hop[1]);
            across += middle;
            slowest = slowest.max(middle);
            longest = longest.max(before + across + (middles - 1) * slowest + rest);
        }
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The same finish time packet by packet: each hop's finish time for the packet before.
    fn pipeline_by_packet(hops: &[[Ps; 3]], packets: u64) -> u128 {
        let mut done = vec![0u128; hops.len()];
        for k in 0..packets {
            let class = if k == 0 {
                0
            } else if k + 1 == packets {
                2
            } else {
                1
            };
            let mut ready = 0;
            for (j, hop) in hops.iter().enumerate() {
                done[j] = ready.max(done[j]) + u128::from(hop[class]);
                ready = done[j];
            }
        }
        done[hops.len() - 1]
    }

    #[test]
    fn a_single_hop_sends_back_to_back() {
        assert_eq!(pipeline_ps(&[[7, 0, 7]], 1), 7);
        assert_eq!(pipeline_ps(&[[7, 5, 3]], 2), 10);
        assert_eq!(pipeline_ps(&[[7, 5, 3]], 10), 7 + 8 * 5 + 3);
    }

    #[test]
    fn the_slowest_hop_paces_the_middle_packets() {
        // Fast, slow, fast: the first packet's two hops, then one slow serialisation per
        // packet, then the last packet's remaining fast hop.
        let hops = [[1, 1, 1], [10, 10, 10], [1, 1, 1]];
        assert_eq!(pipeline_ps(&hops, 100), 1 + 100 * 10 + 1);
        assert_eq!(pipeline_by_packet(&hops, 100), 1 + 100 * 10 + 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        #[test]
        fn the_closed_form_is_the_packet_by_packet_pipeline(
            hops in prop::collection::vec(prop::array::uniform3(1u64..1_000), 1..7),
            packets in 1u64..40,
        ) {
            prop_assert_eq!(pipeline_ps(&hops, packets), pipeline_by_packet(&hops, packets));
        }
    }
}
