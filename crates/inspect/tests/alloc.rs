//! Feature extraction and classification allocate nothing per chunk: counted by a global
//! allocator wrapping the system's (the one unsafe block in this crate, test-only). Only the
//! test's own thread is counted: the harness's other threads allocate when they like.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use sluice_core::policy::{Direction, Service, ServicePacket};
use sluice_inspect::features::{Extractor, FEATURE_COUNT};
use sluice_inspect::{Classifier, Inspect};
use sluice_wire::{Opcode, Psn};

struct Counting;

thread_local! {
    // Const-initialised, no destructor: reading it from the allocator never allocates.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards every call unchanged to `System`, only counting allocations.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn extraction_and_classification_do_not_allocate() {
    // Everything that may allocate is made before counting.
    let ex = Extractor::new(512);
    let model = Classifier::builtin();
    let mut svc = Inspect::builtin();
    let data: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let headers = sluice_wire::RoceHeaders {
        bth: sluice_wire::Bth::new(Opcode::RC_RDMA_WRITE_ONLY, 1, Psn::new(0)),
        ccx: None,
        ext: sluice_wire::ExtHeaders::default(),
    };
    let packet = ServicePacket {
        qpn: sluice_core::QpNum(3),
        psn: Psn::new(0),
        opcode: Opcode::RC_RDMA_WRITE_ONLY,
        direction: Direction::Receive,
        len: 4096,
        headers: &headers,
    };
    let mut f = [0.0; FEATURE_COUNT];

    let before = allocations();
    let mut flagged = 0;
    for c in data.chunks(512) {
        ex.extract(c, &mut f);
        flagged += usize::from(model.is_executable(c));
    }
    for p in data.chunks(4096) {
        svc.observe(&packet, p);
    }
    let after = allocations();
    assert_eq!(
        after - before,
        0,
        "allocations while classifying ({flagged} flagged)"
    );
    assert_eq!(svc.chunks, 128);
}
