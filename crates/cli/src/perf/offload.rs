//! `--offload NAME`: an application offload on read-bw's READ responses (BALBOA's DLRM
//! preprocessing, §4.3 of the paper), in line or, with `--offload-after`, as the baseline
//! the paper compares it with: the whole buffer received, then processed on the
//! requester's one core.
//!
//! The server fills the memory it serves with a generated DLRM table (the same at both
//! ends: a fixed seed). The client's READs land each in a slot of its own (`-t` per QP),
//! so that a buffer is processed, and checked, before the next READ into it is posted:
//! in line, the `dlrm` service processes each response as it lands (the engine's
//! `Service::landed`); after, the client runs the chain over a READ's whole buffer when
//! the READ completes, timed. Either way, every eighth READ's buffer is compared with the
//! chain applied to the table (and the first): a mismatch is counted, and fails the test
//! that looks.

use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_inspect::dlrm::{self, Chain};

use super::verify::Slots;

/// The offloads `--offload` knows: name and what it does.
pub const OFFLOADS: &[(&str, &str)] = &[(
    "dlrm",
    "DLRM preprocessing on READ responses (Neg2Zero and log(1+x) on 13 dense columns, \
     modulus 2^20 on 26 sparse ones, rows of 40 32-bit words; BALBOA's chain, \
     sluice-inspect's dlrm): in line where each response lands, or with --offload-after \
     on the whole buffer once the READ completed (the baseline). read-bw only.",
)];

/// `--offload list`.
pub fn listing() -> String {
    OFFLOADS
        .iter()
        .map(|(name, what)| format!("{name:8} {what}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `--offload` as asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffloadOptions {
    /// Its name (one of [`OFFLOADS`]).
    pub name: &'static str,
    /// The baseline: process each READ's whole buffer once it completed, on this core.
    pub after: bool,
}

impl OffloadOptions {
    /// `name` if it is an offload, else an error naming the choices.
    pub fn new(name: &str, after: bool) -> Result<OffloadOptions, String> {
        let Some(&(name, _)) = OFFLOADS.iter().find(|(n, _)| *n == name) else {
            let known: Vec<&str> = OFFLOADS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "--offload {name}: unknown offload (known: {}; --offload list)",
                known.join(", ")
            ));
        };
        Ok(OffloadOptions { name, after })
    }
}

/// The seed of the table the server serves (both ends generate it).
const TABLE_SEED: u64 = 0xD1A4;

/// Every this many READs of a QP, the buffer is checked.
const CHECK_EVERY: u64 = 8;

/// The table of `len` bytes the server serves.
pub(crate) fn table(len: usize) -> Vec<u8> {
    let mut t = dlrm::generate(len.div_ceil(dlrm::ROW_BYTES), TABLE_SEED);
    t.truncate(len);
    t
}

/// One run's offload at the client: where READs land, what they must become, and what was
/// done.
#[derive(Debug)]
pub(crate) struct OffloadRun {
    pub(crate) options: OffloadOptions,
    pub(crate) slots: Slots,
    chain: Chain,
    source: Vec<u8>,
    /// The processed table for the current message size.
    expected: (u32, Vec<u8>),
    messages: u64,
    bytes: u64,
    busy: Duration,
    checked: u64,
    mismatches: u64,
}

impl OffloadRun {
    pub(crate) fn new(options: OffloadOptions, slots: Slots) -> OffloadRun {
        OffloadRun {
            options,
            slots,
            chain: Chain::default(),
            source: table(slots.size as usize),
            expected: (0, Vec::new()),
            messages: 0,
            bytes: 0,
            busy: Duration::ZERO,
            checked: 0,
            mismatches: 0,
        }
    }

    /// READ `seq` of the QP at `q`, of `size` bytes, completed and its bytes are `buf`:
    /// processes it (after), and checks it every [`CHECK_EVERY`] READs.
    pub(crate) fn completed(&mut self, buf: &mut [u8], seq: u64, size: u32) {
        if self.options.after {
            let t = Instant::now();
            self.chain.apply(buf, 0);
            self.busy += t.elapsed();
            self.bytes += u64::from(size);
        }
        self.messages += 1;
        if seq % CHECK_EVERY == 0 {
            if self.expected.0 != size {
                let mut e = self.source[..size as usize].to_vec();
                self.chain.apply(&mut e, 0);
                self.expected = (size, e);
            }
            self.checked += 1;
            if buf != &self.expected.1[..] {
                self.mismatches += 1;
            }
        }
    }

    /// What it did, for the report (`landed_bytes`: the in-line service's count).
    pub(crate) fn report(&self, landed_bytes: u64) -> OffloadReport {
        OffloadReport {
            name: self.options.name,
            mode: if self.options.after {
                "after"
            } else {
                "in-line"
            },
            messages: self.messages,
            processed_bytes: if self.options.after {
                self.bytes
            } else {
                landed_bytes
            },
            process_s: self.options.after.then_some(self.busy.as_secs_f64()),
            checked: self.checked,
            mismatches: self.mismatches,
        }
    }
}

/// `--offload` in a result line.
#[derive(Debug, Clone, Serialize)]
pub struct OffloadReport {
    /// The offload.
    pub name: &'static str,
    /// `in-line` (where each response lands) or `after` (the whole buffer once complete).
    pub mode: &'static str,
    /// READs completed since the run began.
    pub messages: u64,
    /// Bytes the chain processed (in line: each response as it landed, resent ones again).
    pub processed_bytes: u64,
    /// After: seconds the requester's core spent processing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_s: Option<f64>,
    /// READ buffers compared with the chain applied to the table.
    pub checked: u64,
    /// Of those, the ones that differed.
    pub mismatches: u64,
}

impl OffloadReport {
    /// The line under a result row.
    pub fn row(&self) -> String {
        let busy = self
            .process_s
            .map(|s| format!(", processing {:.3} s on this core", s))
            .unwrap_or_default();
        format!(
            "  offload {} ({}): {} READs, {} bytes processed{busy}, {} checked, {} mismatched",
            self.name,
            self.mode,
            self.messages,
            self.processed_bytes,
            self.checked,
            self.mismatches
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(OffloadOptions::new("dlrm", false).is_ok());
        let e = OffloadOptions::new("gzip", false).unwrap_err();
        assert!(e.contains("--offload gzip") && e.contains("dlrm"), "{e}");
        assert!(listing().starts_with("dlrm"));
    }
}
