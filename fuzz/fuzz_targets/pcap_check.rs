//! Arbitrary bytes as a capture file through the whole `sluice pcap check` path: the pcap
//! and pcapng readers, link-layer decoding, RoCE decoding and the PSN bookkeeping.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(summary) = sluice_cli::check::check(data, "fuzz", sluice_wire::ROCE_V2_PORT) {
        assert!(summary.roce_packets + summary.other_frames == summary.frames);
        let _ = summary.to_text();
    }
});
