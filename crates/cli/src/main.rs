//! `sluice`: the command-line front end. Each subcommand's logic is in the library.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use sluice_cli::{check, synth};
use sluice_wire::ROCE_V2_PORT;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A programmable RDMA transport in software, speaking RoCE v2"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Work with packet captures.
    #[command(subcommand)]
    Pcap(PcapCommand),
}

#[derive(Subcommand)]
enum PcapCommand {
    /// Decode every RoCE v2 packet of a pcap or pcapng file and verify its ICRC.
    ///
    /// Exit status: 0 when every RoCE v2 packet is well formed with a valid ICRC, 1 when
    /// any is not (or cannot be checked), 2 when the file cannot be read as a capture.
    Check(CheckArgs),
    /// Write a capture with every RoCE v2 opcode over IPv4 and IPv6, with random fields.
    Synth(SynthArgs),
}

#[derive(Args)]
struct CheckArgs {
    /// The capture (pcap or pcapng; Ethernet, raw IP or Linux cooked link type).
    file: PathBuf,
    /// The UDP destination port that marks RoCE v2.
    #[arg(long, default_value_t = ROCE_V2_PORT)]
    port: u16,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SynthArgs {
    /// Where to write the capture.
    file: PathBuf,
    #[arg(long, default_value_t = synth::DEFAULT_SEED)]
    seed: u64,
    /// Packets per opcode and IP version.
    #[arg(long, default_value_t = synth::DEFAULT_PER_OPCODE as u32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    per_opcode: u32,
    /// Flip one bit in this many frames after computing their ICRC.
    #[arg(long, default_value_t = 0)]
    corrupt: usize,
    /// The UDP destination port to send to.
    #[arg(long, default_value_t = ROCE_V2_PORT)]
    port: u16,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Pcap(PcapCommand::Check(args)) => run_check(&args),
        Command::Pcap(PcapCommand::Synth(args)) => run_synth(&args),
    }
}

fn run_check(args: &CheckArgs) -> ExitCode {
    let name = args.file.display().to_string();
    let file = match File::open(&args.file) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("sluice: cannot open {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let summary = match check::check(BufReader::with_capacity(1 << 20, file), &name, args.port) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: {name}: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&summary).expect("the summary serialises")
        );
    } else {
        print!("{}", summary.to_text());
    }
    if summary.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run_synth(args: &SynthArgs) -> ExitCode {
    let options = synth::SynthOptions {
        seed: args.seed,
        per_opcode: args.per_opcode as usize,
        corrupt: args.corrupt,
        port: args.port,
    };
    let result =
        File::create(&args.file).and_then(|f| synth::synthesize(BufWriter::new(f), &options));
    match result {
        Ok(packets) => {
            let corrupted: Vec<String> = packets
                .iter()
                .filter(|p| p.corrupted)
                .map(|p| p.frame.to_string())
                .collect();
            eprint!("wrote {} frames to {}", packets.len(), args.file.display());
            if corrupted.is_empty() {
                eprintln!();
            } else {
                eprintln!(" (corrupted frames: {})", corrupted.join(", "));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice: cannot write {}: {e}", args.file.display());
            ExitCode::from(2)
        }
    }
}
