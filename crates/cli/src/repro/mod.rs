//! `sluice repro`: the papers' experiments on the simulator, each printing Sluice's figures
//! beside the paper's (from the structured notes of the SCR and SwCC papers), checking what
//! counts as reproducing it, and drawing its plot.
//!
//! An entry builds its scenarios as text (so that `--quick` can shorten them), runs them
//! with `sluice_sim::run_scenario` and reduces the results to a [`Report`]: a table, checks
//! and plots. Checks are of two kinds: a *shape* check is what the notes say counts as
//! reproducing the experiment, and a failing one fails the run; a *number* check compares a
//! figure with the paper's within a stated tolerance and is reported, not enforced, since
//! the simulator models neither the paper's NIC nor its testbed exactly.

mod balboa;
mod balboa_fig10;
mod ctl;
mod fig19;
mod fig19a;
mod homa;
mod left;
mod left_fct;
mod scr;
mod scr_read;
mod swcc;
mod weir;
mod weir_fig11;

use std::fmt::Write as _;
use std::path::Path;

use sluice_sim::plot::Chart;
use sluice_sim::{RunResult, Scenario};

/// How long the runs of an entry are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Short runs and fewer points: seconds in a debug build (the test suite runs these).
    Quick,
    /// The scale `docs/repro.md` shows.
    Full,
}

/// One experiment.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Its name on the command line.
    pub name: &'static str,
    /// The paper and figure or table, as the notes name them.
    pub source: &'static str,
    /// One line on what it shows.
    pub summary: &'static str,
    /// Runs it.
    pub run: fn(Scale) -> Result<Report, String>,
    /// The schedulers it runs, by their names in `sluice_control::policies::SCHEDULERS`.
    pub needs: &'static [&'static str],
}

impl Entry {
    /// The schedulers it needs that this build does not register.
    pub fn missing(&self) -> Vec<&'static str> {
        self.needs
            .iter()
            .copied()
            .filter(|n| sluice_control::policies::SCHEDULERS.info(n).is_none())
            .collect()
    }
}

/// A table: a header and rows of cells.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    /// Column names.
    pub header: Vec<String>,
    /// Rows, as many cells as the header.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Aligned columns for a terminal.
    pub fn text(&self) -> String {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|c| {
                std::iter::once(&self.header)
                    .chain(&self.rows)
                    .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(s, &w)| format!("{s:<w$}"))
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        }
        out
    }

    /// A Markdown table.
    pub fn markdown(&self) -> String {
        let mut out = format!("| {} |\n", self.header.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(self.header.len()));
        for r in &self.rows {
            let _ = writeln!(out, "| {} |", r.join(" | "));
        }
        out
    }
}

/// One check of an entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// The figures behind the verdict.
    pub detail: String,
    /// A shape check (enforced) rather than a number compared with the paper's.
    pub shape: bool,
}

impl Check {
    /// A shape check: what counts as reproducing the experiment.
    pub fn shape(name: &str, passed: bool, detail: String) -> Check {
        Check {
            name: name.to_string(),
            passed,
            detail,
            shape: true,
        }
    }

    /// A figure compared with the paper's: reported, not enforced.
    pub fn number(name: &str, passed: bool, detail: String) -> Check {
        Check {
            name: name.to_string(),
            passed,
            detail,
            shape: false,
        }
    }

    fn verdict(&self) -> &'static str {
        match (self.shape, self.passed) {
            (true, true) => "PASS",
            (true, false) => "FAIL",
            (false, true) => "match",
            (false, false) => "differs",
        }
    }
}

/// What an entry produced.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Sluice's figures beside the paper's.
    pub table: Table,
    /// Its checks.
    pub checks: Vec<Check>,
    /// Plots, by file name (without `.svg`).
    pub plots: Vec<(String, Chart)>,
    /// The scenarios run, by file name (without `.toml`), as TOML.
    pub scenarios: Vec<(String, String)>,
    /// Remarks on how the setup differs from the paper's.
    pub notes: Vec<String>,
}

impl Report {
    /// Every shape check held.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| !c.shape || c.passed)
    }

    /// The checks, one per line.
    pub fn checks_text(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let _ = writeln!(out, "{:<7} {}: {}", c.verdict(), c.name, c.detail);
        }
        out
    }

    /// The report as Markdown: table, checks, notes.
    pub fn markdown(&self) -> String {
        let mut out = self.table.markdown();
        out.push('\n');
        for c in &self.checks {
            let kind = if c.shape { "shape" } else { "number" };
            let _ = writeln!(
                out,
                "- **{}** ({kind}) {}: {}",
                c.verdict(),
                c.name,
                c.detail
            );
        }
        for n in &self.notes {
            let _ = writeln!(out, "\nNote: {n}");
        }
        out
    }
}

/// Every entry, in the order `sluice repro list` prints them (those whose schedulers this
/// build lacks are listed as such and do not run).
pub const ENTRIES: &[Entry] = &[
    swcc::FIG1,
    scr::TABLE2,
    scr::FIG11,
    scr::FIG12,
    scr::FIG13,
    scr::FIG16,
    scr::FIG17,
    scr::FIG18,
    fig19::FIG19,
    fig19a::FIG19A,
    left::FIG1,
    left::FIG6,
    left::FIG7,
    left_fct::FIG45,
    ctl::SCR_FIG10B,
    ctl::SCR_FIG10CD,
    ctl::SWCC_FIG12,
    ctl::SCR_FIG20,
    scr_read::SCR_FIG20_READ,
    weir::FIG2,
    weir::FIG4,
    weir::FIG7,
    weir::FIG10,
    weir_fig11::FIG11,
    weir::SWCC_FIG11A,
    balboa::FIG7,
    balboa::FIG8,
    balboa_fig10::FIG10,
    homa::WEBSEARCH,
];

/// The entry called `name`.
pub fn find(name: &str) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.name == name)
}

/// `sluice repro list`.
pub fn listing() -> String {
    let mut out = String::new();
    let width = ENTRIES.iter().map(|e| e.name.len()).max().unwrap_or(0);
    for e in ENTRIES {
        let missing = e.missing();
        let _ = write!(out, "{:<width$}  {}: {}", e.name, e.source, e.summary);
        if !missing.is_empty() {
            let _ = write!(
                out,
                " [needs schedulers not registered: {}]",
                missing.join(", ")
            );
        }
        out.push('\n');
    }
    out
}

/// Runs `entry` at `scale` and writes its plots, scenarios and `report.md` into `out`.
pub fn run(entry: &Entry, scale: Scale, out: &Path) -> Result<Report, String> {
    let missing = entry.missing();
    if !missing.is_empty() {
        return Err(format!(
            "{} needs schedulers this build does not register: {}",
            entry.name,
            missing.join(", ")
        ));
    }
    let report = (entry.run)(scale)?;
    let io = |e: std::io::Error| format!("cannot write {}: {e}", out.display());
    std::fs::create_dir_all(out).map_err(io)?;
    for (name, chart) in &report.plots {
        std::fs::write(out.join(format!("{name}.svg")), chart.to_svg()).map_err(io)?;
    }
    for (name, text) in &report.scenarios {
        std::fs::write(out.join(format!("{name}.toml")), text).map_err(io)?;
    }
    let md = format!(
        "# {}: {}\n\n{}",
        entry.name,
        entry.source,
        report.markdown()
    );
    std::fs::write(out.join("report.md"), md).map_err(io)?;
    Ok(report)
}

/// Parses and runs one scenario, keeping its text for the report.
fn simulate(report: &mut Report, name: &str, text: String) -> Result<Vec<RunResult>, String> {
    let scenario =
        Scenario::parse(&text, Path::new(".")).map_err(|e| format!("scenario {name}: {e}"))?;
    let runs = sluice_sim::run_scenario(&scenario, &|_, _| {})
        .map_err(|e| format!("scenario {name}: {e}"))?;
    report.scenarios.push((name.to_string(), text));
    Ok(runs)
}

/// Parses and runs several scenarios, in parallel (each run is deterministic, so this
/// changes nothing in the results), keeping their texts for the report; results in order.
fn simulate_all(
    report: &mut Report,
    scenarios: Vec<(String, String)>,
) -> Result<Vec<Vec<RunResult>>, String> {
    let parsed: Vec<Scenario> = scenarios
        .iter()
        .map(|(name, text)| {
            Scenario::parse(text, Path::new(".")).map_err(|e| format!("scenario {name}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, Result<Vec<RunResult>, String>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.min(parsed.len()))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(sc) = parsed.get(i) else {
                            return mine;
                        };
                        let run = sluice_sim::run_scenario(sc, &|_, _| {})
                            .map_err(|e| format!("scenario {}: {e}", scenarios[i].0));
                        mine.push((i, run));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    report.scenarios.extend(scenarios);
    done.into_iter().map(|(_, r)| r).collect()
}

/// `x` with `digits` decimals.
fn f(x: f64, digits: usize) -> String {
    format!("{x:.digits$}")
}
