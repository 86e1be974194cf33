//! `sluice pcap check` and `sluice pcap synth` end to end: exit statuses, verdicts, counts.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::BufWriter;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sluice_cli::check::{ProblemKind, check};
use sluice_cli::synth::{SynthOptions, synthesize};
use sluice_wire::pcap::{PcapWriter, link_type};
use sluice_wire::*;

fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON object")
}

fn synth_file(name: &str, options: &SynthOptions) -> (String, Vec<sluice_cli::synth::SynthPacket>) {
    let path = scratch(name);
    let packets = synthesize(BufWriter::new(File::create(&path).unwrap()), options).unwrap();
    (path.to_str().unwrap().to_string(), packets)
}

#[test]
fn a_clean_capture_passes_with_every_opcode_counted() {
    let out = sluice(&[
        "pcap",
        "synth",
        scratch("clean.pcap").to_str().unwrap(),
        "--per-opcode",
        "3",
    ]);
    assert!(out.status.success());
    let out = sluice(&[
        "pcap",
        "check",
        "--json",
        scratch("clean.pcap").to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let s = json(&out);
    let opcodes = Opcode::standard().count() as u64;
    assert_eq!(s["frames"], opcodes * 2 * 3);
    assert_eq!(s["roce_packets"], opcodes * 2 * 3);
    assert_eq!(s["ok"], true);
    let by_opcode = s["by_opcode"].as_array().unwrap();
    assert_eq!(by_opcode.len() as u64, opcodes);
    assert!(by_opcode.iter().all(|o| o["packets"] == 6));
    // Requests on every connection run without holes, across the 2^24 wrap.
    for q in s["queue_pairs"].as_array().unwrap() {
        assert_eq!(q["missing"], 0, "{q}");
        assert_eq!(q["duplicates"], 0, "{q}");
    }
    let text = sluice(&["pcap", "check", scratch("clean.pcap").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("OK: every RoCE v2 packet"));
}

#[test]
fn corrupted_frames_are_reported_by_number() {
    let options = SynthOptions {
        seed: 77,
        corrupt: 9,
        ..SynthOptions::default()
    };
    let (path, packets) = synth_file("corrupt.pcap", &options);
    let corrupted: BTreeSet<u64> = packets
        .iter()
        .filter(|p| p.corrupted)
        .map(|p| p.frame)
        .collect();
    assert_eq!(corrupted.len(), 9);
    let out = sluice(&["pcap", "check", "--json", &path]);
    assert_eq!(out.status.code(), Some(1));
    let s = json(&out);
    let flagged: BTreeSet<u64> = s["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["frame"].as_u64().unwrap())
        .collect();
    assert_eq!(flagged, corrupted);
    assert_eq!(s["ok"], false);
    let text = String::from_utf8(sluice(&["pcap", "check", &path]).stdout).unwrap();
    assert!(text.contains("FAILED"), "{text}");
}

#[test]
fn frames_cut_by_the_snap_length_cannot_pass() {
    let path = scratch("snaplen.pcap");
    let mut w = PcapWriter::new(File::create(&path).unwrap(), link_type::ETHERNET, 64).unwrap();
    let mut buf = [0u8; 2048];
    let n = one_frame(&mut buf, Opcode::RC_SEND_ONLY, Psn::new(1), &[7; 500]);
    w.write(0, &buf[..n]).unwrap();
    drop(w);
    let s = check(File::open(&path).unwrap(), "snaplen", ROCE_V2_PORT).unwrap();
    assert_eq!((s.roce_packets, s.truncated, s.ok), (1, 1, false));
    assert_eq!(s.problems[0].kind, ProblemKind::Truncated);
}

#[test]
fn a_capture_cut_mid_record_is_reported() {
    let (path, _) = synth_file("cut.pcap", &SynthOptions::default());
    let bytes = std::fs::read(&path).unwrap();
    let s = check(&bytes[..bytes.len() - 10], "cut", ROCE_V2_PORT).unwrap();
    assert!(!s.ok);
    assert!(
        s.capture_error
            .as_deref()
            .unwrap()
            .contains("middle of a record")
    );
    assert_eq!(s.frames as usize, Opcode::standard().count() * 2 * 2 - 1);
}

#[test]
fn unreadable_input_exits_2_with_a_message() {
    let path = scratch("not-a-capture.txt");
    std::fs::write(&path, "this is not a capture file").unwrap();
    let out = sluice(&["pcap", "check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a pcap or pcapng file"));
    let out = sluice(&[
        "pcap",
        "check",
        scratch("does-not-exist.pcap").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open"));
}

#[test]
fn another_port_is_not_roce_unless_asked() {
    let options = SynthOptions {
        port: 9999,
        ..SynthOptions::default()
    };
    let (path, packets) = synth_file("port.pcap", &options);
    let default = check(File::open(&path).unwrap(), "p", ROCE_V2_PORT).unwrap();
    assert_eq!(
        (default.roce_packets, default.other_frames),
        (0, packets.len() as u64)
    );
    let out = sluice(&["pcap", "check", "--json", "--port", "9999", &path]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json(&out)["roce_packets"], packets.len());
}

/// Writes one Ethernet + IPv4 frame and returns its length.
fn one_frame(buf: &mut [u8], opcode: Opcode, psn: Psn, payload: &[u8]) -> usize {
    let ip = IpHeader::V4(Ipv4Header {
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        tos: 0,
        identification: 0,
        dont_fragment: true,
        ttl: 64,
    });
    let eth = EthernetHeader {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        ethertype: ETHERTYPE_IPV4,
    };
    eth.emit(buf).unwrap();
    let udp = UdpHeader {
        src_port: 0xC011,
        dst_port: ROCE_V2_PORT,
    };
    let roce = RoceHeaders {
        bth: Bth::new(opcode, 0x11, psn),
        ccx: None,
        ext: ExtHeaders::default(),
    };
    ETHERNET_HEADER_LEN
        + emit_datagram(&ip, &udp, &roce, payload, &mut buf[ETHERNET_HEADER_LEN..]).unwrap()
}

#[test]
fn psn_gaps_and_retransmissions_are_counted_per_qp() {
    let path = scratch("gaps.pcap");
    let mut w = PcapWriter::new(File::create(&path).unwrap(), link_type::ETHERNET, 65535).unwrap();
    let mut buf = [0u8; 512];
    // PSNs 0xFFFFFE, 0xFFFFFF, 0, 2, 3, 3 (retransmitted), 6: missing 1, 4, 5.
    for psn in [0xFF_FFFE, 0xFF_FFFF, 0, 2, 3, 3, 6] {
        let n = one_frame(&mut buf, Opcode::RC_SEND_MIDDLE, Psn::new(psn), &[1; 256]);
        w.write(0, &buf[..n]).unwrap();
    }
    drop(w);
    let out = sluice(&["pcap", "check", "--json", path.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "gaps are reported, not failures"
    );
    let q = &json(&out)["queue_pairs"][0];
    assert_eq!(q["dest_qp"], 0x11);
    assert_eq!(
        (q["first_psn"].as_u64(), q["last_psn"].as_u64()),
        (Some(0xFF_FFFE), Some(6))
    );
    assert_eq!(
        (
            q["packets"].as_u64(),
            q["duplicates"].as_u64(),
            q["missing"].as_u64()
        ),
        (Some(7), Some(1), Some(3))
    );
    assert_eq!(q["gaps"], serde_json::json!([[1, 1], [4, 5]]));
    let text =
        String::from_utf8(sluice(&["pcap", "check", path.to_str().unwrap()]).stdout).unwrap();
    assert!(text.contains("missing PSNs: 1, 4-5"), "{text}");
}

#[test]
fn raw_ip_and_linux_cooked_captures_are_decoded() {
    let mut frame = [0u8; 512];
    let n = one_frame(&mut frame, Opcode::RC_SEND_ONLY, Psn::new(5), b"raw");
    let ip = &frame[ETHERNET_HEADER_LEN..n];
    let mut sll = vec![0u8; 16];
    sll[14..16].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    sll.extend_from_slice(ip);
    for (link, data) in [(link_type::RAW, ip.to_vec()), (link_type::LINUX_SLL, sll)] {
        let mut w = PcapWriter::new(Vec::new(), link, 65535).unwrap();
        w.write(0, &data).unwrap();
        let s = check(&w.into_inner()[..], "raw", ROCE_V2_PORT).unwrap();
        assert_eq!((s.roce_packets, s.ok), (1, true), "link type {link}");
    }
}

/// The capture in `examples/` is what `sluice pcap synth` writes on its defaults; regenerate
/// it with `cargo run --release -- pcap synth examples/every-opcode.pcap` if the format changes.
#[test]
fn the_example_capture_is_current() {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/every-opcode.pcap");
    let mut fresh = Vec::new();
    synthesize(&mut fresh, &SynthOptions::default()).unwrap();
    assert!(
        std::fs::read(committed).unwrap() == fresh,
        "examples/every-opcode.pcap is stale"
    );
}

#[test]
fn sim_run_writes_the_summary_the_csvs_and_the_plots() {
    let dir = scratch("sim-incast");
    let _ = std::fs::remove_dir_all(&dir);
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/incast.toml");
    let out = sluice(&[
        "sim",
        "run",
        scenario.to_str().unwrap(),
        "--seed",
        "3",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for law in ["none", "dcqcn", "dctcp", "timely", "swift", "hpcc"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(law)),
            "no row for {law}: {stdout}"
        );
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    for key in [
        "seed",
        "simulated_ns",
        "events",
        "wall_s",
        "events_per_s",
        "flows_completed",
    ] {
        assert!(summary.get(key).is_some(), "summary.json lacks {key}");
    }
    assert_eq!(summary["seed"], 3);
    assert_eq!(summary["flows_completed"], 6 * 16);
    let hpcc = &summary["algorithms"][5];
    assert_eq!(hpcc["name"], "hpcc");
    for key in [
        "fct_slowdown_by_size",
        "drops",
        "ecn_marks",
        "pfc_pauses",
        "cnps",
    ] {
        assert!(hpcc.get(key).is_some(), "hpcc lacks {key}");
    }
    let flows = std::fs::read_to_string(dir.join("flows.csv")).unwrap();
    assert_eq!(flows.lines().count(), 1 + 6 * 16);
    for svg in [
        "fct_slowdown.svg",
        "fct_slowdown_p50.svg",
        "queue.svg",
        "throughput.svg",
    ] {
        let text = std::fs::read_to_string(dir.join(svg)).unwrap();
        assert!(text.starts_with("<svg") && text.contains("hpcc"), "{svg}");
    }
    // Every time series names its columns and has rows for every law.
    for (csv, header) in [
        (
            "timeseries.csv",
            "algorithm,time_ns,max_queue_bytes,total_queue_bytes,goodput_gbps",
        ),
        ("flow_throughput.csv", "algorithm,time_ns,flow,gbps"),
        ("ports.csv", "algorithm,time_ns,port,queue_bytes,gbps"),
    ] {
        let text = std::fs::read_to_string(dir.join(csv)).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(header), "{csv}");
        let columns = header.split(',').count();
        let rows: Vec<&str> = lines.collect();
        assert!(
            rows.iter().all(|r| r.split(',').count() == columns),
            "{csv}"
        );
        for law in ["none", "dcqcn", "dctcp", "timely", "swift", "hpcc"] {
            assert!(
                rows.iter().any(|r| r.starts_with(&format!("{law},"))),
                "{csv} has no rows for {law}"
            );
        }
    }
}

#[test]
fn sim_run_refuses_a_bad_scenario_naming_the_field() {
    let path = scratch("bad-scenario.toml");
    std::fs::write(
        &path,
        "[topology]\nkind = \"star\"\nhosts = 4\nlink_gbps = 100\nlink_delay_ns = 1000\n\
         [switch]\necn = { kmin_bytes = 1000, kmax_bytes = 5000, pmax = 2.0 }\n\
         [workload]\nkind = \"incast\"\nsenders = 2\nbytes = 1000\n",
    )
    .unwrap();
    let out = sluice(&["sim", "run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("switch.ecn.pmax"), "{err}");
    let missing = sluice(&["sim", "run", "no-such-scenario.toml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no-such-scenario.toml"));
}
