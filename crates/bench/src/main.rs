//! `shipworm-bench`: shipworm's relay, Miredo's relay and the kernel's own forwarding,
//! measured alternately in the same run on the same lab, reported as figures over the
//! rounds and ratios in a markdown report with PNG plots. Numbers are never asserted:
//! `--quick` (in the test command) only keeps the benchmark working. A tool beside the
//! product: the `shipworm` binary it measures is found next to this one.

mod buffers;
mod builds;
mod cpu_trials;
mod cpus;
mod end_to_end;
mod error;
mod frame_loads;
mod kernel_path;
mod measure;
mod packets;
mod plots;
mod rate_search;
mod relay_config;
mod report;
mod run;
mod soak;
mod sparse_latency;
mod stats;
mod status_flood;
mod table_bench;
mod traffic;
mod under_attack;

use clap::Parser;
use std::process::ExitCode;

/// Measure shipworm's relay against Miredo's and the kernel's forwarding, in the
/// namespace lab, and write a report (markdown and PNG plots). Root.
#[derive(Debug, Parser)]
#[command(name = "shipworm-bench", version)]
pub struct BenchArgs {
    /// Short trials and few packets: keeps the benchmark working (used by the tests).
    #[arg(long)]
    pub quick: bool,

    /// Rounds (each measures every implementation, searching each rate twice); a figure
    /// is the mean of all its searches without the highest and the lowest ninth.
    #[arg(long, default_value_t = 9)]
    pub rounds: usize,

    /// Where the report and plots go.
    #[arg(long, value_name = "DIR", default_value = "results/latest")]
    pub out: std::path::PathBuf,

    /// How shipworm's relay forwards what its programs move: `direct` (`KernelForward
    /// direct`, past the host's IPv6 stack) or `stack` (the default of the daemon).
    #[arg(long, value_name = "HOW", default_value = "direct", value_parser = ["direct", "stack"])]
    pub forward: String,

    /// The `shipworm` binary to measure (default: the one beside this program).
    #[arg(long, value_name = "PATH")]
    pub shipworm: Option<std::path::PathBuf>,

    /// Measure even a build users do not run (this program's or the `shipworm`
    /// binary's below opt-level 2, as the test command builds them); without it a run
    /// other than `--quick` refuses one.
    #[arg(long)]
    pub any_build: bool,

    /// Measure one part alone (default: the whole benchmark).
    #[command(subcommand)]
    pub part: Option<Part>,
}

/// A part of the benchmark run alone.
#[derive(Debug, clap::Subcommand)]
pub enum Part {
    /// The peer table on one thread (no lab, no root): prints
    /// `peers=N insert_per_s=X lookup_per_s=Y miss_per_s=Z bytes_per_peer=B`.
    PeerTable {
        /// Peers to insert.
        #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
        peers: u64,
    },
    /// The relay for an hour at half the rate it carries, new-peer bubbles flooding in
    /// beside: loss, resident memory and CPU per row, judged against the targets (no
    /// crash, < 0.1 % lost, memory within 5 %); writes OUT/report.md. Root.
    Soak {
        /// Rows (minutes) of the run.
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=1440))]
        minutes: u32,
        /// IPv6 size of the packets carried.
        #[arg(long, default_value_t = 1280, value_parser = clap::value_parser!(u64).range(64..=1280))]
        size: u64,
        /// Rows at the start in which the relay settles; memory is judged after them.
        #[arg(long, default_value_t = 5)]
        warmup: u32,
    },
    /// The relay's highest clean rate, quiet and while a local process floods its
    /// status socket (2,000 requests a second), over `--rounds` rounds; writes
    /// OUT/report.md (default results/status-flood). Root.
    StatusFlood,
    /// The kernel data path's peer map alone, as the full run measures it: filled with
    /// 1,000 and with `--peers` peers, a fresh map each of `--rounds` passes, the
    /// decapsulation's time a packet over peers across it and the map's bytes a peer;
    /// prints them. Root.
    PeerMap {
        /// Peers of the large map.
        #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(1_000..=100_000_000))]
        peers: u64,
    },
    /// The end-to-end chains' TCP alone (client→native and back, two transfers each
    /// way), shipworm's and Miredo's alternately over `--rounds` rounds; prints each
    /// round's Mbit/s. Root.
    Chain {
        /// Bytes a transfer.
        #[arg(long, default_value_t = 20_000_000)]
        bytes: usize,
    },
}

fn main() -> ExitCode {
    let args = BenchArgs::parse();
    relay_config::forward_through_stack(args.forward == "stack");
    if let Some(Part::PeerTable { peers }) = args.part {
        if let Err(f) = builds::check(None, args.quick || args.any_build) {
            return exit_code(Err(f));
        }
        let f = measure::peer_table(peers as usize);
        println!("{f}");
        eprintln!("one look-up at a time: {:.0}/s; entry {} bytes", f.single_lookup_per_s, f.entry_bytes);
        return ExitCode::SUCCESS;
    }
    if let Some(Part::Soak { minutes, size, warmup }) = args.part {
        let plan = soak::SoakPlan {
            rows: minutes,
            // Quick mode keeps the soak working: rows of seconds, not minutes.
            row: std::time::Duration::from_secs(if args.quick { 3 } else { 60 }),
            size: size as usize,
            warmup: warmup.min(minutes.saturating_sub(1)),
            quick: args.quick,
        };
        let out =
            if args.out == std::path::Path::new("results/latest") { "results/soak".into() } else { args.out.clone() };
        let run = run::shipworm_binary(&args).and_then(|bin| {
            soak::soak(&shipworm_lab::Impl::Shipworm(bin), &plan, &out, &mut |l: &str| println!("{l}"))
        });
        return exit_code(run);
    }
    if let Some(Part::StatusFlood) = args.part {
        let out = if args.out == std::path::Path::new("results/latest") {
            "results/status-flood".into()
        } else {
            args.out.clone()
        };
        let rounds = if args.quick { 1 } else { args.rounds };
        let run = run::shipworm_binary(&args).and_then(|bin| {
            status_flood::status_flood(&shipworm_lab::Impl::Shipworm(bin), rounds, args.quick, &out, &mut |l: &str| {
                println!("{l}")
            })
        });
        return exit_code(run);
    }
    if let Some(Part::PeerMap { peers }) = args.part {
        if let Err(f) = builds::check(None, args.quick || args.any_build) {
            return exit_code(Err(f));
        }
        let rounds = if args.quick { 1 } else { args.rounds.max(1) } as u32;
        let probes = if args.quick { 500 } else { 20_000 };
        let run = kernel_path::map_figures(&[1_000, peers as usize], probes, rounds, &mut |l: &str| println!("{l}"));
        return exit_code(run.map(drop).map_err(error::Failure::runtime));
    }
    if let Some(Part::Chain { bytes }) = args.part {
        return exit_code(run::chains_tcp(&args, bytes));
    }
    exit_code(run::run(&args))
}

/// The exit status of a run, its failure said on stderr.
fn exit_code(run: Result<(), error::Failure>) -> ExitCode {
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("shipworm-bench: {}", f.message);
            ExitCode::FAILURE
        }
    }
}
