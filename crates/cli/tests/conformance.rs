//! Conformance against independent implementations of RoCE v2:
//!
//! - tshark (Wireshark's InfiniBand dissector) decodes the packets Sluice builds to the same
//!   header fields Sluice put in;
//! - scapy's RoCE layer computes the same ICRC as Sluice for every packet Sluice builds;
//! - packets scapy builds, valid and deliberately broken, get exactly the verdict they should
//!   from `sluice pcap check`.
//!
//! tshark and scapy are installed by `scripts/test` (Debian's tshark; scapy in a venv under
//! `target/`). Run alone, these tests skip when a tool is missing; with
//! `SLUICE_REQUIRE_CONFORMANCE=1` (set by `scripts/test` and CI) a missing tool fails them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_cli::synth::{SynthOptions, SynthPacket, synthesize};
use sluice_wire::{ETHERNET_HEADER_LEN, HeaderSet, IpHeader, icrc};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Whether a missing tool must fail the test rather than skip it.
fn required() -> bool {
    std::env::var("SLUICE_REQUIRE_CONFORMANCE").is_ok_and(|v| v == "1")
}

fn skip_or_fail(what: &str) -> Option<()> {
    assert!(
        !required(),
        "{what} is required (SLUICE_REQUIRE_CONFORMANCE=1) but not available; run scripts/test"
    );
    eprintln!("SKIPPED: {what} not available (scripts/test installs it)");
    None
}

fn tshark() -> Option<()> {
    match Command::new("tshark").arg("--version").output() {
        Ok(out) if out.status.success() => Some(()),
        _ => skip_or_fail("tshark"),
    }
}

fn python_with_scapy() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("SLUICE_PYTHON").map(PathBuf::from),
        Some(workspace().join("target/py-venv/bin/python")),
    ];
    for python in candidates.into_iter().flatten() {
        let ok = Command::new(&python)
            .args(["-c", "import scapy"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(python);
        }
    }
    skip_or_fail("python with scapy").map(|_| PathBuf::new())
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tool output is UTF-8")
}

/// A few hundred packets: every opcode, IPv4 and IPv6, six of each.
fn synth_capture(name: &str) -> (PathBuf, Vec<SynthPacket>) {
    let path = scratch(name);
    let options = SynthOptions {
        seed: 0x5EED,
        per_opcode: 6,
        ..SynthOptions::default()
    };
    let packets = synthesize(BufWriter::new(File::create(&path).unwrap()), &options).unwrap();
    assert!(packets.len() >= 400);
    (path, packets)
}

/// Parses tshark's numbers: decimal, or hex with 0x; booleans as 0/1 or True/False.
fn num(field: &str) -> u64 {
    match field {
        "True" => 1,
        "False" => 0,
        f if f.starts_with("0x") => u64::from_str_radix(&f[2..], 16).unwrap(),
        f => f.parse().unwrap_or_else(|_| panic!("not a number: {f:?}")),
    }
}

const TSHARK_FIELDS: &[&str] = &[
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.immdt",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.invariant.crc",
];

#[test]
fn tshark_decodes_the_fields_sluice_encodes() {
    let Some(()) = tshark() else { return };
    let (path, packets) = synth_capture("conformance-tshark.pcap");
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]);
    for f in TSHARK_FIELDS {
        cmd.args(["-e", f]);
    }
    let output = run(&mut cmd);
    let rows: Vec<BTreeMap<&str, &str>> = output
        .lines()
        .map(|line| {
            TSHARK_FIELDS
                .iter()
                .copied()
                .zip(line.split('\t'))
                .filter(|(_, v)| !v.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(
        rows.len(),
        packets.len(),
        "tshark saw a different number of frames"
    );

    let mut icrc_compared = 0;
    for (row, p) in rows.iter().zip(&packets) {
        let ctx = format!("frame {} ({})", p.frame, p.roce.bth.opcode);
        let get = |f: &str| {
            row.get(f)
                .map(|v| num(v))
                .unwrap_or_else(|| panic!("{ctx}: tshark gave no {f}"))
        };
        let bth = &p.roce.bth;
        assert_eq!(get("frame.number"), p.frame, "{ctx}");
        assert_eq!(
            get("infiniband.bth.opcode"),
            u64::from(bth.opcode.0),
            "{ctx}"
        );
        assert_eq!(get("infiniband.bth.se"), u64::from(bth.solicited), "{ctx}");
        assert_eq!(get("infiniband.bth.m"), u64::from(bth.mig_req), "{ctx}");
        assert_eq!(
            get("infiniband.bth.padcnt"),
            u64::from(sluice_wire::pad_for(p.payload_len)),
            "{ctx}"
        );
        assert_eq!(get("infiniband.bth.p_key"), u64::from(bth.pkey), "{ctx}");
        assert_eq!(
            get("infiniband.bth.destqp"),
            u64::from(bth.dest_qp),
            "{ctx}"
        );
        assert_eq!(get("infiniband.bth.a"), u64::from(bth.ack_req), "{ctx}");
        assert_eq!(
            get("infiniband.bth.psn"),
            u64::from(bth.psn.value()),
            "{ctx}"
        );
        let ext = &p.roce.ext;
        if let Some(r) = ext.reth {
            assert_eq!(get("infiniband.reth.va"), r.va, "{ctx}");
            assert_eq!(get("infiniband.reth.r_key"), u64::from(r.rkey), "{ctx}");
            assert_eq!(get("infiniband.reth.dmalen"), u64::from(r.dma_len), "{ctx}");
        }
        if let Some(a) = ext.atomic_eth {
            // tshark shows the AtomicETH address and R_Key under the RETH field names.
            assert_eq!(get("infiniband.reth.va"), a.va, "{ctx}");
            assert_eq!(get("infiniband.reth.r_key"), u64::from(a.rkey), "{ctx}");
            assert_eq!(get("infiniband.atomiceth.swapdt"), a.swap_add, "{ctx}");
            assert_eq!(get("infiniband.atomiceth.cmpdt"), a.compare, "{ctx}");
        }
        if let Some(a) = ext.aeth {
            assert_eq!(
                get("infiniband.aeth.syndrome"),
                u64::from(a.syndrome.to_byte()),
                "{ctx}"
            );
            assert_eq!(get("infiniband.aeth.msn"), u64::from(a.msn), "{ctx}");
        }
        if let Some(a) = ext.atomic_ack_eth {
            assert_eq!(
                get("infiniband.atomicacketh.origremdt"),
                a.original,
                "{ctx}"
            );
        }
        if let Some(imm) = ext.imm_dt {
            // A byte field: hex digits without 0x.
            assert_eq!(
                row.get("infiniband.immdt").copied(),
                Some(format!("{imm:08x}").as_str()),
                "{ctx}"
            );
        }
        if let Some(d) = ext.deth {
            assert_eq!(get("infiniband.deth.q_key"), u64::from(d.qkey), "{ctx}");
            assert_eq!(get("infiniband.deth.srcqp"), u64::from(d.src_qp), "{ctx}");
        }
        for (h, field) in [
            (HeaderSet::RETH, "infiniband.reth.dmalen"),
            (HeaderSet::AETH, "infiniband.aeth.msn"),
            (HeaderSet::DETH, "infiniband.deth.srcqp"),
        ] {
            let has = p.roce.bth.opcode.info().unwrap().headers.contains(h);
            assert_eq!(
                row.contains_key(field),
                has,
                "{ctx}: tshark disagrees on the presence of {field}"
            );
        }
        // tshark shows the ICRC bytes as a big-endian number; Sluice's value is the CRC,
        // which the wire holds least significant byte first. tshark leaves the field out
        // where a heuristic sub-dissector of the payload gave up first.
        if let Some(crc) = row.get("infiniband.invariant.crc") {
            let ours = ours_icrc(&path, p);
            assert_eq!(num(crc) as u32, ours.swap_bytes(), "{ctx}");
            icrc_compared += 1;
        }
    }
    assert!(
        icrc_compared * 10 >= packets.len() * 9,
        "tshark showed the ICRC of only {icrc_compared} frames"
    );
}

/// The ICRC Sluice computes for one synthesized frame, re-read from the capture.
fn ours_icrc(path: &Path, p: &SynthPacket) -> u32 {
    let bytes = std::fs::read(path).unwrap();
    let mut reader = sluice_wire::pcap::CaptureReader::new(&bytes[..]).unwrap();
    for _ in 1..p.frame {
        reader.next_record().unwrap();
    }
    let record = reader.next_record().unwrap().unwrap();
    icrc::compute(&record.data[ETHERNET_HEADER_LEN..]).unwrap()
}

#[test]
fn scapy_computes_the_same_icrc() {
    let Some(python) = python_with_scapy() else {
        return;
    };
    let (path, packets) = synth_capture("conformance-scapy-icrc.pcap");
    let script = workspace().join("conformance/scapy_icrc.py");
    let output = run(Command::new(&python).arg(&script).arg(&path));
    let scapy: BTreeMap<u64, u32> = output
        .lines()
        .map(|l| {
            let (frame, crc) = l.split_once('\t').expect("FRAME<TAB>ICRC");
            (
                frame.parse().unwrap(),
                u32::from_str_radix(crc, 16).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        scapy.len(),
        packets.len(),
        "scapy recognised a different number of RoCE frames"
    );
    let bytes = std::fs::read(&path).unwrap();
    let mut reader = sluice_wire::pcap::CaptureReader::new(&bytes[..]).unwrap();
    let mut v6 = 0;
    for p in &packets {
        let record = reader.next_record().unwrap().unwrap();
        let ours = icrc::compute(&record.data[ETHERNET_HEADER_LEN..]).unwrap();
        assert_eq!(
            scapy[&p.frame], ours,
            "frame {} ({})",
            p.frame, p.roce.bth.opcode
        );
        v6 += usize::from(matches!(p.ip, IpHeader::V6(_)));
    }
    assert_eq!(v6 * 2, packets.len(), "half the frames are IPv6");
}

#[test]
fn sluice_judges_scapy_built_packets_correctly() {
    let Some(python) = python_with_scapy() else {
        return;
    };
    let pcap = scratch("conformance-scapy-built.pcap");
    let expect_path = scratch("conformance-scapy-built.json");
    run(Command::new(&python)
        .arg(workspace().join("conformance/scapy_build.py"))
        .arg(&pcap)
        .arg(&expect_path));
    let expect: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&expect_path).unwrap()).unwrap();
    let frames_where = |verdict: &str| -> BTreeSet<u64> {
        expect
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["expect"] == verdict)
            .map(|e| e["frame"].as_u64().unwrap())
            .collect()
    };

    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["pcap", "check", "--json"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "broken packets must fail the check"
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems_of = |kind: &str| -> BTreeSet<u64> {
        summary["problems"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] == kind)
            .map(|p| p["frame"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(problems_of("icrc"), frames_where("icrc"));
    assert_eq!(problems_of("malformed"), frames_where("malformed"));
    let total = expect.as_array().unwrap().len() as u64;
    let other = frames_where("other").len() as u64;
    assert_eq!(summary["frames"], total);
    assert_eq!(summary["other_frames"], other);
    assert_eq!(summary["roce_packets"], total - other);
    assert!(
        frames_where("ok").len() >= 40,
        "most scapy frames are valid ones"
    );
}
