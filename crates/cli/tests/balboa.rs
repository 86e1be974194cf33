//! BALBOA's payload services through `sluice perf` over loopback (issue 35): inspection's
//! flags reaching the application's completions, the DLRM offload in line and after, and
//! their bad input.

use std::process::Command;

#[path = "common/perf.rs"]
mod perf_run;
use perf_run::loopback;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// A file of machine code cut from the `sluice` executable's code sections, in the test's
/// temporary directory (`None`: the executable is not a 64-bit ELF file).
fn code_file(name: &str) -> Option<std::path::PathBuf> {
    let bytes = std::fs::read(SLUICE).ok()?;
    let ranges = sluice_inspect::corpus::elf_code_ranges(&bytes)?;
    let code: Vec<u8> = ranges
        .iter()
        .flat_map(|&(a, e)| bytes[a..e].iter().copied())
        .take(1 << 20)
        .collect();
    let path = std::env::temp_dir().join(format!("sluice-balboa-{}-{name}", std::process::id()));
    std::fs::write(&path, code).ok()?;
    Some(path)
}

fn count(r: &serde_json::Value, key: &str) -> u64 {
    r[key].as_u64().unwrap_or_else(|| panic!("no {key} in {r}"))
}

/// A payload the classifier flags makes every completion flagged, end to end: a READ's at
/// the client (its responses inspected as they arrive), a WRITE's (its packets inspected
/// as they go); the zero-filled default buffers flag none.
#[test]
fn inspection_flags_reach_the_completions() {
    let Some(code) = code_file("code") else {
        eprintln!("skipped: the sluice executable is not a 64-bit ELF file");
        return;
    };
    let code = code.to_str().unwrap();
    for (test, port) in [("read-bw", 24_951), ("write-bw", 24_952)] {
        // Completions wait for the classifier's flags as long as it takes (a debug build
        // classifies far slower than the link; by default they do not wait, as
        // `a_slow_classifier_is_passed_over_not_waited_for` shows).
        let args = [
            test,
            "-s",
            "65536",
            "-n",
            "20",
            "-Q",
            "1",
            "--inspect",
            "--service-flag-wait",
            "600000",
        ];
        let r = &loopback(&[&args[..], &["--fill", code]].concat(), port)[0];
        assert_eq!(count(r, "flagged_completions"), 20, "{test}: {r}");
        let flagged = &r["services"]["inspect"];
        assert!(
            count(flagged, "flagged_received") + count(flagged, "flagged_sent") >= 20,
            "{r}"
        );
        let clean = &loopback(&args, port + 10)[0];
        assert_eq!(count(clean, "flagged_completions"), 0, "{test}: {clean}");
    }
    let _ = std::fs::remove_file(code);
}

/// By default a completion does not wait for the classifier on its thread: a debug
/// build's classifier, far slower than the link, leaves flags to come after their
/// completions (counted), and payloads past the credit uninspected (counted); every
/// message still completes, and the run's bytes are all accounted for.
#[test]
fn a_slow_classifier_is_passed_over_not_waited_for() {
    let Some(code) = code_file("late") else {
        eprintln!("skipped: the sluice executable is not a 64-bit ELF file");
        return;
    };
    let args = [
        "write-bw",
        "-s",
        "65536",
        "-n",
        "200",
        "--inspect",
        "--fill",
        code.to_str().unwrap(),
    ];
    let r = &loopback(&args, 24_956)[0];
    assert_eq!(count(r, "iterations"), 200, "{r}");
    let s = &r["services"]["inspect"];
    // 200 x 16 packets sent: each inspected, or passed over and counted.
    assert_eq!(
        count(s, "inspected_packets") + count(s, "uninspected"),
        3200,
        "{r}"
    );
    // Completions went without waiting: flagged ones are few, the rest came later.
    assert!(count(r, "flagged_completions") < 200, "{r}");
    assert!(count(s, "flags_after_completion") > 0, "{r}");
    let _ = std::fs::remove_file(code);
}

/// `--offload dlrm` processes each READ response where it lands; `--offload-after` the
/// whole buffer once the READ completed. Both leave in every checked buffer the chain
/// applied to the table the server serves, byte for byte (so the two agree), and report
/// what they processed.
#[test]
fn dlrm_in_line_is_byte_identical_to_receive_then_process() {
    // 65,536 bytes: 409.6 rows, so a READ ends mid-row (and every 4 KiB response does).
    let args = ["read-bw", "-s", "65536", "-n", "64", "--offload", "dlrm"];
    let inline = &loopback(&args, 24_953)[0];
    let after = &loopback(&[&args[..], &["--offload-after"]].concat(), 24_954)[0];
    for (r, mode) in [(inline, "in-line"), (after, "after")] {
        let o = &r["offload"];
        assert_eq!(o["mode"], mode, "{r}");
        assert_eq!(count(o, "messages"), 64, "{r}");
        assert_eq!(count(o, "checked"), 8, "{r}");
        assert_eq!(count(o, "mismatches"), 0, "{r}");
        // Resent responses are processed again in line.
        assert!(count(o, "processed_bytes") >= 64 * 65536, "{r}");
    }
    assert_eq!(
        count(&inline["services"]["dlrm"], "unaligned"),
        0,
        "{inline}"
    );
    assert!(after["offload"]["process_s"].as_f64().unwrap() > 0.0);
    assert!(inline["offload"].get("process_s").is_none());
}

/// Bad input is refused before anything connects, naming the flag.
#[test]
fn bad_offload_and_fill_are_refused_at_once() {
    for (args, says) in [
        (
            &["read-bw", "--offload", "gzip"][..],
            "--offload gzip: unknown offload",
        ),
        (&["write-bw", "--offload", "dlrm"][..], "run read-bw"),
        (
            &["read-bw", "--fill", "/nonexistent/sluice"][..],
            "--fill /nonexistent/sluice",
        ),
    ] {
        refused(args, &[], 24_955, says);
    }
    let o = Command::new(SLUICE)
        .args(["perf", "read-bw", "--offload", "list"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("dlrm"));
}

/// `sluice perf ARGS EXTRA --loopback` on `roce_port` is refused as bad options (exit 2)
/// before anything connects, its error saying `says`.
fn refused(args: &[&str], extra: &[&str], roce_port: u16, says: &str) {
    let o = Command::new(SLUICE)
        .arg("perf")
        .args(args)
        .args(extra)
        .args([
            "--loopback",
            "-p",
            "0",
            "--roce-port",
            &roce_port.to_string(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

/// Fig 7's CPU baseline through `sluice perf --doorbell-crypt`: write-bw streams sealed
/// buffers, each opened and checked (`--verify`) at the receiver, and counts every message;
/// what it cannot run is refused before anything connects, naming the flag.
#[test]
fn the_doorbell_baseline_streams_and_refuses_what_it_cannot_run() {
    let key = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("balboa-doorbell.key");
    std::fs::write(&key, format!("{}\n", "35".repeat(32))).unwrap();
    let key = [
        "--encrypt",
        "--psk-file",
        key.to_str().unwrap(),
        "--doorbell-crypt",
    ];
    let args = ["write-bw", "-s", "4096", "-n", "100", "-t", "4", "--verify"];
    let r = &loopback(&[&args[..], &key].concat(), 24_956)[0];
    assert_eq!(
        (count(r, "iterations"), count(r, "bytes")),
        (100, 4096),
        "{r}"
    );
    for (args, says) in [
        (
            &["read-bw"][..],
            "--doorbell-crypt (the doorbell baseline): write-lat or write-bw only",
        ),
        (&["write-bw", "-q", "2"][..], "one queue pair (-q 1)"),
        (&["write-lat", "-s", "32"][..], "-s of at least 33"),
    ] {
        refused(args, &key, 24_957, says);
    }
    let o = Command::new(SLUICE)
        .args(["perf", "write-bw", "--doorbell-crypt", "--loopback"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--encrypt"));
}
