//! `sluice perf` over loopback, as several test binaries run it (each that uses it declares
//! `#[path = "common/perf.rs"] mod perf_run;`, so that binaries without it carry no unused
//! code).

use std::process::Command;

/// `sluice perf ARGS --loopback --json` on RoCE port `port`: its JSON results, one a line;
/// a run that fails fails the test with what it printed.
pub(crate) fn loopback(args: &[&str], port: u16) -> Vec<serde_json::Value> {
    let port = port.to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("perf")
        .args(args)
        .args(["--loopback", "--json", "-p", "0", "--roce-port", &port])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "sluice perf {args:?}: {}\n{out}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
