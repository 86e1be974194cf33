//! The classifier on the `Service` seam: beside the path, counts what it sees and flags
//! packets carrying code, by direction; length-only payloads are passed over.

use sluice_core::policy::{Direction, Service, ServiceFlags, ServicePacket};
use sluice_inspect::Inspect;
use sluice_inspect::corpus::elf_code_ranges;
use sluice_wire::{Bth, ExtHeaders, Opcode, Psn, RoceHeaders};

static HEADERS: std::sync::LazyLock<RoceHeaders> = std::sync::LazyLock::new(|| RoceHeaders {
    bth: Bth::new(Opcode::RC_RDMA_WRITE_ONLY, 7, Psn::new(1)),
    ccx: None,
    ext: ExtHeaders::default(),
});

fn packet(direction: Direction, len: usize) -> ServicePacket<'static> {
    ServicePacket {
        qpn: sluice_core::QpNum(7),
        psn: Psn::new(1),
        opcode: Opcode::RC_RDMA_WRITE_ONLY,
        direction,
        len: len as u32,
        headers: &HEADERS,
    }
}

#[test]
fn counts_and_flags_by_direction() {
    let mut s = Inspect::builtin();
    assert!(!s.in_line());
    assert_eq!(s.name(), "inspect");
    let text = include_bytes!("../src/model.rs");
    assert_eq!(
        s.observe(&packet(Direction::Send, 4096), &text[..4096]),
        ServiceFlags::NONE
    );
    // The simulator's length-only payload: nothing to see.
    s.observe(&packet(Direction::Receive, 4096), &[]);
    assert_eq!(
        s.counters()[..2],
        [("inspected_packets", 1), ("inspected_bytes", 4096)]
    );
    assert_eq!(s.flagged_sent + s.flagged_received, 0);

    let Some(code) = std::fs::read(std::env::current_exe().unwrap())
        .ok()
        .and_then(|b| {
            Some(
                elf_code_ranges(&b)?
                    .iter()
                    .flat_map(|&(a, e)| b[a..e].to_vec())
                    .collect::<Vec<u8>>(),
            )
        })
    else {
        eprintln!("skipped the code half: this test's executable is not a 64-bit ELF file");
        return;
    };
    let mid = code.len() / 2;
    // A tail shorter than MIN_CHUNK is not classified: 4096 + 40 bytes give 8 chunks.
    assert_eq!(
        s.observe(&packet(Direction::Receive, 4136), &code[mid..mid + 4136]),
        ServiceFlags::EXECUTABLE
    );
    assert_eq!(s.chunks, 8 + 8);
    assert_eq!((s.flagged_sent, s.flagged_received), (0, 1));
}
